"""Knob tables resolved for an engine family, GPU generation and architecture class (sim/knobs.py),
and the classes a fitted table lacks filled from the ones it has (plan/knobfit.py)."""

from __future__ import annotations

import pytest

from servescope.sim.knobs import resolve_knobs


def test_prompt_steps_launch_cost_is_per_family_times_class() -> None:
    """prefill_layer_overhead_s = pfl.eng.<family> x pfl.arch.<class> (dense: the family's alone); the
    prompt tokens' share of the link is the fitted factor of a generation without a published bus
    bandwidth and the measured one (`PINNED`, whatever a table says) of Hopper and Ampere; an unseen
    mla-moe-early class takes the fitted mla-moe factor, as for layer.arch."""
    from servescope.plan.knobfit import _with_unseen_families

    t = {
        "pfl.eng.sglang": 2e-4,
        "pfl.arch.mla-moe": 5.0,
        "pfl.arch.moe": 2.0,
        "comm.prefill": 0.3,
        "comm.prefill.gpu.cdna3": 0.6,
        "comm.prefill.gpu.hopper": 0.1,
    }
    assert resolve_knobs(t, "sglang", "hopper", "dense").prefill_layer_overhead_s == pytest.approx(2e-4)
    assert resolve_knobs(t, "sglang", "hopper", "moe").prefill_layer_overhead_s == pytest.approx(4e-4)
    assert resolve_knobs(t, "sglang", "hopper", "mla-moe").prefill_layer_overhead_s == pytest.approx(1e-3)
    assert resolve_knobs(t, "sglang", "cdna3", "dense").comm_prefill_efficiency == pytest.approx(0.6)
    assert resolve_knobs(t, "sglang", "hopper", "dense").comm_prefill_efficiency == pytest.approx(470 / 900)
    assert resolve_knobs(t, "sglang", "ampere", "dense").comm_prefill_efficiency == pytest.approx(240 / 600)
    assert resolve_knobs({}, "sglang", "blackwell", "dense").comm_prefill_efficiency == pytest.approx(0.45)
    assert _with_unseen_families(t)["pfl.arch.mla-moe-early"] == 5.0
    assert _with_unseen_families(t)["pfl.arch.mla-moe-late"] == 5.0


def test_compute_efficiency_is_per_family_generation_and_class() -> None:
    """compute_efficiency = comp.base x comp.gpu.<gen> x comp.eng.<family> [x comp.arch.<class> for an MoE
    class]; the DeepSeek release classes read mla-moe's factor where a table lacks theirs (resolve and
    the fit alike); the product stays clipped to 0.02..0.95; a MoE deployment's knob names carry it."""
    from servescope.plan.knobfit import _with_unseen_families
    from servescope.sim.knobs import knob_names_for

    t = {
        "comp.base": 0.5,
        "comp.gpu.hopper": 1.2,
        "comp.eng.vllm-v1": 0.8,
        "comp.arch.mla-moe": 0.5,
        "comp.arch.moe": 0.9,
        "comp.arch.mla-moe-late": 0.75,
    }
    assert resolve_knobs(t, "vllm-v1", "hopper", "dense").compute_efficiency == pytest.approx(0.48)
    assert resolve_knobs(t, "vllm-v1", "hopper", "moe").compute_efficiency == pytest.approx(0.432)
    assert resolve_knobs(t, "vllm-v1", "hopper", "mla-moe").compute_efficiency == pytest.approx(0.24)
    assert resolve_knobs(t, "vllm-v1", "hopper", "mla-moe-late").compute_efficiency == pytest.approx(0.36)
    assert resolve_knobs(t, "vllm-v1", "hopper", "mla-moe-early").compute_efficiency == pytest.approx(0.24)
    assert _with_unseen_families(t)["comp.arch.mla-moe-early"] == 0.5
    assert _with_unseen_families(t)["comp.arch.mla-moe-late"] == 0.75
    assert resolve_knobs({**t, "comp.arch.moe": 10.0}, "vllm-v1", "hopper", "moe").compute_efficiency == 0.95
    assert "comp.arch.moe" in knob_names_for("vllm-v1", "hopper", "moe")
    assert not any(n.startswith("comp.arch.") for n in knob_names_for("vllm-v1", "hopper", "dense"))


def test_engine_names_resolve_to_a_family_release_and_accounting() -> None:
    from servescope.errors import ConfigError
    from servescope.sim.knobs import ENGINE_VERSIONS, arch_class, parse_engine

    v07 = parse_engine("vllm-0.7")
    assert (v07.family, v07.version, v07.memory_engine, v07.stated) == ("vllm-v0", "0.7.3", "vllm-0.7", True)
    v08 = parse_engine("vllm-0.8")
    assert (v08.family, v08.version, v08.memory_engine) == ("vllm-v1", "0.8", "vllm")
    cur = parse_engine("sglang")
    assert cur.version == ENGINE_VERSIONS["sglang"] and not cur.stated
    # the release picks the kernel class: SGLang before 0.4.3 ran MLA on its early kernels
    assert arch_class(True, "mla", parse_engine("sglang-0.4").family, parse_engine("sglang-0.4").version) == (
        "mla-moe-early"
    )
    assert arch_class(True, "mla", "sglang", parse_engine("sglang-0.4.3").version) == "mla-moe"
    assert arch_class(True, "mla", "trtllm", parse_engine("trtllm-1.0").version) == "mla-moe-late"
    assert parse_engine("tensorrt-llm-0.17").base == "trtllm"
    for bad in ("tgi-2", "vllm-x", "vllm-1", "llama.cpp"):
        with pytest.raises(ConfigError):
            parse_engine(bad)
