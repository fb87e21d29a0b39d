"""Engine profiles: YAML data in `deploy/profiles/` -> an `EngineConfig` plus output-length settings.

A profile names a deployment (model from `sim.catalog`, GPU, parallelism, quantization, engine
memory accounting) and the engine's scheduler settings, plus the calibration of the step-time model
(efficiencies and overheads) with the published measurements it was fitted to, in YAML comments.
KV capacity comes from `sim.memory.fit` unless the profile sets `kv_tokens`. A profile may instead
give the step-cost coefficients directly under `cost:` (the `tiny` test profile does).

Keys (all optional except `name`)::

    name, description, served_model_name, max_model_len
    model, gpu, gpus, tp, pp, dp, ep, quant, kv_dtype, engine, gpu_memory_utilization
    block_size, max_num_seqs, max_num_batched_tokens, enable_prefix_caching, chunked_prefill
    kv_tokens                    # override the memory model
    efficiency: {memory, compute}
    overhead:   {step_s, layer_s, seq_s, token_s}
    cost:       {<StepCost field>: value, ...}   # explicit coefficients, overriding derived ones
    output:     {eos_mean_tokens, default_max_tokens, reasoning_tokens_mean, reasoning_tokens_min}
    extends:    BASE                              # start from another profile (one-level merge)

`profile_from_dict` is pure; `deploy.loader.load_profile` reads the packaged YAML (or a path to one).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from servebench.errors import ConfigError
from servebench.sim.config import EngineConfig
from servebench.sim.steptime import StepCost

__all__ = ["Profile", "profile_from_dict", "cost_from_catalog"]

_COST_FIELDS = frozenset(f.name for f in fields(StepCost))


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


def cost_from_catalog(data: Mapping[str, Any]) -> tuple[StepCost, int | None, int]:
    """Derive step-cost coefficients and KV capacity (tokens) from the catalogue and memory model."""
    from servebench.sim import catalog, memory  # deferred: only catalogue-backed profiles need them

    spec = data["model"]  # a catalogue name, or a ModelSpec its caller resolved (e.g. from a config.json)
    model = spec if isinstance(spec, catalog.ModelSpec) else catalog.get_model(str(spec))
    gpu = catalog.get_gpu(str(data.get("gpu", "h100")))
    tp, pp, dp = int(data.get("tp", 1)), int(data.get("pp", 1)), int(data.get("dp", 1))
    gpus = int(data.get("gpus", tp * pp * dp))
    quant = str(data.get("quant", model.default_quant))
    layout = memory.Layout(gpu=gpu, gpus_per_node=gpus, tp=tp, pp=pp, dp=dp, ep=int(data.get("ep", 1)),
                           quant=quant, kv_dtype=str(data.get("kv_dtype", "bf16")))
    engine = str(data.get("engine", "vllm"))
    max_model_len = int(data.get("max_model_len", 8192))
    breakdown = memory.weight_bytes_breakdown_per_gpu(model, layout, engine=engine)
    routed = float(breakdown.get("routed_experts", 0))
    dense = float(sum(breakdown.values())) - routed
    # Attention FLOPs per query token per context token. GQA: QK^T and PV, 2 x 2 x head_dim per head.
    # MLA decode (absorbed): QK over kv_lora_rank + rope dims, PV over kv_lora_rank.
    if model.attention == "mla":
        per_head = 2 * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
    else:
        per_head = 4 * model.head_dim
    attn = per_head * model.heads * model.layers / (tp * pp)
    peak = {"bf16": gpu.bf16_flops, "fp8": gpu.fp8_flops, "fp8-ffn": gpu.fp8_flops}.get(quant, gpu.int4_flops)
    eff = data.get("efficiency") or {}
    ovh = data.get("overhead") or {}
    cost = StepCost(
        dense_weight_bytes=dense,
        kv_bytes_per_token=float(memory.kv_bytes_per_token_per_gpu(model, layout)),
        flops_per_token=2.0 * model.params_active / (tp * pp),
        hbm_bytes_per_s=gpu.hbm_bytes_per_s,
        flops_per_s=peak,
        attn_flops_per_token_ctx=float(attn),
        routed_expert_bytes=routed / model.n_routed_experts if model.is_moe else 0.0,
        n_experts=model.n_routed_experts,
        experts_per_token=model.experts_per_token,
        layers=model.layers,
        mem_efficiency=float(eff.get("memory", 0.8)),
        compute_efficiency=float(eff.get("compute", 0.5)),
        step_overhead_s=float(ovh.get("step_s", 0.0)),
        layer_overhead_s=float(ovh.get("layer_s", 0.0)),
        seq_overhead_s=float(ovh.get("seq_s", 0.0)),
        token_overhead_s=float(ovh.get("token_s", 0.0)),
    )
    kv_tokens: int | None = None
    if data.get("kv_tokens") is None:
        res = memory.fit(model, layout, max_model_len=max_model_len,
                         gpu_memory_utilization=float(data.get("gpu_memory_utilization", 0.9)), engine=engine,
                         max_num_batched_tokens=data.get("max_num_batched_tokens"), suggest=False)
        if not res.fits:
            raise ConfigError(f"profile {data.get('name')}: {res.reason}")
        kv_tokens = res.kv_tokens
    return cost, kv_tokens, layout.gpus


def _cost_values(raw: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if k in _COST_FIELDS:
            out[k] = int(v) if k in ("n_experts", "experts_per_token", "layers") else float(v)
    return out


def profile_from_dict(data: Mapping[str, Any]) -> Profile:
    """Build a profile from parsed YAML (pure, apart from the catalogue lookups)."""
    if "name" not in data:
        raise ConfigError("profile: 'name' is required")
    name = str(data["name"])
    gpus = int(data.get("gpus", 1))
    kv_tokens = data.get("kv_tokens")
    if "model" in data:
        cost, fitted, gpus = cost_from_catalog(data)
        if kv_tokens is None:
            kv_tokens = fitted
    else:
        try:
            cost = StepCost(**_cost_values(data.get("cost") or {}))
        except TypeError:
            raise ConfigError(f"profile {name}: needs a catalogue 'model' or a complete 'cost' block") from None
    extra = data.get("cost") or {}
    unknown = set(extra) - _COST_FIELDS
    if unknown:
        raise ConfigError(f"profile {name}: unknown cost keys {sorted(unknown)}")
    if extra and "model" in data:
        cost = StepCost(**{**{f: getattr(cost, f) for f in _COST_FIELDS}, **_cost_values(extra)})
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
            max_model_len=int(data.get("max_model_len", 8192)),
            enable_prefix_caching=bool(data.get("enable_prefix_caching", True)),
            chunked_prefill=bool(data.get("chunked_prefill", True)),
        )
    except ValueError as e:
        raise ConfigError(f"profile {name}: {e}") from None
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
