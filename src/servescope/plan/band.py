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
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from servescope.plan import intervals as iv
from servescope.plan.calibrate import MeasuredPoint
from servescope.plan.whatif import WhatIfPoint

__all__ = [
    "Band",
    "FALLBACK_BAND",
    "FALLBACK_BAND_SOURCE",
    "Reach",
    "band_for",
    "loo_line",
    "loo_spread",
    "point_intervals",
    "reach_for",
    "interval_lines",
]

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


# --- 80% and 95% intervals (plan/intervals.py) ----------------------------------------------------
_METRIC = {"output_tokens_per_s": "tok_s", "itl_ms": "itl", "ttft_ms": "ttft"}
_Z = {0.80: 1.2816, 0.95: 1.9600}  # central normal quantiles
_MEDIAN_ABS_Z = 0.6745  # the median |z| of a normal


@dataclasses.dataclass(frozen=True, slots=True)
class Reach:
    """Where a deployment stands against the corpus: its classes, whether the corpus reaches them
    (in / thin / outside, and why), what the corpus holds of its engine release, and the published
    interval table (empty when none is installed)."""

    status: str
    why: list[str]
    classes: dict[str, str]
    release: str
    published: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        cov = self.published.get("coverage") or {}
        return {
            "status": self.status,
            "why": self.why,
            "classes": self.classes,
            "engine_release": self.release,
            "coverage_on_held_out_sources": cov,
        }


def reach_for(dep: Any) -> Reach:
    """The deployment's reach (`plan.intervals.deployment_reach`) from the installed calibration."""
    from servescope.deploy.deployment import load_knob_table_meta
    from servescope.sim.knobs import gpu_generation

    pub = load_knob_table_meta().get("intervals") or {}
    spec = dep.engine_spec
    classes = iv.classes_of(dep.arch, dep.family, dep.version, dep.quant, gpu_generation(dep.gpu.name))
    status, why = iv.deployment_reach(classes, pub) if pub else ("unknown", ["no interval table is installed"])
    release = iv.release_note(spec.base, spec.version, spec.stated, pub.get("engine_releases") or {})
    return Reach(status, why, classes, release, pub)


def point_intervals(
    p: WhatIfPoint, reach: Reach, band: Mapping[str, float], *, calibrated: bool
) -> dict[str, dict[str, dict[str, float]]]:
    """Per metric, the 80% and 95% intervals of a what-if point's figure ({"p80": {low, high}, "p95": ...}).
    Uncalibrated: the published split-conformal table for the deployment's reach, kind of load and
    architecture. After --calibrate (or with no table installed): log-normal errors whose median is
    the point's band -- an assumption, not a measured coverage."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, attr, _ in METRIC_ATTRS:
        x = float(getattr(p, attr))
        per: dict[str, dict[str, float]] = {}
        for lv in iv.LEVELS:
            f = None
            if not calibrated and reach.published:
                f = iv.figure_interval(reach.published, _METRIC[name], reach.status, p.mode, reach.classes["arch"], lv)
            if f is None and name in band:
                sigma = math.log1p(band[name]) / _MEDIAN_ABS_Z
                f = (math.exp(-_Z[lv] * sigma), math.exp(_Z[lv] * sigma))
            if f is not None:
                per[f"p{round(lv * 100)}"] = {"low": x * f[0], "high": x * f[1]}
        if per:
            out[name] = per
    return out


def interval_lines(
    points: Sequence[WhatIfPoint],
    ivs: Sequence[Mapping[str, Mapping[str, Mapping[str, float]]]],
    reach: Reach,
    *,
    calibrated: bool,
) -> list[str]:
    """The terminal's account of the intervals: their source and the deployment's reach, then per point
    each metric's 80% (95%) interval."""
    cov = reach.published.get("coverage") or {}
    if calibrated or not reach.published:
        head = "intervals (80%, 95%): log-normal errors with the band's median, not a measured coverage:"
    else:
        shares = ", ".join(
            f"{label} {cov[m]['p80']:.0%}/{cov[m]['p95']:.0%}"
            for name, _, label in METRIC_ATTRS
            if (m := _METRIC[name]) in cov
        )
        head = f"intervals (80%, 95%; on held-out sources they covered {shares} of the points):"
    out = [f"engine release: {reach.release}"]
    if reach.status in ("thin", "outside"):
        words = "OUTSIDE the corpus's reach" if reach.status == "outside" else "where the corpus is thin"
        out.append(f"this deployment is {words} ({'; '.join(reach.why)}): its intervals are the thin classes' (wider)")
    out.append(head)
    fmts = {"output_tokens_per_s": ("{:,.0f}", ""), "itl_ms": ("{:,.1f}", " ms"), "ttft_ms": ("{:,.0f}", " ms")}
    for p, per in zip(points, ivs):
        parts = []
        for name, _, label in METRIC_ATTRS:
            if name not in per or "p80" not in per[name]:
                continue
            fmt, unit = fmts[name]
            a, b = per[name]["p80"], per[name].get("p95", per[name]["p80"])
            parts.append(
                f"{label} {fmt.format(a['low'])}-{fmt.format(a['high'])}{unit} "
                f"({fmt.format(b['low'])}-{fmt.format(b['high'])})"
            )
        out.append(f"  {p.load}: " + ", ".join(parts))
    return out
