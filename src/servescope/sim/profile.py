"""Profiles: what the emulator serves. An engine configuration plus output-length settings. Pure.

A profile is a saved deployment (`deploy.deployment.Deployment`: model, GPU, parallelism, engine,
limits) resolved to one `EngineConfig`, plus the output settings below. The deployment's step costs
come from `step_cost` here, with the calibration knobs of the one place that holds them
(`deploy.deployment.Deployment.knobs`): `servescope plan`'s what-if runs the very same engine
configuration on a virtual clock. A test-only profile may instead give the step-cost coefficients
directly under `cost:` (the made-up `tiny` does); `profile_from_dict` builds those.

Keys of a cost profile: name, description, served_model_name, max_model_len, block_size,
max_num_seqs, max_num_batched_tokens, max_prefill_tokens, enable_prefix_caching, chunked_prefill, kv_tokens,
first_token_s, frontend_s (`EngineConfig.first_token_s`, `.frontend_s`; a deployment profile takes
them from its knobs),
cost: {<StepCost field>: value},
output: {eos_mean_tokens, default_max_tokens, reasoning_tokens_mean, reasoning_tokens_min}.
Deployment keys are in `deploy/deployment.py`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from servescope.errors import ConfigError
from servescope.sim.catalog.gpus import GPUSpec
from servescope.sim.catalog.models import ModelSpec
from servescope.sim.config import EngineConfig
from servescope.sim.knobs import StepKnobs
from servescope.sim.placement import Layout
from servescope.sim.steptime import StepCost

__all__ = [
    "Profile",
    "profile_from_dict",
    "profile_with_engine",
    "step_cost",
    "comm_terms",
    "compute_peak",
    "linear_flops_per_token",
    "IB_BYTES_PER_S",
    "internode_collectives",
    "nvlink_domain",
]

_COST_FIELDS = frozenset(f.name for f in fields(StepCost))
_INT_COST_FIELDS = frozenset({"n_experts", "experts_per_token", "layers", "collectives", "internode_collectives"})


@dataclass(slots=True)
class Profile:
    """A loaded profile: what the emulator serves and how the engine behaves."""

    name: str
    served_model_name: str
    engine: EngineConfig
    description: str = ""
    eos_mean_tokens: float = 256.0  # mean output length when EOS is allowed (geometric)
    default_max_tokens: int = 1024  # max_tokens when the request gives none (capped by max_model_len)
    reasoning_tokens_mean: float = 0.0  # > 0: a reasoning model (chain of thought first)
    reasoning_tokens_min: int = 0
    gpus: int = 1
    gpu: str = ""

    @property
    def reasoning(self) -> bool:
        return self.reasoning_tokens_mean > 0

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len


def compute_peak(gpu: GPUSpec, quant: str) -> float:
    """Dense FLOP/s the linear layers of a `quant` model compute at on `gpu`: BF16 or FP8 tensor cores;
    FP4 (mxfp4, nvfp4) on FP4 tensor cores where the GPU has them (Blackwell), else dequantized to
    BF16; W4A16 (awq, int4) at the BF16 peak. The knob's efficiency applies to every format alike;
    only a W4A16 MoE's routed experts count more work (`linear_flops_per_token`)."""
    if quant in ("mxfp4", "nvfp4") and gpu.fp4_flops:
        return gpu.fp4_flops
    return {"bf16": gpu.bf16_flops, "fp8": gpu.fp8_flops, "fp8-ffn": gpu.fp8_flops}.get(quant, gpu.int4_flops)


# W4A16 routed experts: the fused MoE kernels (Marlin MoE, vLLM's moe_wna16 Triton kernel) dequantize in
# their inner loop for every token block, at a fifth of a BF16 GEMM's rate (a prior: no corpus point runs a
# W4A16 MoE). Dense W4A16 GEMMs do not take it (`linear_flops_per_token`).
_W4A16_MOE_EXPERT_RATE = 0.2


def linear_flops_per_token(model: ModelSpec, quant: str) -> float:
    """Work of one token's linear layers, whole model, in BF16-GEMM FLOPs at the knob's efficiency.

    2 x active parameters, for every format: where compute binds (a prompt's tokens, large batches)
    vLLM's AWQ method dequantizes the weight and runs an FP16 matmul from 256 tokens up
    (`AWQLinearMethod.apply`, FP16_MATMUL_HEURISTIC_CONDITION), and on Ampere and later it loads AWQ and
    GPTQ checkpoints on Marlin (awq_marlin / gptq_marlin), which multiplies on FP16 tensor cores after
    dequantizing in registers; below that decode is bound by reading the 4-bit weights, which the weight
    bytes price. The routed experts of a W4A16 MoE count 1 / `_W4A16_MOE_EXPERT_RATE` times theirs.
    (Until 2026-11-28 every W4A16 FLOP, attention's included, ran at 0.2 of the efficiency: the
    Qwen2.5-72B AWQ/GPTQ runs on two A100s were predicted 23-64% slow, the more the longer the prompt,
    where the same table's BF16 runs on four were 0-18% off; no weight format touches attention, whose
    FLOPs are BF16 activations on FlashAttention.)"""
    flops = 2.0 * model.params_active
    if quant in ("awq", "int4") and model.is_moe:
        routed = model.routed_active_params()
        flops += 2.0 * routed * (1.0 / _W4A16_MOE_EXPERT_RATE - 1.0)
    return flops


# One 400 Gb/s ConnectX-7 NIC per GPU (DGX H100 reference architecture), counted both ways as the
# catalogue counts NVLink's 900 GB/s.
IB_BYTES_PER_S = 100e9


def comm_terms(model: ModelSpec, layout: Layout) -> tuple[float, int, float]:
    """Collectives of one step per GPU: (bytes sent per token, collective calls per step, expert-side
    tokens per local token). TP all-reduce: two per layer of `hidden` BF16 values, a ring moving
    2 (n - 1) / n of the message per rank; across nodes NCCL reduces within each node over NVLink
    first and sends only its 1/g share over the network (hierarchical ring/tree: NCCL 2.4, NVIDIA blog
    2019): 2 (g - 1) / g M on NVLink plus 2 (k - 1) / k M / g on the NIC for k nodes of g GPUs, the
    NIC bytes counted in NVLink-time. DP attention with EP: an all-to-all dispatch (FP8) and combine
    (BF16) of each token's top-k hidden vectors per MoE layer, and the experts see every DP rank's
    tokens. The same terms for plan, the emulator and the validation."""
    tp, dp, ep = layout.tp, layout.dp, layout.ep
    g = min(nvlink_domain(layout), tp * dp) if tp * dp > 1 else 1
    comm_bytes, collectives, moe_mult = 0.0, 0, 1.0
    if tp > 1:
        m = _tp_all_reduces(model) * model.hidden * 2.0  # bytes all-reduced per token per step
        if not _tp_spans_nodes(layout):
            comm_bytes += m * 2 * (tp - 1) / tp
        else:
            nodes = math.ceil(tp / g)
            comm_bytes += m * 2 * (g - 1) / g + (
                m / g * 2 * (nodes - 1) / nodes * layout.gpu.interconnect_bytes_per_s / IB_BYTES_PER_S
            )
        collectives += _tp_all_reduces(model)
    if dp > 1 and ep > 1 and model.is_moe:
        comm_bytes += model.moe_layers * model.experts_per_token * model.hidden * 3.0 * (ep - 1) / ep
        collectives += 2 * model.moe_layers
        moe_mult = float(dp)
    return comm_bytes, collectives, moe_mult


