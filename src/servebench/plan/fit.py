"""The plan's inputs and the memory fit: `PlanArgs`, the parallel layout they resolve to, the fit table,
and the profile-shaped deployment mapping the what-if and calibration simulate.

Pure over `sim/` (no I/O); `plan.command` prints what these return.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from rich.table import Table

from servebench.errors import ConfigError
from servebench.sim.catalog import GPUSpec, ModelSpec, params_b
from servebench.sim.memory import FitResult, Layout, kv_bytes_per_token

__all__ = ["GIB", "PlanArgs", "resolve_layout", "engine_base", "fit_table", "deployment_dict"]

GIB = 1 << 30


@dataclass(slots=True)
class PlanArgs:
    model: str
    gpu: str = "h100"
    gpus: int = 8  # per node
    nodes: int = 1
    quant: str | None = None  # default: the checkpoint's precision
    kv_dtype: str = "bf16"
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: int | None = None
    engine: str = "vllm"
    max_model_len: int = 8192
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int = 256
    out: str | None = None
    input_len: int = 1024
    output_len: int = 256
    concurrency: tuple[int, ...] = ()  # what-if points; empty: no what-if
    num_requests: int | None = None
    calibrate: str | None = None
    predict_concurrency: tuple[int, ...] = field(default_factory=tuple)


def resolve_layout(args: PlanArgs, model: ModelSpec, gpu: GPUSpec) -> Layout:
    """Fill in the parallelism the user left out: TP within a node, PP across nodes, EP off."""
    total = args.gpus * args.nodes
    tp, pp, dp = args.tp, args.pp, args.dp
    if tp is None and pp is None and dp is None:
        tp, pp, dp = args.gpus, args.nodes, 1
    if tp is None:
        tp = max(1, total // ((pp or 1) * (dp or 1)))
    if pp is None:
        pp = max(1, total // (tp * (dp or 1)))
    if dp is None:
        dp = max(1, total // (tp * pp))
    if engine_base(args.engine) not in ("vllm", "sglang", "trtllm"):
        raise ConfigError(f"unknown engine {args.engine!r}")
    return Layout(gpu=gpu, gpus_per_node=args.gpus, nodes=args.nodes, tp=tp, pp=pp, dp=dp, ep=args.ep or 1,
                  quant=args.quant or model.default_quant, kv_dtype=args.kv_dtype)


def engine_base(engine: str) -> str:
    return engine.split("-")[0]


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def fit_table(model: ModelSpec, layout: Layout, res: FitResult, *, engine: str, seq_lens: Sequence[int]) -> Table:
    t = Table(title=f"{model.name} on {layout.describe()} ({engine})", show_header=True)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("how", overflow="fold")
    t.add_row("parameters", f"{params_b(model.params_total)} ({params_b(model.params_active)} active)",
              f"{model.attention.upper()}{', MoE ' + str(model.n_routed_experts) + ' experts' if model.is_moe else ''}")
    bd = ", ".join(f"{k} {v / GIB:.2f}" for k, v in res.weights_breakdown.items() if v >= 0.01 * GIB)
    t.add_row("weights per GPU", _gib(res.weights_per_gpu_bytes), f"{layout.quant}: {bd} GiB")
    t.add_row("engine reserve per GPU", _gib(res.reserve_per_gpu_bytes), "activation peak + non-torch + graphs")
    t.add_row("usable per GPU", _gib(res.usable_per_gpu_bytes),
              f"{layout.gpu.memory_gib:.1f} GiB {layout.gpu.name.upper()}")
    whole = kv_bytes_per_token(model, layout.kv_dtype_bytes)
    how = ("MLA latent: replicated on every TP rank" if model.attention == "mla"
           else f"GQA: {model.kv_heads} KV heads split over min(tp, kv_heads) = {min(layout.tp, model.kv_heads)}")
    if layout.pp > 1:
        how += f"; layers split over PP{layout.pp}"
    t.add_row("KV bytes per token", f"{res.kv_bytes_per_token_per_gpu:,} per GPU",
              f"{whole:,} whole model ({layout.kv_dtype}); {how}")
    t.add_row("KV cache per GPU", _gib(res.kv_bytes_per_gpu), "usable - weights - reserve")
    reps = f" x {res.replicas} DP replicas" if res.replicas > 1 else ""
    t.add_row("KV capacity", f"{res.kv_tokens:,} tokens{reps}", "per model replica, whole blocks")
    for n in seq_lens:
        t.add_row(f"concurrent seqs of {n:,}", f"{res.max_concurrent_seqs(n):,}", "all replicas")
    t.add_row("fits", "yes" if res.fits else "NO", res.reason)
    return t



def deployment_dict(args: PlanArgs, model: ModelSpec, layout: Layout) -> dict[str, Any]:
    """The profile-shaped mapping `sim.profile` turns into an engine (what-if and calibration)."""
    return {
        "name": f"plan-{model.name}", "model": model, "gpu": layout.gpu.name,
        "gpus": layout.gpus, "tp": layout.tp, "pp": layout.pp, "dp": layout.dp, "ep": layout.ep,
        "quant": layout.quant, "kv_dtype": layout.kv_dtype, "engine": args.engine,
        "gpu_memory_utilization": args.gpu_memory_utilization, "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": max(8192, args.max_num_seqs),
        "chunked_prefill": args.engine != "vllm-0.7",
    }

