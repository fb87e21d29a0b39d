"""The asyncio hot loop: send on schedule, timestamp chunks where the bytes arrive, record.

One `Shard` is the unit of work: a slice of a precomputed schedule in, records out. Everything a
request needs (its encoded body, its scheduled offset, a keep-alive connection) is ready before the
clock starts. Per socket read the hot path (`servebench.client.http`, then `_StreamSink.on_body`) does only
what timing and token counting need: one `perf_counter_ns()`, the chunked-framing and SSE splits,
one JSON parse per event and list appends — inside the transport's `data_received`, with no
coroutine switch per chunk. Token allocation, metrics and file formats happen after each request
(records) or after the run (summary).

Schedules: a *unit* is one request, or the turns of one multi-turn session (sent in order, each
after the previous answer and its think time). Closed loop: N workers each take the next unit when
the previous one ends. Open loop: units start at their absolute offsets from t0, optionally capped.

Clocks: every timestamp is `time.perf_counter_ns() - t0_ns` of the process that measured it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from servebench.client.http import ConnectionPool, Endpoint, HttpError, request_head
from servebench.client.fastpath import token_run
from servebench.client.openai import StreamAccumulator, interpret_response
from servebench.client.sse import SSEDecoder
from servebench.results.records import RequestRecord

__all__ = ["Prepared", "Shard", "ShardResult", "ShardSpec", "classify_status"]

_perf_ns = time.perf_counter_ns
_ERROR_BODY_BYTES = 2048


@dataclass(slots=True)
class Prepared:
    """A request ready to go: encoded body and, for open loops, its send offset from t0."""

    id: int
    body: bytes
    input_len: int
    output_len: int
    warmup: bool = False
    offset_ns: int | None = None  # None: closed loop (sent when a slot frees)
    session: int | None = None
    turn: int | None = None
    think_ns: int = 0  # multi-turn: pause after the previous turn's answer, before this one


def _units(items: list[Prepared]) -> list[list[Prepared]]:
    """Group a multi-turn session's requests (same `session`, in `turn` order) into one unit;
    every other request is a unit of its own. Units keep the order of their first request."""
    units: list[list[Prepared]] = []
    by_session: dict[int, list[Prepared]] = {}
    for item in items:
        if item.session is None:
            units.append([item])
        elif item.session in by_session:
            by_session[item.session].append(item)
        else:
            by_session[item.session] = [item]
            units.append(by_session[item.session])
    for unit in by_session.values():
        unit.sort(key=lambda p: p.turn or 0)
    return units


@dataclass(slots=True)
class ShardSpec:
    url: str  # the full endpoint URL (…/v1/chat/completions)
    api: str  # "chat" | "completions"
    headers: dict[str, str]
    items: list[Prepared]
    stream: bool = True
    concurrency: int | None = None  # closed loop: N workers; open loop: a cap (None = no cap)
    open_loop: bool = False
    duration_s: float | None = None  # stop sending after this long (items are reused cyclically)
    num_requests: int | None = None  # total to send (default: len(items))
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    preconnect: int = 0  # connections to open (and keep alive) before the clock starts
    reuse_connections: bool = True  # False: the server closes after each stream (probe finding)
    kernel_timestamps: bool = True  # stamp reads with the kernel's receive time where possible
    coalesce_reads: bool = True  # with kernel stamps: pause briefly when reads come very fast (http.ReadCoalescer)


@dataclass(slots=True)
class ShardResult:
    records: list[RequestRecord]
    t0_ns: int  # the run origin, in this process's perf_counter_ns
    elapsed_s: float
    rx_timestamps: str  # "kernel" (receive timestamps) or "read" (taken when the read ran)
    cpu_s: float  # this process's user+system CPU over the run
    cpu_busy_peak: float  # highest 1-second CPU share (1.0 = one core fully busy)
    loop_lag_ms: list[float] = field(default_factory=list)  # event-loop oversleep samples
    read_pauses: int = 0  # read coalescing: pauses taken (http.ReadCoalescer)
    read_pause_ms: float = 0.0  # and their total length
    interrupted: bool = False


def classify_status(status: int) -> str:
    if status == 429:
        return "http_429"
    if 400 <= status < 500:
        return "http_4xx"
    return "http_5xx"


_BULK_MISSES = 32  # offers of a response's chunks the bulk path may decline before it stops trying


class _StreamSink:
    """Body bytes of one streamed response -> SSE events -> the accumulator, timestamped."""

    __slots__ = ("dec", "acc", "t0", "feed", "on_event", "misses")

    def __init__(self, acc: StreamAccumulator, t0_ns: int) -> None:
        self.dec = SSEDecoder()
        self.acc = acc
        self.t0 = t0_ns
        self.feed = self.dec.feed
        self.on_event = acc.on_event
        self.misses = 0

    def on_chunks(self, data: bytes, pos: int, t_ns: int) -> int:
        """Whole HTTP chunks of the stream's plain token template, read in bulk (`fastpath`)."""
        tpl = self.acc.template
        if tpl is None:
            return pos if self.acc.learning else -1
        if not self.dec.idle:
            return pos
        end, chars = token_run(data, pos, tpl)
        if chars:
            self.acc.add_run(chars, t_ns - self.t0)
        elif self.misses < _BULK_MISSES:
            self.misses += 1  # a finishing chunk, an escaped text: a few per stream
        else:
            return -1  # most chunks are not plain ones: stop trying
        return end

    def on_body(self, data: bytes, t_ns: int) -> None:
        t = t_ns - self.t0
        for event, payload in self.feed(data):
            if event is None or event == b"message":
                self.on_event(payload, t)
            elif event == b"error":
                self.acc.error = payload.decode("utf-8", "replace")[:500]

    def close(self) -> None:
        for event, payload in self.dec.close():
            if event is None or event == b"message":
                self.on_event(payload, self.acc.chunk_ns[-1] if self.acc.chunk_ns else 0)


