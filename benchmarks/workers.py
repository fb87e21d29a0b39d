"""`--workers 2` against one process: CPU per streamed token, and an open loop's rate and schedule lag.

    .venv/bin/python benchmarks/workers.py [--requests 20000] [--concurrency 64] [--rate 2000] [--seconds 10]
                                           [--server-writes response|token]

Starts the scripted server (tests/support/scripted_server.py) with no delays in its own process, then:

1. closed loop, `--concurrency` streams of `--output-len` tokens: the run's shard in this process
   (`client.shard.Shard`) and over 2 worker processes (`run.workers.ProcessShards`), interleaved
   `--repeats` times, each writing its records to requests.parquet as `servescope run` does
   (`RecordWriter`, Arrow warmed up before the clock; `--no-records`: records kept in memory, written
   nowhere). CPU is the shard's own measure over the run (getrusage from t0 to the end, every
   thread): one process's, or the sum of both workers' and this process's (which receives, unpickles
   and writes every record). Target: within 10% per streamed token.
2. open loop, Poisson at `--rate` req/s for `--seconds`, over 2 worker processes: the achieved rate
   (requests over the span of their sends, against the nominal rate and against the planned
   schedule's own span) and the median schedule lag (send time - planned time). Target: within 2%,
   median lag under 1 ms.

The machine this was written on has 2 cores, shared by the server under test, the workers and this
process. A no-delay server that writes each token on its own (`--server-writes token`, the scripted
server's usual way: ~0.5-1 us of Python per token) then takes most of a core at the client's rates,
so two workers cannot both have one: they stream less per wake-up, are switched out more, and
spend more per token. By default the server sends each response in one write (`--server-writes
response`: the same bytes, a body built once and reused, ~0.05 us a token), which leaves the cores
to the clients, as a server on other hardware would.

Figures (Nov 2026, concurrency 64, 128 tokens a request, records written; medians of interleaved runs):
- `--server-writes response` (20,000 requests, 5 repeats): one process 1.16 us/token at 896k
  tokens/s; `--workers 2` 1.25 us/token (+7.1%; 0.57 + 0.58 in the workers, 0.09 in this process:
  receiving, unpickling and writing the records, the writing of which one process pays too) at 1.28M
  tokens/s. Open loop: 2,000 req/s achieved +0.01%, schedule lag p50 0.25 ms.
- `--server-writes token` (20,000 requests, 3 repeats): one process 2.23 us/token (404k tokens/s),
  `--workers 2` 2.50 (+12%, 362k tokens/s): the server takes most of a core, three busy processes
  share two.
- paced (`--itl-ms 0.5 --server-writes token`, 2,000 requests, both at ~123k tokens/s): 5.38 vs 6.56
  us/token (+22%): a read a chunk, and each worker's loop wakes for 32 streams instead of 64.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Awaitable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servescope.client.openai import build_body, encode_body  # noqa: E402
from servescope.client.shard import Shard  # noqa: E402
from servescope.client.spec import Prepared, ShardResult, ShardSpec  # noqa: E402
from servescope.results.store import RECORDS, RecordWriter, warm_up  # noqa: E402
from servescope.run.workers import ProcessShards  # noqa: E402
from servescope.workload.schedule import open_loop_offsets_ns  # noqa: E402
from tests.support.procs import scripted  # noqa: E402


def _run(coro: Awaitable[ShardResult]) -> ShardResult:
    import uvloop

    async def go() -> ShardResult:
        return await coro

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(go())


def _spec(url: str, body: bytes, n: int, *, concurrency: int | None, offsets: list[int] | None = None) -> ShardSpec:
    items = [
        Prepared(id=i, body=body, input_len=16, output_len=0, offset_ns=None if offsets is None else offsets[i])
        for i in range(n)
    ]
    return ShardSpec(
        url=url,
        api="completions",
        headers={"Content-Type": "application/json"},
        items=items,
        concurrency=concurrency,
        open_loop=offsets is not None,
        preconnect=min(concurrency or 256, 256),
    )


def _check(result: ShardResult) -> int:
    bad = [r for r in result.records if r.status != "ok"]
    assert not bad, bad[0]
    return sum(len(r.chunk_ns) for r in result.records)


def _closed_once(url: str, body: bytes, n: int, c: int, workers: int, records: bool) -> tuple[ShardResult, int]:
    """One closed-loop run (records written to a temporary requests.parquet unless not `records`) and
    its streamed tokens."""
    spec = _spec(url, body, n, concurrency=c)
    with tempfile.TemporaryDirectory(prefix="sb-workers-") as tmp:
        path = Path(tmp) / RECORDS

        async def go() -> ShardResult:
            writer = RecordWriter(path) if records else None
            on_record = writer.write if writer is not None else None
            try:
                if workers == 1:
                    return await Shard(spec, on_record=on_record).run()
                return await ProcessShards(spec, workers=workers, on_record=on_record).run()
            finally:
                if writer is not None:
                    writer.close()

        result = _run(go())
        if records:
            table = pq.read_table(path, columns=["status", "chunks"]).to_pydict()
            assert len(table["status"]) == n and set(table["status"]) == {"ok"}
            return result, sum(table["chunks"])
    return result, _check(result)


def closed_loop(url: str, body: bytes, n: int, c: int, repeats: int, records: bool) -> None:
    runs: dict[str, list[tuple[float, float]]] = {"1 process": [], "--workers 2": []}
    detail: dict[str, list[str]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name in runs:
            result, tokens = _closed_once(url, body, n, c, 1 if name == "1 process" else 2, records)
            runs[name].append((result.cpu_s * 1e6 / tokens, tokens / result.elapsed_s))
            parts = result.parts or [result]
            detail[name].append(
                " + ".join(f"{p.cpu_s * 1e6 / tokens:.2f}" for p in parts)
                + (f" + run process {result.parent_cpu_s * 1e6 / tokens:.2f}" if result.parts else "")
                + f" (read pauses {sum(p.read_pauses for p in parts)})"
            )
    print(
        f"closed loop, concurrency {c}, {n} requests (median of {repeats}, interleaved), records "
        + ("written to requests.parquet" if records else "kept in memory (--no-records)")
    )
    base = float(np.median([x[0] for x in runs["1 process"]]))
    for name, xs in runs.items():
        us = float(np.median([x[0] for x in xs]))
        print(
            f"  {name:>12}: {us:6.2f} us CPU/token ({us / base - 1:+.1%})  "
            f"{np.median([x[1] for x in xs]):>10,.0f} tokens/s   runs: " + ", ".join(f"{x[0]:.2f}" for x in xs)
        )
        for d in detail[name]:
            print(f"{'':>16}us/token by process: {d}")


def open_loop(url: str, body: bytes, rate: float, seconds: float) -> None:
    n = int(rate * seconds)
    offsets = open_loop_offsets_ns(n, rate, burstiness=1.0, seed=1)
    spec = _spec(url, body, n, concurrency=None, offsets=list(offsets))
    spec.preconnect = 64
    shards = ProcessShards(spec, workers=2)
    result = _run(shards.run())
    _check(result)
    sends = np.array(sorted(r.t_send_ns or 0 for r in result.records))
    lag_ms = np.array([(r.t_send_ns or 0) - r.t_sched_ns for r in result.records]) / 1e6
    achieved = (n - 1) / ((sends[-1] - sends[0]) / 1e9)
    planned = (n - 1) / ((offsets[-1] - offsets[0]) / 1e9)
    print(f"open loop, Poisson {rate:g} req/s over 2 workers, {n} requests")
    print(
        f"  achieved {achieved:,.1f} req/s: {achieved / rate - 1:+.2%} of nominal, {achieved / planned - 1:+.2%} of "
        f"the planned schedule ({planned:,.1f} req/s)"
    )
    print(
        f"  schedule lag ms: p50 {np.percentile(lag_ms, 50):.3f}  p90 {np.percentile(lag_ms, 90):.3f}  "
        f"p99 {np.percentile(lag_ms, 99):.3f}  max {lag_ms.max():.3f}"
    )
    for p in result.parts:
        print(
            f"  worker {p.index} (pid {p.pid}): cpu {p.cpu_s:.2f} s over {p.elapsed_s:.2f} s "
            f"({p.cpu_s / p.elapsed_s:.0%} of a core), loop lag p99 {np.percentile(p.loop_lag_ms, 99):.2f} ms, "
            f"woke {p.start_late_ms:.3f} ms late"
        )
    print(f"  this process: cpu {result.parent_cpu_s:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--open-output-len", type=int, default=16)
    ap.add_argument(
        "--itl-ms",
        type=float,
        default=0.0,
        help="the server's gap between tokens (0: none, each process's CPU is then at its ceiling)",
    )
    ap.add_argument(
        "--server-writes",
        choices=("response", "token"),
        default="response",
        help="with --itl-ms 0: the server sends each response in one write (default: its CPU then "
        "leaves the cores to the clients) or each token in its own (see the docstring)",
    )
    ap.add_argument("--skip-closed", action="store_true")
    ap.add_argument("--no-records", action="store_true", help="closed loop: keep records in memory, write none")
    ap.add_argument("--skip-open", action="store_true")
    args = ap.parse_args()
    srv = scripted(
        "--ttft-ms",
        "0",
        "--itl-ms",
        str(args.itl_ms),
        "--no-usage-chunk",
        *(["--write-whole"] if args.server_writes == "response" else []),
    )
    warm_up()  # as servescope run does before the clock
    try:
        url = srv.url + "/v1/completions"

        def body(n: int) -> bytes:
            return encode_body(build_body(api="completions", model="m", prompt="hello " * 16, max_tokens=n))

        if not args.skip_closed:
            closed_loop(url, body(args.output_len), args.requests, args.concurrency, args.repeats, not args.no_records)
        if not args.skip_open:
            open_loop(url, body(args.open_output_len), args.rate, args.seconds)
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
