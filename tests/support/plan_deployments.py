"""Deployments and measured points the plan tests share."""

from __future__ import annotations

from servescope.deploy.deployment import Deployment
from servescope.plan.calibrate import MeasuredPoint
from servescope.plan.memfit import PlanArgs, to_deployment
from servescope.sim.catalog.models import get_model

__all__ = ["awq_deployment", "llama_8b_h100", "measured_by"]


def awq_deployment() -> tuple[Deployment, object]:
    """DeepSeek-V3-AWQ on 8xH100 under vLLM 0.7 (the seed measurements' deployment), and its model."""
    args = PlanArgs(
        model="DeepSeek-V3-AWQ",
        gpu="h100",
        engine="vllm-0.7",
        max_model_len=8000,
        gpu_memory_utilization=0.95,
        max_num_seqs=128,
    )
    return to_deployment(args), get_model(args.model)


def llama_8b_h100(**kw: object) -> Deployment:
    """Llama-3.1-8B on one H100, with `kw` for Deployment.build."""
    return Deployment.build(model="Llama-3.1-8B", gpu="h100", gpus=1, **kw)  # type: ignore[arg-type]


def measured_by(dep: Deployment, knobs: object, concurrencies: tuple[int, ...]) -> list[MeasuredPoint]:
    """Points a deployment with other knobs than plan's 'measured' (the simulator's own answer, off by
    15% either way)."""
    from servescope.plan.whatif import engine_config, simulate_point

    cfg = engine_config(dep, knobs)  # type: ignore[arg-type]
    out = []
    for i, c in enumerate(concurrencies):
        p = simulate_point(cfg, concurrency=c, input_len=256, output_len=64, num_requests=4 * c + 4)
        # measurement noise, so that no one knob set fits every point exactly: +-15%, alternating
        f = 1.15 if i % 2 else 0.85
        out.append(MeasuredPoint(c, 256, 64, f * p.output_tokens_per_s, p.itl_ms_p50 / f))
    return out