class _BufferSink:
    """A non-streamed body: kept whole; the arrival of its last byte is the token time."""

    __slots__ = ("parts", "t0", "t_last_ns")

    def __init__(self, t0_ns: int) -> None:
        self.parts: list[bytes] = []
        self.t0 = t0_ns
        self.t_last_ns = 0

    def on_body(self, data: bytes, t_ns: int) -> None:
        self.parts.append(data)
        self.t_last_ns = t_ns - self.t0


class Shard:
    """Runs one shard's schedule against the target and returns its records."""

    def __init__(
        self,
        spec: ShardSpec,
        *,
        on_record: Callable[[RequestRecord], None] | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.spec = spec
        self.on_record = on_record
        self.stop = stop or asyncio.Event()
        self.records: list[RequestRecord] = []
        self.t0_ns = 0
        self.in_flight: set[asyncio.Task[None]] = set()
        self.done = 0
        self.failed = 0
        self.output_tokens = 0
        self._units = _units(spec.items)
        self._started = 0
        self._pool: ConnectionPool | None = None
        self._head_prefix = b""
        self._deadline_ns: int | None = None

    # ------------------------------------------------------------------ public
    async def run(self) -> ShardResult:
        with _quiet_gc():
            return await self._run()

    async def _run(self) -> ShardResult:
        spec = self.spec
        pool = ConnectionPool(Endpoint.parse(spec.url), connect_timeout_s=spec.connect_timeout_s,
                              reuse=spec.reuse_connections, kernel_timestamps=spec.kernel_timestamps,
                              coalesce_reads=spec.coalesce_reads)
        self._pool = pool
        self._head_prefix = pool.head_prefix("POST", spec.headers)
        try:
            if spec.preconnect:
                await pool.preconnect(spec.preconnect)
            lag: list[float] = []
            cpu_peak = [0.0]
            self.t0_ns = _perf_ns()
            cpu0 = _cpu_s()
            if spec.duration_s is not None:
                self._deadline_ns = int(spec.duration_s * 1e9)
            watch = asyncio.ensure_future(self._watch(lag, cpu_peak))
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
        return not self.stop.is_set() and self._started < self._total()

    async def _run_unit(self, unit: list[Prepared], first_sched_ns: int) -> None:
        """Send a unit's requests in order: a multi-turn session waits for each answer, then its
        think time, before the next turn."""
        t0 = self.t0_ns
        sched = first_sched_ns
        for k, item in enumerate(unit):
            if k:
                sched = _perf_ns() - t0
                if item.think_ns:
                    sched += item.think_ns
                    await _sleep_until(t0 + sched)
            if not self._may_send() or self._past_deadline(sched):
                return
            self._started += 1
            await self._request(item, self._started - 1, sched)

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
        finally:
            if sem is not None:
                sem.release()

    async def _closed_loop(self) -> None:
        n = self.spec.concurrency or 1
        counter = itertools.count()
        t0 = self.t0_ns

        async def worker() -> None:
            while self._may_send():
                unit = self._unit(next(counter))
                if unit is None:
                    return
                sched = _perf_ns() - t0  # the slot just became free
                if self._past_deadline(sched):
                    return
                await self._run_unit(unit, sched)

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
        acc = StreamAccumulator(spec.api)
        sink: _StreamSink | _BufferSink = _StreamSink(acc, t0) if spec.stream else _BufferSink(t0)
        head = request_head(self._head_prefix, len(item.body))
        resp = None
        def on_send() -> None:
            rec.t_send_ns = _perf_ns() - t0

        try:
            rec.t_send_ns = _perf_ns() - t0
            async with asyncio.timeout(spec.timeout_s):
                resp = await self._pool.request(head, item.body, sink, on_send)  # type: ignore[union-attr]
            rec.t_end_ns = _perf_ns() - t0
            rec.http_status = resp.status
            rec.response_id = resp.headers.get("x-request-id")
            if not 200 <= resp.status < 300:
                _fail(rec, classify_status(resp.status), resp.error_body.decode("utf-8", "replace"))
            elif spec.stream:
                sink.close()  # type: ignore[union-attr]
            else:
                _finish_unary(rec, b"".join(sink.parts), sink.t_last_ns, spec.api)  # type: ignore[union-attr]
        except TimeoutError:
            _fail(rec, "timeout", f"no complete response within --timeout {spec.timeout_s:g} s")
        except asyncio.CancelledError:
            _fail(rec, "cancelled", "still in flight when the run stopped")
            raise
        except HttpError as e:
            _fail(rec, "reset", str(e))
        except ValueError as e:  # orjson.JSONDecodeError is a ValueError
            _fail(rec, "malformed_sse", f"{type(e).__name__}: {e}")
        except OSError as e:
            _fail(rec, "connect" if rec.chunks == 0 and not acc.chunk_ns else "reset", f"{type(e).__name__}: {e}")
        finally:
            if rec.t_end_ns is None:
                rec.t_end_ns = _perf_ns() - t0
            if spec.stream and (resp is None or 200 <= resp.status < 300):
                _finish_stream(rec, acc)  # partial streams keep their timestamps too
            self._record(rec)

    def _record(self, rec: RequestRecord) -> None:
        self.records.append(rec)
        self.done += 1
        if rec.status != "ok":
            self.failed += 1
        elif rec.output_tokens:
            self.output_tokens += rec.output_tokens
        if self.on_record is not None:
            self.on_record(rec)

    # ------------------------------------------------------------------ support
    async def _watch(self, lag: list[float], cpu_peak: list[float]) -> None:
        """Samples event-loop oversleep every 20 ms and this process's CPU share every second."""
        interval_ns = 20_000_000
        cpu_last, t_last = _cpu_s(), _perf_ns()
        while True:
            before = _perf_ns()
            await asyncio.sleep(interval_ns / 1e9)
            now = _perf_ns()
            lag.append(max(0, now - before - interval_ns) / 1e6)
            if now - t_last >= 1_000_000_000:
                cpu = _cpu_s()
                cpu_peak[0] = max(cpu_peak[0], (cpu - cpu_last) / ((now - t_last) / 1e9))
                cpu_last, t_last = cpu, now


@contextlib.contextmanager
def _quiet_gc() -> Iterator[None]:
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


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _fail(rec: RequestRecord, kind: str, detail: str) -> None:
    if rec.status == "error":
        return
    rec.status = "error"
    rec.error_kind = kind
    rec.error_detail = detail[:_ERROR_BODY_BYTES]


def _finish_stream(rec: RequestRecord, acc: StreamAccumulator) -> None:
    """After the stream ended without an exception: decide ok or failed, fill token counts."""
    res = acc.finish()
    rec.chunk_ns = acc.chunk_ns
    rec.chunks = len(acc.chunk_ns)
    rec.chunk_tokens = res.chunk_tokens
    rec.output_tokens = res.output_tokens
    rec.output_tokens_source = res.output_tokens_source
    rec.reasoning_tokens = res.reasoning_tokens
    rec.input_tokens = res.input_tokens
    if acc.chunk_ns:
        rec.t_first_ns = acc.chunk_ns[0]
        rec.t_last_ns = acc.chunk_ns[-1]
        rec.t_first_answer_ns = acc.t_first_answer_ns
    if rec.status != "pending":
        return
    if res.error is not None:
        _fail(rec, "stream_error", res.error)
    elif not acc.done and acc.finish_reason is None:
        _fail(rec, "no_done", "the stream ended without data: [DONE] or a finish_reason")
    elif not acc.chunk_ns:
        _fail(rec, "empty", "the response carried no generated token")
    else:
        rec.status = "ok"


def _finish_unary(rec: RequestRecord, body: bytes, t_ns: int, api: str) -> None:
    res, has_text, has_answer = interpret_response(body, api)
    rec.t_end_ns = t_ns
    rec.output_tokens = res.output_tokens
    rec.output_tokens_source = res.output_tokens_source
    rec.reasoning_tokens = res.reasoning_tokens
    rec.input_tokens = res.input_tokens
    if res.error is not None:
        _fail(rec, "stream_error", res.error)
        return
    if not has_text:
        _fail(rec, "empty", "the response carried no generated token")
        return
    # Without streaming, every token arrives with the body: TTFT = E2E, ITL undefined.
    rec.t_first_ns = rec.t_last_ns = t_ns
    rec.t_first_answer_ns = t_ns if has_answer else None
    rec.chunk_ns = [t_ns]
    rec.chunk_tokens = [res.output_tokens]
    rec.chunks = 1
    rec.status = "ok"
