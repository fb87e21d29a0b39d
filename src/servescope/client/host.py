"""One shard hosted outside the run's own process: a worker process on this host, or any host.

Two faces over the same `shard.Shard`:
- `worker_main(conn, index, spec_bytes)`: a worker process of `--workers N` (run.workers starts it
  with multiprocessing's `spawn`). It talks to the run over one duplex pipe, in pickled tuples:

      worker -> run   ("ready", pid, preconnected, wall_minus_perf_ns)   connections open, waiting
                      ("batch", started, done)    every `FLUSH_S`: requests sent since the last
                                                  batch (id, t_sched, t_send, warmup, lengths,
                                                  session, turn) and records finished since
                                                  (`record_fields`: each a tuple of its fields)
                      ("done", ShardResult)       the end (its records already went in batches)
                      ("error", text)             an exception outside the shard
      run -> worker   ("start", start_ns)         the common start instant (perf_counter_ns)
                      ("stop",)                   Ctrl-C: cancel what is in flight, as one process does
                      ("enough", why)             --target-precision: send nothing more, let in-flight end

  Batches are pickled and written by a thread of the worker's own, so a slow reader on the other end
  never stalls the event loop; the loop only appends to two lists. Messages from the run are read
  by another thread (blocking reads; the pipe stays in blocking mode for both). A worker ignores SIGINT (the run
  forwards `stop`) and stops when the pipe closes (the run is gone).
- `host_shard(out, listen, index, spec)`: that loop over any transport; `client.remote.RemoteShard`
  runs it on a thread with a queue for its messages (what a `--ray` actor hosts, run/ray_run.py).
- `run_shard(spec_bytes, start_ns)`: the same shard as one blocking call that returns its result
  with every record, for any host that can only call a function.

Clocks: `start_ns` is `time.perf_counter_ns()`, which on Linux reads CLOCK_MONOTONIC, one clock for
every process of the host: a worker takes the instant as given and its records are relative to the
common start with no conversion. Elsewhere (`clock="wall"`) the instant is `time.time_ns()` and is
converted once with `wall_minus_perf_ns` (docs/metrics.md, "Clocks across shards").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import operator
import os
import pickle
import queue
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Protocol

from servescope.client.shard import Shard
from servescope.client.spec import ShardResult, ShardSpec
from servescope.results.columns import compact
from servescope.results.records import RequestRecord

__all__ = [
    "FLUSH_S",
    "Listen",
    "Outbox",
    "dumps",
    "host_shard",
    "record_fields",
    "record_from_fields",
    "run_shard",
    "wall_minus_perf_ns",
    "worker_main",
]

#: How often a worker sends the requests it started and the records it finished.
FLUSH_S = 0.05

_PICKLE = pickle.HIGHEST_PROTOCOL


#: A record as the tuple of its fields, in declaration order: what crosses the pipe (a tuple of plain
#: values pickles and unpickles in C; a dataclass instance goes through Python-level __setstate__).
record_fields = operator.attrgetter(*RequestRecord.__dataclass_fields__)


def record_from_fields(values: tuple[Any, ...]) -> RequestRecord:
    """The inverse of `record_fields`."""
    return RequestRecord(*values)


def dumps(spec: ShardSpec) -> bytes:
    """A shard's spec as bytes, for another process or host (`run_shard`, `worker_main`)."""
    return pickle.dumps(spec, protocol=_PICKLE)


