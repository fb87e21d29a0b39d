"""The real scheduler as a held-out test of the simulation: vLLM's CPU build (V1 engine) against `sim.engine`.

    # record (starts vLLM; run it under the shared lock, in short parts; each part appends to the file)
    flock /work/notes/heavy.lock .venv/bin/python benchmarks/vllm_scheduler.py record OUT.json --runs calib
    flock /work/notes/heavy.lock .venv/bin/python benchmarks/vllm_scheduler.py record OUT.json --runs closed
    flock /work/notes/heavy.lock .venv/bin/python benchmarks/vllm_scheduler.py record OUT.json --runs spread,open
    # compare (no server; seconds)
    .venv/bin/python benchmarks/vllm_scheduler.py compare OUT.json [--fixture tests/fixtures/vllm_scheduler.json]

`record` serves the e2e tier's tiny random Llama (hidden 256, 4 layers) with vLLM's CPU build on CPU 0
(`tests.support.real_servers.start_vllm`: chunked prefill and prefix caching on, as by default, a 1 GiB KV
cache) and drives it with `servescope run` pinned to CPU 1, one run at a time, each a short bounded run of
random prompts. Kept per request: send, first-token and last-token times (s from the run's first send),
prompt and output tokens as the server counted them, and the gaps between consecutive tokens (the ITL
sample). Around every run /metrics is scraped: the deltas of vLLM's own histograms (prefill time, queue
time, TTFT, ITL) are kept with the run. The scheduler settings vLLM ran with (max_num_seqs,
max_num_batched_tokens, block size, KV cache blocks) are read from its log and kept too.

Run groups (`--runs`): `calib` = the calibration runs (c=1 at prompts of 128, 512 and 1,024 tokens; one wave
of c = 1..64 sends of 32-token prompts and 64 outputs; one of 16 sends of 1,024-token prompts), `waves` and
`waves512` = calibration waves of longer prompts (16 x 128, 8 x 256, 4 x 512 tokens: the followers' prompts
fill one step whole), `closed` = closed loops with fixed output lengths (ignore_eos), `spread` = the same
with `--range-ratio 0.5`, `open` = Poisson arrivals. `compare` measures vLLM's step costs from the
calibration runs alone (`sim.replay.measure_costs`: vLLM's own prefill-time histogram at c=1, the median gap
between tokens in the decode waves, and what each wave's admitting steps cost beyond those, by its lead's
gaps), builds an `EngineConfig` with them and vLLM's scheduler settings, replays every other run (the same
requests, lengths and send pattern) through `sim.simulate`, and prints TTFT median/P90, ITL and output tok/s
point by point, and each closed loop's wave profile (median TTFT by position within a wave of c sends, the
first wave dropped). Nothing is fitted to the runs being compared.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from servescope.results.store import read_records  # noqa: E402
from servescope.sim import replay  # noqa: E402
from servescope.target.servermetrics import histogram_window, read_page  # noqa: E402
from tests.support.real_servers import (  # noqa: E402
    VLLM_TINY,
    RealServer,
    find_vllm,
    free_port,
    stable_model_dir,
    vllm_command,
    vllm_env,
)
from tests.support.tiny_model import make_tiny_model  # noqa: E402


def _run(name: str, kind: str, p: int, o: int, c: int, n: int, *, ratio: float = 0.0, rate: float = 0.0) -> dict:
    return {"name": name, "kind": kind, "input": p, "output": o, "concurrency": c, "n": n, "ratio": ratio, "rate": rate}


#: every run, by group; names are unique over all groups
RUNS: dict[str, list[dict[str, Any]]] = {
    "calib": [
        *[_run(f"prefill-p{p}", "calib", p, 8, 1, 6) for p in (128, 512, 1024)],
        *[_run(f"decode-c{c}", "calib", 32, 64, c, c) for c in (1, 4, 16, 64)],
        _run("decode-c16-p1024", "calib", 1024, 64, 16, 16),
    ],
    # one wave each whose c - 1 followers share one prompt step of longer prompts (calibration too)
    "waves": [_run("wave-c16-p128", "calib", 128, 64, 16, 16), _run("wave-c8-p256", "calib", 256, 64, 8, 8)],
    # the same with prompts of 512 tokens: three followers fill one step whole
    "waves512": [_run("wave-c4-p512", "calib", 512, 64, 4, 4)],
    "closed": [
        _run("fixed-p128-c1", "closed", 128, 32, 1, 16),
        _run("fixed-p128-c4", "closed", 128, 32, 4, 40),
        _run("fixed-p128-c16", "closed", 128, 32, 16, 160),
        _run("fixed-p128-c64", "closed", 128, 32, 64, 192),
        _run("fixed-p512-c16", "closed", 512, 32, 16, 160),
        _run("fixed-p1024-c8", "closed", 1024, 32, 8, 40),
    ],
    "spread": [
        _run("spread-p512-c16", "closed", 512, 32, 16, 112, ratio=0.5),
        _run("spread-p128-c64", "closed", 128, 32, 64, 192, ratio=0.5),
    ],
    "open": [
        _run("poisson-p512-r1", "open", 512, 32, 64, 40, rate=1.0),
    ],
}

_SETTINGS = {  # what vLLM's log says it runs with
    "max_num_batched_tokens": re.compile(r"max_num_batched_tokens=(\d+)"),
    "max_num_seqs": re.compile(r"max_num_seqs=(\d+)"),
    "block_size": re.compile(r"block_size=(\d+)"),
    "kv_tokens": re.compile(r"KV cache size: ([\d,]+) tokens"),
}


#: vLLM 0.32's defaults on CPU for the OpenAI server (engine/arg_utils.py: max_num_seqs 128,
#: max_num_batched_tokens 2048; platforms/cpu.py: block_size 128), used when its log does not say
_CPU_DEFAULTS = {"max_num_seqs": 128, "max_num_batched_tokens": 2048, "block_size": 128}


def _scrape(root: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{root}/metrics", timeout=10) as r:
        return read_page(r.read().decode())


def _engine_view(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Means (s) of vLLM's own per-request histograms over one run: Δsum / Δcount."""
    out: dict[str, float] = {}
    for role, h in histogram_window(before, after).items():
        if h.count:
            out[f"{role}_mean_s"] = h.sum_s / h.count
    for name in ("request_prefill_time_seconds", "request_queue_time_seconds", "request_decode_time_seconds"):
        s = sum(v - before.get(k, 0.0) for k, v in after.items() if k.startswith(f"vllm:{name}_sum"))
        n = sum(v - before.get(k, 0.0) for k, v in after.items() if k.startswith(f"vllm:{name}_count"))
        if n:
            out[name.replace("_seconds", "_mean_s").replace("request_", "")] = s / n
    return out


