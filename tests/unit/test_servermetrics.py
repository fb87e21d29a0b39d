"""Server /metrics: parsing, window deltas in common keys, histogram means, the prefix-cache check."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from servescope.target.servermetrics import parse_prometheus, prefix_cache_note, scrape, server_summary
from tests.support.loopback import serving

VLLM_BEFORE = """
# HELP vllm:prefix_cache_queries Prefix cache queries, in tokens.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 100.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 5000.0
vllm:generation_tokens_total{engine="0",model_name="m"} 700.0
vllm:num_requests_running{engine="0",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.6
vllm:time_to_first_token_seconds_count{model_name="m"} 3.0
vllm:time_to_first_token_seconds_created{model_name="m"} 1.7e9
"""
VLLM_AFTER = """
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 11000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 6100.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 15000.0
vllm:generation_tokens_total{engine="0",model_name="m"} 1700.0
vllm:num_requests_running{engine="0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 13.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 2.6
vllm:time_to_first_token_seconds_count{model_name="m"} 13.0
vllm:num_requests_waiting{engine="0",model_name="m"} NaN
"""


def test_parse_strips_total_sums_labels_drops_buckets() -> None:
    d = parse_prometheus(VLLM_BEFORE + 'vllm:prompt_tokens_total{engine="1",model_name="m"} 5.0\n')
    assert d["vllm:prefix_cache_queries"] == 1000.0
    assert d["vllm:prompt_tokens"] == 5005.0  # summed over engines
    assert "vllm:time_to_first_token_seconds_bucket" not in d
    assert "vllm:time_to_first_token_seconds_created" not in d
    assert d["vllm:time_to_first_token_seconds_count"] == 3.0


def test_vllm_window_deltas_and_hit_rate() -> None:
    s = server_summary(parse_prometheus(VLLM_BEFORE), parse_prometheus(VLLM_AFTER))
    assert s is not None
    assert s["prefix_queries"] == 10000 and s["prefix_hits"] == 6000
    assert s["prefix_cache_hit_rate"] == pytest.approx(0.6)
    assert s["prompt_tokens"] == 10000 and s["generation_tokens"] == 1000
    assert s["running"] == 2.0 and "waiting" not in s  # NaN gauge dropped
    assert s["latency_ms"]["ttft_mean_ms"] == pytest.approx(200.0)  # (2.6-0.6)/(13-3) s
    assert s["metrics_used"]["prefix_hits"] == "vllm:prefix_cache_hits"


def test_sglang_and_llamacpp_hit_rates() -> None:
    sg = server_summary(
        {"sglang:prompt_tokens": 100.0, "sglang:cached_tokens": 10.0},
        {"sglang:prompt_tokens": 1100.0, "sglang:cached_tokens": 510.0},
    )
    assert sg is not None and sg["prefix_cache_hit_rate"] == pytest.approx(0.5)
    lc = server_summary(None, {"llamacpp:prompt_tokens": 400.0, "llamacpp:prompt_tokens_cached": 100.0})
    assert lc is not None and lc["prefix_cache_hit_rate"] == pytest.approx(0.25)
    old = server_summary(None, {"llamacpp:prompt_tokens": 400.0})  # builds without the cached counter
    assert old is not None and old["prefix_cache_hit_rate"] is None
    assert server_summary({"x": 1.0}, None) is None


def test_prefix_cache_note() -> None:
    server = {"prefix_cache_hit_rate": 0.60, "metrics_used": {"prefix_hits": "vllm:prefix_cache_hits"}}
    assert prefix_cache_note(0.6125, server) is None  # within 5 points
    assert prefix_cache_note(0.56, server) is None
    low = prefix_cache_note(0.6125, {**server, "prefix_cache_hit_rate": 0.05})
    assert low is not None and "intended hit rate 61.3%" in low and "achieved 5.0%" in low and "off" in low
    high = prefix_cache_note(0.0, {**server, "prefix_cache_hit_rate": 0.4})
    assert high is not None and "more than the workload shares" in high
    assert prefix_cache_note(None, server) is None
    assert prefix_cache_note(0.5, {"prefix_cache_hit_rate": None}) is None
    assert prefix_cache_note(0.5, None) is None


async def _scrape_from(routes: dict[str, tuple[int, str]], path: str | None) -> dict[str, float] | None:
    """`scrape` against a real aiohttp server on loopback that answers `routes` (path -> status, body)."""
    app = web.Application()
    for route, (status, body) in routes.items():

        async def handler(request: web.Request, status: int = status, body: str = body) -> web.Response:
            return web.Response(status=status, text=body)

        app.router.add_get(route, handler)
    async with serving(app) as url:
        return await scrape(f"{url}/v1/", path=path)


def test_scrape_reads_the_page_where_the_probe_found_it() -> None:
    routes = {
        "/metrics": (200, "vllm:num_requests_running 1\n"),
        "/prometheus/metrics": (200, "trtllm_num_requests_running 2\n"),
    }
    assert asyncio.run(_scrape_from(routes, "/prometheus/metrics")) == {"trtllm_num_requests_running": 2.0}
    assert asyncio.run(_scrape_from(routes, "/metrics")) == {"vllm:num_requests_running": 1.0}
    # no probe: each engine's path in turn; TensorRT-LLM's JSON /metrics is not a page
    trt = {"/metrics": (200, '[{"iter": 1}]'), "/prometheus/metrics": (200, "trtllm_num_requests_running 2\n")}
    assert asyncio.run(_scrape_from(trt, None)) == {"trtllm_num_requests_running": 2.0}
    assert asyncio.run(_scrape_from({"/metrics": (404, "")}, None)) is None