def clock_offset_ns(read: Callable[[], int], tries: int) -> tuple[int, int]:
    """Another clock minus this process's `perf_counter_ns`, and its error bound (ns): `read()` (the
    other clock) bracketed by two perf_counter reads, the narrowest bracket of `tries` kept, the
    reading taken at its midpoint; half its width bounds the error. One routine for the wall clock
    here and a Ray actor's clock over a round trip (run.ray_run)."""
    best: tuple[int, int] | None = None
    for _ in range(tries):
        a = time.perf_counter_ns()
        other = read()
        b = time.perf_counter_ns()
        cand = (other - (a + b) // 2, (b - a + 1) // 2)
        if best is None or cand[1] < best[1]:
            best = cand
    assert best is not None
    return best


def wall_minus_perf_ns(tries: int = 7) -> tuple[int, int]:
    """`time.time_ns() - time.perf_counter_ns()` now, and its error bound (ns) (`clock_offset_ns`)."""
    return clock_offset_ns(time.time_ns, tries)


def run_shard(spec_bytes: bytes, start_ns: int, *, clock: str = "perf") -> ShardResult:
    """Run one shard from the common start instant and return its result with every record.

    `clock` "perf": `start_ns` is perf_counter_ns (CLOCK_MONOTONIC on Linux, shared by the host's
    processes); "wall": it is time.time_ns(), converted here with the offset measured now.
    Blocking: call it from a thread or process of its own (a Ray actor's method, say)."""
    spec = pickle.loads(spec_bytes)  # our own bytes (`dumps`), from the run that planned them
    local = start_ns if clock == "perf" else start_ns - wall_minus_perf_ns()[0]

    async def ready(preconnected: int) -> int:
        return local

    async def go() -> ShardResult:
        return await Shard(spec, ready=ready).run()

    return asyncio.run(go())


def worker_main(conn: Connection, index: int, spec_bytes: bytes) -> None:
    """A worker process's entry (multiprocessing target): host one shard, talk over `conn`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's to handle; it says stop
    spec = pickle.loads(spec_bytes)  # our own bytes, from the parent process
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux and macOS
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(host_shard(_Sender(conn), functools.partial(_receive, conn), index, spec))


class Outbox(Protocol):
    """Where a hosted shard's messages go, in order: a pipe (`_Sender`) or a queue (`client.remote`)."""

    def put(self, msg: tuple[Any, ...]) -> None: ...

    def close(self) -> None: ...


#: How a hosted shard hears the run: given the loop and the two callbacks, arrange for each message to
#: reach `on_message` and the run's end to reach `on_eof` (both called on the loop's thread).
Listen = Callable[[asyncio.AbstractEventLoop, Callable[[tuple[Any, ...]], None], Callable[[], None]], None]


class _Sender:
    """Pickles and writes messages to the run on a thread of its own, in order."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.q: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="servescope-sender", daemon=True)
        self.thread.start()

    def put(self, msg: tuple[Any, ...]) -> None:
        self.q.put(msg)

    def _run(self) -> None:
        while (msg := self.q.get()) is not None:
            try:
                self.conn.send(msg)
            except OSError:  # the run is gone: nothing to tell
                return

    def close(self) -> None:
        self.q.put(None)
        self.thread.join()


def _receive(
    conn: Connection,
    loop: asyncio.AbstractEventLoop,
    on_message: Callable[[tuple[Any, ...]], None],
    on_eof: Callable[[], None],
) -> None:
    """Read messages on a thread of its own (blocking reads: an event loop's reader would make the pipe
    non-blocking for the sender thread too) and hand each to the loop."""

    def run() -> None:
        try:
            while True:
                msg = conn.recv()
                loop.call_soon_threadsafe(on_message, msg)
        except (EOFError, OSError):
            with contextlib.suppress(RuntimeError):  # (the loop closed first: the shard is over)
                loop.call_soon_threadsafe(on_eof)

    threading.Thread(target=run, name="servescope-receiver", daemon=True).start()


async def host_shard(out: Outbox, listen: Listen, index: int, spec: ShardSpec) -> None:
    """Host one shard: say `ready`, wait for `start`, send `batch`es every `FLUSH_S`, end with `done` (or
    `error`), through `out`; `listen` brings the run's `start`/`stop`/`enough` (module docstring). The
    worker process's pipe and `client.remote`'s queues are two transports for it."""
    loop = asyncio.get_running_loop()
    started: list[RequestRecord] = []
    finished: list[RequestRecord] = []
    start: asyncio.Future[int] = loop.create_future()
    stop = asyncio.Event()
    late = [0.0]
    shard: Shard | None = None

    def on_message(msg: tuple[Any, ...]) -> None:
        if msg[0] == "start" and not start.done():
            late[0] = max(0, time.perf_counter_ns() - msg[1]) / 1e6
            start.set_result(msg[1])
        elif msg[0] == "stop":
            stop.set()
        elif msg[0] == "enough" and shard is not None and shard.stopped_by is None:
            shard.stopped_by = msg[1]

    def on_eof() -> None:  # the run is gone: stop as on Ctrl-C
        stop.set()
        if not start.done():
            start.cancel()

    async def ready(preconnected: int) -> int:
        out.put(("ready", os.getpid(), preconnected, wall_minus_perf_ns()[0]))
        return await start

    def flush() -> None:
        if started or finished:
            sent = [
                (r.id, r.t_sched_ns, r.t_send_ns, r.warmup, r.input_len, r.output_len, r.session, r.turn)
                for r in started
            ]
            compact(finished)  # chunk times as one int64 array: pickled as one copy, not an int object a chunk
            done = [record_fields(r) for r in finished]
            started.clear()
            finished.clear()  # (the shard keeps none: they go on to the run's process, memory here stays flat)
            out.put(("batch", sent, done))

    async def flusher() -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            flush()

    listen(loop, on_message, on_eof)
    shard = Shard(spec, on_record=finished.append, on_send=started.append, stop=stop, ready=ready)
    task = asyncio.ensure_future(flusher())
    try:
        result = await shard.run()
    except asyncio.CancelledError:  # the run went away before the start instant
        out.close()
        return
    except Exception as e:  # outside any request: say so, the run counts what was in flight as lost
        out.put(("error", f"{type(e).__name__}: {e}"))
        out.close()
        raise
    finally:
        task.cancel()
    flush()
    result.records = []
    result.index = index
    result.pid = os.getpid()
    result.start_late_ms = late[0]
    out.put(("done", result))
    out.close()