def _client(spec: dict[str, Any], root: str, tokenizer: Path, out: Path, seed: int) -> None:
    argv = [
        sys.executable, "-m", "servescope.cli", "run", "--url", root, "--api", "completions",
        "--tokenizer", str(tokenizer), "--dataset", "random", "--input-len", str(spec["input"]),
        "--output-len", str(spec["output"]), "--range-ratio", str(spec["ratio"]),
        "--num-requests", str(spec["n"]), "--concurrency", str(spec["concurrency"]), "--seed", str(seed),
        "--timeout", "120", "--out", str(out),
    ]  # fmt: skip
    if spec["rate"]:
        argv += ["--rate", str(spec["rate"])]
    p = subprocess.run(["taskset", "-c", "1", *argv], capture_output=True, text=True, timeout=240)
    if p.returncode != 0:
        raise SystemExit(f"servescope run exited {p.returncode} on {spec['name']}:\n{p.stderr[-3000:]}")


def _timeline(out: Path) -> dict[str, Any]:
    """Per-request send / first / last (s from the first send), server-counted lengths, and every ITL gap."""
    recs = [r for r in read_records(out) if r.ok and not r.warmup]
    if not recs:
        raise SystemExit(f"{out}: no successful request")
    t0 = min(r.t_send_ns or 0 for r in recs)
    rows, gaps = [], []
    for r in sorted(recs, key=lambda r: r.id):
        assert r.t_send_ns is not None and r.t_first_ns is not None and r.t_last_ns is not None
        rows.append(
            [
                round((r.t_send_ns - t0) / 1e9, 6),
                round((r.t_first_ns - t0) / 1e9, 6),
                round((r.t_last_ns - t0) / 1e9, 6),
                int(r.input_tokens or r.input_len),
                int(r.output_tokens or 0),
            ]
        )
        ns = list(r.chunk_ns)
        gaps += [round((b - a) / 1e9, 6) for a, b in itertools.pairwise(ns)]
    return {"requests": rows, "itl_gaps_s": gaps}


