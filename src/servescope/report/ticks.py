"""Axis ticks (1-2-2.5-5 linear grids, 1-2-5 per decade) and compact number formatting (12k, 1.5M,
0.25) for charts and tables. Pure."""

from __future__ import annotations

import math

__all__ = ["format_number", "nice_ticks", "log_ticks"]


def format_number(v: float, step: float | None = None) -> str:
    """Compact human formatting for tick labels and annotations (12k, 1.5M, 0.25)."""
    if not math.isfinite(v):
        return "∞" if v > 0 else ("-∞" if v < 0 else "n/a")
    a = abs(v)
    if a >= 1e6 and (step is None or step >= 1e5):
        return f"{v / 1e6:.{_decimals((step or a) / 1e6)}f}M"
    if a >= 1e4 and (step is None or step >= 1e3):
        return f"{v / 1e3:.{_decimals((step or a) / 1e3)}f}k"
    if step is None:
        if float(v).is_integer():
            return str(int(v))
        return f"{v:.{max(0, min(3, 2 - math.floor(math.log10(a))))}f}"
    return f"{v:.{_decimals(step)}f}"


def _decimals(step: float) -> int:
    """Fewest decimals (0-6) that write `step` exactly: 0.25 -> 2, 5 -> 0, 0.1 -> 1."""
    if step <= 0 or not math.isfinite(step):
        return 0
    for d in range(7):
        if abs(round(step, d) - step) <= 1e-9 * max(1.0, step):
            return d
    return 6


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Ticks on a 1-2-2.5-5 grid covering [lo, hi]; the first and last tick bound the range."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = mag * 10
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag * (1 + 1e-9):
            step = m * mag
            break
    first = math.floor(lo / step + 1e-9)
    last = math.ceil(hi / step - 1e-9)
    nd = _decimals(step) + 2
    return [round(i * step, nd) + 0.0 for i in range(first, last + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks 1-2-5 per decade covering [lo, hi] (lo > 0)."""
    lo = max(lo, 1e-12)
    hi = max(hi, lo * 1.0001)
    e0, e1 = math.floor(math.log10(lo) + 1e-9), math.ceil(math.log10(hi) - 1e-9)
    ticks = [m * 10.0**e for e in range(e0, e1 + 1) for m in (1, 2, 5)]
    below = [t for t in ticks if t <= lo * (1 + 1e-9)]
    above = [t for t in ticks if t >= hi * (1 - 1e-9)]
    start = below[-1] if below else ticks[0]
    end = above[0] if above else ticks[-1]
    sel = [round(t, 12) for t in ticks if start <= t <= end]
    if len(sel) > 9:  # too dense: keep powers of ten (and the ends)
        sel = [t for t in sel if t in (start, end) or abs(math.log10(t) % 1) < 1e-9]
    return sel
