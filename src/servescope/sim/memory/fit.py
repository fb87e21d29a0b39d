"""Does a model fit a layout, and how many KV tokens are left (`fit`, `FitResult`)? When not, the
smallest layouts that do (`suggest_layouts`). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

from servescope.errors import ConfigError
from servescope.sim.catalog.gpus import GPUS, GPUSpec
from servescope.sim.catalog.models import ModelSpec
from servescope.sim.memory.accounting import engine_profile
from servescope.sim.memory.activations import reserve_bytes_per_gpu
from servescope.sim.memory.kvsize import kv_pool_bytes_per_token_per_gpu, kv_seq_overhead_tokens
from servescope.sim.memory.weights import checkpoint_bytes, weight_bytes_breakdown_per_gpu
from servescope.sim.placement import Layout

__all__ = ["FitResult", "fit", "candidate_layouts", "suggest_layouts"]

_GIB = 1 << 30


@dataclass(slots=True)
class FitResult:
    fits: bool
    weights_per_gpu_bytes: int
    reserve_per_gpu_bytes: int
    kv_bytes_per_gpu: int
    kv_bytes_per_token_per_gpu: int
    kv_tokens: int  # per model replica (what the engine logs as its KV cache size)
    replicas: int  # data-parallel replicas, each with its own KV pool
    usable_per_gpu_bytes: int
    max_model_len: int
    reason: str = ""
    suggestions: list[str] = field(default_factory=list)
    weights_breakdown: dict[str, int] = field(default_factory=dict)
    seq_overhead_tokens: int = 0  # pool tokens each request holds besides its context (`kv_seq_overhead_tokens`)

    def max_concurrent_seqs(self, seq_len: int) -> int:
        """Sequences of `seq_len` tokens whose KV fits at once, across all replicas."""
        if seq_len <= 0:
            raise ConfigError("seq_len must be positive")
        return (self.kv_tokens // (seq_len + self.seq_overhead_tokens)) * self.replicas


def fit(
    model: ModelSpec,
    layout: Layout,
    *,
    max_model_len: int,
    gpu_memory_utilization: float = 0.9,
    engine: str = "vllm",
    max_num_batched_tokens: int | None = None,
    suggest: bool = True,
) -> FitResult:
    """Does `model` fit `layout`, and how many KV tokens are left? When not, `suggestions` lists the
    smallest layouts that do (more nodes, a larger GPU, a smaller quantization)."""
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ConfigError("gpu_memory_utilization must be in (0, 1]")
    if max_model_len <= 0:
        raise ConfigError("max_model_len must be positive")
    prof = engine_profile(engine)
    breakdown = weight_bytes_breakdown_per_gpu(model, layout, engine=engine)
    weights = sum(breakdown.values())
    reserve = reserve_bytes_per_gpu(
        model, layout, max_model_len=max_model_len, engine=engine, max_num_batched_tokens=max_num_batched_tokens
    )
    mem = layout.gpu.memory_bytes
    if prof.util_semantics == "free":
        usable = mem
        kv_bytes = int((mem - weights - reserve) * gpu_memory_utilization)
    else:
        usable = int(mem * gpu_memory_utilization)
        kv_bytes = usable - weights - reserve
    per_tok = kv_pool_bytes_per_token_per_gpu(model, layout, engine=engine)
    overhead = kv_seq_overhead_tokens(model, engine=engine)
    block = prof.block_tokens
    kv_tokens = max(0, kv_bytes) // per_tok // block * block
    res = FitResult(
        fits=True,
        weights_per_gpu_bytes=weights,
        reserve_per_gpu_bytes=reserve,
        kv_bytes_per_gpu=max(0, kv_bytes),
        kv_bytes_per_token_per_gpu=per_tok,
        kv_tokens=kv_tokens,
        replicas=layout.dp,
        usable_per_gpu_bytes=usable,
        max_model_len=max_model_len,
        weights_breakdown=breakdown,
        seq_overhead_tokens=overhead,
    )
    g = _GIB
    if weights > usable:
        ckpt = checkpoint_bytes(model, layout.quant, include_mtp=False)
        mtp = (
            f" ({ckpt / 1e9:.0f} GB; {checkpoint_bytes(model, layout.quant) / 1e9:.0f} GB with the "
            f"{model.mtp_params / 1e9:.1f}B MTP module)"
            if model.mtp_params
            else f" ({ckpt / 1e9:.0f} GB)"
        )
        res.fits = False
        if prof.util_semantics == "free":  # the fraction applies to what is left after weights
            room = (
                f"only {mem / g:.1f} GiB per GPU exists (the KV fraction {gpu_memory_utilization:.2f} "
                f"applies to what is left after weights)"
            )
        else:
            room = f"only {usable / g:.1f} GiB per GPU is usable ({gpu_memory_utilization:.2f} x {mem / g:.1f} GiB)"
        res.reason = (
            f"{model.name} weights in {layout.quant}{mtp} need {weights / g:.1f} GiB per GPU over "
            f"{layout.describe()}, but {room}; {layout.gpus} GPUs hold "
            f"{layout.gpus * mem / g:.0f} GiB in all"
        )
    elif kv_bytes <= 0 or kv_tokens < max_model_len + overhead:
        res.fits = False
        extra = f" (+{overhead} tokens of sliding-window pages per request)" if overhead else ""
        res.reason = (
            f"after {weights / g:.1f} GiB weights and {reserve / g:.1f} GiB engine reserve, the KV cache "
            f"holds {kv_tokens:,} tokens, fewer than max_model_len {max_model_len:,}{extra}"
        )
    if not res.fits and suggest:
        res.suggestions = suggest_layouts(
            model, layout, max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization, engine=engine
        )
    return res


_SMALLER_QUANT = MappingProxyType(
    {
        "bf16": ("fp8", "awq"),
        "fp8": ("awq",),
        "fp8-ffn": ("fp8", "awq"),
        "awq": (),
        "int4": (),
        "mxfp4": (),
        "nvfp4": (),
    }
)


def candidate_layouts(model: ModelSpec, layout: Layout, gpus: tuple[GPUSpec, ...] = ()) -> list[Layout]:
    """Layouts to try when `layout` does not fit: more nodes of the same GPU (TP within a node, PP
    across nodes), one node of each larger GPU, and the same GPUs with a smaller quantization."""
    out: list[Layout] = []
    per_node = layout.gpus_per_node
    for nodes in (2, 3, 4):
        if nodes > layout.nodes:
            out.append(
                Layout(
                    gpu=layout.gpu,
                    gpus_per_node=per_node,
                    nodes=nodes,
                    tp=per_node,
                    pp=nodes,
                    quant=layout.quant,
                    kv_dtype=layout.kv_dtype,
                )
            )
    for g in gpus:
        if g.memory_bytes > layout.gpu.memory_bytes:
            out.append(
                Layout(
                    gpu=g, gpus_per_node=per_node, nodes=1, tp=per_node, quant=layout.quant, kv_dtype=layout.kv_dtype
                )
            )
    for q in _SMALLER_QUANT[layout.quant]:
        out.append(
            Layout(
                gpu=layout.gpu,
                gpus_per_node=per_node,
                nodes=layout.nodes,
                tp=layout.tp,
                pp=layout.pp,
                dp=layout.dp,
                ep=layout.ep,
                quant=q,
                kv_dtype=layout.kv_dtype,
            )
        )
    return out


def suggest_layouts(
    model: ModelSpec, layout: Layout, *, max_model_len: int, gpu_memory_utilization: float, engine: str, limit: int = 5
) -> list[str]:
    # Keep the smallest fitting layout of each kind: more nodes, a larger GPU (two), a smaller quant.
    quota = {"nodes": 1, "gpu": 2, "quant": 2}
    out: list[str] = []
    for cand in candidate_layouts(model, layout, tuple(GPUS.values())):
        kind = "quant" if cand.quant != layout.quant else "gpu" if cand.gpu != layout.gpu else "nodes"
        if quota[kind] == 0:
            continue
        r = fit(
            model,
            cand,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            engine=engine,
            suggest=False,
        )
        if r.fits:
            quota[kind] -= 1
            out.append(
                f"{cand.describe()}: {r.weights_per_gpu_bytes / _GIB:.1f} GiB weights per GPU, "
                f"{r.kv_tokens:,} KV tokens"
            )
    return out[:limit]