def _start(vllm_py: Path, model_dir: Path, layout: str) -> RealServer:
    """vLLM on this host's two cores. `shared`: every vLLM process on CPU 0 (`start_vllm`, the e2e tier's
    layout), its API server competing with the model's OpenMP threads for the core. `split`: the model's
    OpenMP threads bound to CPU 0 (VLLM_CPU_OMP_THREADS_BIND=0), the API server and the engine core's
    scheduler on CPU 1 beside the client: the front end on a core of its own, as vLLM's CPU guide advises
    (reserve cores for the serving framework, VLLM_CPU_NUM_OF_RESERVED_CPU)."""
    port = free_port()
    cmd = vllm_command(vllm_py, model_dir, port)
    if layout == "split":
        cmd[2] = "1"  # taskset -c 1; the worker's OpenMP threads rebind themselves to CPU 0
    return RealServer("vllm", cmd, port, "/v1/models", env=vllm_env(vllm_py), start_timeout_s=420)


def record(path: Path, groups: list[str], layout: str, budget_s: float) -> None:
    vllm_py = find_vllm()
    if vllm_py is None:
        raise SystemExit("vLLM's CPU build is not installed: run scripts/setup-vllm.sh")
    doc: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"runs": {}, "layout": layout}
    cmd = " ".join(["benchmarks/vllm_scheduler.py", *sys.argv[1:]])
    doc["recorded_by"] = "; ".join(x for x in (doc.get("recorded_by", ""), cmd) if x)
    if doc.get("layout", "shared") != layout:
        raise SystemExit(f"{path} was recorded with --layout {doc.get('layout', 'shared')}; record into a new file")
    specs = [s for g in groups for s in RUNS[g]]
    with tempfile.TemporaryDirectory(prefix="vllm-scheduler-") as tmp:
        model = make_tiny_model(Path(tmp) / "model", VLLM_TINY, hub_cache=False)
        model_dir = stable_model_dir(model.hf_dir, vllm_py.parent.parent)
        t_start = time.monotonic()
        with _start(vllm_py, model_dir, layout) as server:
            log = server.log_tail(200_000)
            settings = {k: int(m.group(1).replace(",", "")) for k, rx in _SETTINGS.items() if (m := rx.search(log))}
            for k, v in _CPU_DEFAULTS.items():  # not in its log: vLLM 0.32's CPU defaults, from its source
                settings.setdefault(k, v)
            doc["vllm_settings"] = {**doc.get("vllm_settings", {}), **settings}
            path.write_text(json.dumps(doc, separators=(",", ":")))
            print(f"vLLM ready after {time.monotonic() - t_start:.0f} s", flush=True)
            warm = _run("warm", "calib", 256, 16, 8, 24)
            _client(warm, server.root, model_dir, Path(tmp) / "warm", 999)
            t_ready = time.monotonic()
            for k, spec in enumerate(specs):
                if spec["name"] in doc["runs"]:
                    continue  # recorded by an earlier part
                if time.monotonic() - t_ready > budget_s:
                    print(f"budget of {budget_s:.0f} s spent: {spec['name']} and later runs left for another part")
                    break
                out = Path(tmp) / spec["name"]
                before = _scrape(server.root)
                t0 = time.monotonic()
                _client(spec, server.root, model_dir, out, k)
                wall = time.monotonic() - t0
                after = _scrape(server.root)
                doc["runs"][spec["name"]] = {**spec, **_timeline(out), "engine": _engine_view(before, after)}
                path.write_text(json.dumps(doc, separators=(",", ":")))  # each run kept as it ends
                print(f"{spec['name']}: {wall:.1f} s", flush=True)
        print(f"vLLM up {time.monotonic() - t_start:.0f} s; settings {doc['vllm_settings']}", flush=True)


def fixture(doc: dict[str, Any], path: Path, names: list[str], command: str) -> None:
    """A small recording for tests/unit: the calibration runs and the named runs, ITL gaps dropped."""
    runs = {}
    for name, run in doc["runs"].items():
        if run["kind"] == "calib" or name in names:
            runs[name] = dict(run)
            if run["kind"] != "calib":
                runs[name]["itl_gaps_s"] = []
                runs[name]["itl_p50_s"] = replay.median(run["itl_gaps_s"])
    out = {
        "made_by": command,
        "recorded_by": doc.get("recorded_by", ""),
        "layout": doc.get("layout", "shared"),
        "vllm_settings": doc["vllm_settings"],
        "runs": runs,
    }
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")


