"""The emulator's wall-clock loop: steps the engine back to back on absolute deadlines and writes each
step's tokens in one burst centred on its deadline; measures its own pacing (`/_servescope/pacing`).

See "Pacing" in `emulator.server` for the contract. What requests arrive, and what happens to a stream
after its token left, are the application's (`emulator.app`): the loop calls `admit` at step
boundaries and `deliver` after each burst.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Sized
from typing import Any

from servescope.emulator.stream import BurstPlan, Stream, held_bytes, plan_burst
from servescope.emulator.wire import Histogram
from servescope.sim.engine import Engine

__all__ = ["Pacer"]

_LATE_BUCKET_NS = 10_000  # pacing histogram resolution: 10 us
_LATE_BUCKETS = 10_000  # up to 100 ms
_MAX_BEHIND_S = 0.025


class Pacer:
    """Runs `engine` on the wall clock: each step's tokens leave at its end, one send per stream."""

    def __init__(
        self,
        engine: Engine,
        *,
        inbox: Sized,
        admit: Callable[[], None],
        deliver: Callable[[list[tuple[Stream, int]]], None],
        iteration_tokens: Histogram,
        hold_s: float = 0.0,
        chunk: Callable[[Stream, int], bytes] | None = None,
        ready_in: Callable[[], float] | None = None,
    ) -> None:
        """`inbox`: requests waiting for `admit` (called at step boundaries while it is non-empty);
        `ready_in`: seconds until `admit` can take the inbox's first request (a front end's queue;
        None: at once), what an idle loop sleeps before it looks again;
        `deliver`: the bookkeeping of the streams a burst wrote to, with each write's perf_counter_ns.
        `hold_s` > 0 (the deployment's first-token latency) holds each streaming response's first
        tokens that long (`stream.plan_burst`; `chunk` frames token i of a stream)."""
        self.engine = engine
        self._inbox = inbox
        self._admit = admit
        self._ready_in = ready_in
        self._deliver = deliver
        self._iteration_tokens = iteration_tokens
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._late = [0] * (_LATE_BUCKETS + 1)
        self._late_max_ns = 0
        self._early = 0  # tokens written before their emission time (the burst's first half)
        self._send_cost_s = 5e-6  # EWMA of the wall time to emit one token (send + bookkeeping)
        self._burst_s = 0.0  # total wall time spent in token bursts
        self._wake_late_s: deque[float] = deque(maxlen=10_000)  # burst start - planned start, recent steps
        self.scheduling = "normal"  # what the loop runs under (emulator --realtime-priority)
        self._hold_ns = round(hold_s * 1e9)
        self._chunk = chunk
        if self._hold_ns and chunk is None:
            raise ValueError("a first-token hold needs the chunk framer")
        self._holding: list[Stream] = []  # streams whose first tokens are held (hold not yet over)

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._task.add_done_callback(_report_crash)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def wake(self) -> None:
        """Something arrived (in `inbox`, or in the engine): run the loop if it is idle."""
        assert self._wake is not None
        self._wake.set()

    async def _run(self) -> None:
        engine = self.engine
        assert self._wake is not None
        next_start: float | None = None
        perf = time.perf_counter
        while True:
            if self._inbox:
                self._admit()
            if not engine.has_work():
                self._wake.clear()
                if not self._inbox:
                    await self._wake.wait()  # (held tokens leave on their own timers meanwhile)
                    next_start = None
                elif self._ready_in is not None and (delay := self._ready_in()) > 0:
                    # the front end is still on the first request: sleep until it is done (or a wake)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), delay)
                    next_start = None
                continue
            now = perf()
            # Back to back from the last deadline (late steps catch up, keeping the model's throughput);
            # if we fell more than _MAX_BEHIND_S behind (or were idle), restart the clock at now.
            start = next_start if next_start is not None and now - next_start < _MAX_BEHIND_S else now
            res = engine.step(start)
            if res is not None:
                self._iteration_tokens.observe(res.decode_seqs + res.prefill_tokens)
            if res is None:
                next_start = None
                await asyncio.sleep(0)
                continue
            deadline = start + res.duration_s
            # The step's tokens leave in one burst (a send per stream); centre it on the deadline.
            # Everything but the sends is made ready now, before the wait.
            n_holding = len(self._holding)
            plan, first = plan_burst(res, int(deadline * 1e9), self._hold_ns, self._chunk, self._holding)
            if len(self._holding) > n_holding:
                loop = asyncio.get_running_loop()
                for st in self._holding[n_holding:]:  # the holds this step started: written when they end
                    loop.call_later(max(0.0, st.hold_until * 1e-9 - perf()), self._hold_timer)
            n = len(plan[0]) + len(plan[2])
            half = min(0.003, 0.5 * n * self._send_cost_s)
            go = deadline - half
            rem = go - perf()
            # Coarse wait on the loop (its timers have ~1 ms granularity), always yielding once so
            # new requests are read; then a fine sleep to the burst start.
            await asyncio.sleep(rem - 0.002 if rem > 0.0025 else 0)
            rem = go - perf()
            while rem > 0:
                if rem > 0.0003:
                    time.sleep(rem - 0.0002)
                rem = go - perf()
            if first:
                self._flush_holds(first)
            if n:
                t0 = perf()
                t1 = self._emit(plan, int(deadline * 1e9))
                # per-token burst cost, clamped so a burst stretched by descheduling does not skew it
                sample = min(max((t1 - t0) / n, 1e-6), 40e-6)
                self._send_cost_s = 0.8 * self._send_cost_s + 0.2 * sample
                self._burst_s += t1 - t0
                self._wake_late_s.append(t0 - go)
            next_start = deadline

    def _hold_timer(self) -> None:
        """A hold's end. The loop's timers can fire up to a millisecond early (uvloop counts in whole
        milliseconds): what is still held then is looked at again a millisecond later."""
        self._flush_holds()
        soon = time.perf_counter_ns() + 5_000_000
        if any(st.held and st.hold_until <= soon for st in self._holding):
            asyncio.get_running_loop().call_later(0.001, self._hold_timer)

    def _flush_holds(self, now_too: Iterable[Stream] = ()) -> None:
        """Write the held tokens of the streams whose hold is over (and of `now_too`, whose next token
        the coming burst writes); forget the streams with nothing held."""
        now = time.perf_counter_ns()
        due = set(map(id, now_too))
        keep: list[Stream] = []
        for st in self._holding:
            if not st.held:  # flushed already, or released by a burst with nothing held
                continue
            if st.status != "running":
                st.sent += st.held
                st.held = 0
                continue
            if st.hold_until > now and id(st) not in due:
                keep.append(st)
                continue
            assert self._chunk is not None
            data, n = held_bytes(st, self._chunk), st.held
            st.held = 0
            st.hold_until = -1
            try:
                st.write(data)
            except RuntimeError:  # uvloop: the client went away
                pass
            self._deliver([(st, time.perf_counter_ns())] * n)
        self._holding = keep

    def _emit(self, plan: BurstPlan, deadline_ns: int) -> float:
        """Write the step's tokens (the burst: one send per stream, nothing else), then count their
        lateness and hand them to `deliver`. Returns the burst's end (perf_counter seconds)."""
        streams, sends, quiet = plan
        perf_ns = time.perf_counter_ns
        stamps: list[int] = []
        stamp = stamps.append
        t0 = perf_ns()
        for write, data in sends:
            stamp(perf_ns())  # just before the bytes go to the socket: causal with any client
            try:
                write(data)
            except RuntimeError:  # uvloop: the client went away since the plan was made
                pass
        burst_end = time.perf_counter()
        sent = list(zip(streams, stamps))
        if quiet:  # non-streaming: the token was generated now; its body leaves with the last one
            sent += [(st, t0) for st in quiet]
        # lateness, off the burst
        late = self._late
        max_late = self._late_max_ns
        early = 0
        for st, t in sent:
            if st.status != "running":  # the client went away while the burst waited: nothing sent
                continue
            d = t - deadline_ns
            if d < 0:
                d = -d  # early (the burst is centred on the deadline): count |error|
                early += 1
            if d > max_late:
                max_late = d
            b = d // _LATE_BUCKET_NS
            late[b if b < _LATE_BUCKETS else _LATE_BUCKETS] += 1
        self._late_max_ns = max_late
        self._early += early
        self._deliver(sent)
        return burst_end

    def report(self) -> dict[str, Any]:
        """Emission error |actual write - engine emission time| over all tokens so far, in ms."""
        n = sum(self._late)

        def q(p: float) -> float:
            if n == 0:
                return 0.0
            rank = p * n
            acc = 0
            for i, c in enumerate(self._late):
                acc += c
                if acc >= rank:
                    return (i + 1) * _LATE_BUCKET_NS / 1e6
            return self._late_max_ns / 1e6

        return {
            "tokens": n,
            "p50_ms": q(0.5),
            "p90_ms": q(0.9),
            "p99_ms": q(0.99),
            "p999_ms": q(0.999),
            "max_ms": self._late_max_ns / 1e6,
            "steps": self.engine.stats.steps,
            "emit_wall_s": self._burst_s,
            "send_cost_us": self._send_cost_s * 1e6,
            "wake_late_p50_ms": _pct(self._wake_late_s, 0.5) * 1e3,
            "wake_late_p99_ms": _pct(self._wake_late_s, 0.99) * 1e3,
            "early_share": self._early / n if n else 0.0,
            "process_cpu_s": time.process_time(),
            "scheduling": self.scheduling,
        }


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        import traceback

        traceback.print_exception(task.exception(), file=sys.stderr)
        print("servescope.emulator.server: engine loop crashed", file=sys.stderr)


def _pct(values: Iterable[float], p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))] if v else 0.0
