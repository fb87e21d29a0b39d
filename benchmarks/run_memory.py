"""The client's resident memory over a long run (target: 200,000 requests under 500 MB).

    .venv/bin/python benchmarks/run_memory.py [--requests 200000] [--concurrency 64] [--output-len 8] [--workers 1]

Starts the scripted server (tests/support/scripted_server.py) with no delays, runs `servescope run`
against it in a child process (records to requests.parquet, no report), and samples the child's
resident memory (/proc/PID/status VmRSS) every 0.2 s; prints the peak (VmHWM) and RSS at quarters of
the run, so growth with the number of requests shows. With `--workers N` the figures are the run
process's (it receives and writes every record; each worker holds only its slice and its batch).

What the figures hold (200,000 requests, 8 tokens each): ~90 MB of imports, ~60 MB of encoded
bodies and the schedule, ~55 MB of pandas where it is installed (pyarrow imports it at its first
conversion: the dev environment's test extra, not a servescope dependency), flat during the run; the
peak comes after the clock, reading the records back as columns for the summary and the checks.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.procs import scripted  # noqa: E402


def _status_mb(pid: int, key: str) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=8)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    srv = scripted("--ttft-ms", "0", "--itl-ms", "0")
    out = Path(tempfile.mkdtemp(prefix="sb-rss-")) / "run"
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "servescope.cli",
                "run",
                "--url",
                srv.url,
                "--model",
                "m",
                "--no-probe",
                "--num-requests",
                str(args.requests),
                "--concurrency",
                str(args.concurrency),
                "--input-len",
                "16",
                "--output-len",
                str(args.output_len),
                "--workers",
                str(args.workers),
                "--no-report",
                "--quiet",
                "--out",
                str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        samples: list[tuple[float, float]] = []
        peak = 0.0
        while proc.poll() is None:
            rss = _status_mb(proc.pid, "VmRSS")
            peak = max(peak, _status_mb(proc.pid, "VmHWM") or 0.0)
            if rss is not None:
                samples.append((time.perf_counter() - t0, rss))
            time.sleep(0.2)
        _, err = proc.communicate()
        wall = time.perf_counter() - t0
        if proc.returncode:
            raise SystemExit(err[-3000:])
    finally:
        srv.stop()
    import json

    s = json.loads((out / "summary.json").read_text())
    print(
        f"{s['requests']['completed']:,} of {args.requests:,} requests completed in {wall:.0f} s "
        f"({s['throughput']['requests_per_s']:.0f} req/s, {args.output_len} tokens each, concurrency "
        f"{args.concurrency}, {args.workers} worker process{'es' if args.workers > 1 else ''})"
    )
    print(f"client peak RSS (VmHWM): {peak:.0f} MB")
    for q in (0.25, 0.5, 0.75, 0.95):
        t, rss = samples[min(len(samples) - 1, int(q * len(samples)))]
        print(f"  at {t:5.0f} s: {rss:.0f} MB")
    print(f"requests.parquet: {(out / 'requests.parquet').stat().st_size / 1e6:.0f} MB in {out}")


if __name__ == "__main__":
    main()