def compare(path: Path, cpu: str) -> None:
    doc = json.loads(path.read_text())
    costs = replay.measure_costs(doc)
    print(f"vLLM settings: {doc['vllm_settings']}; layout {doc.get('layout', 'shared')}")
    print(f"measured step costs: {costs}")
    rows = replay.compare_all(doc, costs)
    print(replay.table(rows))
    print(replay.wave_table(rows))
    print(plan_check(doc, cpu))


def plan_check(doc: dict[str, Any], cpu: str) -> str:
    """The whole prediction on this host: `servescope plan` for the tiny model on `cpu` (the catalogue's
    entry for this host, the engine's cores), uncalibrated, against each fixed-length closed loop."""
    with tempfile.TemporaryDirectory(prefix="vllm-scheduler-plan-") as tmp:
        cfg = make_tiny_model(Path(tmp), VLLM_TINY, hub_cache=False).hf_dir / "config.json"
        lines = [f"plan --gpu {cpu} (uncalibrated; GPU-fitted knobs) against vLLM:"]
        lines.append(f"{'run':20s} {'TTFT p50 ms':>22s} {'ITL p50 ms':>22s} {'out tok/s':>22s}")
        for run in doc["runs"].values():
            if run["kind"] != "closed" or run["ratio"]:
                continue
            argv = [
                sys.executable, "-m", "servescope.cli", "plan", "--model", str(cfg), "--gpu", cpu, "--gpus", "1",
                "--tp", "1", "--max-model-len", "2048", "--max-num-seqs", str(doc["vllm_settings"]["max_num_seqs"]),
                "--max-num-batched-tokens", str(doc["vllm_settings"]["max_num_batched_tokens"]),
                "--input-len", str(run["input"]), "--output-len", str(run["output"]),
                "--concurrency", str(run["concurrency"]), "--num-requests", str(run["n"]), "--json", "-",
            ]  # fmt: skip
            p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                raise SystemExit(f"plan failed:\n{p.stderr[-2000:]}")
            point = json.loads(p.stdout)["whatif"]["points"][0]
            real = replay.observed(run)
            line = f"{run['name']:20s}"
            for pred, meas in (
                (point["ttft_ms_p50"], 1e3 * real.ttft_p50_s),
                (point["itl_ms_p50"], 1e3 * real.itl_p50_s),
                (point["output_tokens_per_s"], real.out_tok_s),
            ):
                line += f" {pred:7.1f} vs {meas:7.1f} {100 * (pred - meas) / meas:+5.0f}%"
            lines.append(line)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out", type=Path)
    r.add_argument("--runs", default="calib", help=f"groups, comma-separated: {', '.join(RUNS)}")
    r.add_argument("--budget-s", type=float, default=300.0, help="start no run after this long (s) of load")
    r.add_argument("--layout", choices=("split", "shared"), default="split", help="vLLM's processes on the cores")
    c = sub.add_parser("compare")
    c.add_argument("recording", type=Path)
    c.add_argument("--cpu", default="epyc-milan-kvm:1", help="plan --gpu for the whole-prediction check")
    c.add_argument("--fixture", type=Path, help="also write the small recording the unit test reads")
    c.add_argument("--fixture-runs", default="fixed-p512-c16,spread-p512-c16,fixed-p128-c16,spread-p128-c64")
    args = ap.parse_args()
    if args.cmd == "record":
        groups = args.runs.split(",")
        bad = [g for g in groups if g not in RUNS]
        if bad:
            raise SystemExit(f"unknown run group(s) {bad}; known: {', '.join(RUNS)}")
        record(args.out, groups, args.layout, args.budget_s)
    else:
        compare(args.recording, args.cpu)
        if args.fixture:
            doc = json.loads(args.recording.read_text())
            cmd = " ".join(["benchmarks/vllm_scheduler.py", *sys.argv[1:]])
            fixture(doc, args.fixture, args.fixture_runs.split(","), cmd)


if __name__ == "__main__":
    main()
