"""`simulate_lockstep`: attention data-parallel ranks whose MoE layers span them all, on one virtual clock.

With DP attention (SGLang `--enable-dp-attention`, TensorRT-LLM's attention DP) or vLLM's DP + EP, each
rank schedules its own batch, but the MoE layers of every step take every rank's tokens together (an
all-gather or all-to-all inside each layer), so the ranks run their steps in lock-step: a step lasts as
long as the slowest rank's, and a rank that has nothing to do runs an idle batch to take part (SGLang's
`prepare_mlp_sync_batch`, vLLM's dummy batches). A rank prefilling a prompt therefore holds back the
decodes of every other rank: the effect `sim.simulate` cannot show when it runs one rank with its share of
the load.

Requests go to the ranks in turn as they reach the engine (SGLang's data-parallel controller's default
round robin). One API server stands in front of all ranks (`config.frontend_s`, not scaled).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from servescope.sim.config import EngineConfig
from servescope.sim.engine import Engine, EngineStats
from servescope.sim.frontend import FrontEnd
from servescope.sim.request import SimRequest
from servescope.sim.simulate import SimRun, step_gaps, weighted_median

__all__ = ["LockstepRun", "simulate_lockstep"]


@dataclass(slots=True)
class LockstepRun:
    """The ranks' runs on the shared clock, read as one run: each request's times from its rank's steps."""

    ranks: list[SimRun]
    _of: dict[int, SimRun] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._of = {id(r): run for run in self.ranks for r in run.requests}

    def first_token_s(self, req: SimRequest) -> float:
        return self._of[id(req)].first_token_s(req)

    def end_s(self, req: SimRequest) -> float:
        return self._of[id(req)].end_s(req)

    @property
    def duration_s(self) -> float:
        return max((run.duration_s for run in self.ranks), default=0.0)

    @property
    def stats(self) -> EngineStats:
        """Prefix-cache and token counters summed over the ranks."""
        out = EngineStats()
        for run in self.ranks:
            st = run.stats
            out.prefix_queries += st.prefix_queries
            out.prefix_hits += st.prefix_hits
            out.preemptions += st.preemptions
            out.prompt_tokens += st.prompt_tokens
            out.generation_tokens += st.generation_tokens
            out.finished += st.finished
            out.steps = max(out.steps, st.steps)
        return out

    def median_itl_s(self) -> float:
        """Median gap between consecutive tokens over every rank's requests (`sim.simulate.step_gaps`)."""
        parts = [step_gaps(np.asarray(run.step_end_s, dtype=np.float64), run.requests) for run in self.ranks]
        if not parts:
            return 0.0
        return weighted_median(np.concatenate([g for g, _ in parts]), np.concatenate([w for _, w in parts]))


def simulate_lockstep(
    config: EngineConfig,
    requests: Iterable[SimRequest],
    ranks: int,
    *,
    concurrency: int | None = None,
    max_steps: int = 50_000_000,
) -> LockstepRun:
    """Run `requests` over `ranks` engines stepping together: a `SimRun` per rank (its requests, and its
    steps' start and end times on the shared clock). Open loop by `arrival_s`, or a closed loop of
    `concurrency` users over all ranks, as `sim.simulate.simulate` runs one engine."""
    if ranks < 1:
        raise ValueError("ranks must be >= 1")
    engines = [Engine(config) for _ in range(ranks)]
    mine: list[list[SimRequest]] = [[] for _ in range(ranks)]
    ends: list[list[float]] = [[] for _ in range(ranks)]
    starts: list[list[float]] = [[] for _ in range(ranks)]
    reqs = list(requests)
    front = FrontEnd(config.frontend_s)
    if concurrency is None:
        pending = sorted(reqs, key=lambda r: r.arrival_s)
        reach = FrontEnd.departures(config.frontend_s, [r.arrival_s for r in pending])
    else:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        pending, reach = reqs, []
        for _ in range(min(concurrency, len(reqs))):
            front.send(0.0, 0.0)
    n, i, turn, now, steps = len(pending), 0, 0, 0.0, 0

    def admit(req: SimRequest) -> None:
        nonlocal turn
        engines[turn].add(req)
        mine[turn].append(req)
        turn = (turn + 1) % ranks

    while True:
        if concurrency is None:
            while i < n and reach[i] <= now:
                admit(pending[i])
                i += 1
        elif front:
            reached = front.pop_before(now)
            if not reached and not any(e.has_work() for e in engines):
                reached = [front.pop_first()]
                now = max(now, reached[0][0])
            for _, t in reached:
                if i < n:
                    pending[i].arrival_s = t
                    admit(pending[i])
                    i += 1
        results = [e.step(now, with_tokens=False) for e in engines]
        ran = [r for r in results if r is not None]
        if not ran:
            if concurrency is not None:
                if not front:  # nothing in flight and nothing sent: the loop is done (or can never go on)
                    break
                continue
            if i >= n:
                break
            now = max(now, reach[i])
            continue
        duration = max(r.duration_s for r in ran)
        finished = 0
        for k, r in enumerate(results):
            if r is not None:
                starts[k].append(now)
                ends[k].append(now + duration)
                finished += len(r.finished)
        now += duration
        if concurrency is not None:
            for _ in range(min(finished, n - i - len(front))):
                front.send(now, now)
        steps += 1
        if steps >= max_steps:
            raise RuntimeError("simulation did not finish within max_steps")
    return LockstepRun([SimRun(mine[k], ends[k], starts[k], engines[k].stats) for k in range(ranks)])
