"""Packaged profiles load, and the calibrated one reproduces its published figures."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from servebench.deploy.loader import list_profiles, load_profile
from servebench.errors import ConfigError
from servebench.sim.profile import profile_from_dict
from servebench.sim.request import SimRequest
from servebench.sim.simulate import simulate


def test_all_profiles_load() -> None:
    names = list_profiles()
    for required in ("tiny", "tiny-reasoning", "llama-3.1-8b", "llama-3.1-70b", "deepseek-r1",
                     "deepseek-r1-reasoning", "deepseek-v3-awq"):
        assert required in names
    for n in names:
        p = load_profile(n)
        assert p.engine.kv_blocks > 0 and p.engine.max_model_len > 0
        assert p.engine.kv_tokens >= p.engine.max_model_len


def test_reasoning_profiles() -> None:
    r = load_profile("deepseek-r1-reasoning")
    base = load_profile("deepseek-r1")
    assert r.reasoning and not base.reasoning
    assert r.reasoning_tokens_mean == 1162
    assert r.engine == base.engine  # `extends` keeps the deployment


def test_kv_capacity_comes_from_memory_model() -> None:
    p = load_profile("deepseek-r1")
    from servebench.sim import catalog, memory

    layout = memory.Layout(gpu=catalog.get_gpu("h200"), gpus_per_node=8, tp=8, quant="fp8")
    fit = memory.fit(catalog.get_model("DeepSeek-R1"), layout, max_model_len=32768, gpu_memory_utilization=0.9,
                     max_num_batched_tokens=8192)
    assert p.engine.kv_tokens == fit.kv_tokens // 16 * 16


def _closed(profile: str, c: int, inp: int, out: int) -> tuple[float, float]:
    """Steady-state output tok/s and median ITL (ms) of a closed loop at concurrency c."""
    prof = load_profile(profile)
    reqs = [SimRequest(i, inp, out) for i in range(max(6 * c, 20))]
    run = simulate(prof.engine, reqs, concurrency=c)
    a, b = run.duration_s * 0.25, run.duration_s * 0.75
    toks = 0
    gaps: list[float] = []
    for r in reqs:
        t = run.token_times_s(r)
        toks += sum(1 for x in t if a <= x < b)
        gaps += [y - x for x, y in zip(t, t[1:]) if a <= x < b]
    return toks / (b - a), statistics.median(gaps) * 1e3


def test_deepseek_v3_awq_matches_the_seed_benchmark() -> None:
    # Seed: 8xH100, vLLM 0.7.3, input 1024 / output 256.
    tps1, _ = _closed("deepseek-v3-awq", 1, 1024, 256)
    assert 28 <= tps1 <= 38  # ~33 tok/s at concurrency 1
    _, itl15 = _closed("deepseek-v3-awq", 15, 1024, 256)
    assert 42 <= itl15 <= 58  # median ITL close to 50 ms at concurrency 15
    tps100, _ = _closed("deepseek-v3-awq", 100, 1024, 256)
    assert 540 <= tps100 <= 700  # ~620 tok/s around concurrency 100
    tps50, _ = _closed("deepseek-v3-awq", 50, 1024, 256)
    assert tps50 < tps100
    assert load_profile("deepseek-v3-awq").engine.kv_tokens == 151072


def test_tiny_is_fast_enough_for_pacing_tests() -> None:
    tps, itl = _closed("tiny", 256, 64, 256)
    assert tps >= 20_000
    assert 6 <= itl <= 12


def test_profile_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_profile("no-such-profile")
    with pytest.raises(ConfigError):
        profile_from_dict({"name": "x"})  # neither kv_tokens nor a model
    with pytest.raises(ConfigError):
        profile_from_dict({"name": "x", "kv_tokens": 1000, "cost": {"bogus": 1}})
    f = tmp_path / "mine.yaml"
    f.write_text("extends: tiny\nname: mine\nmax_num_seqs: 4\n")
    p = load_profile(str(f))
    assert p.name == "mine" and p.engine.max_num_seqs == 4
    assert p.engine.cost == load_profile("tiny").engine.cost
