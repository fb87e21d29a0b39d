"""The step cost of a model on a layout (sim/profile.py): W4A16 weights' compute peak and efficiency."""

from __future__ import annotations

import pytest

from servescope.sim.catalog.gpus import get_gpu
from servescope.sim.knobs import DEFAULT_KNOBS, resolve_knobs
from servescope.sim.steptime import StepShape, step_time_s


def test_w4a16_dense_computes_at_the_knobs_efficiency_and_moe_experts_count_more() -> None:
    """AWQ / GPTQ int4: a dense model's prompt runs at the BF16 peak and the knob's efficiency, as BF16
    does (vLLM dequantizes to an FP16 matmul from 256 tokens, or runs Marlin), attention FLOPs included;
    with fewer weight bytes its prompt step is no slower than BF16's. A W4A16 MoE's routed experts count
    1 / 0.2 times their FLOPs (fused MoE kernels dequantize per token block), its other layers do not."""
    from servescope.sim.catalog.models import get_model
    from servescope.sim.placement import Layout
    from servescope.sim.profile import linear_flops_per_token, step_cost

    k = resolve_knobs(dict(DEFAULT_KNOBS), "vllm-v0", "ampere", "dense")
    a100 = get_gpu("a100")
    qwen = get_model("Qwen2.5-72B")
    cost = {q: step_cost(qwen, Layout(gpu=a100, gpus_per_node=2, tp=2, quant=q), k) for q in ("bf16", "awq", "int4")}
    for q in ("awq", "int4"):
        assert cost[q].flops_per_s == cost["bf16"].flops_per_s == a100.bf16_flops
        assert cost[q].compute_efficiency == cost["bf16"].compute_efficiency == k.compute_efficiency
        assert cost[q].flops_per_token == cost["bf16"].flops_per_token
        assert cost[q].attn_flops_per_token_ctx == cost["bf16"].attn_flops_per_token_ctx
        prompt = StepShape(prefill_seqs=1, prefill_tokens=8192, prefill_ctx_pairs=8192 * 8192 / 2)
        assert step_time_s(cost[q], prompt) <= step_time_s(cost["bf16"], prompt)
    v3 = get_model("DeepSeek-V3")
    routed = v3.experts_per_token * v3.expert_params() * v3.moe_layers
    assert linear_flops_per_token(v3, "awq") == pytest.approx(2.0 * v3.params_active + 2.0 * routed * 4.0)
    assert linear_flops_per_token(v3, "fp8") == linear_flops_per_token(v3, "bf16") == 2.0 * v3.params_active
