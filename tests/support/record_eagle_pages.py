"""Record vLLM's `/metrics` page before and after a servescope run with EAGLE-3 speculative decoding on.

The target is the e2e tier's tiny Llama (`VLLM_TINY`), the draft `tests.support.tiny_eagle`'s copy draft;
vLLM is the CPU build the e2e tier uses (`scripts/setup-vllm.sh`), started as there (`start_vllm`) with
`--speculative-config '{"method":"eagle3","model":DRAFT,"num_speculative_tokens":3}'`. Between the two
scrapes, servescope's own CLI runs a bounded load (completions, greedy; a smaller run before the first
scrape leaves the counters off zero); the pages are written byte for
byte as the server sent them, and the run's speculative-decoding block is printed beside the counters'
deltas. What tests/fixtures/engines/metrics/vllm_eagle3_cpu_{before,after}.prom were made with.

Usage (heavy: wrap it in the machine's lock):
``flock /work/notes/heavy.lock python -m tests.support.record_eagle_pages OUT_DIR``
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import urllib.request
from pathlib import Path

from tests.support.procs import servescope
from tests.support.real_servers import VLLM_MODEL, VLLM_TINY, find_vllm, stable_model_dir, start_vllm
from tests.support.tiny_eagle import make_tiny_eagle3
from tests.support.tiny_model import make_tiny_model

NUM_SPECULATIVE_TOKENS = 3
RUN_ARGS = (
    "--api", "completions", "--concurrency", "2", "--num-requests", "16", "--input-len", "64",
    "--output-len", "48", "--seed", "7", "--no-probe", "--extra-body", '{"temperature": 0}',
)  # fmt: skip
# before the first scrape, so that the counters do not start from zero (a server that has served before)
WARMUP_ARGS = ("--api", "completions", "--concurrency", "2", "--num-requests", "6", "--input-len", "32",
               "--output-len", "24", "--seed", "3")  # fmt: skip


def speculative_config(draft_dir: Path) -> str:
    return json.dumps({"method": "eagle3", "model": str(draft_dir), "num_speculative_tokens": NUM_SPECULATIVE_TOKENS})


def _page(root: str) -> str:
    with urllib.request.urlopen(root + "/metrics", timeout=10) as r:
        return str(r.read().decode())


def _run(url: str, out: Path, args: tuple[str, ...]) -> None:
    proc = servescope("run", "--url", url, "--model", VLLM_MODEL, "--out", str(out), "--quiet", *args)
    if proc.returncode != 0:
        raise SystemExit(f"servescope run failed:\n{proc.stdout}\n{proc.stderr}")


def record(out_dir: Path) -> dict[str, object]:
    py = find_vllm()
    if py is None:
        raise SystemExit("no vLLM CPU build: run scripts/setup-vllm.sh")
    work = Path(tempfile.mkdtemp(prefix="record-eagle-"))
    target = stable_model_dir(make_tiny_model(work / "target", VLLM_TINY, hub_cache=False).hf_dir, py.parent.parent)
    draft = stable_model_dir(make_tiny_eagle3(target, work / "draft"), py.parent.parent)
    spec = speculative_config(draft)
    srv = start_vllm(py, target, extra=["--speculative-config", spec])
    try:
        _run(srv.url, work / "warmup", WARMUP_ARGS)
        before = _page(srv.root)
        _run(srv.url, work / "run", RUN_ARGS)
        after = _page(srv.root)
        start_s = srv.start_s
    finally:
        srv.stop()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "vllm_eagle3_cpu_before.prom").write_text(before)
    (out_dir / "vllm_eagle3_cpu_after.prom").write_text(after)
    summary = json.loads((work / "run" / "summary.json").read_text())
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "vllm_start_s": round(start_s, 1),
        "speculative_config": spec,
        "warmup_args": list(WARMUP_ARGS),
        "run_args": list(RUN_ARGS),
        "speculative": summary["engine_view"]["speculative"],
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    args = ap.parse_args(argv)
    json.dump(record(Path(args.out_dir)), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
