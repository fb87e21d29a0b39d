"""The asyncio hot loop: send on schedule, timestamp chunks where the bytes arrive, record.

One `Shard` is the unit of work: a slice of a precomputed schedule in (`spec.ShardSpec`), records
out (`spec.ShardResult`). Everything a request needs (its encoded body, its scheduled offset, a
keep-alive connection) is ready before the clock starts. Per socket read the hot path
(`conn.Connection.on_data`, then `sinks.StreamSink`) does only what timing and token counting
need: one timestamp, the chunked-framing split, and either a run of template chunks read in bulk
(`fastpath.token_run`) or the SSE split with a template check or one JSON parse per event
(`openai.StreamAccumulator`) — inside the transport's read callback, with no coroutine switch per
chunk. Token allocation, metrics and file formats happen after each request (records,
`outcome`) or after the run (summary).

Schedules: a *unit* is one request, or the turns of one multi-turn session (sent in order, each
after the previous answer and its think time). Closed loop: N workers each take the next unit when
the previous one ends. Open loop: units start at their absolute offsets from t0, optionally capped.

Nothing is lost silently: a request that fails on an unexpected exception of the client's own is
recorded (`client_error`) and its worker goes on with the next unit, so concurrency holds. If
`CLIENT_ERROR_STREAK` requests in a row fail so (the same bug hits every request), or an exception
escapes a worker outside any request, the shard stops sending, lets what is in flight finish, and
says why in `ShardResult.failure`.

Clocks: every timestamp is `time.perf_counter_ns() - t0_ns` of the process that measured it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import random
import resource
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Protocol

from servescope.client.openai import new_accumulator
from servescope.client.outcome import classify_status, exception_kind, fail, finish_stream, finish_unary
from servescope.client.pool import ConnectionPool, Endpoint, request_head
from servescope.client.sinks import BufferSink, StreamSink
from servescope.client.spec import Prepared, ShardResult, ShardSpec
from servescope.client.split import units_of
from servescope.results.columns import compact
from servescope.results.records import RequestRecord

__all__ = ["CLIENT_ERROR_STREAK", "FD_RESERVE", "Shard", "StopCheck", "fd_room"]

_perf_ns = time.perf_counter_ns

#: Requests in a row (any worker) that may fail with `client_error` before the shard stops sending.
CLIENT_ERROR_STREAK = 32


class StopCheck(Protocol):
    """A stop rule as the shard uses it (`results.precision.StopRule`): told of each finished record,
    asked every few seconds whether the run may stop (why, or None)."""

    def observe(self, record: RequestRecord) -> None: ...

    def __call__(self) -> str | None: ...


class Shard:
    """Runs one shard's schedule against the target and returns its records.

    Records go to `on_record` as they finish; only without one does the shard keep them, for its
    result (`ShardResult.records`). A run writes them to disk and keeps none: its memory does not grow
    with the number of requests."""

    def __init__(
        self,
        spec: ShardSpec,
        *,
        on_record: Callable[[RequestRecord], None] | None = None,
        stop: asyncio.Event | None = None,
        enough: StopCheck | None = None,
        ready: Callable[[int], Awaitable[int]] | None = None,
        on_send: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        self.spec = spec
        self.on_record = on_record
        # a shard among several (run.workers): told the connections opened before the clock, `ready`
        # answers the common start instant (perf_counter_ns); the shard waits for it and takes it as t0
        self.ready = ready
        self.on_send = on_send  # told of each request as it is sent (its host tracks what is in flight)
        self.stop = stop or asyncio.Event()
        # a stop rule (--target-precision): told of each record, asked every few seconds, off the hot
        # path, whether the records so far say enough; its answer (why) stops new sends like a limit does
        self.enough = enough
        self._keep = on_record is None
        self.stopped_by: str | None = None
        self.records: list[RequestRecord] = []
        self.t0_ns = 0
        self.in_flight: set[asyncio.Task[None]] = set()
        self.done = 0
        self.failed = 0
        self.output_tokens = 0
        self._units = units_of(spec.items)
        self._started = 0
        self._pool: ConnectionPool | None = None
        self._head_prefix = b""
        self._deadline_ns: int | None = None
        self.failure: str | None = None  # set: send nothing more (module docstring)
        self._client_errors = 0  # requests in a row that failed with client_error

    # ------------------------------------------------------------------ public
    async def run(self) -> ShardResult:
        with quiet_gc():
            return await self._run()

    async def _run(self) -> ShardResult:
        spec = self.spec
        pool = ConnectionPool(
            Endpoint.parse(spec.url),
            connect_timeout_s=spec.connect_timeout_s,
            reuse=spec.reuse_connections,
            kernel_timestamps=spec.kernel_timestamps,
            coalesce_reads=spec.coalesce_reads,
        )
        self._pool = pool
        self._head_prefix = pool.head_prefix("POST", spec.headers)
        preconnected = 0
        try:
            if spec.preconnect:
                n = min(spec.preconnect, fd_room(spec.preconnect))
                preconnected = await pool.preconnect(n, budget_s=spec.preconnect_budget_s)
            lag: list[float] = []
            cpu_peak = [0.0]
            if self.ready is not None:
                start_ns = await self.ready(preconnected)
                await _sleep_until(start_ns)
                self.t0_ns = start_ns
            else:
                self.t0_ns = _perf_ns()
            cpu0 = _cpu_s()
            if spec.duration_s is not None:
                self._deadline_ns = int(spec.duration_s * 1e9)
            watch = asyncio.ensure_future(self._watch(lag, cpu_peak))
            rule = asyncio.ensure_future(self._ask_enough()) if self.enough is not None else None
            interrupted = False
            try:
                if spec.open_loop:
                    await self._open_loop()
                else:
                    await self._closed_loop()
                await self._drain()
            except asyncio.CancelledError:
                interrupted = True
            finally:
                if self.stop.is_set():
                    interrupted = True
                await self._cancel_in_flight()
                watch.cancel()
                if rule is not None:
                    rule.cancel()
            elapsed = (_perf_ns() - self.t0_ns) / 1e9
            cpu = _cpu_s() - cpu0
        finally:
            pool.close()
        self.records.sort(key=lambda r: r.id)
        return ShardResult(
            records=self.records,
            t0_ns=self.t0_ns,
            elapsed_s=elapsed,
            rx_timestamps="kernel" if pool.kernel_timestamps else "read",
            cpu_s=cpu,
            cpu_busy_peak=cpu_peak[0],
            loop_lag_ms=lag,
            interrupted=interrupted,
            read_pauses=pool.coalescer.pauses if pool.coalescer else 0,
            read_pause_ms=pool.coalescer.pause_ns / 1e6 if pool.coalescer else 0.0,
            preconnected=preconnected,
            read_lateness=list(pool.lateness) if any(pool.lateness) else [],
            failure=self.failure,
        )

    # --------------------------------------------------------------- schedules
    def _total(self) -> int:
        spec = self.spec
        if spec.num_requests is not None:
            return spec.num_requests
        return len(spec.items) if spec.duration_s is None else 1 << 62

    def _unit(self, u: int) -> list[Prepared] | None:
        """Unit u of the schedule (a session's turns, or one request); reused cyclically only
        when --duration asks for more requests than the workload holds."""
        units = self._units
        if u < len(units):
            return units[u]
        if self.spec.duration_s is None or not units:
            return None
        return units[u % len(units)]

    def _past_deadline(self, now_rel_ns: int) -> bool:
        return self._deadline_ns is not None and now_rel_ns >= self._deadline_ns

    def _may_send(self) -> bool:
        return (
            self.failure is None
            and self.stopped_by is None
            and not self.stop.is_set()
            and self._started < self._total()
        )

    async def _run_unit(self, unit: list[Prepared], first_sched_ns: int) -> None:
        """Send a unit's requests in order: a multi-turn session waits for each answer, then its
        think time, before the next turn. An agent session's run of sub-agent turns (`branch` > 0)
        is a fan-out: each sub-agent's turns go in order, all sub-agents at once, and the next main
        turn waits for all of them (the join)."""
        k = 0
        first: int | None = first_sched_ns
        while k < len(unit):
            if not unit[k].branch:
                if not await self._run_seq([unit[k]], first):
                    return
                k += 1
            else:
                j = k
                while j < len(unit) and unit[j].branch:
                    j += 1
                agents: dict[int, list[Prepared]] = {}
                for item in unit[k:j]:
                    agents.setdefault(item.branch, []).append(item)
                await asyncio.gather(*(self._run_seq(seq, None) for seq in agents.values()))
                k = j
            first = None

    async def _run_seq(self, seq: list[Prepared], first_sched_ns: int | None) -> bool:
        """Turns one after another, each after the previous answer and its think time (the first at
        `first_sched_ns` when given); False when the run stopped sending."""
        t0 = self.t0_ns
        for k, item in enumerate(seq):
            if k or first_sched_ns is None:
                sched = _perf_ns() - t0
                if item.think_ns:
                    sched += item.think_ns
                    await _sleep_until(t0 + sched)
            else:
                sched = first_sched_ns
            if not self._may_send() or self._past_deadline(sched):
                return False
            self._started += 1
            await self._request(item, self._started - 1, sched)
        return True

    async def _open_loop(self) -> None:
        spec = self.spec
        sem = asyncio.Semaphore(spec.concurrency) if spec.concurrency else None
        t0 = self.t0_ns
        for unit in self._units:
            offset = unit[0].offset_ns or 0
            if self._past_deadline(offset) or not self._may_send():
                break
            await _sleep_until(t0 + offset)
            if self.stop.is_set():
                break
            sched = offset
            if sem is not None:
                if sem.locked():
                    await sem.acquire()
                    # The cap, not the client, delayed this one: its slot time is the schedule.
                    sched = max(offset, _perf_ns() - t0)
                else:
                    await sem.acquire()
            task = asyncio.ensure_future(self._run_capped(unit, sched, sem))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)

    async def _run_capped(self, unit: list[Prepared], sched: int, sem: asyncio.Semaphore | None) -> None:
        try:
            await self._run_unit(unit, sched)
        except Exception as e:  # outside any request (each request records its own)
            self._give_up(f"an open-loop task stopped on {exception_kind(e, got_tokens=False)[1]}")
        finally:
            if sem is not None:
                sem.release()

    async def _closed_loop(self) -> None:
        n = self.spec.concurrency or 1
        counter = itertools.count()
        t0 = self.t0_ns

        async def worker() -> None:
            try:
                while self._may_send():
                    unit = self._unit(next(counter))
                    if unit is None:
                        return
                    sched = _perf_ns() - t0  # the slot just became free
                    if self._past_deadline(sched):
                        return
                    await self._run_unit(unit, sched)
            except Exception as e:  # outside any request (each request records its own)
                self._give_up(f"a closed-loop worker stopped on {exception_kind(e, got_tokens=False)[1]}")

        workers = [asyncio.ensure_future(worker()) for _ in range(n)]
        for w in workers:
            self.in_flight.add(w)
            w.add_done_callback(self.in_flight.discard)
        stop_wait = asyncio.ensure_future(self.stop.wait())
        try:
            pending = set(workers)
            while pending and not self.stop.is_set():
                # wait on the unfinished workers only: a finished one would make this spin
                await asyncio.wait([*pending, stop_wait], return_when=asyncio.FIRST_COMPLETED)
                pending = {w for w in pending if not w.done()}
        finally:
            stop_wait.cancel()

    async def _drain(self) -> None:
        while self.in_flight and not self.stop.is_set():
            stop_wait = asyncio.ensure_future(self.stop.wait())
            await asyncio.wait([*self.in_flight, stop_wait], return_when=asyncio.FIRST_COMPLETED)
            stop_wait.cancel()

    async def _cancel_in_flight(self) -> None:
        tasks = list(self.in_flight)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------- one request
    async def _request(self, item: Prepared, seq: int, sched_ns: int) -> None:
        """One request, start to end; always leaves one record, whatever happens."""
        spec = self.spec
        rec = RequestRecord(
            id=seq,
            warmup=item.warmup,
            t_sched_ns=sched_ns,
            input_len=item.input_len,
            output_len=item.output_len,
            session=item.session,
            turn=item.turn,
        )
        t0 = self.t0_ns
        acc = new_accumulator(spec.api)
        stream_sink = StreamSink(acc, t0) if spec.stream else None
        buffer_sink = None if spec.stream else BufferSink(t0)
        sink = stream_sink or buffer_sink
        pool = self._pool
        assert sink is not None and pool is not None
        resp = None

        sent = False  # the bytes went out: a connection was there for them

        def on_send(setup_ns: int | None) -> None:
            nonlocal sent
            sent = True
            rec.t_send_ns = _perf_ns() - t0
            rec.setup_ns = setup_ns

        try:
            rec.t_send_ns = _perf_ns() - t0  # (set first: a record without it would not count as sent)
            if self.on_send is not None:
                self.on_send(rec)
            head = request_head(self._head_prefix, len(item.body))
            async with asyncio.timeout(spec.timeout_s):
                resp = await pool.request(head, item.body, sink, on_send)
            rec.t_end_ns = _perf_ns() - t0
            rec.http_status = resp.status
            rec.response_id = resp.headers.get("x-request-id")
            if not 200 <= resp.status < 300:
                fail(rec, classify_status(resp.status), resp.error_body.decode("utf-8", "replace"))
            elif stream_sink is not None:
                stream_sink.close()
            elif buffer_sink is not None:
                finish_unary(rec, b"".join(buffer_sink.parts), buffer_sink.t_last_ns, spec.api)
        except TimeoutError:
            if sent:
                fail(rec, "timeout", f"no complete response within --timeout {spec.timeout_s:g} s")
            else:  # still connecting: the server's accept queue, or nothing listening that answers
                fail(rec, "connect", f"no connection opened within --timeout {spec.timeout_s:g} s")
        except asyncio.CancelledError:
            fail(rec, "cancelled", "still in flight when the run stopped")
            raise
        except Exception as e:  # the network's, the server's bytes', or our own (outcome.exception_kind)
            fail(rec, *exception_kind(e, got_tokens=bool(acc.chunk_ns)))
        finally:
            if rec.t_end_ns is None:
                rec.t_end_ns = _perf_ns() - t0
            if spec.stream and (resp is None or 200 <= resp.status < 300):
                try:
                    finish_stream(rec, acc)  # partial streams keep their timestamps too
                except Exception as e:
                    fail(rec, *exception_kind(e, got_tokens=True))
            self._record(rec)

    def _record(self, rec: RequestRecord) -> None:
        if self._keep:
            self.records.append(rec)
        else:  # on its way to a file (or a pipe): chunk times packed, ones dropped (a third of the cost
            compact((rec,))  # of turning records into columns, and of pickling them, for ~1 µs here)
        self.done += 1
        if rec.status != "ok":
            self.failed += 1
        elif rec.output_tokens:
            self.output_tokens += rec.output_tokens
        if rec.error_kind == "client_error":
            self._client_errors += 1
            if self._client_errors >= CLIENT_ERROR_STREAK:
                self._give_up(
                    f"{self._client_errors} requests in a row failed inside the client, the last on {rec.error_detail}"
                )
        else:
            self._client_errors = 0
        if self.enough is not None:
            self.enough.observe(rec)
        if self.on_record is not None:
            self.on_record(rec)

    def _give_up(self, why: str) -> None:
        """Send nothing more (what is in flight finishes and is recorded); the first reason stays."""
        if self.failure is None:
            self.failure = why

    # ------------------------------------------------------------------ support
    async def _ask_enough(self) -> None:
        """The stop rule, every 2 s at first; a check that took d waits at least 100·d before the next,
        so it never takes more than ~1% of the loop (it runs on the loop, between reads)."""
        assert self.enough is not None
        wait_s = 2.0
        while self.stopped_by is None:
            await asyncio.sleep(wait_s)
            t = _perf_ns()
            self.stopped_by = self.enough()
            wait_s = max(2.0, 100 * (_perf_ns() - t) / 1e9)

    async def _watch(self, lag: list[float], cpu_peak: list[float]) -> None:
        """Samples event-loop oversleep every 10-30 ms (20 on average) and this process's CPU share every
        second. The interval is drawn at random: a fixed one locks in phase with a server that writes every
        stream's tokens together at the same period (a 20 ms ITL), and then samples the loop only as each
        burst is read, which overstates the stalls a token meets (seen: p99 17-21 ms at 512 streams)."""
        draw = random.Random(0x5EB).uniform
        cpu_last, t_last = _cpu_s(), _perf_ns()
        while True:
            interval_ns = int(draw(10e6, 30e6))
            before = _perf_ns()
            await asyncio.sleep(interval_ns / 1e9)
            now = _perf_ns()
            lag.append(max(0, now - before - interval_ns) / 1e6)
            if now - t_last >= 1_000_000_000:
                cpu = _cpu_s()
                cpu_peak[0] = max(cpu_peak[0], (cpu - cpu_last) / ((now - t_last) / 1e9))
                cpu_last, t_last = cpu, now


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """Everything made before the clock (prompts, bodies, imports) is moved out of the collector's
    sight, and young collections run 20x less often: the hot path allocates a dict per SSE event,
    and every collection is a pause in which nothing is sent or read."""
    gc.collect()
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(max(threshold[0], 1) * 20, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


async def _sleep_until(due_ns: int) -> None:
    """Wake at `due_ns` (perf_counter) or just after, never before. An event loop's timer rounds
    to whole milliseconds on a cached loop clock (libuv's does) and can fire ~1 ms early: sleep
    again for what is left; under 0.5 ms that is a turn of the loop at a time."""
    while (left := due_ns - _perf_ns()) > 0:
        await asyncio.sleep(left / 1e9)


#: File descriptors kept free of connections (the records' files, pipes, the interpreter's own).
FD_RESERVE = 64


def fd_room(need: int) -> int:
    """How many connections this process may open: the soft file-descriptor limit is raised toward the
    hard one (as far as `need` asks), less `FD_RESERVE`. What it cannot hold opens inside the window,
    and is counted there (the records' `setup_ns`, the summary's `client.setup`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = need + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
    return need if soft == resource.RLIM_INFINITY else max(0, min(need, soft - FD_RESERVE))


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime
