"""Calibration from measurements: fit the step-time knobs (`sim.knobs.StepKnobs`) of a deployment so
its engine (the one plan's what-if and the emulator run) reproduces measured points, and read those
points from servescope result dirs or a YAML/JSON list.

`calibrate` is pure; `load_measurements` is the I/O edge.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from servescope.deploy.deployment import Deployment
from servescope.errors import ConfigError
from servescope.plan.whatif import engine_config, simulate_point
from servescope.sim.knobs import StepKnobs

__all__ = ["MeasuredPoint", "calibrate", "leave_one_out", "load_measurements", "LEAVE_ONE_OUT_MIN_POINTS"]


@dataclass(frozen=True, slots=True)
class MeasuredPoint:
    concurrency: int
    input_len: int
    output_len: int
    output_tokens_per_s: float | None  # None: a point that measured only latency
    itl_ms: float | None = None  # median inter-token latency
    ttft_ms: float | None = None  # median time to first token
    # a lower bound on the median TTFT, for a report such as "the first token does not appear until after
    # 1 second": the fit pays only for a simulated TTFT below it
    ttft_ms_at_least: float | None = None
    # requests the measured run sent (a servescope summary's `requests.completed`): the fit simulates as
    # many, so that a closed loop's waves (its first, where every user's prompt arrives at once, weighs
    # 1 / requests-per-user of the median) have the same shape on both sides; None: `_calib_requests`
    num_requests: int | None = None

    def measures_something(self) -> bool:
        return bool(self.output_tokens_per_s or self.itl_ms or self.ttft_ms or self.ttft_ms_at_least)


# first_token_s stays the fitted table's: free, it trades against compute efficiency through TTFT (on the
# recorded-sweep test it moved the c=100 prediction from +6% to +13%); it is added to TTFT only
_BOUNDS = {
    "mem_efficiency": (0.02, 1.0),
    "compute_efficiency": (0.005, 1.0),
    "step_overhead_s": (1e-4, 0.2),
    "layer_overhead_s": (1e-7, 2e-3),
}


def _calib_requests(concurrency: int) -> int:
    return 4 * concurrency + 4  # enough for a steady state; calibration runs hundreds of these


# a measured run longer than this is simulated at this length (its waves have settled long before)
_MAX_CALIB_REQUESTS = 2000


def _requests_for(p: MeasuredPoint) -> int:
    """Requests to simulate for a measured point: as many as it sent (up to `_MAX_CALIB_REQUESTS`), else
    `_calib_requests`. A closed loop of identical requests moves in waves, and the median TTFT of a
    short run falls in one wave or another by its length: a recorded sweep of 4 requests a user at
    c=5 measured 208 or 285 ms run to run while the fit simulated 24 requests, and the fitted compute
    efficiency moved 0.30 -> 0.37 (c=100 +13%). Simulated at the measured length, seven recorded sweeps
    of 4 and 8 requests a user recovered the emulator's secret compute efficiency (0.30) to 0.301 in 13
    of 14 fits (docs/plan.md)."""
    if p.num_requests:
        return max(1, min(p.num_requests, _MAX_CALIB_REQUESTS))
    return _calib_requests(p.concurrency)


def _loss(dep: Deployment, cal: StepKnobs, pts: Sequence[MeasuredPoint], prior: StepKnobs) -> float:
    cfg = engine_config(dep, cal)
    # Low-concurrency decode points hardly constrain compute efficiency (prefill is a sliver of their
    # time), yet high-concurrency predictions hinge on it: a weak prior keeps it near the kernel-class
    # default unless TTFT or high-concurrency measurements say otherwise.
    total = _PRIOR_WEIGHT * math.log(cal.compute_efficiency / prior.compute_efficiency) ** 2
    for p in pts:
        sim = simulate_point(
            cfg,
            concurrency=p.concurrency,
            input_len=p.input_len,
            output_len=p.output_len,
            num_requests=_requests_for(p),
        )
        if p.output_tokens_per_s:
            total += math.log(sim.output_tokens_per_s / p.output_tokens_per_s) ** 2
        if p.itl_ms:
            total += math.log(sim.itl_ms_p50 / p.itl_ms) ** 2
        if p.ttft_ms:
            total += math.log(sim.ttft_ms_p50 / p.ttft_ms) ** 2
        if p.ttft_ms_at_least and sim.ttft_ms_p50 < p.ttft_ms_at_least:
            total += math.log(sim.ttft_ms_p50 / p.ttft_ms_at_least) ** 2
    return total


_PRIOR_WEIGHT = 0.05


def calibrate(
    dep: Deployment, points: Sequence[MeasuredPoint], *, start: StepKnobs | None = None, max_evals: int = 250
) -> tuple[StepKnobs, str]:
    """Fit the step-time knobs to measured points by coordinate descent in log space (squared log error
    of output throughput, median ITL and TTFT). `start` (default: the deployment's own knobs, from
    the fitted table) is also the prior for compute efficiency. Returns the knobs and a report."""
    if not points:
        raise ConfigError("calibration needs at least one measured point")
    for p in points:
        if not p.measures_something():
            raise ConfigError(
                f"the point at concurrency {p.concurrency} measures nothing: give output tok/s, ITL, "
                "TTFT or a TTFT lower bound"
            )
    start = start or dep.knobs()
    best, best_loss, evals = start, _loss(dep, start, points, start), 1
    for factor in (4.0, 2.0, 1.4, 1.15, 1.05):
        improved = True
        while improved and evals < max_evals:
            improved = False
            for name, (lo, hi) in _BOUNDS.items():
                for f in (factor, 1.0 / factor):
                    val = min(hi, max(lo, getattr(best, name) * f))
                    cand = dataclasses.replace(best, **{name: val})
                    loss = _loss(dep, cand, points, start)
                    evals += 1
                    if loss < best_loss - 1e-9:
                        best, best_loss, improved = cand, loss, True
                        break
    cfg = engine_config(dep, best)
    lines = [
        f"calibrated on {len(points)} points ({evals} simulations, rms log error "
        f"{math.sqrt(best_loss / max(1, len(points))):.3f}): memory eff {best.mem_efficiency:.3g}, compute eff "
        f"{best.compute_efficiency:.3g}, step {1e3 * best.step_overhead_s:.3g} ms, "
        f"layer {1e6 * best.layer_overhead_s:.3g} us; first token {1e3 * best.first_token_s:.3g} ms "
        "(the table's, added to TTFT)"
    ]
    for p in points:
        sim = simulate_point(
            cfg,
            concurrency=p.concurrency,
            input_len=p.input_len,
            output_len=p.output_len,
            num_requests=_requests_for(p),
        )
        itl = f", ITL {sim.itl_ms_p50:.1f} ms vs {p.itl_ms:.1f}" if p.itl_ms else ""
        tput = (
            f"{sim.output_tokens_per_s:.0f} vs measured {p.output_tokens_per_s:.0f} output tok/s"
            if p.output_tokens_per_s
            else f"{sim.output_tokens_per_s:.0f} output tok/s (not measured)"
        )
        ttft = f", TTFT {sim.ttft_ms_p50:.0f} ms vs {p.ttft_ms:.0f}" if p.ttft_ms else ""
        if p.ttft_ms_at_least:
            ttft += f", TTFT {sim.ttft_ms_p50:.0f} ms vs at least {p.ttft_ms_at_least:.0f}"
        lines.append(f"  c={p.concurrency}: {tput}{itl}{ttft}")
    return best, "\n".join(lines)


# With fewer points, leaving one out leaves a fit that only the prior holds: its spread says nothing.
LEAVE_ONE_OUT_MIN_POINTS = 3


def leave_one_out(
    dep: Deployment, points: Sequence[MeasuredPoint], *, start: StepKnobs | None = None, max_evals: int = 250
) -> list[tuple[MeasuredPoint, StepKnobs]]:
    """The knobs `calibrate` fits with each measured point left out in turn (same start, same prior):
    how far a prediction moves between them says how much it hangs on any one measurement, which the
    fit's own error on the points it was given cannot show (an extrapolation to concurrency 100 from
    points at 1-15 can hang on the highest one). Empty with fewer than `LEAVE_ONE_OUT_MIN_POINTS`."""
    if len(points) < LEAVE_ONE_OUT_MIN_POINTS:
        return []
    out = []
    for i, left in enumerate(points):
        rest = [p for j, p in enumerate(points) if j != i]
        if not any(p.output_tokens_per_s or p.itl_ms for p in rest):
            continue  # latency bounds alone would leave the decode knobs to the prior
        knobs, _ = calibrate(dep, rest, start=start, max_evals=max_evals)
        out.append((left, knobs))
    return out


def _median(summary: dict[str, Any], metric: str) -> float | None:
    v = ((summary.get("latency_ms") or {}).get(metric) or {}).get("median")
    return float(v) if v else None


def _opt_int(row: dict[str, Any], key: str) -> int | None:
    return int(row[key]) if row.get(key) else None


def _opt(row: dict[str, Any], key: str) -> float | None:
    return float(row[key]) if row.get(key) else None


def load_measurements(path: str | Path) -> list[MeasuredPoint]:
    """I/O edge: measured points from servescope result dirs (every summary.json below `path`) or from a
    YAML/JSON file: a list (or {points: [...]}) of {concurrency, input_len, output_len, and any of
    output_tokens_per_s, itl_ms, ttft_ms, ttft_ms_at_least, num_requests}."""
    p = Path(path)
    pts: list[MeasuredPoint] = []
    try:
        if p.is_dir():
            for f in sorted(p.rglob("summary.json")):
                d = json.loads(f.read_text(encoding="utf-8"))
                pts.append(
                    MeasuredPoint(
                        concurrency=int(d["load"]["concurrency"]),
                        input_len=int(d["workload"]["input_len"]),
                        output_len=int(d["workload"]["output_len"]),
                        output_tokens_per_s=float(d["throughput"]["output_tokens_per_s"]),
                        itl_ms=_median(d, "itl"),
                        ttft_ms=_median(d, "ttft"),
                        num_requests=_opt_int(d.get("requests") or {}, "completed"),
                    )
                )
        else:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
            rows = data.get("points", []) if isinstance(data, dict) else data
            for r in rows or []:
                pt = MeasuredPoint(
                    concurrency=int(r["concurrency"]),
                    input_len=int(r["input_len"]),
                    output_len=int(r["output_len"]),
                    output_tokens_per_s=_opt(r, "output_tokens_per_s"),
                    itl_ms=_opt(r, "itl_ms"),
                    ttft_ms=_opt(r, "ttft_ms"),
                    ttft_ms_at_least=_opt(r, "ttft_ms_at_least"),
                    num_requests=_opt_int(r, "num_requests"),
                )
                if not pt.measures_something():
                    raise ValueError(
                        f"the point {r} measures nothing (give output_tokens_per_s, itl_ms, ttft_ms "
                        "or ttft_ms_at_least)"
                    )
                pts.append(pt)
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read measurements from {p}: {exc}") from exc
    if not pts:
        raise ConfigError(f"no measured points in {p} (expected summary.json files or a YAML list of points)")
    return pts
