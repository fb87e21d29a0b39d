"""Attention-DP ranks of a MoE stepping together (sim.lockstep) and plan's what-if running them."""

from __future__ import annotations

import statistics

import pytest

from servescope.deploy.deployment import deployment_from_mapping
from servescope.plan.whatif import whatif
from servescope.sim.lockstep import simulate_lockstep
from servescope.sim.request import SimRequest
from servescope.sim.simulate import simulate
from tests.unit.test_engine import config


def test_one_rank_runs_as_the_plain_simulation() -> None:
    cfg = config()
    a = [SimRequest(i, 256, 64) for i in range(40)]
    b = [SimRequest(i, 256, 64) for i in range(40)]
    one = simulate(cfg, a, concurrency=8, fast=False)
    lock = simulate_lockstep(cfg, b, 1, concurrency=8)
    assert [lock.first_token_s(r) for r in b] == [one.first_token_s(r) for r in a]
    assert [lock.end_s(r) for r in b] == [one.end_s(r) for r in a]
    assert lock.duration_s == one.duration_s


def test_a_rank_prefilling_holds_back_the_other_ranks_decodes() -> None:
    """Two ranks: rank 0 decodes a short prompt's 64 tokens while rank 1 takes a long prompt in chunks.
    Alone, the decode steps cost 3.9 ms; in lock-step, each step of rank 0 lasts as long as rank 1's
    512-token prompt chunk (7.2-7.5 ms) while it prefills, and every step of both ranks ends at the same
    instants."""
    cfg = config(max_num_batched_tokens=512)
    short, long_ = SimRequest(0, 16, 64), SimRequest(1, 4096, 4)
    alone = simulate(cfg, [SimRequest(0, 16, 64)], fast=False)
    run = simulate_lockstep(cfg, [short, long_], 2)
    r0, r1 = run.ranks
    assert r0.requests == [short] and r1.requests == [long_]  # round robin
    assert r0.step_end_s[: len(r1.step_end_s)] == r1.step_end_s  # the same clock
    alone_gap = statistics.median(b - a for a, b in zip(alone.step_end_s, alone.step_end_s[1:]))
    gaps = [b - a for a, b in zip(r0.step_end_s, r0.step_end_s[1:])]
    chunks = 4096 // 512
    assert all(g > 1.8 * alone_gap for g in gaps[: chunks - 1])  # held back by the other rank's chunks
    assert run.end_s(short) > alone.end_s(alone.requests[0]) + (chunks - 2) * alone_gap
    assert gaps[-1] == pytest.approx(alone_gap, rel=0.01)  # and free again (its context is longer)


def test_plan_runs_the_dp_ranks_of_a_moe_in_lock_step() -> None:
    """DeepSeek-R1 on SGLang with DP attention over 8 H200s: the what-if simulates the 8 ranks together
    with the whole load (one point, the requests all served); a dense model's DP replicas stay independent."""
    dep = deployment_from_mapping(
        {
            "model": "DeepSeek-R1",
            "gpu": "h200",
            "gpus": 8,
            "engine": "sglang",
            "tp": 1,
            "dp": 8,
            "ep": 8,
            "max_model_len": 8192,
        }
    )
    assert dep.dp == 8 and dep.model.is_moe
    (p,) = whatif(dep, input_len=1024, output_len=128, concurrencies=[64], num_requests=128)
    assert p.concurrency == 64 and p.num_requests == 128
    assert p.output_tokens_per_s > 0 and p.ttft_ms_p50 > 0 and p.itl_ms_p50 > 0
    assert p.requests_per_s == pytest.approx(p.output_tokens_per_s / 128, rel=1e-9)
