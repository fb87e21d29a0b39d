"""plan's what-if on a virtual clock (plan/whatif.py): closed loops, open-loop loads (Poisson rates,
every request at once), shared prompt prefixes, data-parallel replicas, the median ITL."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from servescope.deploy.deployment import Deployment
from servescope.errors import ConfigError
from servescope.plan.memfit import PlanArgs, to_deployment
from servescope.plan.whatif import poisson_arrivals, shared_prefix_hashes, simulate_point, whatif
from servescope.sim.request import block_hashes
from tests.support.plan_deployments import awq_deployment, llama_8b_h100


def test_poisson_arrivals_start_at_zero_with_the_rate_as_their_mean_and_are_repeatable() -> None:
    t = poisson_arrivals(4.0, 20_001)
    assert t[0] == 0.0 and all(b >= a for a, b in itertools.pairwise(t))
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(0.25, rel=0.03)
    assert gaps.std() == pytest.approx(0.25, rel=0.05)  # exponential: the std is the mean
    assert poisson_arrivals(4.0, 50) == t[:50] and poisson_arrivals(4.0, 50, seed=1) != t[:50]
    assert poisson_arrivals(math.inf, 3) == [0.0, 0.0, 0.0]
    with pytest.raises(ConfigError, match="> 0"):
        poisson_arrivals(0.0, 3)


def test_a_rate_so_low_that_requests_never_meet_predicts_what_one_user_alone_does() -> None:
    """At 0.01 requests/s every request runs alone, as each of a single user's does: the same TTFT and
    end-to-end latency (a deterministic virtual clock), and the ITL within float noise."""
    dep = llama_8b_h100()
    (alone,) = whatif(dep, input_len=1024, output_len=128, concurrencies=(1,), num_requests=20)
    (sparse,) = whatif(dep, input_len=1024, output_len=128, request_rates=(0.01,), num_requests=20)
    assert sparse.concurrency is None and sparse.request_rate == 0.01 and sparse.load == "0.01 req/s"
    assert sparse.ttft_ms_p50 == pytest.approx(alone.ttft_ms_p50, rel=1e-9)
    assert sparse.e2e_ms_p50 == pytest.approx(alone.e2e_ms_p50, rel=1e-9)
    assert sparse.itl_ms_p50 == pytest.approx(alone.itl_ms_p50, rel=1e-3)
    # throughput is the offered rate's: 20 requests over ~19 gaps of 100 s
    assert sparse.requests_per_s == pytest.approx(0.01, rel=0.3)


def test_rates_below_capacity_are_served_and_above_it_the_queue_grows() -> None:
    dep = llama_8b_h100()
    low, mid, high, burst = whatif(dep, input_len=1024, output_len=128, request_rates=(2, 8, 64, math.inf))
    assert (low.num_requests, mid.num_requests, high.num_requests, burst.num_requests) == (200, 480, 3840, 1000)
    # served: completions keep up with arrivals (less the drain at the end), TTFT stays near one prefill
    assert low.requests_per_s == pytest.approx(2, rel=0.15) and mid.requests_per_s == pytest.approx(8, rel=0.15)
    assert mid.ttft_ms_p50 < 2 * low.ttft_ms_p50
    # saturated: completions fall short of the rate and the queue's wait dominates TTFT
    assert high.requests_per_s < 0.5 * 64 and high.ttft_ms_p50 > 20 * low.ttft_ms_p50
    # every request at once: the queue holds them all; the engine runs at its capacity
    assert burst.load == "all at once" and burst.ttft_ms_p50 > 20 * low.ttft_ms_p50
    assert burst.output_tokens_per_s == pytest.approx(high.output_tokens_per_s, rel=0.25)


def test_data_parallel_replicas_split_the_rate() -> None:
    one = llama_8b_h100()
    two = Deployment.build(model="Llama-3.1-8B", gpu="h100", gpus=2, tp=1, dp=2)
    (p1,) = whatif(one, input_len=1024, output_len=128, request_rates=(4,), num_requests=240)
    (p2,) = whatif(two, input_len=1024, output_len=128, request_rates=(8,), num_requests=480)
    assert p2.request_rate == 8 and p2.num_requests == 480
    # each replica runs 4 requests/s; the API server in front of both spends its time per request on
    # both replicas' requests (`Deployment.engine_config`: frontend_s x dp), so TTFT is a little longer
    assert p2.output_tokens_per_s == pytest.approx(2 * p1.output_tokens_per_s, rel=0.01)
    assert p1.ttft_ms_p50 < p2.ttft_ms_p50 < 1.2 * p1.ttft_ms_p50


def test_a_closed_loop_of_fewer_users_than_replicas_keeps_only_theirs_busy() -> None:
    """One user on 2 DP replicas is one replica's single user: the same throughput, ITL and TTFT (the API
    server admits one request at a time, not both replicas' share), not twice the throughput. Two users
    are one each; three are 2 + 1, counted as 1.5 replicas of two users (`dp_share`)."""
    one = llama_8b_h100()
    two = Deployment.build(model="Llama-3.1-8B", gpu="h100", gpus=2, tp=1, dp=2)
    kw = {"input_len": 1024, "output_len": 128, "num_requests": 24}
    alone_1, pair_1 = whatif(one, concurrencies=(1, 2), **kw)  # type: ignore[arg-type]
    alone_2, each_2, three = whatif(two, concurrencies=(1, 2, 3), **kw)  # type: ignore[arg-type]
    assert alone_2.concurrency == 1 and alone_2.num_requests == 24
    assert alone_2.output_tokens_per_s == pytest.approx(alone_1.output_tokens_per_s, rel=1e-9)
    assert alone_2.ttft_ms_p50 == pytest.approx(alone_1.ttft_ms_p50, rel=1e-9)
    assert alone_2.itl_ms_p50 == pytest.approx(alone_1.itl_ms_p50, rel=1e-9)
    assert each_2.output_tokens_per_s == pytest.approx(2 * alone_1.output_tokens_per_s, rel=0.01)
    assert three.output_tokens_per_s == pytest.approx(1.5 * pair_1.output_tokens_per_s, rel=0.02)
    from servescope.plan.whatif import dp_share

    assert dp_share(1, 8) == (1, 1.0) and dp_share(8, 8) == (1, 8.0) and dp_share(16, 8) == (2, 8.0)
    assert dp_share(100, 8) == (13, pytest.approx(100 / 13))


def test_a_load_is_a_concurrency_or_a_rate() -> None:
    cfg = llama_8b_h100().engine_config()
    for kw in ({}, {"concurrency": 2, "request_rate": 1.0}):
        with pytest.raises(ConfigError, match="one of them"):
            simulate_point(cfg, input_len=16, output_len=4, num_requests=2, **kw)  # type: ignore[arg-type]


def test_shared_prefix_blocks_are_named_alike_and_the_rest_apart() -> None:
    a, b = (shared_prefix_hashes(i, 40, 100, 16) for i in (0, 1))
    assert len(a) == len(b) == 6  # full blocks of 100 tokens
    assert a[:2] == b[:2]  # blocks 0-1 lie inside the 40-token prefix; block 2 straddles it
    assert all(x != y for x, y in zip(a[2:], b[2:]))
    # the chain form `sim.request.block_hashes` gives: prompts that differ in a block differ after it too
    p, q = block_hashes(list(range(48)), 16), block_hashes([*range(16), *range(100, 132)], 16)
    assert p[0] == q[0] and p[1] != q[1] and p[2] != q[2]


def test_a_shared_prefix_meets_the_prefix_cache() -> None:
    """512 shared tokens + 512 own: every request after the first finds the prefix's 32 blocks cached, so
    19 of 20 prompts hit half their tokens (hits / queries = 19 x 512 / (20 x 1,024)), and their first
    tokens come sooner than a 1,024-token prompt computed whole."""
    dep = llama_8b_h100()
    (shared,) = whatif(dep, input_len=512, output_len=64, concurrencies=(1,), num_requests=20, prefix_len=512)
    (whole,) = whatif(dep, input_len=1024, output_len=64, concurrencies=(1,), num_requests=20)
    assert shared.prefix_cache_hit_rate == pytest.approx(19 * 512 / (20 * 1024), rel=1e-12)
    assert shared.ttft_ms_p50 < 0.9 * whole.ttft_ms_p50
    assert shared.total_tokens_per_s == pytest.approx(shared.requests_per_s * (1024 + 64), rel=1e-9)
    assert whole.prefix_cache_hit_rate is None
    # caching off (as set, or vLLM 0.7's default): no hits, the prefix recomputed every time
    (off,) = whatif(
        llama_8b_h100(enable_prefix_caching=False),
        input_len=512,
        output_len=64,
        concurrencies=(1,),
        num_requests=20,
        prefix_len=512,
    )
    assert off.prefix_cache_hit_rate == 0.0 and off.ttft_ms_p50 == pytest.approx(whole.ttft_ms_p50, rel=1e-9)
    with pytest.raises(ConfigError, match="prefix_len \\+ input_len \\+ output_len"):
        whatif(dep, input_len=4096, output_len=256, concurrencies=(1,), prefix_len=4096)


def test_whatif_throughput_rises_and_saturates_while_itl_grows() -> None:
    dep, _m = awq_deployment()
    pts = whatif(dep, None, input_len=1024, output_len=256, concurrencies=(1, 16, 128), num_requests=64)
    tput = [p.output_tokens_per_s for p in pts]
    itl = [p.itl_ms_p50 for p in pts]
    assert tput[0] < tput[1] < tput[2]
    assert tput[2] / tput[1] < 128 / 16  # sub-linear: the batch costs more per step
    assert itl[0] < itl[2]
    with pytest.raises(ConfigError):
        whatif(dep, None, input_len=8000, output_len=256, concurrencies=(1,))


def test_whatif_ttft_carries_the_first_token_latency_as_the_validation_does() -> None:
    """One answer: the what-if adds the knobs' first-token latency to every TTFT (plan/validate.py's
    `_summary` does the same), and nothing else moves; the engine configuration the emulator serves
    carries the same latency (it holds each stream's first tokens that long)."""
    import dataclasses

    from servescope.deploy.deployment import profile_from_raw

    dep = Deployment.build(model="Llama-3.1-8B", gpu="h100", gpus=1)
    k = dep.knobs()
    assert k.first_token_s > 0.005  # the fitted table's, not zero
    kw = {"input_len": 1024, "output_len": 128, "concurrencies": (1, 32), "num_requests": 64}
    with_it = whatif(dep, k, **kw)
    without = whatif(dep, dataclasses.replace(k, first_token_s=0.0), **kw)
    for a, b in zip(with_it, without):
        assert a.ttft_ms_p50 - b.ttft_ms_p50 == pytest.approx(1e3 * k.first_token_s, rel=1e-9)
        assert (a.output_tokens_per_s, a.itl_ms_p50, a.e2e_ms_p50) == (
            b.output_tokens_per_s,
            b.itl_ms_p50,
            b.e2e_ms_p50,
        )
    prof = profile_from_raw({"name": "x", "model": "Llama-3.1-8B", "gpu": "h100", "gpus": 1})
    assert prof.engine.first_token_s == k.first_token_s


@pytest.mark.parametrize(("kv_blocks", "concurrency"), [(None, 1), (None, 7), (300, 7), (300, 100)])
def test_median_itl_equals_brute_force_token_gaps(kv_blocks, concurrency) -> None:
    import dataclasses
    import statistics

    from servescope.plan.whatif import _median_itl_s, engine_config
    from servescope.sim.request import SimRequest
    from servescope.sim.simulate import simulate

    dep, _m = awq_deployment()
    cfg = engine_config(dep)
    if kv_blocks:
        cfg = dataclasses.replace(cfg, kv_blocks=kv_blocks)  # a tiny cache forces preemptions
    reqs = [SimRequest(id=i, prompt_len=1024, max_tokens=256) for i in range(3 * concurrency + 5)]
    run = simulate(cfg, reqs, concurrency=concurrency)
    gaps = []
    for r in reqs:
        t = run.token_times_s(r)
        gaps.extend(b - a for a, b in itertools.pairwise(t))
    assert _median_itl_s(run, reqs) == pytest.approx(statistics.median(gaps), rel=1e-12)
    if kv_blocks:
        assert run.stats.preemptions > 0


def test_whatif_with_data_parallel_scales_replicas() -> None:
    dep2 = to_deployment(PlanArgs(model="Llama-3.1-8B", gpu="h100", gpus=2, tp=1, dp=2))
    dep1 = to_deployment(PlanArgs(model="Llama-3.1-8B", gpu="h100", gpus=1))
    # one API server in front of both ranks: each replica's requests pass a front end twice as busy
    fe1 = dep1.engine_config().frontend_s
    assert fe1 > 0 and dep2.engine_config().frontend_s == pytest.approx(2 * fe1)
    cal = dataclasses.replace(dep1.knobs(), frontend_s=0.0)  # without it, replicas scale exactly
    (p2,) = whatif(dep2, cal, input_len=512, output_len=64, concurrencies=(16,), num_requests=64)
    (p1,) = whatif(dep1, cal, input_len=512, output_len=64, concurrencies=(8,), num_requests=32)
    assert p2.concurrency == 16
    assert p2.output_tokens_per_s == pytest.approx(2 * p1.output_tokens_per_s, rel=1e-6)
