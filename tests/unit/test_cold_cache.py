"""Cold caches by default: per-part seeds, a random workload's designed prefix-cache hit rate, the
hit-rate note, the reset plan per engine and the emulator's block pool reset."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import numpy as np
import pytest
from aiohttp import web

from servescope.sim.kvcache import BlockPool
from servescope.target.cachereset import EMULATOR_RESET_PATH, plan_reset, reset_prefix_cache
from servescope.target.engines import CACHE_RESET_PATHS
from servescope.target.servermetrics import prefix_cache_note
from servescope.workload.seeds import derive_seed
from servescope.workload.synthetic import template_hit_rate
from tests.support.loopback import serving


def test_derived_seeds_differ_per_label_and_are_stable_across_processes() -> None:
    labels = [f"c{c:04d}-in1024-out128" for c in (1, 4, 16, 64)] + ["repeat-2", "repeat-3"]
    seeds = [derive_seed(0, label) for label in labels]
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= s < 2**31 for s in seeds)
    assert derive_seed(1, labels[0]) != derive_seed(0, labels[0])  # --seed still matters
    # no hash() randomisation: another interpreter derives the same seed (a --resume in a new process)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from servescope.workload.seeds import derive_seed;print(derive_seed(0, {labels[0]!r}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(out.stdout) == seeds[0]


def test_template_hit_rate_is_the_overhead_share() -> None:
    # 10 prompts of 1,000 tokens: 24 template/anchor tokens each + 976 content tokens
    assert template_hit_rate(24, np.full(10, 976)) == pytest.approx(0.024)
    assert template_hit_rate(0, np.full(3, 100)) == 0.0
    assert template_hit_rate(5, np.array([], dtype=np.int64)) == 0.0


def test_a_ceiling_flags_only_a_warmer_cache() -> None:
    server = {"prefix_cache_hit_rate": 0.0, "metrics_used": {"prefix_hits": "vllm:prefix_cache_hits"}}
    # 16-token prompts with an 8-token template: designed 50%, a block-granular cache hits nothing
    assert prefix_cache_note(0.5, server, at_most=True) is None
    assert prefix_cache_note(0.5, server) is not None  # an exact design (shared-prefix) still says so
    warm = prefix_cache_note(0.008, {**server, "prefix_cache_hit_rate": 0.984}, at_most=True)
    assert warm is not None and "achieved 98.4%" in warm and "--reset-cache" in warm
    assert prefix_cache_note(0.008, {**server, "prefix_cache_hit_rate": 0.05}, at_most=True) is None  # within 5


def test_reset_plan_per_engine() -> None:
    assert plan_reset("vllm", emulated=True).paths == (EMULATOR_RESET_PATH,)
    vllm = plan_reset("vllm", emulated=False)
    assert vllm.paths == ("/reset_prefix_cache",) and "VLLM_SERVER_DEV_MODE" in (vllm.hint or "")
    assert plan_reset("sglang", emulated=False).paths == ("/flush_cache",)
    trt = plan_reset("trtllm", emulated=False)
    assert trt.paths == () and trt.note and "no endpoint" in trt.note
    unknown = plan_reset(None, emulated=False)
    assert unknown.paths == CACHE_RESET_PATHS == ("/reset_prefix_cache", "/flush_cache")


def test_reset_of_an_engine_without_an_endpoint_sends_nothing_and_says_so() -> None:
    doc = asyncio.run(reset_prefix_cache("http://127.0.0.1:9/v1", {}, plan_reset("tgi", emulated=False)))
    assert doc["ok"] is False and doc["attempts"] == [] and "tgi offers no endpoint" in doc["note"]


def test_unknown_engine_tries_each_endpoint_until_one_answers() -> None:
    async def flushed(_: web.Request) -> web.Response:
        return web.Response(text="Cache flushed.\n")

    async def main() -> dict:
        app = web.Application()
        app.router.add_post("/flush_cache", flushed)
        async with serving(app) as url:
            return await reset_prefix_cache(f"{url}/v1", {}, plan_reset(None, emulated=False))

    doc = asyncio.run(main())
    assert doc["ok"] is True and doc["path"] == "/flush_cache"
    assert [(a["path"], a["status"]) for a in doc["attempts"]] == [("/reset_prefix_cache", 404), ("/flush_cache", 200)]
    assert doc["attempts"][1]["body_head"] == "Cache flushed.\n"


def test_a_reset_refused_while_requests_leave_is_retried_until_they_have_left() -> None:
    """vLLM (and the emulator) answer 409 while requests still run or wait: the previous run's last
    requests can leave the engine just after their last token reached the client. The reset is retried
    every 0.1 s until it succeeds, and gives up with a note once `busy_wait_s` has passed."""
    calls = {"n": 0}

    async def reset(_: web.Request) -> web.Response:
        calls["n"] += 1
        if calls["n"] <= 3 or calls.get("always"):
            return web.json_response({"detail": "Prefix cache reset failed."}, status=409)
        return web.Response(status=200)

    async def main(busy_wait_s: float) -> dict:
        app = web.Application()
        app.router.add_post("/reset_prefix_cache", reset)
        async with serving(app) as url:
            return await reset_prefix_cache(
                f"{url}/v1", {}, plan_reset("vllm", emulated=False), busy_wait_s=busy_wait_s
            )

    doc = asyncio.run(main(10.0))
    assert doc["ok"] is True and calls["n"] == 4
    (attempt,) = doc["attempts"]
    assert attempt["status"] == 200 and attempt["busy_retries"] == 3 and attempt["elapsed_ms"] >= 300
    calls.update(n=0, always=1)
    doc = asyncio.run(main(0.35))
    assert doc["ok"] is False and doc["attempts"][0]["status"] == 409 and 2 <= calls["n"] <= 4
    assert "HTTP 409" in doc["note"] and "warm cache" in doc["note"]


def test_unreachable_or_refusing_reset_gives_a_note() -> None:
    doc = asyncio.run(reset_prefix_cache("http://127.0.0.1:9/v1", {}, plan_reset("vllm", emulated=False)))
    assert doc["ok"] is False and "error" in doc["attempts"][0]
    assert "not reset" in doc["note"] and "VLLM_SERVER_DEV_MODE" in doc["note"]


def test_block_pool_drop_cached_frees_unreferenced_blocks_only() -> None:
    pool = BlockPool(10)
    pool.alloc(3)
    for h in (11, 12, 13):
        pool.name(h)
    pool.release([11, 12], private=0)  # 11, 12 cached and evictable; 13 still held
    assert (pool.cached_prefix([11, 12], 2), pool.evictable([11, 12])) == (2, 2)
    assert pool.drop_cached() == 2
    assert pool.cached_prefix([11, 12], 2) == 0
    assert pool.free == 9 and pool.used == 1 and 13 in pool.table