def internode_collectives(model: ModelSpec, layout: Layout) -> int:
    """Of `comm_terms`' collective calls per step, those that span nodes: every TP all-reduce when the
    TP group is wider than its NVLink fabric (`nvlink_domain`: a node, or a rack-scale system). (DP
    attention's all-to-all across nodes keeps the intra-node latency: DeepEP's kernels are not NCCL's
    all-reduce, and no figure here prices them.)"""
    return _tp_all_reduces(model) if _tp_spans_nodes(layout) else 0


def _tp_all_reduces(model: ModelSpec) -> int:
    """TP all-reduces per step: two per layer, after attention and after the MLP (Megatron-style)."""
    return 2 * model.layers


def nvlink_domain(layout: Layout) -> int:
    """GPUs one scale-up fabric joins: the node's, or a rack-scale system's across its hosts (GB200 NVL72:
    72 GPUs on trays of four, `GPUSpec.nvlink_domain`)."""
    return max(layout.gpus_per_node, layout.gpu.nvlink_domain)


def _tp_spans_nodes(layout: Layout) -> bool:
    """Whether the TP group's all-reduces cross the network: it is wider than the NVLink fabric."""
    return layout.tp > nvlink_domain(layout)


def step_cost(model: ModelSpec, layout: Layout, knobs: StepKnobs, *, engine: str = "vllm") -> StepCost:
    """Step-cost coefficients of one deployment: weights, KV and FLOPs per GPU from the catalogue and
    the memory model, efficiencies and overheads from `knobs`."""
    from servescope.sim.memory import kvsize, weights  # deferred: keeps the profile module light for cost-only profiles

    breakdown = weights.weight_bytes_breakdown_per_gpu(model, layout, engine=engine)
    routed = float(weights.routed_bytes(breakdown))
    dense = float(sum(breakdown.values())) - routed
    tp, pp = layout.tp, layout.pp
    # Attention FLOPs per query token per context token. GQA: QK^T and PV, 2 x 2 x head_dim per head.
    # MLA decode (absorbed): QK over kv_lora_rank + rope dims, PV over kv_lora_rank. MLA prompts: the
    # engines up-project the latent to per-head K and V and run multi-head attention, QK over the nope +
    # rope dims and PV over v_head_dim (DeepSeek-V2 report, section 2.1; vLLM's MLA backends'
    # _forward_prefill, SGLang's MHA extend path, TensorRT-LLM's context phase): 640 against 2,176 a pair.
    if model.attention == "mla":
        per_head = 2 * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
        prompt_per_head = 2 * (model.qk_nope_head_dim + model.qk_rope_head_dim) + 2 * model.v_head_dim
    else:
        per_head = prompt_per_head = 4 * model.head_dim
    attn = per_head * model.heads * model.layers / (tp * pp)
    prompt_attn = prompt_per_head * model.heads * model.layers / (tp * pp)
    gpu = layout.gpu
    quant = layout.quant
    peak = compute_peak(gpu, quant)
    # Attention multiplies activations by the KV cache, not by weights: at the KV dtype's tensor-core peak
    # whatever the weight format (BF16 FlashAttention/FlashInfer/FlashMLA by default; FP8 attention with
    # an FP8 KV cache, at the BF16 figure on a GPU without FP8 tensor cores, as the catalogue states it).
    attn_peak = compute_peak(gpu, "fp8" if layout.kv_dtype == "fp8" else "bf16")
    comm_bytes, collectives, moe_mult = comm_terms(model, layout)
    return StepCost(
        dense_weight_bytes=dense,
        kv_bytes_per_token=float(kvsize.kv_bytes_per_token_per_gpu(model, layout)),
        flops_per_token=linear_flops_per_token(model, quant) / (tp * pp),
        hbm_bytes_per_s=gpu.hbm_bytes_per_s,
        flops_per_s=peak,
        attn_flops_per_s=attn_peak,
        attn_flops_per_token_ctx=float(attn),
        prefill_attn_flops_per_pair=float(prompt_attn),
        routed_expert_bytes=routed / model.n_routed_experts if model.is_moe else 0.0,
        n_experts=model.n_routed_experts,
        experts_per_token=model.experts_per_token,
        layers=model.layers,
        mem_efficiency=knobs.mem_efficiency,
        compute_efficiency=knobs.compute_efficiency,
        step_overhead_s=knobs.step_overhead_s,
        layer_overhead_s=knobs.layer_overhead_s,
        prefill_layer_overhead_s=knobs.prefill_layer_overhead_s,
        seq_overhead_s=knobs.seq_overhead_s,
        comm_bytes_per_token=comm_bytes,
        comm_bytes_per_s=gpu.interconnect_bytes_per_s * knobs.comm_efficiency if collectives else 0.0,
        comm_prefill_bytes_per_s=gpu.interconnect_bytes_per_s * knobs.comm_prefill_efficiency if collectives else 0.0,
        collectives=collectives,
        collective_s=knobs.collective_s,
        internode_collectives=internode_collectives(model, layout),
        internode_collective_s=knobs.internode_collective_s,
        moe_token_multiplier=moe_mult,
    )


