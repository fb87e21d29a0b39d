"""servescope and `vllm bench serve` side by side, the same command line, against one real vLLM (run by hand):

    .venv/bin/python benchmarks/vllm_side_by_side.py [--rounds 3] [--workloads c8,poisson,c32] [--json OUT]

vLLM's CPU build (scripts/setup-vllm.sh) serves the tiny random Llama of the e2e tier on CPU 0; each client
runs pinned to CPU 1, one at a time, in interleaved rounds (round k: vLLM's tool first when k is even, ours
first when odd), so drift of the host lands on both. Each client gets the same `vllm bench serve` argv
(`servescope run` reads it as a drop-in) with its own `--result-filename`. Around every run the server's
/metrics is scraped, and its histograms' deltas give the engine's own view of that run: mean TTFT and ITL
(Δsum/Δcount), and what the server counted per request (Δprompt_tokens and Δgeneration_tokens over
Δrequests). Printed per workload: each figure as the median over rounds [min-max], both tools, and whether
the two `--save-result` files have the same keys.

Workloads (`--workloads`): c8 = closed loop, 8 in flight, 256/64 tokens; poisson = Poisson arrivals at
`--rate` (default 14 req/s, near this host's saturation at 256/64) capped at 64 in flight; c32 = closed loop,
32 in flight, 1,024/128 tokens. Each is --num-prompts requests (default 200; 160 for c32).
"""

from __future__ import annotations

import argparse
import json
import statistics
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

from servescope.results.engineview import histogram_mean_ms  # noqa: E402
from servescope.target.servermetrics import histogram_window, read_page  # noqa: E402
from tests.support.real_servers import VLLM_MODEL, VLLM_TINY, find_vllm, start_vllm  # noqa: E402
from tests.support.tiny_model import make_tiny_model  # noqa: E402

WORKLOADS = {
    "c8": {"input": 256, "output": 64, "concurrency": 8, "rate": None, "n": 200},
    "poisson": {"input": 256, "output": 64, "concurrency": 64, "rate": "RATE", "n": 200},
    "c32": {"input": 1024, "output": 128, "concurrency": 32, "rate": None, "n": 160},
}
#: (label, key in the --save-result file) of the figures compared; the engine's come from /metrics.
FIGURES = (
    ("output tok/s", "output_throughput"),
    ("requests/s", "request_throughput"),
    ("TTFT mean ms", "mean_ttft_ms"),
    ("TTFT median ms", "median_ttft_ms"),
    ("ITL mean ms", "mean_itl_ms"),
    ("TPOT mean ms", "mean_tpot_ms"),
    ("completed", "completed"),
)


def argv_for(
    w: dict[str, Any], base_url: str, tokenizer: Path, out_dir: Path, name: str, seed: int, rate: float
) -> list[str]:
    """The one `vllm bench serve` command line both tools run."""
    argv = [
        "--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", VLLM_MODEL,
        "--tokenizer", str(tokenizer), "--dataset-name", "random",
        "--random-input-len", str(w["input"]), "--random-output-len", str(w["output"]),
        "--num-prompts", str(w["n"]), "--max-concurrency", str(w["concurrency"]), "--ignore-eos",
        "--seed", str(seed), "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--save-result", "--result-dir", str(out_dir), "--result-filename", name,
    ]  # fmt: skip
    if w["rate"] is not None:
        argv += ["--request-rate", str(rate)]
    return argv


