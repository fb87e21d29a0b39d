"""Client timing accuracy against the scripted server's own record of every write.

    .venv/bin/python benchmarks/accuracy.py [--concurrency 512] [--num-requests 1024] [--rx-timestamps kernel]

Starts tests/support/scripted_server.py (TTFT 100 ms, 20 ms between tokens), runs `servebench run`
against it, fetches the server's truth (GET /truth: perf_counter_ns of each chunk write, the same
CLOCK_MONOTONIC as the client on this host) and prints, token by token: the delay from the server's
write to the arrival the client recorded, the per-gap error (client gap minus true gap of the same
token pair), the ITL P99 and TTFT median of both, and the client's self-check.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servebench.store import load_run  # noqa: E402
from tests.support.procs import scripted, servebench  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=512)
    ap.add_argument("--num-requests", type=int, default=1024)
    ap.add_argument("--rx-timestamps", choices=["kernel", "read"], default="kernel")
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="servebench-accuracy-"))
    srv = scripted("--ttft-ms", "100", "--itl-ms", "20")
    try:
        p = servebench("run", "--url", srv.url, "--model", "m", "--out", str(out), "--quiet", "--no-report",
                       "--api", "completions", "--concurrency", str(args.concurrency),
                       "--num-requests", str(args.num_requests), "--input-len", "128", "--output-len", "128",
                       "--rx-timestamps", args.rx_timestamps)
        if p.returncode != 0:
            sys.exit(p.stderr)
        truth = json.loads(urllib.request.urlopen(srv.url + "/truth", timeout=10).read())["requests"]
    finally:
        srv.stop()
    run = load_run(out)
    origin = run.manifest["clock"]["origin_ns"]
    delay, gap_err, true_gaps, client_gaps, true_ttft, client_ttft = [], [], [], [], [], []
    for r in run.records:
        t = np.array(truth[r.response_id]["token_ns"]) - origin
        c = np.array(r.chunk_ns)
        delay.append((c - t) / 1e6)
        gap_err.append(np.abs(np.diff(c) - np.diff(t)) / 1e6)
        true_gaps.append(np.diff(t) / 1e6)
        client_gaps.append(np.diff(c) / 1e6)
        true_ttft.append((t[0] - r.t_send_ns) / 1e6)
        client_ttft.append((r.t_first_ns - r.t_send_ns) / 1e6)
    d, g = np.concatenate(delay), np.concatenate(gap_err)
    tg, cg = np.concatenate(true_gaps), np.concatenate(client_gaps)
    summary = json.loads((out / "summary.json").read_text())["client"]
    print(json.dumps({
        "concurrency": args.concurrency, "rx_timestamps": run.manifest["clock"]["rx_timestamps"],
        "delay_ms": {"min": float(d.min()), "p50": float(np.median(d)), "p99": float(np.percentile(d, 99)),
                     "max": float(d.max())},
        "gap_error_ms": {"p50": float(np.median(g)), "p99": float(np.percentile(g, 99))},
        "itl_p99_ms": {"true": float(np.percentile(tg, 99)), "client": float(np.percentile(cg, 99))},
        "ttft_median_ms": {"true": float(np.median(true_ttft)), "client": float(np.median(client_ttft))},
        "client": {k: summary[k] for k in ("cpu_us_per_token", "loop_lag_ms_p99", "saturated")},
        "out": str(out),
    }, indent=2))


if __name__ == "__main__":
    main()
