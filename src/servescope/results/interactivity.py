"""Interactivity and throughput per GPU: the figures behind the Pareto chart (pure: no I/O).

Per run (the summary's `interactivity` block; docs/metrics.md, "Interactivity"):

    tokens/s per user        = 1000 / median TPOT (ms)
    per request              = 1000 / TPOT_i, its percentiles (p10, p1: the slow users)
    output tokens/s per GPU  = output tokens/s / GPUs
    total tokens/s per GPU   = (input + output) tokens/s / GPUs      (GPUs unknown: null)

Across runs (a sweep, or several sweeps in `report`/`compare`): each run is a point (x =
tokens/s per user, y = throughput per GPU), both higher-is-better. The Pareto front is the points
no other point beats on both axes; the best throughput per GPU at an interactivity level is read
off the front by linear interpolation between its two neighbours (never above the higher of them,
never below the lower). A level below the front's range reads the slowest point's throughput as a
lower bound (`below_range`); a level above it was not reached (`not_reached`, no value).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from servescope.errors import ConfigError
from servescope.results.schema import Interactivity, Throughput, UserRateDistribution

__all__ = [
    "DEFAULT_LEVELS",
    "LevelReading",
    "ParetoPoint",
    "interactivity_block",
    "pareto_front",
    "parse_levels",
    "read_front",
    "usd_per_million",
]

#: Interactivity levels (tokens/s per user) of the table when none are asked for.
DEFAULT_LEVELS: tuple[float, ...] = (20.0, 50.0, 100.0)

Status = Literal["measured", "interpolated", "below_range", "not_reached", "no_data"]


def _user_rates(tpot_ms: Sequence[float] | np.ndarray) -> UserRateDistribution:
    arr = np.asarray(tpot_ms, dtype=float)
    arr = arr[np.isfinite(arr) & (arr > 0)]
    if arr.size == 0:
        return {"count": 0, "mean": None, "median": None, "p90": None, "p10": None, "p1": None}
    rates = 1000.0 / arr
    p1, p10, p50, p90 = np.percentile(rates, (1, 10, 50, 90))
    return {
        "count": int(rates.size),
        "mean": float(rates.mean()),
        "median": float(p50),
        "p90": float(p90),
        "p10": float(p10),
        "p1": float(p1),
    }


def interactivity_block(
    tpot_ms: Sequence[float] | np.ndarray,
    throughput: Throughput | Mapping[str, float],
    gpus: int | None,
    gpus_source: str | None = None,
) -> Interactivity:
    """The summary's `interactivity` block from the completed requests' TPOTs (ms) and the run's
    `throughput` block; `gpus` None (unknown) leaves the per-GPU figures null."""
    arr = np.asarray(tpot_ms, dtype=float)
    arr = arr[np.isfinite(arr) & (arr > 0)]
    median_tpot = float(np.median(arr)) if arr.size else None
    per_gpu_ok = gpus is not None and gpus > 0

    def per_gpu(key: str) -> float | None:
        v = throughput.get(key)
        return float(v) / gpus if per_gpu_ok and gpus and isinstance(v, (int, float)) else None

    return {
        "tokens_per_s_per_user": 1000.0 / median_tpot if median_tpot else None,
        "per_request_tokens_per_s_per_user": _user_rates(arr),
        "gpus": gpus if per_gpu_ok else None,
        "gpus_source": gpus_source if per_gpu_ok else None,
        "output_tokens_per_s_per_gpu": per_gpu("output_tokens_per_s"),
        "total_tokens_per_s_per_gpu": per_gpu("total_tokens_per_s"),
    }


@dataclass(frozen=True, slots=True)
class ParetoPoint:
    """One run on the chart: x tokens/s per user, y throughput per GPU (or per deployment).

    `usd_per_hour` is the price of one unit of y (a GPU-hour when y is per GPU); `j_per_token`
    the energy per output token, when measured."""

    x: float
    y: float
    label: str = ""
    usd_per_hour: float | None = None
    j_per_token: float | None = None


def pareto_front(points: Sequence[ParetoPoint]) -> list[ParetoPoint]:
    """The points no other point beats on both axes (x and y higher is better), by x ascending
    (so y descending). Of identical points one is kept; non-finite or x <= 0 points are left out."""
    ok = [p for p in points if math.isfinite(p.x) and math.isfinite(p.y) and p.x > 0 and p.y >= 0]
    front: list[ParetoPoint] = []
    best = -math.inf
    for p in sorted(ok, key=lambda p: (-p.x, -p.y)):  # fastest users first: keep what beats all before
        if p.y > best:
            front.append(p)
            best = p.y
    return front[::-1]


def usd_per_million(usd_per_hour: float | None, tokens_per_s: float | None) -> float | None:
    """Dollars per 1M tokens when `tokens_per_s` cost `usd_per_hour` (results.cost's formula)."""
    if usd_per_hour is None or not tokens_per_s or tokens_per_s <= 0:
        return None
    return usd_per_hour / (tokens_per_s * 3600.0) * 1e6


@dataclass(frozen=True, slots=True)
class LevelReading:
    """The front read at one interactivity level (see the module docstring for `status`)."""

    level: float
    status: Status
    y: float | None = None
    left: ParetoPoint | None = None  # the front points the reading lies between (or the one it is)
    right: ParetoPoint | None = None
    usd_per_1m_tokens: float | None = None
    j_per_token: float | None = None

    @property
    def extrapolated(self) -> bool:
        """Outside the front's measured range: a lower bound, or no value at all."""
        return self.status in ("below_range", "not_reached")


def _same(a: float | None, b: float | None) -> float | None:
    return a if a is not None and b is not None and math.isclose(a, b) else None


def _lerp(a: float | None, b: float | None, t: float) -> float | None:
    return a + (b - a) * t if a is not None and b is not None else None


def read_front(front: Sequence[ParetoPoint], level: float) -> LevelReading:
    """The best throughput per GPU at `level` tokens/s per user, off a front from `pareto_front`."""
    if not front:
        return LevelReading(level, "no_data")
    first, last = front[0], front[-1]
    if level < first.x:  # the slowest front point already serves these users: a lower bound
        return LevelReading(
            level, "below_range", first.y, first, None, usd_per_million(first.usd_per_hour, first.y), first.j_per_token
        )
    if level > last.x:
        return LevelReading(level, "not_reached", None, last, None)
    exact = next((p for p in front if p.x == level), None)
    if exact is not None:
        return LevelReading(
            level, "measured", exact.y, exact, None, usd_per_million(exact.usd_per_hour, exact.y), exact.j_per_token
        )
    a, b = next((a, b) for a, b in itertools.pairwise(front) if a.x < level < b.x)
    t = (level - a.x) / (b.x - a.x)
    y = a.y + (b.y - a.y) * t
    return LevelReading(
        level,
        "interpolated",
        y,
        a,
        b,
        usd_per_million(_same(a.usd_per_hour, b.usd_per_hour), y),
        _lerp(a.j_per_token, b.j_per_token, t),
    )


def parse_levels(text: str | Sequence[float] | None) -> tuple[float, ...]:
    """`"20,50,100"` (or numbers) -> sorted distinct positive levels; None -> DEFAULT_LEVELS."""
    if text is None:
        return DEFAULT_LEVELS
    items = [s.strip() for s in text.split(",")] if isinstance(text, str) else list(text)
    out: set[float] = set()
    for item in items:
        if item == "":
            continue
        try:
            v = float(item)
        except (TypeError, ValueError):
            raise ConfigError(f"interactivity level {item!r} is not a number (tokens/s per user)") from None
        if not (math.isfinite(v) and v > 0):
            raise ConfigError(f"interactivity level {item!r} must be a positive number of tokens/s per user")
        out.add(v)
    if not out:
        raise ConfigError("no interactivity level given (e.g. 20,50,100 tokens/s per user)")
    return tuple(sorted(out))
