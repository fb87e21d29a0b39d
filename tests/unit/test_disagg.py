"""Prefill/decode disaggregation on the virtual clock (sim/disagg.py), checked by hand."""

from __future__ import annotations

import dataclasses

import pytest

from servescope.sim.config import EngineConfig
from servescope.sim.disagg import simulate_disagg
from servescope.sim.steptime import StepCost, StepShape, step_time_s


def test_pd_single_request_by_hand() -> None:
    """One request through one prefill and one decode worker: TTFT = the prefill step + the KV transfer
    + the decode worker's admitting step; then one decode step per further token."""
    cost = StepCost(
        dense_weight_bytes=16e9,
        kv_bytes_per_token=131072,
        flops_per_token=16e9,
        hbm_bytes_per_s=3.35e12,
        flops_per_s=989.5e12,
        step_overhead_s=1e-3,
    )
    pre = EngineConfig(cost=cost, kv_blocks=4096, enable_prefix_caching=False)
    dec = EngineConfig(cost=dataclasses.replace(cost, prefill_work=0.0), kv_blocks=4096, enable_prefix_caching=False)
    run = simulate_disagg(pre, dec, 1, 1, [(2000, 4)], concurrency=1, transfer_s_per_token=1e-6)
    t_pre = step_time_s(cost, StepShape(prefill_seqs=1, prefill_tokens=2000, prefill_ctx_pairs=2000 * 1000.0))
    t_adm = step_time_s(dec.cost, StepShape(prefill_seqs=1, prefill_tokens=2000, prefill_ctx_pairs=2000 * 1000.0))
    assert run.first_token_s[0] == pytest.approx(t_pre + 2000e-6 + t_adm)
    t_dec = [step_time_s(dec.cost, StepShape(decode_seqs=1, decode_ctx_tokens=2000 + i)) for i in range(3)]
    assert run.end_s[0] == pytest.approx(run.first_token_s[0] + sum(t_dec))
    assert run.median_itl_s() == pytest.approx(sorted(t_dec)[1])


def test_pd_closed_loop_first_wave_arrives_after_the_first_step_starts() -> None:
    """As in `simulate`'s closed loop: of four requests sent at 0 to one prefill worker, the first
    starts a prompt step alone and the other three arrive after it began, so they share the next."""
    cost = StepCost(
        dense_weight_bytes=16e9,
        kv_bytes_per_token=131072,
        flops_per_token=16e9,
        hbm_bytes_per_s=3.35e12,
        flops_per_s=989.5e12,
        step_overhead_s=1e-3,
    )
    pre = EngineConfig(cost=cost, kv_blocks=4096, enable_prefix_caching=False)
    dec = EngineConfig(cost=dataclasses.replace(cost, prefill_work=0.0), kv_blocks=4096, enable_prefix_caching=False)
    run = simulate_disagg(pre, dec, 1, 1, [(2000, 4)] * 4, concurrency=4)
    t_one = step_time_s(cost, StepShape(prefill_seqs=1, prefill_tokens=2000, prefill_ctx_pairs=2000 * 1000.0))
    t_three = step_time_s(cost, StepShape(prefill_seqs=3, prefill_tokens=6000, prefill_ctx_pairs=3 * 2000 * 1000.0))
    assert run.arrival_s == [0.0] * 4
    first = run.first_token_s
    assert first[1] == first[2] == first[3] > first[0]
    assert first[1] >= t_one + t_three  # the three prompts were computed in the second prompt step
