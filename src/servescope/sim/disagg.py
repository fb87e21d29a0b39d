"""Prefill/decode-disaggregated serving on a virtual clock. Pure: no I/O, no wall clock.

SGLang's PD disaggregation (and NVIDIA Dynamo's) runs prompts on dedicated prefill workers and
generation on decode workers; the prompt's KV cache moves between them (NIXL / Mooncake over NVLink
or RDMA) and the decode worker streams every output token, the first included (SGLang docs, "PD
Disaggregation"). Modelled here as two pools of `sim.engine.Engine` on one clock:

- a request goes to a prefill worker (round robin, as a load balancer without state would), which
  prefills it under its own scheduler limits (chunked prefill, `max_num_seqs`) and samples one token;
- its KV then travels for `transfer_s_per_token` x prompt tokens to a decode worker (round robin);
- the decode worker admits it without computing the prompt (its `StepCost.prefill_work` is 0: the KV
  arrived computed; the admission still costs its per-sequence overhead) and generates `max_tokens`
  tokens, the first at the end of the step that admits it (the client's time to first token).

Closed loop (`concurrency`): each finished request releases its client, which sends the next one at
once; open loop: requests arrive at their `arrival_s`. A closed loop's request reaches its prefill
worker just after it was sent, as in `sim.simulate.simulate`: one sent as that worker starts a step
(the first wave's second and later requests, a completion's successor when the worker steps then)
misses that step and joins the next. Each prefill worker's front end (`EngineConfig.frontend_s` of
`prefill`) is shared by the requests inside it (`sim.frontend.FrontEnd`, processor sharing); its
engine sees a request when the front end is done with it. Every
engine steps on its own timeline; a step's consequences (a prompt done, a request finished) land at
the step's end, when the engine steps again.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from servescope.sim.config import EngineConfig
from servescope.sim.engine import Engine
from servescope.sim.frontend import FrontEnd
from servescope.sim.request import SimRequest
from servescope.sim.simulate import step_gaps, weighted_median

__all__ = ["DisaggRun", "simulate_disagg"]

_SEND, _KV = 0, 1


@dataclass(slots=True)
class DisaggRun:
    """Per request (in the order given): client arrival, first token and last token times (s)."""

    arrival_s: list[float]
    first_token_s: list[float]
    end_s: list[float]
    output_tokens: list[int]
    gaps_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # decode step-to-step gaps
    gap_weights: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # sequences per gap

    @property
    def duration_s(self) -> float:
        return max(self.end_s) if self.end_s else 0.0

    def median_itl_s(self) -> float:
        """Median gap between consecutive tokens over all requests (each gap weighted by the
        sequences that waited on it), as a streaming client measures ITL."""
        return weighted_median(self.gaps_s, self.gap_weights)


def simulate_disagg(
    prefill: EngineConfig,
    decode: EngineConfig,
    n_prefill: int,
    n_decode: int,
    jobs: Sequence[tuple[int, int]],
    *,
    concurrency: int | None = None,
    arrivals_s: Sequence[float] | None = None,
    transfer_s_per_token: float = 0.0,
    max_steps: int = 20_000_000,
) -> DisaggRun:
    """Run `jobs` ((prompt tokens, output tokens) each) through `n_prefill` prefill and `n_decode`
    decode engines. `decode.cost.prefill_work` should be 0 (the caller states the decode worker)."""
    if n_prefill < 1 or n_decode < 1:
        raise ValueError("need at least one prefill and one decode worker")
    if concurrency is None and arrivals_s is None:
        raise ValueError("give a concurrency (closed loop) or arrival times (open loop)")
    n = len(jobs)
    engines = [Engine(prefill) for _ in range(n_prefill)] + [Engine(decode) for _ in range(n_decode)]
    next_t: list[float | None] = [None] * len(engines)  # start of the engine's next step; None: idle
    free_at = [0.0] * len(engines)
    ends: list[list[float]] = [[] for _ in engines]
    arrival = [0.0] * n
    first = [0.0] * n
    end = [0.0] * n
    dec_reqs: list[SimRequest | None] = [None] * n
    dec_engine = [0] * n
    events: list[tuple[float, int, int, int]] = []  # (time, seq, kind, job)
    seq = 0
    rr_p = rr_d = 0
    issued = 0
    held: list[list[SimRequest]] = [[] for _ in engines]  # closed loop: sent as the engine's step starts
    to_prefill = [0] * n  # the prefill worker each request goes to (round robin as it is sent)
    fronts = [FrontEnd(prefill.frontend_s) for _ in range(n_prefill)]  # each prefill worker's

    def push(t: float, kind: int, job: int) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, job))
        seq += 1

    def send(t: float, job: int) -> None:
        """The client sends `job` at t (an event: the front ends take sends in time order); it reaches
        its prefill worker after that worker's front end."""
        nonlocal rr_p
        to_prefill[job] = rr_p % n_prefill
        rr_p += 1
        arrival[job] = t
        push(t, _SEND, job)

    if concurrency is not None:
        for _ in range(min(concurrency, n)):
            send(0.0, issued)
            issued += 1
    else:
        assert arrivals_s is not None
        for j in sorted(range(n), key=lambda j: float(arrivals_s[j])):
            send(float(arrivals_s[j]), j)
        issued = n

    def wake(e: int, t: float) -> None:
        if next_t[e] is None:
            next_t[e] = max(t, free_at[e])

    steps = 0
    while True:
        e_best, t_best = -1, float("inf")
        for e, t in enumerate(next_t):
            if t is not None and t < t_best:
                e_best, t_best = e, t
        t_ev = events[0][0] if events else float("inf")
        e_front, t_front = -1, float("inf")
        for e, front in enumerate(fronts):
            if (x := front.next_at()) < t_front:
                e_front, t_front = e, x
        if t_front <= t_best and t_front < t_ev:  # a request leaves a front end for its prefill worker
            e = e_front
            t, j = fronts[e].pop_first()
            r = SimRequest(id=j, prompt_len=jobs[j][0], max_tokens=1)
            if concurrency is not None and next_t[e] == t:
                held[e].append(r)  # the step starting now began before it arrived
                continue
            engines[e].add(r)
            wake(e, t)
            continue
        if events and t_ev <= t_best:
            t, _, kind, j = heapq.heappop(events)
            if kind == _SEND:
                fronts[to_prefill[j]].send(t, j)
                continue
            e = n_prefill + rr_d % n_decode  # _KV: the prompt's cache reached a decode worker
            rr_d += 1
            r = SimRequest(id=j, prompt_len=jobs[j][0], max_tokens=jobs[j][1])
            dec_reqs[j], dec_engine[j] = r, e
            engines[e].add(r)
            wake(e, t)
            continue
        if e_best < 0:
            break
        e, t = e_best, t_best
        eng = engines[e]
        if e >= n_prefill:  # decode-only stretches in one call, up to the next thing that can happen
            until = min([t_ev, t_front] + [x for i, x in enumerate(next_t) if x is not None and i != e])
            durations = eng.decode_run(t, until, max_steps)
            if durations:
                for d in durations:
                    t += d
                    ends[e].append(t)
                next_t[e] = t
                steps += len(durations)
                continue
        res = eng.step(t, with_tokens=False)
        for r in held[e]:
            eng.add(r)
        if res is None:
            next_t[e], free_at[e] = (t, t) if held[e] else (None, t)
            held[e].clear()
            continue
        held[e].clear()
        t_end = t + res.duration_s
        steps += 1
        if steps > max_steps:
            raise RuntimeError("simulation did not finish within max_steps")
        if e < n_prefill:
            for r in res.first_token:
                push(t_end + transfer_s_per_token * r.prompt_len, _KV, int(r.id))
        else:
            ends[e].append(t_end)
            for r in res.first_token:
                first[int(r.id)] = t_end
            for r in res.finished:
                j = int(r.id)
                end[j] = t_end
                if concurrency is not None and issued < n:
                    send(t_end, issued)
                    issued += 1
        next_t[e] = t_end
    gaps, weights = _gaps(engines[n_prefill:], ends[n_prefill:], dec_reqs, dec_engine, n_prefill)
    return DisaggRun(arrival, first, end, [o for _, o in jobs], gaps, weights)


def _gaps(
    engines: Sequence[Engine],
    ends: Sequence[list[float]],
    reqs: Sequence[SimRequest | None],
    which: Sequence[int],
    offset: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Step-to-step gaps of every decode engine, each weighted by the requests decoding across it
    (`sim.simulate.step_gaps` per engine)."""
    all_gaps: list[np.ndarray] = []
    all_w: list[np.ndarray] = []
    for k in range(len(engines)):
        e_ends = np.asarray(ends[k], dtype=np.float64)
        if len(e_ends) < 2:
            continue
        gaps, weights = step_gaps(e_ends, [r for r, w in zip(reqs, which) if r is not None and w - offset == k])
        all_gaps.append(gaps)
        all_w.append(weights)
    if not all_gaps:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    return np.concatenate(all_gaps), np.concatenate(all_w)
