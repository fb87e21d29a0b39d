"""Many streams against the scripted server's truth: TTFT and ITL errors, connections, and the verdict.

    .venv/bin/python benchmarks/streams.py [--concurrency 2048] [--num-requests 4096] [--workers 2]
        [--ray] [--repeats 1]

Starts tests/support/scripted_server.py (TTFT 100 ms, 20 ms between tokens, 128-token answers), runs
`servescope run --workers N` against it, fetches the server's record of every chunk write (same host, same
CLOCK_MONOTONIC) and prints, per run: the client's TTFT p50/p99 and ITL p99 against the truth's (the
same records with each arrival replaced by the server's write), the connections opened before the clock
and inside it, and the client's verdict with its reasons. Where the host keeps up the targets are TTFT
p50 error <= 2 ms, p99 <= 5 ms, ITL p99 <= 1 ms; where it does not, the verdict must say so, and why.

`--ray` (root, Ray installed: scripts/setup-ray.sh): the same run over a two-node Ray cluster in network
namespaces of this machine (tests/support/raynet.py, ../shared/RAY-NETNS.md). The server and the driver
(`servescope run --ray HEAD:6390 --ray-resource servescope_load`) are in the head's namespace, on its
address; one shard per worker node (`--workers` is then ignored). The nodes still share this machine's
CLOCK_MONOTONIC, so each shard's records line up with the server's writes at the run's origin plus that
shard's measured clock offset (tests/support/truth.py, `shard_origins_ns`); the offsets and their error
bounds are printed with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.oracle import itl_gaps_ms, request_latencies_ms  # noqa: E402
from tests.support.procs import SCRIPTED, ServerProcess, scripted, servescope  # noqa: E402
from tests.support.raynet import WORKER_RESOURCE, RayNet, ray_cluster, unavailable  # noqa: E402
from tests.support.truth import truth_twin  # noqa: E402

SERVER_ARGS = ("--ttft-ms", "100", "--itl-ms", "20")

TARGETS_MS = {"ttft_p50": 2.0, "ttft_p99": 5.0, "itl_p99": 1.0}


#: benchmark target -> the figure's name in the client's bias bounds (client.unvouched)
_FIGURE = {"ttft_p50": "ttft median", "ttft_p99": "ttft p99", "itl_p99": "itl p99"}


def errors_ms(url: str, out: Path, truth: dict[str, dict] | None = None) -> dict[str, float]:
    """Client figure minus true figure: TTFT p50 and p99, ITL p50 and p99."""
    client, true = truth_twin(url, out, truth)

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


def run_args(args: argparse.Namespace, url: str, out: Path) -> list[str]:
    """`servescope run`'s arguments, the same for both modes but the shards' flags."""
    return [
        "run",
        *("--url", url, "--model", "m", "--out", str(out), "--quiet", "--no-report"),
        *("--api", "completions", "--concurrency", str(args.concurrency)),
        *("--num-requests", str(args.num_requests), "--input-len", "128", "--output-len", "128"),
    ]


def run_workers(args: argparse.Namespace, out: Path) -> tuple[dict[str, float], float]:
    """`--workers N` on this host against the scripted server on 127.0.0.1: the errors and the run's wall time."""
    srv = scripted(*SERVER_ARGS)
    try:
        t = time.monotonic()
        p = servescope(*run_args(args, srv.url, out), "--workers", str(args.workers), timeout_s=600)
        wall = time.monotonic() - t
        if p.returncode != 0:
            sys.exit(p.stderr)
        return errors_ms(srv.url, out), wall
    finally:
        srv.stop()


@dataclass
class _RayRun:
    wall_s: float = 0.0
    cluster_s: dict[str, float] | None = None


def run_ray(args: argparse.Namespace, out: Path, note: _RayRun) -> dict[str, float]:
    """`--ray` over two worker nodes in namespaces; the server and the driver in the head's namespace."""
    why = unavailable()
    if why is not None:
        sys.exit(f"--ray: {why}")
    # the actors import servescope on the worker nodes: this checkout's src, as the driver does
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    with ray_cluster(2) as net, contextlib.ExitStack() as stack:
        note.cluster_s = dict(net.started)
        srv = ServerProcess(
            net.argv(net.head, [sys.executable, str(SCRIPTED), "--host", net.head_ip, "--port", "0", *SERVER_ARGS])
        )
        stack.callback(srv.stop)
        argv = [sys.executable, "-m", "servescope.cli", *run_args(args, srv.url, out)]
        argv += ["--ray", net.address, "--ray-resource", WORKER_RESOURCE]
        t = time.monotonic()
        p = net.run(net.head, argv, timeout=600)
        note.wall_s = time.monotonic() - t
        if p.returncode != 0:
            sys.exit(p.stderr[-6000:])
        truth = _truth_in(net, srv.url, out)
    return errors_ms(srv.url, out, truth)


def _truth_in(net: RayNet, url: str, out: Path) -> dict[str, dict]:
    """The server's /truth, fetched from inside the head namespace (the root namespace has no route there)."""
    dest = out / "truth.json"
    code = (
        "import sys, urllib.request\n"
        f"open(sys.argv[1], 'wb').write(urllib.request.urlopen({url + '/truth'!r}, timeout=60).read())"
    )
    p = net.run(net.head, [sys.executable, "-c", code, str(dest)], timeout=120)
    if p.returncode != 0:
        sys.exit(f"GET /truth in {net.head}: {p.stderr[-2000:]}")
    return json.loads(dest.read_text())["requests"]


def one(args: argparse.Namespace) -> dict:
    out = Path(tempfile.mkdtemp(prefix="servescope-streams-"))
    note = _RayRun()
    if args.ray:
        err = run_ray(args, out, note)
    else:
        err, note.wall_s = run_workers(args, out)
    manifest = json.loads((out / "manifest.json").read_text())
    client = json.loads((out / "summary.json").read_text())["client"]
    met = {k: abs(err[k]) <= v for k, v in TARGETS_MS.items()}
    shards = (client.get("workers") or {}).get("shards") or []
    return {
        "mode": "ray" if args.ray else "workers",
        "concurrency": args.concurrency,
        "workers": len(shards) if args.ray else args.workers,
        "wall_s": round(note.wall_s, 1),
        "cluster_start_s": note.cluster_s,
        "shards": [
            {
                k: s.get(k)
                for k in (
                    "index",
                    "host",
                    "requests",
                    "cpu_share",
                    "loop_lag_ms_p99",
                    "start_late_ms",
                    "clock_offset_ms",
                    "clock_error_ms",
                    "saturated",
                )
            }
            for s in shards
        ],
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
        "unvouched": client.get("unvouched"),
        # the criterion: the figures within their targets, or a verdict that says the client could not vouch,
        # for the whole run (saturated) or for each figure off its target (named in client.unvouched)
        "honest": all(met.values())
        or bool(client["saturated"])
        or all(ok or any(_FIGURE[k] in u for u in client.get("unvouched") or ()) for k, ok in met.items()),
        "out": str(out),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=2048)
    ap.add_argument("--num-requests", type=int, default=4096)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ray", action="store_true", help="over two Ray worker nodes in network namespaces (root)")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    for _ in range(args.repeats):
        print(json.dumps(one(args), indent=2), flush=True)


if __name__ == "__main__":
    main()
