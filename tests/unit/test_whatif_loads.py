"""plan's what-if under open-loop loads (Poisson rates, every request at once) and shared prompt prefixes
(issue 13, coverage), and the engines' prefix-caching defaults the deployment states."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

from servescope.deploy.deployment import Deployment
from servescope.errors import ConfigError
from servescope.plan.command import plan_command, plan_main
from servescope.plan.memfit import PlanArgs
from servescope.plan.whatif import poisson_arrivals, shared_prefix_hashes, simulate_point, whatif
from servescope.sim.request import block_hashes


def _dep(**kw: object) -> Deployment:
    return Deployment.build(model="Llama-3.1-8B", gpu="h100", gpus=1, **kw)  # type: ignore[arg-type]


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
    dep = _dep()
    (alone,) = whatif(dep, input_len=1024, output_len=128, concurrencies=(1,), num_requests=20)
    (sparse,) = whatif(dep, input_len=1024, output_len=128, request_rates=(0.01,), num_requests=20)
    assert sparse.concurrency is None and sparse.request_rate == 0.01 and sparse.load == "0.01 req/s"
    assert sparse.ttft_ms_p50 == pytest.approx(alone.ttft_ms_p50, rel=1e-9)
    assert sparse.e2e_ms_p50 == pytest.approx(alone.e2e_ms_p50, rel=1e-9)
    assert sparse.itl_ms_p50 == pytest.approx(alone.itl_ms_p50, rel=1e-3)
    # throughput is the offered rate's: 20 requests over ~19 gaps of 100 s
    assert sparse.requests_per_s == pytest.approx(0.01, rel=0.3)


def test_rates_below_capacity_are_served_and_above_it_the_queue_grows() -> None:
    dep = _dep()
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
    one = _dep()
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
    one = _dep()
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
    cfg = _dep().engine_config()
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
    dep = _dep()
    (shared,) = whatif(dep, input_len=512, output_len=64, concurrencies=(1,), num_requests=20, prefix_len=512)
    (whole,) = whatif(dep, input_len=1024, output_len=64, concurrencies=(1,), num_requests=20)
    assert shared.prefix_cache_hit_rate == pytest.approx(19 * 512 / (20 * 1024), rel=1e-12)
    assert shared.ttft_ms_p50 < 0.9 * whole.ttft_ms_p50
    assert shared.total_tokens_per_s == pytest.approx(shared.requests_per_s * (1024 + 64), rel=1e-9)
    assert whole.prefix_cache_hit_rate is None
    # caching off (as set, or vLLM 0.7's default): no hits, the prefix recomputed every time
    (off,) = whatif(
        _dep(enable_prefix_caching=False),
        input_len=512,
        output_len=64,
        concurrencies=(1,),
        num_requests=20,
        prefix_len=512,
    )
    assert off.prefix_cache_hit_rate == 0.0 and off.ttft_ms_p50 == pytest.approx(whole.ttft_ms_p50, rel=1e-9)
    with pytest.raises(ConfigError, match="prefix_len \\+ input_len \\+ output_len"):
        whatif(dep, input_len=4096, output_len=256, concurrencies=(1,), prefix_len=4096)


def test_engines_prefix_caching_defaults() -> None:
    assert _dep().prefix_caching and _dep(engine="sglang").prefix_caching and _dep(engine="trtllm").prefix_caching
    assert not _dep(enable_prefix_caching=False).prefix_caching
    assert not _dep(engine="vllm-0.7").prefix_caching  # V0: --enable-prefix-caching off by default
    assert _dep(engine="vllm-0.7", enable_prefix_caching=True).prefix_caching
    mla = Deployment.build(model="DeepSeek-R1", gpu="h200", gpus=8, engine="vllm-0.7", enable_prefix_caching=True)
    assert not mla.prefix_caching  # 0.7 forces it off for MLA
    assert not mla.engine_config().enable_prefix_caching and mla.to_mapping()["enable_prefix_caching"] is False


def test_plan_command_rates_burst_and_prefix(tmp_path) -> None:
    res = CliRunner().invoke(
        plan_command,
        [
            "--model",
            "Llama-3.1-8B",
            "--gpu",
            "h100",
            "--gpus",
            "1",
            "--concurrency",
            "4",
            "--request-rate",
            "2,inf",
            "--prefix-len",
            "256",
            "--input-len",
            "256",
            "--output-len",
            "32",
            "--num-requests",
            "40",
            "--json",
            "-",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    w = doc["whatif"]
    assert w["closed_loop"] and w["open_loop"] and "Poisson" in w["arrivals"]
    pts = w["points"]
    assert [(p["concurrency"], p["request_rate"]) for p in pts] == [(4, None), (None, 2.0), (None, "inf")]
    assert all(p["prefix_len"] == 256 for p in pts)
    # one at a time, every request after the first finds the prefix (39 x 256 of 40 x 512 tokens); all at
    # once, the first step's 16 prompts (8,192 batched tokens / 512) compute it together, none cached yet
    assert pts[0]["prefix_cache_hit_rate"] == pts[1]["prefix_cache_hit_rate"] == pytest.approx(39 / 80, rel=1e-12)
    assert pts[2]["prefix_cache_hit_rate"] == pytest.approx(24 / 80, rel=1e-12)
    assert all(p["uncertainty"]["ttft_ms"]["low"] < p["ttft_ms_p50"] for p in pts)
    # the tables
    con = Console(record=True, width=200, color_system=None)
    assert plan_main(PlanArgs(model="Llama-3.1-8B", gpus=1, request_rate=(2.0, math.inf), num_requests=20), con) == 0
    text = con.export_text()
    assert "2 req/s" in text and "all at once" in text and "prefix hits" not in text
    # caching off: a note says the prefix is recomputed, and the table shows no hits
    con = Console(record=True, width=200, color_system=None)
    assert (
        plan_main(
            PlanArgs(
                model="Llama-3.1-8B", gpus=1, engine="vllm-0.7", request_rate=(1.0,), prefix_len=64, num_requests=10
            ),
            con,
        )
        == 0
    )
    text = con.export_text()
    assert "prefix caching is off for vllm-0.7" in text and "prefix hits" in text and "64+1024/256" in text
    # `--rate`, as `servescope run` spells it, is the same flag
    res = CliRunner().invoke(
        plan_command, ["--model", "Llama-3.1-8B", "--gpus", "1", "--rate", "inf", "--num-requests", "8", "--json", "-"]
    )
    assert res.exit_code == 0 and json.loads(res.stdout)["whatif"]["points"][0]["request_rate"] == "inf"
    for bad in ("0", "1,x", "-2"):
        res = CliRunner().invoke(plan_command, ["--model", "Llama-3.1-8B", "--request-rate", bad])
        assert res.exit_code == 2 and "--request-rate" in res.output
