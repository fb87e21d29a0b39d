"""`--workers N`: the run's shard as N worker processes on this host, merged back into one result.

`ProcessShards` has the face of `client.shard.Shard` (`client.face.ShardFace`: `run()` -> `ShardResult`;
`done`, `failed`, `output_tokens`, `in_flight`, `stopped_by` for the progress line), so `run.measure`
runs either. In order:

1. `client.split.split_spec` deals the planned schedule (docs/architecture.md, "Scale-out").
2. Each slice goes to a process started with multiprocessing's `spawn` context (a fresh interpreter:
   never a fork of this asyncio process) running `client.host.worker_main`; it imports, opens its
   connections and says `ready`. `on_ready` is told the workers' PIDs before the clock (the manifest).
3. One common start instant, `LEAD_S` ahead on perf_counter_ns (CLOCK_MONOTONIC, one clock for
   every process of a Linux host), goes to every worker; each waits for it and takes it as t0, so
   every record is relative to the same origin.
4. Records come back in batches during the run (`client.host.FLUSH_S`), get run-wide ids
   (`split.global_id`) and go to `on_record` (the records file) at once. Ctrl-C is forwarded as
   `stop`, a --target-precision verdict (asked of the merged records) as `enough`.
5. A worker whose process dies mid-run: its finished records are already here; the requests it had
   sent and not finished are recorded as `worker_lost` (what it sent in its last `FLUSH_S` before
   dying is not known and goes unrecorded); the others run on to the end. The merged result's
   `failure` says what was lost, and the run exits 1.

The summary is computed from the merged records; `run.assemble.assess_shards` adds each shard's
CPU, loop lag and send lag to its client block and names the saturated shard.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.process
import resource
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from servescope.client.host import dumps, record_from_fields, worker_main
from servescope.client.outcome import fail
from servescope.client.shard import StopCheck, quiet_gc
from servescope.client.spec import ShardResult, ShardSpec
from servescope.client.split import global_id, split_spec
from servescope.errors import ServescopeError
from servescope.results.records import RequestRecord

__all__ = ["LEAD_S", "ProcessShards"]

#: How far ahead of now the common start instant is set, once every worker is ready.
LEAD_S = 0.25
_READY_TIMEOUT_S = 120.0


@dataclass
class _Worker:
    index: int
    spec: ShardSpec
    proc: multiprocessing.process.BaseProcess | None = None  # (run.ray_run: None, an actor instead)
    conn: Connection | None = None
    pid: int | None = None
    preconnected: int = 0
    wall_minus_perf_ns: int | None = None
    ready: bool = False
    result: ShardResult | None = None
    error: str | None = None
    gone_ns: int | None = None  # when its pipe closed without a result (perf_counter_ns)
    pending: dict[int, tuple[Any, ...]] = field(default_factory=dict)  # sent, not finished (local id)
    finished: int = 0
    reader: threading.Thread | None = None
    lost: int = 0  # requests in flight when its process died (recorded as worker_lost)

    @property
    def over(self) -> bool:
        return self.result is not None or self.gone_ns is not None


class ProcessShards:
    """The run's shard over `workers` processes on this host (module docstring).

    `run.ray_run.RayShards` is the same driver over Ray actors: it overrides the transport (`_launch`,
    `_send`, `_close`, `_alive`, `_gone_text`, `_label`, `_start_for`, `_ready_doc`); dispatching, the
    worker_lost accounting and the merge are this class's."""

    #: How far ahead of now the common start instant is set, once every shard is ready.
    lead_s = LEAD_S

    def __init__(
        self,
        spec: ShardSpec,
        *,
        workers: int,
        on_record: Callable[[RequestRecord], None] | None = None,
        stop: asyncio.Event | None = None,
        enough: StopCheck | None = None,
        on_ready: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.spec = spec
        self.n = workers
        self.on_record = on_record
        self.stop = stop or asyncio.Event()
        self.enough = enough
        self.on_ready = on_ready
        self.stopped_by: str | None = None
        self.records: list[RequestRecord] = []  # kept only without `on_record` (as `Shard` does)
        self.done = 0
        self.failed = 0
        self.output_tokens = 0
        self.in_flight: dict[tuple[int, int], tuple[Any, ...]] = {}  # (shard, local id): sent, not finished
        self.t0_ns = 0
        self._workers: list[_Worker] = []
        self._changed = asyncio.Event()

    # ------------------------------------------------------------------ public
    async def run(self) -> ShardResult:
        loop = asyncio.get_running_loop()
        stack = contextlib.ExitStack()
        try:
            await self._launch(split_spec(self.spec, self.n), loop)
            await self._wait_ready()
            if self.on_ready is not None:
                self.on_ready(self._ready_doc())
            stack.enter_context(quiet_gc())  # unpickling a batch makes hundreds of objects per record
            cpu0 = _cpu_s()
            self.t0_ns = time.perf_counter_ns() + int(self.lead_s * 1e9)
            for w in self._workers:
                self._send(w, ("start", self._start_for(w)))
            tasks = [asyncio.ensure_future(self._forward_stop())]
            if self.enough is not None:
                tasks.append(asyncio.ensure_future(self._ask_enough()))
            try:
                while not all(w.over for w in self._workers):
                    self._changed.clear()
                    await self._changed.wait()
            finally:
                for t in tasks:
                    t.cancel()
            parent_cpu = _cpu_s() - cpu0
        finally:
            stack.close()
            for w in self._workers:
                self._close(w)
        return self._merge(parent_cpu)

    # ---------------------------------------------------------------- the pipe
    async def _launch(self, specs: list[ShardSpec], loop: asyncio.AbstractEventLoop) -> None:
        """One spawned process per slice, each read by a thread of its own."""
        ctx = multiprocessing.get_context("spawn")
        for i, sub in enumerate(specs):
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(
                target=worker_main, args=(child, i, dumps(sub)), name=f"servescope-shard-{i}", daemon=True
            )
            proc.start()
            child.close()
            w = _Worker(index=i, spec=sub, proc=proc, conn=parent)
            self._workers.append(w)
            w.reader = threading.Thread(
                target=self._read, args=(w, loop), name=f"servescope-shard-{i}-reader", daemon=True
            )
            w.reader.start()

    def _start_for(self, w: _Worker) -> int:
        """The common start instant in `w`'s clock (this host's processes share perf_counter_ns)."""
        return self.t0_ns

    def _alive(self, w: _Worker) -> bool:
        return w.proc is not None and w.proc.is_alive()

    def _gone_text(self, w: _Worker) -> str:
        """How a shard's host ended (its process's exit), for the loss notes."""
        if w.proc is None:
            return "never started"
        w.proc.join(1.0)
        return _exit_text(w.proc.exitcode)

    def _gone_at(self, w: _Worker) -> int:
        """When a shard's host was last known alive (perf_counter_ns): its lost records' `t_end`."""
        return time.perf_counter_ns()  # the pipe closed just now

    def _label(self, w: _Worker) -> str:
        return f"worker {w.index}" + (f" (pid {w.pid})" if w.pid is not None else "")

    def _read(self, w: _Worker, loop: asyncio.AbstractEventLoop) -> None:
        """A worker's pipe, read on a thread of its own until its result or its end (blocking reads: an
        event loop's reader would make the pipe non-blocking, and a message can span many reads)."""
        assert w.conn is not None
        try:
            while True:
                msg = w.conn.recv()
                loop.call_soon_threadsafe(self._on_message, w, msg)
                if msg[0] == "done":
                    return
        except (EOFError, OSError):
            with contextlib.suppress(RuntimeError):  # (the loop closed first: the run is over)
                loop.call_soon_threadsafe(self._on_eof, w)

    def _on_message(self, w: _Worker, msg: tuple[Any, ...]) -> None:
        self._dispatch(w, msg)
        self._changed.set()

    def _on_eof(self, w: _Worker) -> None:
        self._lost(w)
        self._changed.set()

    def _dispatch(self, w: _Worker, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "batch":
            _, sent, done = msg
            for stub in sent:
                w.pending[stub[0]] = stub
                self.in_flight[(w.index, stub[0])] = stub
            for values in done:
                rec = record_from_fields(values)
                w.pending.pop(rec.id, None)
                self.in_flight.pop((w.index, rec.id), None)
                rec.id = global_id(rec.id, w.index, len(self._workers))
                w.finished += 1
                self._record(rec)
        elif kind == "ready":
            _, w.pid, w.preconnected, w.wall_minus_perf_ns = msg
            w.ready = True
        elif kind == "done":
            w.result = msg[1]
        elif kind == "error":
            w.error = msg[1]

    def _record(self, rec: RequestRecord) -> None:
        self.done += 1
        if rec.status != "ok":
            self.failed += 1
        elif rec.output_tokens:
            self.output_tokens += rec.output_tokens
        if self.enough is not None:
            self.enough.observe(rec)
        if self.on_record is not None:
            self.on_record(rec)
        else:
            self.records.append(rec)

    def _lost(self, w: _Worker) -> None:
        """The pipe closed before a result: the process is gone. What it had in flight is lost."""
        if w.over:
            return
        w.gone_ns = self._gone_at(w)
        if self.t0_ns == 0:  # before the clock: nothing was sent
            return
        why = f"{self._label(w)} died ({self._gone_text(w)})"
        if w.error:
            why += f" on {w.error}"
        for local, stub in sorted(w.pending.items()):
            _, sched, send, warmup, in_len, out_len, session, turn = stub
            rec = RequestRecord(
                id=global_id(local, w.index, len(self._workers)),
                warmup=warmup,
                t_sched_ns=sched,
                t_send_ns=send,
                t_end_ns=w.gone_ns - self.t0_ns,
                input_len=in_len,
                output_len=out_len,
                session=session,
                turn=turn,
            )
            fail(rec, "worker_lost", f"{why} with this request in flight")
            w.lost += 1
            self.in_flight.pop((w.index, local), None)
            self._record(rec)

    def _send(self, w: _Worker, msg: tuple[Any, ...]) -> None:
        if w.over or w.conn is None:
            return
        try:
            w.conn.send(msg)
        except OSError:
            self._lost(w)

    def _close(self, w: _Worker) -> None:
        """At the end: its process gone (killed if it lingers), then its pipe (its reader has ended)."""
        if w.proc is None or w.conn is None:
            return
        w.proc.join(5.0 if w.result is not None else 0.0)
        if w.proc.is_alive():
            w.proc.kill()  # (a finished worker that does not exit, or a start that failed)
            w.proc.join(1.0)
        if w.reader is not None:
            w.reader.join(1.0)
        w.conn.close()

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while not all(w.ready for w in self._workers):
            dead = [w for w in self._workers if w.gone_ns is not None or not self._alive(w)]
            if dead:
                w = dead[0]
                raise ServescopeError(
                    f"{self._label(w)} exited before the clock "
                    f"({self._gone_text(w)}){': ' + w.error if w.error else ''}"
                )
            if time.monotonic() > deadline:
                raise ServescopeError(
                    f"shards not ready after {_READY_TIMEOUT_S:g} s: "
                    + ", ".join(self._label(w) for w in self._workers if not w.ready)
                )
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), 0.2)
            except TimeoutError:
                pass

    def _ready_doc(self) -> dict[str, Any]:
        """What the manifest records before the clock: one entry per worker process."""
        return {
            "count": len(self._workers),
            "start": "perf_counter_ns (CLOCK_MONOTONIC, shared by this host's processes)",
            "lead_s": LEAD_S,
            "processes": [
                {
                    "index": w.index,
                    "pid": w.pid,
                    "concurrency": w.spec.concurrency,
                    "items": len(w.spec.items),
                    "preconnected": w.preconnected,
                    "wall_minus_perf_ns": w.wall_minus_perf_ns,
                }
                for w in self._workers
            ],
        }

    async def _forward_stop(self) -> None:
        await self.stop.wait()
        for w in self._workers:
            self._send(w, ("stop",))

    async def _ask_enough(self) -> None:
        """The stop rule over the merged records, as `Shard` asks it over its own (every 2 s at least)."""
        assert self.enough is not None
        wait_s = 2.0
        while self.stopped_by is None:
            await asyncio.sleep(wait_s)
            t = time.perf_counter_ns()
            self.stopped_by = self.enough()
            wait_s = max(2.0, 100 * (time.perf_counter_ns() - t) / 1e9)
        for w in self._workers:
            self._send(w, ("enough", self.stopped_by))

    # ------------------------------------------------------------------- merge
    def _merge(self, parent_cpu_s: float) -> ShardResult:
        parts: list[ShardResult] = []
        lost_notes: list[str] = []
        lost = 0
        not_sent: int | None = None
        for w in self._workers:
            if w.result is not None:
                parts.append(w.result)
                continue
            n_lost = w.lost
            lost += n_lost
            # its slice's requests it never sent (or sent in its last moments, unheard of): counted, not recorded
            planned = (
                w.spec.num_requests
                if w.spec.num_requests is not None
                else (len(w.spec.items) if w.spec.duration_s is None else None)
            )
            unsent = None if planned is None else max(planned - w.finished - n_lost, 0)
            if unsent is not None:
                not_sent = (not_sent or 0) + unsent
            gone = ((w.gone_ns or time.perf_counter_ns()) - self.t0_ns) / 1e9
            rest = "the rest of its slice" + (f" ({unsent} requests)" if unsent is not None else "")
            lost_notes.append(
                f"{self._label(w)} died {gone:.2f} s into the run "
                f"({self._gone_text(w)}): {n_lost} requests in flight lost (records of kind "
                f"worker_lost), its {w.finished} finished requests kept, {rest} not sent"
            )
            parts.append(
                ShardResult(
                    records=[],
                    t0_ns=self.t0_ns,
                    elapsed_s=max(gone, 0.0),
                    rx_timestamps="",
                    cpu_s=0.0,
                    cpu_busy_peak=0.0,
                    index=w.index,
                    pid=w.pid,
                    preconnected=w.preconnected,
                    failure=lost_notes[-1],
                    not_sent=unsent,
                )
            )
        self.records.sort(key=lambda r: r.id)
        finished = [p for p in parts if p.rx_timestamps]
        failures = [f"worker {p.index}: {p.failure}" for p in finished if p.failure] + lost_notes
        return ShardResult(
            records=self.records,
            t0_ns=self.t0_ns,
            elapsed_s=max((p.elapsed_s for p in parts), default=0.0),
            rx_timestamps=finished[0].rx_timestamps
            if finished
            else ("kernel" if self.spec.kernel_timestamps else "read"),
            cpu_s=sum(p.cpu_s for p in parts) + parent_cpu_s,
            cpu_busy_peak=max((p.cpu_busy_peak for p in parts), default=0.0),
            loop_lag_ms=[x for p in parts for x in p.loop_lag_ms],
            read_pauses=sum(p.read_pauses for p in parts),
            read_pause_ms=sum(p.read_pause_ms for p in parts),
            interrupted=any(p.interrupted for p in finished) or self.stop.is_set(),
            preconnected=sum(p.preconnected for p in parts),
            read_lateness=[sum(c) for c in zip(*(p.read_lateness for p in parts if p.read_lateness), strict=True)],
            failure="; ".join(failures) or None,
            parts=parts,
            lost=lost,
            not_sent=not_sent,
            parent_cpu_s=parent_cpu_s,
        )


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime
