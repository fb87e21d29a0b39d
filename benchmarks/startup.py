"""Startup cost of the command line: `servescope --help`, and a short run until its first request.

    .venv/bin/python benchmarks/startup.py [--repeats 7] [--pythonpath DIR] [--python EXE]

(a) `servescope --help`: wall time of the whole process (python -m servescope.cli --help), median of N.
(b) `servescope run --url <local no-delay server> --num-requests 10 --concurrency 4`: wall time end to
    end, and the time to the first measured request: from just before the process is started to the
    moment the server read that request. The server is the scripted one (tests/support/scripted_server.py)
    with no delays, in its own process; it stamps each streamed request's arrival on CLOCK_MONOTONIC
    (GET /truth), the clock of this process's perf_counter_ns on the same host. The run's own requests are
    the last 10 to arrive (the capability probe's come before them), so nothing is added to the product.

`--pythonpath DIR` puts DIR first on the child processes' PYTHONPATH, to measure another checkout's code
with the same interpreter and packages, e.g. the code before the redesign:

    git worktree add /tmp/sb-before b83a8b0
    .venv/bin/python benchmarks/startup.py --pythonpath /tmp/sb-before/src
    git worktree remove /tmp/sb-before
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.procs import scripted  # noqa: E402


def _env(pythonpath: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    return env


def _which_code(python: str, env: dict[str, str]) -> str:
    out = subprocess.run(
        [python, "-c", "import servescope, os; print(os.path.dirname(servescope.__file__))"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return out.stdout.strip()


def time_help(python: str, env: dict[str, str], repeats: int) -> list[float]:
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([python, "-m", "servescope.cli", "--help"], capture_output=True, env=env, check=True)
        walls.append(time.perf_counter() - t0)
    return walls


def _arrivals_ns(url: str) -> list[int]:
    with urllib.request.urlopen(url + "/truth", timeout=10) as r:
        doc = json.loads(r.read())
    return sorted(int(req["arrival_ns"]) for req in doc["requests"].values())


def time_run(python: str, env: dict[str, str], repeats: int, n: int, concurrency: int) -> list[tuple[float, float]]:
    """(wall s, time to first measured request s) per repeat; a fresh server each time."""
    out = []
    for _ in range(repeats):
        srv = scripted("--ttft-ms", "0", "--itl-ms", "0")
        try:
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [
                    python,
                    "-m",
                    "servescope.cli",
                    "run",
                    "--url",
                    srv.url,
                    "--model",
                    "m",
                    "--num-requests",
                    str(n),
                    "--concurrency",
                    str(concurrency),
                    "--input-len",
                    "32",
                    "--output-len",
                    "16",
                    "--quiet",
                    "--no-report",
                    "--out",
                    str(Path(tmp) / "r"),
                ]
                t0_ns = time.perf_counter_ns()
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
                wall = (time.perf_counter_ns() - t0_ns) / 1e9
                if proc.returncode != 0:
                    raise SystemExit(f"run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
            arrivals = _arrivals_ns(srv.url)
            if len(arrivals) < n:
                raise SystemExit(f"the server saw {len(arrivals)} streamed requests, expected >= {n}")
            out.append((wall, (arrivals[-n] - t0_ns) / 1e9))
        finally:
            srv.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="interpreter of the child processes")
    ap.add_argument(
        "--pythonpath",
        default=os.environ.get("SERVESCOPE_PYTHONPATH"),
        help="put this first on the children's PYTHONPATH (another checkout's src/)",
    )
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--num-requests", type=int, default=10)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    env = _env(args.pythonpath)
    code = _which_code(args.python, env)
    helps = time_help(args.python, env, args.repeats)
    runs = time_run(args.python, env, args.repeats, args.num_requests, args.concurrency)
    doc = {
        "code": code,
        "help_s_median": statistics.median(helps),
        "help_s_min": min(helps),
        "run_wall_s_median": statistics.median(w for w, _ in runs),
        "first_request_s_median": statistics.median(f for _, f in runs),
        "first_request_s_min": min(f for _, f in runs),
        "repeats": args.repeats,
        "num_requests": args.num_requests,
        "concurrency": args.concurrency,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"code: {code}  (median of {args.repeats})")
    print(f"servescope --help              {doc['help_s_median'] * 1e3:7.0f} ms   (min {doc['help_s_min'] * 1e3:.0f})")
    print(f"run {args.num_requests} requests, wall         {doc['run_wall_s_median'] * 1e3:7.0f} ms")
    print(
        f"run: process start -> 1st req  {doc['first_request_s_median'] * 1e3:7.0f} ms   "
        f"(min {doc['first_request_s_min'] * 1e3:.0f})"
    )


if __name__ == "__main__":
    main()
