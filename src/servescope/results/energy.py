"""Energy of a run from GPU telemetry (pure): joules over the measured window, per output token, per
1M output tokens, mean power, output tokens/s per kW.

Readings come from a DCGM exporter or NVML (target/telemetry.py), one per GPU per sample, on the run's
clock (seconds from the shard's t0, as the records). Per GPU, the energy over the window [t0, t1] is

- the **energy counter** where the GPU has one (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, NVML's total
  energy; read as joules): its value linearly interpolated at t1 minus at t0. When the samples do not
  cover the whole window, the covered part's mean power stands for the rest (`coverage` < 1 says so);
  a counter that goes down (reset) is not used;
- else the **power integral**: the power samples joined by straight lines (held flat before the first
  and after the last), integrated over the window.

The run's energy is the sum over GPUs; mean power = energy / window; J per output token = energy /
output tokens of the measured requests; tokens/s per kW = (output tokens / window) / (mean power /
1000), which equals output tokens per kJ. Utilisation and SM clock are time-weighted means over the
window, memory the highest reading.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from servescope.results.schema import Energy, GpuEnergy

__all__ = ["GpuReading", "energy_block", "integrate", "interp", "not_available"]


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one instant: `t_s` on the run's clock; None where the source lacks the field."""

    t_s: float
    gpu: str
    power_w: float | None = None
    energy_j: float | None = None  # a cumulative counter (since boot, or since the driver loaded)
    util_pct: float | None = None
    mem_used_mib: float | None = None
    sm_clock_mhz: float | None = None


def interp(ts: Sequence[float], vs: Sequence[float], t: float) -> float:
    """The piecewise-linear function through (ts, vs) at t, held flat outside [ts[0], ts[-1]]."""
    if t <= ts[0]:
        return vs[0]
    if t >= ts[-1]:
        return vs[-1]
    lo, hi = 0, len(ts) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ts[mid] <= t:
            lo = mid
        else:
            hi = mid
    span = ts[hi] - ts[lo]
    if span <= 0:
        return vs[hi]
    return vs[lo] + (vs[hi] - vs[lo]) * (t - ts[lo]) / span


def integrate(ts: Sequence[float], vs: Sequence[float], t0: float, t1: float) -> float:
    """The integral over [t0, t1] of the piecewise-linear function through (ts, vs), held flat outside."""
    if t1 <= t0:
        return 0.0
    knots = [t0, *(t for t in ts if t0 < t < t1), t1]
    total = 0.0
    for a, b in itertools.pairwise(knots):
        total += (interp(ts, vs, a) + interp(ts, vs, b)) / 2.0 * (b - a)
    return total


def not_available(why: str) -> Energy:
    """The block of a run without telemetry: nothing measured, and why."""
    return {"available": False, "why": why}


def _series(readings: Sequence[GpuReading], field: str) -> tuple[list[float], list[float]]:
    pts = sorted((r.t_s, v) for r in readings if (v := getattr(r, field)) is not None)
    return [t for t, _ in pts], [v for _, v in pts]


def _gpu(gpu: str, readings: Sequence[GpuReading], t0: float, t1: float) -> GpuEnergy | None:
    window = t1 - t0
    et, ev = _series(readings, "energy_j")
    doc: dict[str, object] = {"gpu": gpu}
    if len(et) >= 2 and all(b >= a for a, b in itertools.pairwise(ev)) and et[-1] > t0 and et[0] < t1:
        a, b = max(t0, et[0]), min(t1, et[-1])
        coverage = (b - a) / window
        joules = (interp(et, ev, b) - interp(et, ev, a)) / coverage if coverage > 0 else 0.0
        doc.update({"method": "energy counter", "coverage": round(min(coverage, 1.0), 6)})
    else:
        pt, pv = _series(readings, "power_w")
        if not pt:
            return None
        joules = integrate(pt, pv, t0, t1)
        covered = min(t1, pt[-1]) - max(t0, pt[0])
        doc.update({"method": "power integral", "coverage": round(max(0.0, min(covered / window, 1.0)), 6)})
    doc["energy_j"] = joules
    doc["mean_power_w"] = joules / window
    for field, key in (("util_pct", "util_pct_mean"), ("sm_clock_mhz", "sm_clock_mhz_mean")):
        ts, vs = _series(readings, field)
        doc[key] = integrate(ts, vs, t0, t1) / window if ts else None
    _, mem = _series(readings, "mem_used_mib")
    doc["mem_used_mib_max"] = max(mem) if mem else None
    return cast(GpuEnergy, doc)


def energy_block(
    readings: Sequence[GpuReading], window: tuple[float, float] | None, *, output_tokens: int, source: str
) -> Energy:
    """The summary's `energy` block over the measured window [t0, t1] (seconds on the run's clock)."""
    if window is None or window[1] <= window[0]:
        return not_available("no measured window (no request completed)")
    if not readings:
        return not_available(f"{source}: no sample was read during the run")
    t0, t1 = window
    by_gpu: dict[str, list[GpuReading]] = {}
    for r in readings:
        by_gpu.setdefault(r.gpu, []).append(r)
    gpus = [g for gpu, rs in sorted(by_gpu.items()) if (g := _gpu(gpu, rs, t0, t1)) is not None]
    if not gpus:
        return not_available(f"{source}: the samples carry neither power nor an energy counter")
    joules = sum(g["energy_j"] for g in gpus)
    window_s = t1 - t0
    power = joules / window_s
    per_token = joules / output_tokens if output_tokens > 0 and joules > 0 else None
    tok_s = output_tokens / window_s
    methods = sorted({g["method"] for g in gpus})
    utils = [u for g in gpus if (u := g.get("util_pct_mean")) is not None]
    clocks = [c for g in gpus if (c := g.get("sm_clock_mhz_mean")) is not None]
    mems = [m for g in gpus if (m := g.get("mem_used_mib_max")) is not None]
    return {
        "available": True,
        "source": source,
        "method": methods[0] if len(methods) == 1 else "mixed",
        "gpus": len(gpus),
        "samples": len({r.t_s for r in readings}),
        "window_s": window_s,
        "energy_j": joules,
        "mean_power_w": power,
        "output_tokens": output_tokens,
        "joules_per_output_token": per_token,
        "joules_per_1m_output_tokens": per_token * 1e6 if per_token is not None else None,
        "kwh_per_1m_output_tokens": per_token * 1e6 / 3.6e6 if per_token is not None else None,
        "output_tokens_per_s_per_kw": tok_s / (power / 1000.0) if power > 0 else None,
        "gpu_util_pct_mean": sum(utils) / len(utils) if utils else None,
        "sm_clock_mhz_mean": sum(clocks) / len(clocks) if clocks else None,
        "mem_used_mib_max": max(mems) if mems else None,
        "coverage": min(g["coverage"] for g in gpus),
        "per_gpu": gpus,
    }
