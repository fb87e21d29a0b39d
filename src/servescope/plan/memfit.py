"""The plan's inputs and the memory fit: `PlanArgs`, the deployment they resolve to
(`deploy.deployment.Deployment`, the same object the emulator serves), and the fit table.

`plan.command` prints what these return.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.table import Table

from servescope.deploy.deployment import Deployment
from servescope.sim.catalog.gpus import GPUSpec
from servescope.sim.catalog.models import ModelSpec, params_b
from servescope.sim.memory.fit import FitResult
from servescope.sim.memory.kvsize import kv_bytes_per_token
from servescope.sim.placement import Layout

__all__ = ["GIB", "PlanArgs", "to_deployment", "resolve_layout", "engine_base", "fit_table", "fit_rows"]

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
    gpu_memory_utilization: float | None = None  # default: the engine's (0.9 for vLLM)
    max_num_seqs: int | None = None  # default: the engine's
    max_num_batched_tokens: int | None = None  # default: the engine's (see Deployment.limits)
    out: str | None = None
    json_out: str | None = None  # "-": JSON on stdout instead of tables; a path: write plan.json there
    input_len: int = 1024
    output_len: int = 256
    concurrency: tuple[int, ...] = ()  # what-if points, closed loop
    request_rate: tuple[float, ...] = ()  # what-if points, Poisson arrivals per second (inf: all at once)
    prefix_len: int = 0  # what-if: tokens every prompt shares before its own input_len
    num_requests: int | None = None
    calibrate: str | None = None
    predict_concurrency: tuple[int, ...] = field(default_factory=tuple)


def to_deployment(args: PlanArgs, model: ModelSpec | None = None, gpu: GPUSpec | None = None) -> Deployment:
    """The deployment the flags describe, with what they leave out filled in (TP within a node, PP across
    nodes, DP 1, EP over tp*dp for DP attention on MoE models, the engine's limits)."""
    rest = {
        k: v
        for k, v in (
            ("max_num_seqs", args.max_num_seqs),
            ("max_num_batched_tokens", args.max_num_batched_tokens),
            ("gpu_memory_utilization", args.gpu_memory_utilization),
        )
        if v is not None
    }
    return Deployment.build(
        model=model or args.model,
        gpu=gpu or args.gpu,
        gpus=args.gpus,
        nodes=args.nodes,
        engine=args.engine,
        tp=args.tp,
        pp=args.pp,
        dp=args.dp,
        ep=args.ep,
        quant=args.quant,
        kv_dtype=args.kv_dtype,
        max_model_len=args.max_model_len,
        **rest,
    )


def resolve_layout(args: PlanArgs, model: ModelSpec, gpu: GPUSpec) -> Layout:
    """The parallel layout of `to_deployment(args)`."""
    return to_deployment(args, model, gpu).layout


def engine_base(engine: str) -> str:
    return engine.split("-")[0]


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def fit_rows(
    model: ModelSpec, layout: Layout, res: FitResult, *, seq_lens: Sequence[int]
) -> list[tuple[str, str, str]]:
    """The fit as (quantity, value, how) rows."""
    rows: list[tuple[str, str, str]] = []
    moe = f", MoE {model.n_routed_experts} experts" if model.is_moe else ""
    rows.append(
        (
            "parameters",
            f"{params_b(model.params_total)} ({params_b(model.params_active)} active)",
            f"{model.attention.upper()}{moe}",
        )
    )
    bd = ", ".join(f"{k} {v / GIB:.2f}" for k, v in res.weights_breakdown.items() if v >= 0.01 * GIB)
    rows.append(("weights per GPU", _gib(res.weights_per_gpu_bytes), f"{layout.quant}: {bd} GiB"))
    rows.append(("engine reserve per GPU", _gib(res.reserve_per_gpu_bytes), "activation peak + non-torch + graphs"))
    rows.append(
        ("usable per GPU", _gib(res.usable_per_gpu_bytes), f"{layout.gpu.memory_gib:.1f} GiB {layout.gpu.name.upper()}")
    )
    whole = kv_bytes_per_token(model, layout.kv_dtype_bytes)
    how = (
        "MLA latent: replicated on every TP rank"
        if model.attention == "mla"
        else f"GQA: {model.kv_heads} KV heads split over min(tp, kv_heads) = {min(layout.tp, model.kv_heads)}"
    )
    if layout.pp > 1:
        how += f"; layers split over PP{layout.pp}"
    if model.sliding_layers:
        full = model.layers - model.sliding_layers
        how += f"; {model.sliding_layers} of {model.layers} layers slide over {model.sliding_window} tokens: " + (
            f"a token costs the {full} full layers, each request holds {res.seq_overhead_tokens} more"
            if res.seq_overhead_tokens
            else "the engine's sliding-window pool"
        )
    rows.append(
        (
            "KV bytes per token",
            f"{res.kv_bytes_per_token_per_gpu:,} per GPU",
            f"{whole:,} whole model ({layout.kv_dtype}); {how}",
        )
    )
    rows.append(("KV cache per GPU", _gib(res.kv_bytes_per_gpu), "usable - weights - reserve"))
    reps = f" x {res.replicas} DP replicas" if res.replicas > 1 else ""
    rows.append(("KV capacity", f"{res.kv_tokens:,} tokens{reps}", "per model replica, whole blocks"))
    for n in seq_lens:
        rows.append(
            (
                f"concurrent seqs of {n:,}",
                f"{res.max_concurrent_seqs(n):,}",
                "all replicas" + (f", {res.seq_overhead_tokens} window tokens each" if res.seq_overhead_tokens else ""),
            )
        )
    rows.append(("fits", "yes" if res.fits else "NO", res.reason))
    return rows


def fit_table(model: ModelSpec, layout: Layout, res: FitResult, *, engine: str, seq_lens: Sequence[int]) -> Table:
    t = Table(title=f"{model.name} on {layout.describe()} ({engine})", show_header=True)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("how", overflow="fold")
    for row in fit_rows(model, layout, res, seq_lens=seq_lens):
        t.add_row(*row)
    return t
