"""A whole workload on a virtual clock (sim/simulate.py): open-loop gaps, closed loops, the front end,
the decode fast path against stepping, per-request rows, determinism."""

from __future__ import annotations

import dataclasses
import random

import pytest

from servescope.sim.request import SimRequest
from servescope.sim.simulate import simulate
from tests.unit.test_engine import check_complete, closed, config, median_ttft


def test_max_tokens_one_and_open_loop_gaps() -> None:
    reqs = [SimRequest(i, 10, 1, arrival_s=i * 10.0) for i in range(3)]
    run = simulate(config(), reqs)
    check_complete(run, reqs)
    assert run.duration_s > 20.0  # the clock jumped over idle gaps


def test_deterministic() -> None:
    cfg = config(max_num_seqs=8, kv_blocks=80)
    r1, q1 = closed(cfg, 12, n=40)
    r2, q2 = closed(cfg, 12, n=40)
    assert r1.step_end_s == r2.step_end_s
    assert [r.segments for r in q1] == [r.segments for r in q2]


@pytest.mark.parametrize(("extra", "reserve"), [(0, 0.0), (2, 0.0), (0, 1.0), (2, 0.7)])
@pytest.mark.parametrize("concurrency", [None, 1, 7, 40])
def test_decode_fast_path_is_exact(concurrency: int | None, extra: int, reserve: float) -> None:
    cfg = config(max_num_seqs=16, kv_blocks=120, seq_overhead_blocks=extra, reserve_output=reserve)

    def mk() -> list[SimRequest]:
        rng = random.Random(5)
        return [SimRequest(i, rng.randrange(8, 300), rng.randrange(1, 150), arrival_s=i * 0.05) for i in range(60)]

    a, b = mk(), mk()
    ra = simulate(cfg, a, concurrency=concurrency, fast=True)
    rb = simulate(cfg, b, concurrency=concurrency, fast=False)
    assert ra.step_end_s == pytest.approx(rb.step_end_s, rel=1e-12)
    assert [r.segments for r in a] == [r.segments for r in b]
    assert ra.stats == rb.stats


def test_per_request_rows() -> None:
    run, reqs = closed(config(), 2, n=4, prompt=64, out=10)
    rows = run.per_request()
    assert len(rows) == 4
    for row, r in zip(rows, reqs):
        t = run.token_times_s(r)
        assert row["ttft_s"] == pytest.approx(t[0] - r.arrival_s)
        assert row["tpot_s"] == pytest.approx((t[-1] - t[0]) / 9)
        assert row["output_tokens"] == 10 and row["prompt_tokens"] == 64


def test_a_burst_shares_the_front_end_and_reaches_the_engine_together() -> None:
    """1,000 short requests sent at once (a GPUStack-style burst) through a front end of 1 ms each,
    which they share (processor sharing): none reaches the engine before 1,000 x 1 ms, so no first
    token comes before 1 s and the run is longer by the whole 1 s (the engine waits meanwhile); TTFT
    counts from the send, and the steps cost what they cost without a front end."""

    free = config(max_num_seqs=256, max_num_batched_tokens=8192)
    fe = dataclasses.replace(free, frontend_s=1e-3)
    runs = []
    for cfg in (free, fe):
        reqs = [SimRequest(i, 128, 4) for i in range(1000)]
        runs.append((simulate(cfg, reqs), reqs))
    (r0, q0), (r1, q1) = runs
    assert all(r.arrival_s == 0.0 for r in q1)
    assert all(r.first_scheduled_s >= 1.0 - 1e-9 for r in q1)
    assert min(r1.first_token_s(r) for r in q1) >= 1.0
    assert median_ttft(r1, q1) == pytest.approx(median_ttft(r0, q0) + 1.0)
    assert r1.duration_s == pytest.approx(r0.duration_s + 1.0)


def test_closed_loop_requests_pass_the_front_end() -> None:
    """Closed loop with a front end: the first wave of four shares it and reaches the engine after four
    service times, a successor reaches it a service time after its send (the front end being idle),
    and the decode fast path gives the same steps."""

    cfg = dataclasses.replace(config(max_num_seqs=8, kv_blocks=200), frontend_s=2e-3)
    runs = []
    for fast in (True, False):
        reqs = [SimRequest(i, 32, 40) for i in range(8)]
        runs.append((simulate(cfg, reqs, concurrency=4, fast=fast), reqs))
    (run, reqs), (slow, _) = runs
    assert run.step_end_s == slow.step_end_s
    assert all(r.first_scheduled_s >= 4 * 2e-3 - 1e-12 for r in reqs[:4])
    succ = reqs[4]
    sent = run.step_end_s[reqs[0].finish_step]
    assert succ.arrival_s == sent and succ.first_scheduled_s >= sent + 2e-3


def test_closed_loop_arrivals_reach_the_engine_as_on_the_wall_clock() -> None:
    """Closed loop: the N first requests are sent at 0, the first starts the first step alone and the
    rest join the second; a completion's successor is sent at that step's end and joins the step after
    the next one (the engine does not wait for it); TTFT counts from the send time."""
    cfg = config(max_num_seqs=8, kv_blocks=200)
    reqs = [SimRequest(i, 32, 5) for i in range(8)]
    run = simulate(cfg, reqs, concurrency=4)
    assert reqs[0].first_token_step == 0
    assert [r.first_token_step for r in reqs[1:4]] == [1, 1, 1]
    assert all(r.arrival_s == 0.0 for r in reqs[:4])
    succ = reqs[4]  # sent when request 0 finished
    assert succ.arrival_s == run.step_end_s[reqs[0].finish_step]
    assert succ.first_token_step == reqs[0].finish_step + 2
    for fast in (True, False):  # the decode fast path stops for a pending arrival
        again = [SimRequest(i, 32, 5) for i in range(8)]
        other = simulate(cfg, again, concurrency=4, fast=fast)
        assert [r.first_token_step for r in again] == [r.first_token_step for r in reqs]
        assert other.step_end_s == pytest.approx(run.step_end_s)
