"""Client timing accuracy against the scripted server's own record of every write.

    .venv/bin/python benchmarks/accuracy.py [--concurrency 512] [--num-requests 1024] [--rx-timestamps kernel]
        [--no-read-coalescing]

Starts tests/support/scripted_server.py (TTFT 100 ms, 20 ms between tokens), runs `servescope run`
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.procs import scripted, servescope  # noqa: E402
from tests.support.truth import truth_vs_client  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=512)
    ap.add_argument("--num-requests", type=int, default=1024)
    ap.add_argument("--rx-timestamps", choices=["kernel", "read"], default="kernel")
    ap.add_argument("--no-read-coalescing", action="store_true", help="pass --no-read-coalescing to the run")
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="servescope-accuracy-"))
    srv = scripted("--ttft-ms", "100", "--itl-ms", "20")
    try:
        p = servescope(
            "run",
            "--url",
            srv.url,
            "--model",
            "m",
            "--out",
            str(out),
            "--quiet",
            "--no-report",
            "--api",
            "completions",
            "--concurrency",
            str(args.concurrency),
            "--num-requests",
            str(args.num_requests),
            "--input-len",
            "128",
            "--output-len",
            "128",
            "--rx-timestamps",
            args.rx_timestamps,
            *(["--no-read-coalescing"] if args.no_read_coalescing else []),
        )
        if p.returncode != 0:
            sys.exit(p.stderr)
        errors_ms = truth_vs_client(srv.url, out)
    finally:
        srv.stop()
    manifest = json.loads((out / "manifest.json").read_text())
    client = json.loads((out / "summary.json").read_text())["client"]
    print(
        json.dumps(
            {
                "concurrency": args.concurrency,
                "rx_timestamps": manifest["clock"]["rx_timestamps"],
                "ms": errors_ms,
                "client": {
                    k: client.get(k)
                    for k in ("cpu_us_per_token", "loop_lag_ms_p99", "saturated", "read_pauses", "read_pause_ms")
                },
                "out": str(out),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
