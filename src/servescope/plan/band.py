"""The uncertainty band of plan's what-if points: how far a prediction may be off, and why.

Three sources, in order of preference: the calibrated model's median |error| on the user's own points
(`--calibrate`); the held-out median |error| the validation published with the installed knob table
(deploy/calibration.yaml, `heldout_median_abs_error`, by kind of load where it had enough points); and,
with neither, a fixed fallback. After `--calibrate` on three or more points, `loo_spread` adds how far
each prediction moves when one calibration point is left out of the fit. Pure but for reading the
installed knob table's metadata.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

from servescope.plan.calibrate import MeasuredPoint
from servescope.plan.whatif import WhatIfPoint

__all__ = ["Band", "FALLBACK_BAND", "FALLBACK_BAND_SOURCE", "band_for", "loo_line", "loo_spread"]

# Until plan/validate.py publishes held-out errors (deploy/calibration.yaml, `heldout_median_abs_error`),
# the band is the uncalibrated what-if's held-out median |error| against the published measurements
# (output tok/s 88%, ITL 51%, TTFT 94%): wide, and honest about it.
FALLBACK_BAND = {"output_tokens_per_s": 0.88, "itl_ms": 0.51, "ttft_ms": 0.94}
FALLBACK_BAND_SOURCE = (
    "held-out median |error| of the uncalibrated what-if against published measurements "
    "(88% output tok/s, 51% ITL, 94% TTFT); no validation figures are installed"
)

#: (JSON name, WhatIfPoint attribute, label) of the metrics a band covers.
METRIC_ATTRS = (
    ("output_tokens_per_s", "output_tokens_per_s", "output tok/s"),
    ("itl_ms", "itl_ms_p50", "ITL"),
    ("ttft_ms", "ttft_ms_p50", "TTFT"),
)


@dataclasses.dataclass(frozen=True, slots=True)
class Band:
    """The relative +- band per metric (output_tokens_per_s, itl_ms, ttft_ms) of what-if points, and
    where it comes from: over all validation points, and by workload mode where the validation had
    enough points of that mode (`plan.knobfit.published_bands`)."""

    overall: dict[str, float]
    source: str
    by_mode: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)

    def for_point(self, p: WhatIfPoint) -> dict[str, float]:
        return {**self.overall, **self.by_mode.get(p.mode, {})}

    def lines(self, points: Sequence[WhatIfPoint]) -> list[str]:
        """The terminal's account of the band: where it comes from, then one line per kind of load
        among `points` (a kind the validation had too few points of carries the band over all)."""
        out = [f"uncertainty{' by kind of load' if self.by_mode else ''} ({self.source}):"]
        for mode in dict.fromkeys(p.mode for p in points):
            b = {**self.overall, **self.by_mode.get(mode, {})}
            parts = [
                f"±{b[k]:.0%} {name}"
                for k, name in (("output_tokens_per_s", "output tok/s"), ("itl_ms", "ITL"), ("ttft_ms", "TTFT"))
                if k in b
            ]
            kind = {"closed": "closed loop", "offline": "all at once", "rate": "Poisson rate"}[mode]
            own = mode in self.by_mode or not self.by_mode
            out.append(f"  {kind}: {', '.join(parts)}" + ("" if own else f" (too few {kind} points: over all)"))
        return out


def band_for(calibrated: list[tuple[MeasuredPoint, WhatIfPoint]] | None) -> Band:
    """Relative +- band per metric for what-if points, and where it comes from: the calibration's own
    errors when there is one (`calibrated`: each measured point with its prediction), else the
    installed table's held-out errors, else the fallback."""
    if calibrated:
        return _calibrated_band(calibrated)
    from servescope.deploy.deployment import load_knob_table_meta

    meta = load_knob_table_meta()
    held = meta.get("heldout_median_abs_error")
    if isinstance(held, dict) and held:
        modes = meta.get("heldout_median_abs_error_by_mode")
        by_mode = (
            {str(m): {str(k): float(v) for k, v in b.items()} for m, b in modes.items() if isinstance(b, dict)}
            if isinstance(modes, dict)
            else {}
        )
        return Band(
            {str(k): float(v) for k, v in held.items()},
            str(meta.get("heldout_source", "held-out median |error| by source")),
            by_mode,
        )
    return Band(dict(FALLBACK_BAND), FALLBACK_BAND_SOURCE)


def _calibrated_band(calibrated: list[tuple[MeasuredPoint, WhatIfPoint]]) -> Band:
    """The calibrated model's median |error| on its calibration points, per metric (at least 5%)."""
    errs: dict[str, list[float]] = {"output_tokens_per_s": [], "itl_ms": [], "ttft_ms": []}
    for m, sim in calibrated:
        if m.output_tokens_per_s:
            errs["output_tokens_per_s"].append(abs(sim.output_tokens_per_s / m.output_tokens_per_s - 1))
        if m.itl_ms:
            errs["itl_ms"].append(abs(sim.itl_ms_p50 / m.itl_ms - 1))
        if m.ttft_ms:
            errs["ttft_ms"].append(abs(sim.ttft_ms_p50 / m.ttft_ms - 1))
    band = {k: max(0.05, statistics.median(v)) for k, v in errs.items() if v}
    return Band(
        band,
        "median |error| of the calibrated model on the calibration points (at least 5%); "
        "extrapolation beyond them is wider",
    )


def loo_spread(
    full: Sequence[WhatIfPoint], runs: Sequence[tuple[MeasuredPoint, Sequence[WhatIfPoint]]]
) -> list[dict[str, dict[str, Any]]]:
    """Per what-if point and metric: the lowest and highest prediction over the leave-one-out fits
    (`calibrate.leave_one_out`), which point each left out, and the largest relative move from the
    prediction on all points."""
    out = []
    for i, p in enumerate(full):
        per: dict[str, dict[str, Any]] = {}
        for name, attr, _ in METRIC_ATTRS:
            base = float(getattr(p, attr))
            vals = [(float(getattr(pts[i], attr)), left) for left, pts in runs]
            lo, hi = min(vals, key=lambda v: v[0]), max(vals, key=lambda v: v[0])
            per[name] = {
                "low": min(lo[0], base),
                "high": max(hi[0], base),
                "lowest_without": f"c={lo[1].concurrency}",
                "highest_without": f"c={hi[1].concurrency}",
                "max_rel": max(abs(v / base - 1) for v, _ in vals) if base > 0 else 0.0,
            }
        out.append(per)
    return out


def loo_line(p: WhatIfPoint, spread: dict[str, dict[str, Any]], band: dict[str, float]) -> str:
    """One what-if point's terminal line: per metric its band and its leave-one-out range."""
    parts = []
    for name, _, label in METRIC_ATTRS:
        s = spread[name]
        unit = "" if name == "output_tokens_per_s" else " ms"
        fmt = "{:,.0f}" if name != "itl_ms" else "{:,.1f}"
        pm = f"±{band[name]:.0%} " if name in band else ""  # a metric none of the points measured has no band
        parts.append(
            f"{pm}{label} {fmt.format(s['low'])}-{fmt.format(s['high'])}{unit} (lowest without {s['lowest_without']})"
        )
    return f"  {p.load}: " + ", ".join(parts)
