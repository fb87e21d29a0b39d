"""Many streams against the scripted server's truth: TTFT and ITL errors, connections, and the verdict.

    .venv/bin/python benchmarks/streams.py [--concurrency 2048] [--num-requests 4096] [--workers 2]
        [--repeats 1]

Starts tests/support/scripted_server.py (TTFT 100 ms, 20 ms between tokens, 128-token answers), runs
`servescope run --workers N` against it, fetches the server's record of every chunk write (same host, same
CLOCK_MONOTONIC) and prints, per run: the client's TTFT p50/p99 and ITL p99 against the truth's (the
same records with each arrival replaced by the server's write), the connections opened before the clock
and inside it, and the client's verdict with its reasons. Where the host keeps up the targets are TTFT
p50 error <= 2 ms, p99 <= 5 ms, ITL p99 <= 1 ms; where it does not, the verdict must say so, and why.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.oracle import itl_gaps_ms, request_latencies_ms  # noqa: E402
from tests.support.procs import scripted, servescope  # noqa: E402
from tests.support.truth import truth_twin  # noqa: E402

TARGETS_MS = {"ttft_p50": 2.0, "ttft_p99": 5.0, "itl_p99": 1.0}


def errors_ms(url: str, out: Path) -> dict[str, float]:
    """Client figure minus true figure: TTFT p50 and p99, ITL p50 and p99."""
    client, true = truth_twin(url, out)

    def ttft(rs: list) -> np.ndarray:
        return np.array([request_latencies_ms(r)["ttft"] for r in rs])

    def gaps(rs: list) -> np.ndarray:
        return np.concatenate([itl_gaps_ms(r) for r in rs])

    tc, tt, gc, gt = ttft(client), ttft(true), gaps(client), gaps(true)
    return {
        "ttft_p50": float(np.median(tc) - np.median(tt)),
        "ttft_p99": float(np.percentile(tc, 99) - np.percentile(tt, 99)),
        "itl_p50": float(np.median(gc) - np.median(gt)),
        "itl_p99": float(np.percentile(gc, 99) - np.percentile(gt, 99)),
        "true_ttft_p99": float(np.percentile(tt, 99)),
        "true_itl_p99": float(np.percentile(gt, 99)),
    }


def one(args: argparse.Namespace) -> dict:
    out = Path(tempfile.mkdtemp(prefix="servescope-streams-"))
    srv = scripted("--ttft-ms", "100", "--itl-ms", "20")
    try:
        p = servescope(
            "run",
            *("--url", srv.url, "--model", "m", "--out", str(out), "--quiet", "--no-report"),
            *("--api", "completions", "--concurrency", str(args.concurrency)),
            *("--num-requests", str(args.num_requests), "--input-len", "128", "--output-len", "128"),
            *("--workers", str(args.workers)),
            timeout_s=600,
        )
        if p.returncode != 0:
            sys.exit(p.stderr)
        err = errors_ms(srv.url, out)
    finally:
        srv.stop()
    manifest = json.loads((out / "manifest.json").read_text())
    client = json.loads((out / "summary.json").read_text())["client"]
    met = {k: abs(err[k]) <= v for k, v in TARGETS_MS.items()}
    return {
        "concurrency": args.concurrency,
        "workers": args.workers,
        "errors_ms": err,
        "targets_met": met,
        "connections": manifest["connections"],
        "setup": client.get("setup"),
        "preconnect_shortfall": client.get("preconnect_shortfall"),
        "load_deficit": client.get("load_deficit"),
        "loop_stall_share": client.get("loop_stall_share"),
        "biases": client.get("biases"),
        "saturated": client["saturated"],
        "reasons": client["reasons"],
        # the criterion: the figures within their targets, or a verdict that says the client could not vouch
        "honest": all(met.values()) or bool(client["saturated"]),
        "out": str(out),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=2048)
    ap.add_argument("--num-requests", type=int, default=4096)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    for _ in range(args.repeats):
        print(json.dumps(one(args), indent=2), flush=True)


if __name__ == "__main__":
    main()