def scrape(base_url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as r:
        return read_page(r.read().decode())


def server_view(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """What the engine saw over one client's run: its TTFT/ITL means and the tokens it counted per request."""
    hists = histogram_window(before, after)

    def delta(name: str) -> float:
        keys = [k for k in after if k == name or k.startswith(name + "{")]
        return sum(after[k] - before.get(k, 0.0) for k in keys)

    done = delta("vllm:request_success")
    out: dict[str, float | None] = {
        f"engine {role} mean ms": histogram_mean_ms(h.sum_s, h.count)
        for role, h in hists.items()
        if role in ("ttft", "itl")
    }
    out["server prompt tokens/request"] = delta("vllm:prompt_tokens") / done if done else None
    out["server output tokens/request"] = delta("vllm:generation_tokens") / done if done else None
    out["server requests"] = done
    return out


def run_tool(tool: str, vllm_py: Path, argv: list[str], cwd: Path, timeout_s: float) -> None:
    if tool == "vllm":
        cmd = [str(vllm_py), "-m", "vllm.entrypoints.cli.main", "bench", "serve", *argv]
    else:
        cmd = [sys.executable, "-m", "servescope.cli", "run", *argv]
    p = subprocess.run(["taskset", "-c", "1", *cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    if p.returncode != 0:
        raise SystemExit(f"{tool} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")


def one_run(tool: str, w: dict[str, Any], ctx: dict[str, Any], seed: int, work: Path) -> dict[str, Any]:
    name = f"{tool}-{seed}.json"
    argv = argv_for(w, ctx["base_url"], ctx["tokenizer"], work, name, seed, ctx["rate"])
    before = scrape(ctx["base_url"])
    t0 = time.monotonic()
    run_tool(tool, ctx["vllm_py"], argv, work, ctx["timeout_s"])
    after = scrape(ctx["base_url"])
    doc = json.loads((work / name).read_text())
    row: dict[str, Any] = {label: doc.get(key) for label, key in FIGURES}
    row.update(server_view(before, after))
    eng = row.get("engine ttft mean ms")
    row["TTFT client - engine ms"] = row["TTFT mean ms"] - eng if eng is not None else None
    row["keys"] = list(doc)
    row["wall s"] = time.monotonic() - t0
    return row


def spread(values: list[Any]) -> str:
    nums = [v for v in values if isinstance(v, int | float)]
    if not nums:
        return "-"
    return f"{statistics.median(nums):,.2f} [{min(nums):,.2f}-{max(nums):,.2f}]"


def table(name: str, rows: dict[str, list[dict[str, Any]]]) -> str:
    labels = [label for label, _ in FIGURES] + [
        "engine ttft mean ms",
        "engine itl mean ms",
        "TTFT client - engine ms",
        "server prompt tokens/request",
        "server output tokens/request",
        "server requests",
    ]
    lines = [
        f"\n{name}: median over {len(rows['vllm'])} rounds [min-max]",
        f"{'':30s} {'vllm bench serve':>30s} {'servescope':>30s}",
    ]
    for label in labels:
        theirs_s, ours_s = (spread([r.get(label) for r in rows[t]]) for t in ("vllm", "ours"))
        lines.append(f"{label:30s} {theirs_s:>30s} {ours_s:>30s}")
    theirs, ours = set(rows["vllm"][0]["keys"]), set(rows["ours"][0]["keys"])
    same = "equal" if theirs == ours else f"only vllm: {sorted(theirs - ours)}, only ours: {sorted(ours - theirs)}"
    lines.append(f"--save-result keys: {same} ({len(theirs)} keys)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workloads", default="c8,poisson,c32")
    ap.add_argument("--rate", type=float, default=14.0, help="the poisson workload's requests/s")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one client run may take")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args()
    vllm_py = find_vllm()
    if vllm_py is None:
        raise SystemExit("vLLM's CPU build is not installed: run scripts/setup-vllm.sh")
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="side-by-side-") as tmp:
        model = make_tiny_model(Path(tmp) / "model", VLLM_TINY, hub_cache=False)
        with start_vllm(vllm_py, model.hf_dir) as server:
            base_url = f"http://127.0.0.1:{server.port}"
            ctx = {
                "base_url": base_url,
                "tokenizer": model.hf_dir,
                "vllm_py": vllm_py,
                "rate": args.rate,
                "timeout_s": args.timeout,
            }
            warm = dict(WORKLOADS["c8"], n=40)
            one_run("vllm", warm, ctx, 999, Path(tmp))  # warm the server's compiled graphs before any figure
            for name in args.workloads.split(","):
                w = WORKLOADS[name]
                rows: dict[str, list[dict[str, Any]]] = {"vllm": [], "ours": []}
                for k in range(args.rounds):
                    order = ("vllm", "ours") if k % 2 == 0 else ("ours", "vllm")
                    for tool in order:
                        work = Path(tmp) / f"{name}-{k}-{tool}"
                        work.mkdir()
                        rows[tool].append(one_run(tool, w, ctx, k, work))
                results[name] = rows
                print(table(name, rows), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