def _cost_values(raw: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if k in _COST_FIELDS:
            out[k] = int(v) if k in _INT_COST_FIELDS else float(v)
    return out


def profile_from_dict(data: Mapping[str, Any]) -> Profile:
    """Build a profile from a parsed cost profile (`cost:` coefficients and `kv_tokens`; pure).
    A deployment profile (one with `model:`) goes through `deploy.loader.load_profile`."""
    if "name" not in data:
        raise ConfigError("profile: 'name' is required")
    name = str(data["name"])
    if "model" in data:
        raise ConfigError(f"profile {name}: a deployment profile (model: ...) is built by deploy.loader.load_profile")
    extra = data.get("cost") or {}
    unknown = set(extra) - _COST_FIELDS
    if unknown:
        raise ConfigError(f"profile {name}: unknown cost keys {sorted(unknown)}")
    try:
        cost = StepCost(**_cost_values(extra))
    except TypeError:
        raise ConfigError(f"profile {name}: needs a catalogue 'model' or a complete 'cost' block") from None
    kv_tokens = data.get("kv_tokens")
    if kv_tokens is None:
        raise ConfigError(f"profile {name}: needs 'kv_tokens' or a catalogue 'model'")
    block = int(data.get("block_size", 16))
    try:
        engine = EngineConfig(
            cost=cost,
            kv_blocks=int(kv_tokens) // block,
            block_size=block,
            max_num_seqs=int(data.get("max_num_seqs", 256)),
            max_num_batched_tokens=int(data.get("max_num_batched_tokens", 8192)),
            max_prefill_tokens=int(data.get("max_prefill_tokens", 0)),
            max_model_len=int(data.get("max_model_len", 8192)),
            enable_prefix_caching=bool(data.get("enable_prefix_caching", True)),
            chunked_prefill=bool(data.get("chunked_prefill", True)),
            first_token_s=float(data.get("first_token_s", 0.0)),
            frontend_s=float(data.get("frontend_s", 0.0)),
        )
    except ValueError as e:
        raise ConfigError(f"profile {name}: {e}") from None
    return profile_with_engine(data, engine, gpus=int(data.get("gpus", 1)))


def profile_with_engine(data: Mapping[str, Any], engine: EngineConfig, *, gpus: int) -> Profile:
    """A profile around an engine configuration: the naming and output settings of `data`."""
    name = str(data["name"])
    out = data.get("output") or {}
    return Profile(
        name=name,
        served_model_name=str(data.get("served_model_name", name)),
        engine=engine,
        description=str(data.get("description", "")),
        eos_mean_tokens=float(out.get("eos_mean_tokens", 256)),
        default_max_tokens=int(out.get("default_max_tokens", 1024)),
        reasoning_tokens_mean=float(out.get("reasoning_tokens_mean", 0)),
        reasoning_tokens_min=int(out.get("reasoning_tokens_min", 0)),
        gpus=gpus,
        gpu=str(data.get("gpu", "")),
    )
