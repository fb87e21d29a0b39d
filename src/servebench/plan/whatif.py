"""What-if on a virtual clock: the deployment's engine configuration (the one the emulator serves on the
wall clock) run closed loop with `sim.simulate`, and the table it prints as.

Pure (no I/O beyond the deployment's knob table): a model of a deployment, not a measurement.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.table import Table

from servebench.deploy.deployment import Deployment
from servebench.errors import ConfigError
from servebench.sim.config import EngineConfig
from servebench.sim.knobs import StepKnobs
from servebench.sim.request import SimRequest
from servebench.sim.simulate import SimRun, simulate, step_gaps, weighted_median

__all__ = ["WhatIfPoint", "engine_config", "simulate_point", "whatif", "whatif_table", "knobs_yaml",
           "point_dict"]


def knobs_yaml(knobs: StepKnobs) -> str:
    """A `knobs:` block for a saved deployment (emulate --profile FILE, or a profile YAML)."""
    import yaml

    vals = {k: float(f"{v:.4g}") for k, v in dataclasses.asdict(knobs).items()}
    return "# fitted by servebench plan --calibrate; add to a saved deployment (profile YAML)\n" + yaml.safe_dump(
        {"knobs": vals}, sort_keys=False)


@dataclass(frozen=True, slots=True)
class WhatIfPoint:
    concurrency: int
    input_len: int
    output_len: int
    output_tokens_per_s: float
    total_tokens_per_s: float
    requests_per_s: float
    ttft_ms_p50: float
    itl_ms_p50: float  # median gap between consecutive tokens, all requests
    e2e_ms_p50: float


def engine_config(dep: Deployment, knobs: StepKnobs | None = None) -> EngineConfig:
    """The engine of one replica of `dep` (with `knobs`, else the deployment's own)."""
    return dep.engine_config(knobs)


def simulate_point(cfg: EngineConfig, *, concurrency: int, input_len: int, output_len: int,
                   num_requests: int) -> WhatIfPoint:
    """Closed loop of `concurrency` on a virtual clock; throughput over the whole run (as a benchmark sees
    it); ITL is the median gap between consecutive tokens over all requests (as vLLM's bench reports).
    TTFT adds `cfg.first_token_s` (the knobs' first-token latency), as the validation does; throughput,
    ITL and end-to-end latency do not carry it (a response shorter than it ends with its first token,
    as the emulator's hold sends it)."""
    reqs = [SimRequest(id=i, prompt_len=input_len, max_tokens=output_len) for i in range(num_requests)]
    run = simulate(cfg, reqs, concurrency=concurrency)
    dur = run.duration_s or 1e-9
    ttft = [run.first_token_s(r) - r.arrival_s + cfg.first_token_s for r in reqs]
    e2e = [max(run.end_s(r) - r.arrival_s, t) for r, t in zip(reqs, ttft)]
    itl_s = _median_itl_s(run, reqs)
    out_tok = output_len * num_requests
    return WhatIfPoint(concurrency=concurrency, input_len=input_len, output_len=output_len,
                       output_tokens_per_s=out_tok / dur, total_tokens_per_s=(out_tok + input_len * num_requests) / dur,
                       requests_per_s=num_requests / dur, ttft_ms_p50=1e3 * statistics.median(ttft),
                       itl_ms_p50=1e3 * itl_s,
                       e2e_ms_p50=1e3 * statistics.median(e2e))


def _median_itl_s(run: SimRun, reqs: Sequence[SimRequest]) -> float:
    """Median gap between consecutive tokens over all requests (`sim.simulate.step_gaps`: each step
    gap weighted by the requests decoding across it)."""
    ends = np.asarray(run.step_end_s, dtype=np.float64)
    if len(ends) < 2:
        return 0.0
    return weighted_median(*step_gaps(ends, reqs))


def _n_requests(concurrency: int, num_requests: int | None) -> int:
    return num_requests or max(200, 4 * concurrency)


def whatif(dep: Deployment, knobs: StepKnobs | None = None, *, input_len: int, output_len: int,
           concurrencies: Sequence[int], num_requests: int | None = None) -> list[WhatIfPoint]:
    cfg = engine_config(dep, knobs)
    if input_len + output_len > cfg.max_model_len:
        raise ConfigError(f"input_len + output_len = {input_len + output_len} exceeds max_model_len "
                          f"{cfg.max_model_len}")
    replicas = dep.dp
    out: list[WhatIfPoint] = []
    for c in concurrencies:
        # DP replicas are independent engines sharing the load evenly (their MoE sync is not modelled)
        per = math.ceil(c / replicas)
        p = simulate_point(cfg, concurrency=per, input_len=input_len, output_len=output_len,
                           num_requests=math.ceil(_n_requests(c, num_requests) / replicas))
        if replicas > 1:
            p = dataclasses.replace(p, concurrency=c, output_tokens_per_s=p.output_tokens_per_s * replicas,
                                    total_tokens_per_s=p.total_tokens_per_s * replicas,
                                    requests_per_s=p.requests_per_s * replicas)
        out.append(p)
    return out



def point_dict(p: WhatIfPoint, band: dict[str, float] | None = None) -> dict[str, Any]:
    """One what-if point for plan.json; `band` gives each metric's relative uncertainty (+-)."""
    out: dict[str, Any] = dataclasses.asdict(p)
    if band:
        out["uncertainty"] = {
            m: {"rel": r, "low": out[k] * (1 - r), "high": out[k] * (1 + r)}
            for m, k, r in ((m, k, band[m]) for m, k in (("output_tokens_per_s", "output_tokens_per_s"),
                                                        ("itl_ms", "itl_ms_p50"), ("ttft_ms", "ttft_ms_p50"))
                             if m in band)}
    return out


def whatif_table(points: Sequence[WhatIfPoint], title: str) -> Table:
    t = Table(title=title)
    for col in ("concurrency", "in/out", "output tok/s", "total tok/s", "TTFT p50 ms", "ITL p50 ms",
                "E2E p50 ms", "req/s"):
        t.add_column(col, justify="right")
    for p in points:
        t.add_row(str(p.concurrency), f"{p.input_len}/{p.output_len}", f"{p.output_tokens_per_s:,.0f}",
                  f"{p.total_tokens_per_s:,.0f}", f"{p.ttft_ms_p50:,.0f}", f"{p.itl_ms_p50:,.1f}",
                  f"{p.e2e_ms_p50:,.0f}", f"{p.requests_per_s:,.2f}")
    return t
