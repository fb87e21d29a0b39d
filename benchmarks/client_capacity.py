"""Client capacity: CPU time per streamed token and tokens/s, servescope vs a minimal client.

    .venv/bin/python benchmarks/client_capacity.py [--concurrency 64 256] [--requests 2000]

Starts the scripted server (tests/support/scripted_server.py) with no delays in its own process,
then, in this process and one after the other on the same event-loop implementation, drives it
with (a) servescope's shard (`servescope.client.shard.Shard`; as run by default, then without read
coalescing, then with read-time stamps) and (b) a minimal asyncio + aiohttp
a typical lean streaming client (~60 lines: iter_any, split lines, json.loads
per data line, perf_counter_ns per read). CPU is this process's user+system time over the load
(getrusage), so the server's CPU is not counted. Target: servescope <= 5 us per token and no
more than the minimal client.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import resource
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servescope.client.openai import build_body, encode_body  # noqa: E402
from servescope.client.shard import Shard  # noqa: E402
from servescope.client.spec import Prepared, ShardSpec  # noqa: E402
from tests.support.procs import scripted  # noqa: E402


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def minimal_client(url: str, body: bytes, n: int, concurrency: int) -> int:
    """The baseline: what a careful 60-line script does."""
    tokens = 0
    next_i = 0
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def worker() -> None:
            nonlocal tokens, next_i
            while next_i < n:
                next_i += 1
                times = []
                async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                    buf = b""
                    async for chunk in r.content.iter_any():
                        t = time.perf_counter_ns()
                        buf += chunk
                        *lines, buf = buf.split(b"\n")
                        for line in lines:
                            if line.startswith(b"data: ") and line != b"data: [DONE]":
                                obj = json.loads(line[6:])
                                ch = obj.get("choices")
                                if ch and ch[0].get("text"):
                                    times.append(t)
                tokens += len(times)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tokens


async def servescope_client(
    url: str, body: bytes, n: int, concurrency: int, kernel: bool = True, coalesce: bool = True
) -> int:
    items = [Prepared(id=i, body=body, input_len=16, output_len=128) for i in range(n)]
    spec = ShardSpec(
        url=url,
        api="completions",
        headers={"Content-Type": "application/json"},
        items=items,
        concurrency=concurrency,
        kernel_timestamps=kernel,
        coalesce_reads=coalesce,
    )
    result = await Shard(spec).run()
    bad = [r for r in result.records if r.status != "ok"]
    assert not bad, bad[0]
    return sum(len(r.chunk_ns) for r in result.records)


def measure(fn, url: str, body: bytes, n: int, c: int) -> tuple[float, float, int]:
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        cpu0, t0 = cpu_s(), time.perf_counter()
        tokens = runner.run(fn(url, body, n, c))
        cpu, wall = cpu_s() - cpu0, time.perf_counter() - t0
    return cpu * 1e6 / tokens, tokens / wall, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    srv = scripted("--ttft-ms", "0", "--itl-ms", "0", "--no-usage-chunk")
    try:
        url = srv.url + "/v1/completions"
        body = encode_body(build_body(api="completions", model="m", prompt="hello " * 16, max_tokens=args.output_len))
        print(
            f"{'concurrency':>11} {'client':>24} {'us CPU/token':>13} {'median':>7} {'tokens/s':>10}"
            f"  (best and median of {args.repeats}, interleaved)"
        )
        clients = (
            ("minimal", minimal_client),
            ("servescope", servescope_client),
            ("sb --no-read-coalescing", functools.partial(servescope_client, coalesce=False)),
            ("sb --rx-timestamps read", functools.partial(servescope_client, kernel=False)),
        )
        for c in args.concurrency:
            # round-robin over the clients, so a slow spell of a shared host hits them alike
            runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name, _ in clients}
            for _ in range(args.repeats):
                for name, fn in clients:
                    runs[name].append(measure(fn, url, body, args.requests, c))
            for name, _ in clients:
                ordered = sorted(runs[name], key=lambda x: x[0])
                best, median = ordered[0], ordered[len(ordered) // 2]
                print(f"{c:>11} {name:>24} {best[0]:>13.2f} {median[0]:>7.2f} {best[1]:>10,.0f}")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
