"""Weight bytes: bytes per parameter under each quantization, a checkpoint's size, and the weights the
most loaded GPU of a layout holds, by part. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping

from servescope.errors import ConfigError
from servescope.sim.catalog.models import ModelSpec
from servescope.sim.memory.accounting import engine_profile
from servescope.sim.placement import Layout

__all__ = [
    "bytes_per_param",
    "checkpoint_bytes",
    "weight_bytes_breakdown_per_gpu",
    "routed_bytes",
    "weight_bytes_per_gpu",
]

# NVIDIA GPUs without FP4 tensor cores, where vLLM repacks MXFP4 experts for weight-only kernels
# (EngineProfile.mxfp4_moe_repack); Blackwell runs them as stored, ROCm has its own path (not modelled).
_REPACK_MXFP4_GPUS = frozenset({"a100", "h100", "h200"})


def bytes_per_param(quant: str, part: str, model: ModelSpec) -> float:
    """Bytes per parameter of one model part under a quantization scheme, following the real checkpoints.

    bf16: 2. fp8 (DeepSeek-V3, llm-compressor FP8): every linear FP8 + an FP32 scale per 128x128 block;
    embeddings, lm_head, router, norms BF16. fp8 on a model whose published FP8 checkpoint is FFN-only
    (Meta Llama-3.1-405B-FP8, fbgemm row-wise scales), or quant "fp8-ffn": FFN FP8, attention BF16.
    awq: 4-bit weights, group 128, FP16 scale + 4-bit zero per group: 0.5 + 2.5/128. int4 (GPTQ-style
    symmetric): 0.5 + 2/128. mxfp4 (gpt-oss's published checkpoints: the MoE weights in MXFP4, the
    rest BF16, per OpenAI's gpt-oss model card): FFN/expert weights 0.5 + 1/32 (one E8M0 scale byte per
    block of 32 FP4 values, OCP Microscaling Formats spec v1.0), attention BF16. nvfp4 (NVIDIA's
    ModelOpt FP4 checkpoints, e.g. DeepSeek-R1-FP4): every linear 0.5 + 1/16 (one FP8 E4M3 scale per
    16 values; the per-tensor FP32 scale is negligible). Embeddings, lm_head, router, norms stay BF16
    in every scheme.
    """
    if quant == "bf16" or part in ("embedding", "router", "replicated_norms"):
        return 2.0
    ffn_parts = ("dense_ffn", "shared_experts", "routed_experts")
    if quant in ("fp8", "fp8-ffn"):
        if part == "attention" and (quant == "fp8-ffn" or model.fp8_scheme == "ffn"):
            return 2.0
        if part in ffn_parts and (quant == "fp8-ffn" or model.fp8_scheme == "ffn"):
            return 1.0 + 4.0 / model.hidden  # row-wise FP32 scale
        return 1.0 + 4.0 / (128 * 128)
    if quant == "mxfp4":
        return 0.5 + 1.0 / 32 if part in ffn_parts else 2.0
    if quant == "nvfp4":
        return 0.5 + 1.0 / 16
    if quant == "awq":
        return 0.5 + 2.5 / 128
    if quant == "int4":
        return 0.5 + 2.0 / 128
    raise ConfigError(f"unknown quant {quant!r}")


def checkpoint_bytes(model: ModelSpec, quant: str, *, include_mtp: bool = True) -> int:
    """Whole-model weight bytes in `quant` (what the checkpoint weighs, scales included)."""
    b = model.weight_params_breakdown()
    total = sum(n * bytes_per_param(quant, part, model) for part, n in b.items())
    if include_mtp:
        total += model.mtp_params * bytes_per_param(quant, "routed_experts", model)
    return int(total)


def weight_bytes_breakdown_per_gpu(model: ModelSpec, layout: Layout, *, engine: str = "vllm") -> dict[str, int]:
    """Weight bytes on the most loaded GPU, by part.

    TP splits attention heads, dense FFN, shared experts and the vocab (embedding and lm_head).
    Routed experts are split over all tp x dp ranks (EP ranks x MoE TP slices; see `Layout`).
    Attention and the rest are per DP rank (split by TP only). Replicated on every TP rank:
    MLA's q_a/kv_a projections, the router, norms; GQA K/V projections past kv_heads.
    PP: the worst stage holds ceil(layers/pp) layers and one of embedding / lm_head (both when pp = 1).
    """
    q, tp, pp = layout.quant, layout.tp, layout.pp
    share = math.ceil(model.layers / pp) / model.layers
    attn_shard, attn_rep = model.attention_params_per_layer()
    if model.attention == "gqa":
        kv_proj = 2 * model.hidden * model.kv_heads * model.head_dim
        kv_per_gpu = kv_proj / min(tp, model.kv_heads)
        attn_gpu = (attn_shard - kv_proj) / tp + kv_per_gpu
    else:
        attn_gpu = attn_shard / tp
    b = model.weight_params_breakdown()
    expert_div = tp * layout.dp  # = ep x moe_tp
    emb_one = model.vocab * model.hidden
    emb_params = (emb_one * (1 if model.tie_embeddings else 2)) if pp == 1 else emb_one
    out = {
        "attention": attn_gpu * model.layers * share * bytes_per_param(q, "attention", model),
        "attention_replicated": attn_rep * model.layers * share * bytes_per_param(q, "attention", model),
        "dense_ffn": b["dense_ffn"] * share / tp * bytes_per_param(q, "dense_ffn", model),
        "shared_experts": b["shared_experts"] * share / tp * bytes_per_param(q, "shared_experts", model),
        "routed_experts": b["routed_experts"] * share / expert_div * bytes_per_param(q, "routed_experts", model),
        "router": b["router"] * share * 2.0,
        "embedding": emb_params / tp * 2.0,
    }
    prof = engine_profile(engine)
    if prof.mla_absorb_copies and model.attention == "mla":
        heads_gpu = model.heads / tp
        absorbed = model.q_lora_rank * heads_gpu * model.kv_lora_rank + heads_gpu * model.kv_lora_rank * model.hidden
        out["mla_absorbed"] = absorbed * model.layers * share * (1.0 if q == "fp8" else 2.0)
    if q == "mxfp4" and prof.mxfp4_moe_repack != 1.0 and layout.gpu.name in _REPACK_MXFP4_GPUS:
        out["mxfp4_repack"] = out["routed_experts"] * (prof.mxfp4_moe_repack - 1.0)
    if layout.load_mtp and model.mtp_params:
        out["mtp"] = model.mtp_params / (tp * pp) * bytes_per_param(q, "routed_experts", model)
    return {k: int(v) for k, v in out.items()}


def routed_bytes(breakdown: Mapping[str, int]) -> int:
    """The routed experts' bytes of a weight breakdown, as the MoE kernels read them (the engine's
    repacked MXFP4 form included); the step-time model reads only the experts a batch hits."""
    return breakdown.get("routed_experts", 0) + breakdown.get("mxfp4_repack", 0)


def weight_bytes_per_gpu(model: ModelSpec, layout: Layout, *, engine: str = "vllm") -> int:
    return sum(weight_bytes_breakdown_per_gpu(model, layout, engine=engine).values())
