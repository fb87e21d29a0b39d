"""`simulate`: a whole workload through `sim.engine.Engine` on a virtual clock (open or closed loop),
and `SimRun`, its per-step times and per-request results. What `servescope plan` what-if runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from servescope.sim.config import EngineConfig
from servescope.sim.engine import Engine, EngineStats
from servescope.sim.frontend import FrontEnd
from servescope.sim.request import SimRequest

__all__ = ["SimRun", "simulate", "step_gaps", "weighted_median"]


@dataclass(slots=True)
class SimRun:
    """A workload run on a virtual clock. Times in seconds from the clock's origin."""

    requests: list[SimRequest]
    step_end_s: list[float]  # end time of step i (token emission time)
    step_start_s: list[float]
    stats: EngineStats

    def first_token_s(self, req: SimRequest) -> float:
        return self.step_end_s[req.first_token_step]

    def end_s(self, req: SimRequest) -> float:
        return self.step_end_s[req.finish_step]

    def token_times_s(self, req: SimRequest) -> list[float]:
        """Emission time of each of the request's tokens, in order."""
        ends = self.step_end_s
        out: list[float] = []
        for a, b in req.segments:
            out.extend(ends[a : b + 1])
        return out

    @property
    def duration_s(self) -> float:
        return self.step_end_s[-1] if self.step_end_s else 0.0

    def per_request(self) -> list[dict[str, float]]:
        """One row per finished request: arrival, first token, end (s), TTFT, TPOT (s), tokens, preemptions."""
        ends = self.step_end_s
        rows: list[dict[str, float]] = []
        for r in self.requests:
            if r.finish_step < 0:
                continue
            first, end = ends[r.first_token_step], ends[r.finish_step]
            rows.append(
                {
                    "arrival_s": r.arrival_s,
                    "first_token_s": first,
                    "end_s": end,
                    "ttft_s": first - r.arrival_s,
                    "e2e_s": end - r.arrival_s,
                    "tpot_s": (end - first) / (r.max_tokens - 1) if r.max_tokens > 1 else 0.0,
                    "output_tokens": r.max_tokens,
                    "prompt_tokens": r.prompt_len,
                    "cached_tokens": r.cached_tokens,
                    "preemptions": r.preemptions,
                }
            )
        return rows


def step_gaps(ends: np.ndarray, reqs: Iterable[SimRequest]) -> tuple[np.ndarray, np.ndarray]:
    """One engine's step-to-step gaps (`ends`: its step end times), each weighted by the requests
    decoding across it, in O(requests + steps): within a request's run of steps [a, b] its gaps are
    the step gaps a..b-1, so a difference array counts how many requests cover each; a gap across a
    preemption (from one run's last step to the next run's first) is appended with weight 1."""
    diff = np.zeros(len(ends) + 1, dtype=np.int64)
    extra: list[float] = []
    for r in reqs:
        prev_b = -1
        for a, b in r.segments:
            if b > a:
                diff[a] += 1
                diff[b] -= 1
            if prev_b >= 0:
                extra.append(float(ends[a] - ends[prev_b]))
            prev_b = b
    gaps = np.diff(ends)
    weights = np.cumsum(diff)[: max(len(ends) - 1, 0)]
    if extra:
        gaps = np.concatenate([gaps, np.asarray(extra)])
        weights = np.concatenate([weights, np.ones(len(extra), dtype=np.int64)])
    return gaps, weights


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """The median of `values` each counted `weights` times, as `statistics.median` of the expanded
    list would give it (the mean of the two middle values when the count is even); 0 with none."""
    total = int(weights.sum())
    if total == 0:
        return 0.0
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    lo = values[order][np.searchsorted(cum, (total + 1) // 2)]
    hi = values[order][np.searchsorted(cum, total // 2 + 1)]
    return float(lo + hi) / 2.0


def simulate(
    config: EngineConfig,
    requests: Iterable[SimRequest],
    *,
    concurrency: int | None = None,
    max_steps: int = 50_000_000,
    fast: bool = True,
) -> SimRun:
    """Run `requests` to completion on a virtual clock.

    Open loop (default): each request arrives at its `arrival_s`. Closed loop (`concurrency=N`):
    arrival times are ignored; N requests are sent at 0 and each completion sends the next at the
    completing step's end (its `arrival_s`, from which its TTFT counts, is overwritten with the send
    time). A request reaches the engine just after it was sent, and an engine starts a step as soon
    as it has work: the first of the N starts the first step alone and the others join the next, and
    a completion's successor misses the step that starts as its predecessor's ends and joins the one
    after (what the wall-clock emulator and a real server do: their client's next request is sent
    when the last token arrives, after the engine's next step began).

    Front end (`config.frontend_s` > 0, open or closed loop): a request reaches the engine only after
    the API server's work on it (parse, chat template, tokenize), which the requests inside share
    (`sim.frontend.FrontEnd`, processor sharing). TTFT still counts from the send. A burst of N
    requests reaches the engine together, about N x `frontend_s` after it was sent; the engine's
    steps do not pay for it.
    `fast=False` disables the decode fast path (`Engine.decode_run`); results are identical.
    """
    engine = Engine(config)
    reqs = list(requests)
    front = FrontEnd(config.frontend_s)
    if concurrency is None:
        pending = sorted(reqs, key=lambda r: r.arrival_s)
    else:
        pending = reqs
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
    ends: list[float] = []
    starts: list[float] = []
    i = 0
    n = len(pending)
    now = 0.0
    # open loop: when each pending request reaches the engine
    reach = FrontEnd.departures(config.frontend_s, [r.arrival_s for r in pending]) if concurrency is None else []
    # closed loop: the front end holds the requests sent that the engine has not seen (item: send time)
    for _ in range(min(concurrency or 0, n)):
        front.send(0.0, 0.0)
    while True:
        if concurrency is None:
            while i < n and reach[i] <= now:
                engine.add(pending[i])
                i += 1
        elif front:
            # a request reaching the engine at t joins the first step that starts after t: one that
            # reaches it while a step runs joins the next step; one sent as a step ended (the client's
            # next request) misses the step that starts then and joins the one after, unless the
            # engine is idle, when the first to arrive starts a step alone and the rest join the next
            reached = front.pop_before(now)
            if not reached and not engine.has_work():
                reached = [front.pop_first()]
                now = max(now, reached[0][0])
            for _, t in reached:
                if i < n:
                    pending[i].arrival_s = t
                    engine.add(pending[i])
                    i += 1
        if fast:
            if concurrency is None:
                until = reach[i] if i < n else float("inf")
            else:
                until = front.next_at()
            durations = engine.decode_run(now, until, max_steps - len(ends))
            if durations:
                for d in durations:
                    starts.append(now)
                    now += d
                    ends.append(now)
                continue
        res = engine.step(now, with_tokens=False)
        if res is None:
            if i >= n:
                break
            if concurrency is None:
                now = max(now, reach[i])
            continue
        starts.append(now)
        now += res.duration_s
        ends.append(now)
        if concurrency is not None:
            for _ in range(min(len(res.finished), n - i - len(front))):
                front.send(now, now)
        if len(ends) >= max_steps:
            raise RuntimeError("simulation did not finish within max_steps")
    return SimRun(reqs, ends, starts, engine.stats)
