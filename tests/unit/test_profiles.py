"""Packaged profiles load, and each is the deployment plan simulates for the same flags."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import pytest

from servescope.deploy.loader import list_profiles, load_profile
from servescope.errors import ConfigError
from servescope.sim.profile import profile_from_dict
from servescope.sim.request import SimRequest
from servescope.sim.simulate import simulate


def test_all_profiles_load() -> None:
    names = list_profiles()
    for required in (
        "tiny",
        "tiny-reasoning",
        "llama-3.1-8b",
        "llama-3.1-70b",
        "deepseek-r1",
        "deepseek-r1-reasoning",
        "deepseek-v3-awq",
    ):
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
    from servescope.sim.catalog.gpus import get_gpu
    from servescope.sim.catalog.models import get_model
    from servescope.sim.memory.fit import fit as memory_fit
    from servescope.sim.placement import Layout

    layout = Layout(gpu=get_gpu("h200"), gpus_per_node=8, tp=8, quant="fp8")
    fit = memory_fit(
        get_model("DeepSeek-R1"),
        layout,
        max_model_len=32768,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=8192,
    )
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
        gaps += [y - x for x, y in itertools.pairwise(t) if a <= x < b]
    return toks / (b - a), statistics.median(gaps) * 1e3


@pytest.mark.parametrize(
    ("profile", "flags"),
    [
        ("llama-3.1-8b", {"model": "Llama-3.1-8B", "gpu": "h100", "gpus": 1, "max_num_seqs": 1024}),
        ("llama-3.1-70b", {"model": "Llama-3.1-70B", "gpu": "h100", "gpus": 4, "tp": 4}),
        ("deepseek-r1", {"model": "DeepSeek-R1", "gpu": "h200", "gpus": 8, "max_model_len": 32768}),
        (
            "deepseek-v3-awq",
            {
                "model": "DeepSeek-V3-AWQ",
                "gpu": "h100",
                "gpus": 8,
                "engine": "vllm-0.7",
                "max_model_len": 8000,
                "gpu_memory_utilization": 0.95,
                "max_num_seqs": 128,
            },
        ),
    ],
)
def test_a_profile_is_the_engine_plan_simulates_for_the_same_flags(profile: str, flags: dict) -> None:
    # One model, one answer: the emulator's profile and plan's deployment resolve to one engine
    # configuration (step costs, knobs, KV capacity, limits); no profile carries knobs of its own.
    from servescope.plan.memfit import PlanArgs, to_deployment

    dep = to_deployment(PlanArgs(**flags))
    assert load_profile(profile).engine == dep.engine_config()
    assert load_profile(profile).engine.kv_tokens == dep.fit().kv_tokens


def test_deepseek_v3_awq_kv_capacity_within_5pct_of_the_vllm_log() -> None:
    # seed 001's vLLM 0.7.3 log: 151,072 KV tokens (memory model, not pinned)
    assert load_profile("deepseek-v3-awq").engine.kv_tokens == pytest.approx(151_072, rel=0.05)


def test_saved_deployment_knobs_override_and_bad_keys(tmp_path: Path) -> None:
    f = tmp_path / "cal.yaml"
    f.write_text("extends: llama-3.1-8b\nname: mine\nknobs: {mem_efficiency: 0.4, step_overhead_s: 0.01}\n")
    p, base = load_profile(str(f)), load_profile("llama-3.1-8b")
    assert p.engine.cost.mem_efficiency == 0.4 and p.engine.cost.step_overhead_s == 0.01
    assert p.engine.cost.compute_efficiency == base.engine.cost.compute_efficiency
    assert p.engine.kv_blocks == base.engine.kv_blocks
    # the front end's time per request: the knob's own name, and the one it had as a step cost
    for key in ("frontend_s", "admit_overhead_s"):
        f.write_text(f"extends: llama-3.1-8b\nname: mine\nknobs: {{{key}: 0.007}}\n")
        assert load_profile(str(f)).engine.frontend_s == 0.007
    f.write_text("extends: llama-3.1-8b\nname: mine\nknobs: {bogus: 1}\n")
    with pytest.raises(ConfigError, match="unknown knobs"):
        load_profile(str(f))
    f.write_text("extends: llama-3.1-8b\nname: mine\nwarp_speed: 9\n")
    with pytest.raises(ConfigError, match="unknown keys"):
        load_profile(str(f))


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


def test_the_emulator_sets_aside_what_a_request_may_make() -> None:
    """The emulator tells the engine the most each request could make (`SimRequest.limit_tokens`, what
    TensorRT-LLM and SGLang reserve KV for): its max_tokens, else the context's room; the tokens it
    makes stop at a sampled EOS below that."""
    from servescope.emulator.stream import Stream, plan_output

    p = load_profile("tiny")
    cases = (({"max_tokens": 100}, 100), ({}, p.max_model_len - 16), ({"max_tokens": 7, "ignore_eos": True}, 7))
    for data, cap in cases:
        st = Stream()
        st.rid = "r1"
        plan_output(st, data, 16, p, seed=3)
        assert st.n_cap == cap
        assert 1 <= st.n_total <= st.n_cap
        assert (st.finish == "length") == (st.n_total == st.n_cap)
