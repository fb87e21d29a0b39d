"""SVG charts with no plotting library (numpy only): data in, SVG text out.

Pure and deterministic: the same data gives the same bytes (fixed float formatting, no ids, no
timestamps, no randomness), so a report re-rendered from the same results is byte-identical.
Every piece of text is XML-escaped; every chart carries its own presentation attributes, so the
same string works inline in HTML and as a standalone `.svg` file. The requests' Gantt chart is
drawn in `gantt.py` with this module's frame, axes and legend.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import TypeAlias

import numpy as np

Samples: TypeAlias = "Sequence[float] | np.ndarray"  # a chart's raw values: a list or a numpy array

__all__ = [
    "PALETTE",
    "RefLine",
    "Series",
    "cdf_chart",
    "format_number",
    "histogram_chart",
    "line_chart",
    "log_ticks",
    "nice_ticks",
]

#: Colour-blind-safe categorical palette (Tableau 10 order).
PALETTE = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#72b7b2",
    "#b279a2",
    "#eeca3b",
    "#9d755d",
    "#ff9da6",
    "#bab0ac",
)
_FONT = "system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif"
_INK = "#1f2937"
_MUTED = "#6b7280"
_GRID = "#e5e7eb"
_MAX_MARKERS = 80  # more points than this: draw the line only
_MAX_TOOLTIPS = 400  # more markers than this: one path of dots without per-point tooltips


@dataclass(slots=True)
class Series:
    """One named series of (x, y) points; `labels` annotate points (e.g. the concurrency)."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    color: str | None = None
    dashed: bool = False
    markers: bool | None = None  # None: automatic (few points -> markers)
    labels: Sequence[str] | None = None
    lines: bool = True
    step: bool = False  # draw as a step function (value holds until the next x)
    fill: bool = False  # shade the area under the line
    opacity: float = 1.0  # < 1: drawn faint (e.g. the points a Pareto front dominates)


@dataclass(slots=True)
class RefLine:
    """A horizontal (axis="y") or vertical (axis="x") reference line, e.g. an SLO threshold."""

    value: float
    label: str = ""
    axis: str = "y"
    color: str = "#dc2626"


@dataclass(slots=True)
class _Axis:
    lo: float
    hi: float
    ticks: list[float] = field(default_factory=list)
    log: bool = False

    def frac(self, v: float) -> float:
        if self.log:
            lo, hi = math.log10(self.lo), math.log10(self.hi)
            v = math.log10(max(v, self.lo * 1e-3))
        else:
            lo, hi = self.lo, self.hi
        return 0.0 if hi == lo else (v - lo) / (hi - lo)


def _f(v: float) -> str:
    """Fixed formatting for coordinates: one decimal, never '-0.0'."""
    s = f"{v:.1f}"
    return "0.0" if s == "-0.0" else s


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


def _axis(values: Samples, *, log: bool, zero: bool, extra: Sequence[float] = ()) -> _Axis:
    arr = np.concatenate([np.asarray(values, dtype=float).ravel(), np.asarray(extra, dtype=float).ravel()])
    arr = arr[np.isfinite(arr) & ((arr > 0) | (not log))]  # (numpy: a million values in milliseconds)
    if not arr.size:
        return _Axis(1.0, 10.0, [1.0, 10.0], log) if log else _Axis(0.0, 1.0, nice_ticks(0, 1), log)
    lo, hi = float(arr.min()), float(arr.max())
    if log:
        t = log_ticks(lo, hi)
        return _Axis(t[0], t[-1], t, True)
    if zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    t = nice_ticks(lo, hi)
    return _Axis(t[0], t[-1], t, False)


def _text_width(s: str, size: float = 12.0) -> float:
    return len(s) * size * 0.56


class _Svg:
    def __init__(self, width: int, height: int, title: str) -> None:
        self.parts: list[str] = [
            (
                f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
                f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}" '
                f'font-family="{escape(_FONT)}" font-size="12" class="sb-chart">'
            ),
            f"<title>{escape(title)}</title>",
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        ]

    def add(self, s: str) -> None:
        self.parts.append(s)

    def text(
        self,
        x: float,
        y: float,
        s: str,
        *,
        anchor: str = "start",
        size: float = 12,
        fill: str = _INK,
        weight: str = "normal",
        rotate: bool = False,
    ) -> None:
        tr = f' transform="rotate(-90 {_f(x)} {_f(y)})"' if rotate else ""
        fw = f' font-weight="{weight}"' if weight != "normal" else ""
        self.add(
            f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}" font-size="{size:g}" '
            f'fill="{fill}"{fw}{tr}>{escape(s)}</text>'
        )

    def done(self) -> str:
        return "\n".join([*self.parts, "</svg>"]) + "\n"


def _legend_rows(names: list[str], max_width: float) -> list[list[tuple[int, str, float]]]:
    rows: list[list[tuple[int, str, float]]] = [[]]
    used = 0.0
    for i, n in enumerate(names):
        w = 22 + _text_width(n) + 14
        if rows[-1] and used + w > max_width:
            rows.append([])
            used = 0.0
        rows[-1].append((i, n, w))
        used += w
    return rows


def _frame(
    title: str, subtitle: str, names: list[str], width: int, height: int, y_label: str
) -> tuple[_Svg, float, float, float, float, list]:
    svg = _Svg(width, height, title)
    svg.text(14, 22, title, size=15, weight="600")
    top = 32.0
    if subtitle:
        svg.text(14, 40, subtitle, size=11.5, fill=_MUTED)
        top = 48.0
    rows = _legend_rows(names, width - 90) if len(names) > 1 else []
    top += 10 + 18 * len(rows)
    left = 70.0 if y_label else 56.0
    return svg, left, top, width - 24.0, height - 50.0, rows


def _draw_axes(
    svg: _Svg,
    xa: _Axis,
    ya: _Axis,
    box: tuple[float, float, float, float],
    x_label: str,
    y_label: str,
    x_fmt_step: float | None,
    y_fmt_step: float | None,
) -> None:
    left, top, right, bottom = box
    for t in ya.ticks:
        y = bottom - ya.frac(t) * (bottom - top)
        svg.add(f'<line x1="{_f(left)}" y1="{_f(y)}" x2="{_f(right)}" y2="{_f(y)}" stroke="{_GRID}" stroke-width="1"/>')
        svg.text(left - 6, y + 4, _tick_label(t, ya, y_fmt_step), anchor="end", size=11, fill=_MUTED)
    for t in xa.ticks:
        x = left + xa.frac(t) * (right - left)
        svg.add(
            f'<line x1="{_f(x)}" y1="{_f(bottom)}" x2="{_f(x)}" y2="{_f(bottom + 4)}" '
            f'stroke="{_MUTED}" stroke-width="1"/>'
        )
        svg.text(x, bottom + 17, _tick_label(t, xa, x_fmt_step), anchor="middle", size=11, fill=_MUTED)
    axis = f'stroke="{_MUTED}" stroke-width="1"/>'
    svg.add(f'<line x1="{_f(left)}" y1="{_f(bottom)}" x2="{_f(right)}" y2="{_f(bottom)}" {axis}')
    svg.add(f'<line x1="{_f(left)}" y1="{_f(top)}" x2="{_f(left)}" y2="{_f(bottom)}" {axis}')
    if x_label:
        svg.text((left + right) / 2, bottom + 38, x_label, anchor="middle", size=12, fill=_INK)
    if y_label:
        svg.text(16, (top + bottom) / 2, y_label, anchor="middle", size=12, fill=_INK, rotate=True)


def _tick_label(t: float, axis: _Axis, step: float | None) -> str:
    if axis.log:
        return format_number(t, t if t >= 1 else None) if t >= 1e4 else f"{t:g}"
    return format_number(t, step)


def _step_of(ticks: list[float]) -> float | None:
    return ticks[1] - ticks[0] if len(ticks) > 1 else None


def _no_data(svg: _Svg, box: tuple[float, float, float, float]) -> str:
    left, top, right, bottom = box
    svg.add(
        f'<rect x="{_f(left)}" y="{_f(top)}" width="{_f(right - left)}" height="{_f(bottom - top)}" '
        f'fill="#f9fafb" stroke="{_GRID}"/>'
    )
    svg.text((left + right) / 2, (top + bottom) / 2, "no data", anchor="middle", fill=_MUTED)
    return svg.done()


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str = "",
    y_label: str = "",
    subtitle: str = "",
    width: int = 640,
    height: int = 360,
    x_log: bool = False,
    y_log: bool = False,
    x_zero: bool = False,
    y_zero: bool = True,
    refs: Sequence[RefLine] = (),
) -> str:
    """Several series overlaid on shared axes (lines, markers, steps or scatter)."""
    clean = [_clean(s) for s in series]
    svg, left, top, right, bottom, rows = _frame(title, subtitle, [s.name for s in clean], width, height, y_label)
    box = (left, top, right, bottom)
    all_x = [x for s in clean for x in s.xs]
    all_y = [y for s in clean for y in s.ys]
    if not all_x:
        return _no_data(svg, box)
    xa = _axis(all_x, log=x_log, zero=x_zero, extra=[r.value for r in refs if r.axis == "x"])
    ya = _axis(all_y, log=y_log, zero=y_zero, extra=[r.value for r in refs if r.axis == "y"])
    _draw_axes(svg, xa, ya, box, x_label, y_label, _step_of(xa.ticks), _step_of(ya.ticks))

    def px(x: float) -> float:
        return left + xa.frac(x) * (right - left)

    def py(y: float) -> float:
        return bottom - ya.frac(y) * (bottom - top)

    for r in refs:
        if r.axis == "y":
            y = py(r.value)
            svg.add(
                f'<line x1="{_f(left)}" y1="{_f(y)}" x2="{_f(right)}" y2="{_f(y)}" stroke="{r.color}" '
                f'stroke-width="1.2" stroke-dasharray="6 4"/>'
            )
            if r.label:
                svg.text(right - 4, y - 5, r.label, anchor="end", size=11, fill=r.color)
        else:
            x = px(r.value)
            svg.add(
                f'<line x1="{_f(x)}" y1="{_f(top)}" x2="{_f(x)}" y2="{_f(bottom)}" stroke="{r.color}" '
                f'stroke-width="1.2" stroke-dasharray="6 4"/>'
            )
            if r.label and x + 4 + _text_width(r.label, 11) > right:  # no room right of the line: left of it
                svg.text(x - 4, top + 12, r.label, anchor="end", size=11, fill=r.color)
            elif r.label:
                svg.text(x + 4, top + 12, r.label, size=11, fill=r.color)

    for i, s in enumerate(clean):
        color = s.color or PALETTE[i % len(PALETTE)]
        faint = f' opacity="{s.opacity:.2f}"' if s.opacity < 1 else ""
        pts = [(px(x), py(y)) for x, y in zip(s.xs, s.ys)]
        if s.step and len(pts) > 1:
            stepped = [pts[0]]
            for (_x0, y0), (x1, y1) in itertools.pairwise(pts):
                stepped += [(x1, y0), (x1, y1)]
            pts_line = stepped
        else:
            pts_line = pts
        if s.fill and len(pts_line) > 1:
            d = " ".join(f"{_f(x)},{_f(y)}" for x, y in pts_line)
            svg.add(
                f'<polygon points="{_f(pts_line[0][0])},{_f(bottom)} {d} {_f(pts_line[-1][0])},{_f(bottom)}" '
                f'fill="{color}" fill-opacity="0.15" stroke="none"/>'
            )
        if s.lines and len(pts_line) > 1:
            d = "M" + " L".join(f"{_f(x)},{_f(y)}" for x, y in pts_line)
            dash = ' stroke-dasharray="7 4"' if s.dashed else ""
            svg.add(
                f'<path d="{d}" fill="none" stroke="{color}" stroke-width="2" stroke-linejoin="round"{dash}{faint}/>'
            )
        markers = s.markers if s.markers is not None else (len(pts) <= _MAX_MARKERS or not s.lines)
        if markers and len(pts) > _MAX_TOOLTIPS:  # a dense scatter: one path of dots, no tooltips
            d = "".join(f"M{_f(x - 1.6)},{_f(y)}a1.6,1.6 0 1,0 3.2,0a1.6,1.6 0 1,0 -3.2,0" for x, y in pts)
            svg.add(f'<path d="{d}" fill="{color}" fill-opacity="0.75" stroke="none"{faint}/>')
        elif markers:
            radius = 3.5 if s.lines else 2.5
            for j, ((x, y), (dx, dy)) in enumerate(zip(pts, zip(s.xs, s.ys))):
                tip = f"{s.name}: {format_number(dx)}, {format_number(dy)}"
                if s.labels and j < len(s.labels):
                    tip = f"{s.name} [{s.labels[j]}]: x={format_number(dx)}, y={format_number(dy)}"
                svg.add(
                    f'<circle cx="{_f(x)}" cy="{_f(y)}" r="{radius}" fill="{color}" stroke="#ffffff" '
                    f'stroke-width="1"{faint}><title>{escape(tip)}</title></circle>'
                )
        if s.labels:
            for (x, y), lab in zip(pts, s.labels):
                if lab:
                    svg.text(x + 5, y - 6, lab, size=10, fill=color)
    _legend(svg, rows, clean, top)
    return svg.done()


def _legend(svg: _Svg, rows: list, series: Sequence[Series], top: float) -> None:
    y = top - 10 - 18 * len(rows) + 12
    for row in rows:
        x = 70.0
        for i, name, w in row:
            s = series[i]
            color = s.color or PALETTE[i % len(PALETTE)]
            dash = ' stroke-dasharray="5 3"' if s.dashed else ""
            faint = f' opacity="{s.opacity:.2f}"' if s.opacity < 1 else ""
            svg.add(
                f'<line x1="{_f(x)}" y1="{_f(y - 4)}" x2="{_f(x + 16)}" y2="{_f(y - 4)}" stroke="{color}" '
                f'stroke-width="3"{dash}{faint}/>'
            )
            svg.text(x + 22, y, name, size=12, fill=_INK)
            x += w
        y += 18


def _clean(s: Series) -> Series:
    """Drop non-finite points (and their labels); keep order."""
    keep = [
        i
        for i, (x, y) in enumerate(zip(s.xs, s.ys))
        if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
    ]
    labels = [s.labels[i] for i in keep] if s.labels else None
    return Series(
        s.name,
        [float(s.xs[i]) for i in keep],
        [float(s.ys[i]) for i in keep],
        s.color,
        s.dashed,
        s.markers,
        labels,
        s.lines,
        s.step,
        s.fill,
        s.opacity,
    )


def _finite_sorted(values: Sequence[float] | np.ndarray, positive: bool = False) -> np.ndarray:
    a = np.array(values, dtype=float).ravel()  # None -> nan
    a = a[np.isfinite(a)]
    return np.sort(a[a > 0] if positive else a)


def histogram_chart(
    samples: Sequence[tuple[str, Samples]],
    *,
    title: str,
    x_label: str = "",
    subtitle: str = "",
    bins: int | None = None,
    width: int = 640,
    height: int = 360,
    refs: Sequence[RefLine] = (),
) -> str:
    """Histograms of one or more samples on shared bins (share of each sample, %).

    The range is [min, P99.5] over all samples so one outlier does not squash the shape; values
    above the range are counted in the last bin and said in the subtitle.
    """
    data = [(n, _finite_sorted(vs)) for n, vs in samples]
    data = [(n, vs) for n, vs in data if vs.size]
    if not data:
        svg, left, top, right, bottom, _ = _frame(title, subtitle, [], width, height, "share")
        return _no_data(svg, (left, top, right, bottom))
    pooled = data[0][1] if len(data) == 1 else np.sort(np.concatenate([vs for _, vs in data]))
    if bins is None:  # about 2·sqrt(n) bins, 8..40: few samples do not shatter into spikes
        bins = max(8, min(40, int(2 * math.sqrt(max(len(vs) for _, vs in data)))))
    lo = float(pooled[0])
    hi = float(pooled[int(0.995 * (len(pooled) - 1))])
    if hi <= lo:
        hi = lo + (abs(lo) * 0.1 or 1.0)
    ticks = nice_ticks(lo, hi, target=6)
    lo_e, hi_e = ticks[0], ticks[-1]
    width_bin = (hi_e - lo_e) / bins
    over = int(np.count_nonzero(pooled > hi_e))
    note = f"{over} value(s) above {format_number(hi_e)} counted in the last bin" if over else ""
    subtitle = "; ".join(p for p in (subtitle, note) if p)
    series = []
    for i, (name, vs) in enumerate(data):
        k = np.clip(((vs - lo_e) / width_bin).astype(np.int64), 0, bins - 1)
        share = [100.0 * float(c) / vs.size for c in np.bincount(k, minlength=bins)]
        xs = [lo_e + k * width_bin for k in range(bins)] + [hi_e]
        series.append(
            Series(name, xs, [*share, share[-1]], PALETTE[i % len(PALETTE)], step=True, fill=True, markers=False)
        )
    return line_chart(
        series,
        title=title,
        x_label=x_label,
        y_label="share of values (%)",
        subtitle=subtitle,
        width=width,
        height=height,
        x_zero=False,
        refs=refs,
    )


def cdf_chart(
    samples: Sequence[tuple[str, Samples]],
    *,
    title: str,
    x_label: str = "",
    subtitle: str = "",
    width: int = 640,
    height: int = 360,
    x_log: bool = False,
    max_points: int = 400,
    refs: Sequence[RefLine] = (),
) -> str:
    """Empirical CDFs (percentile 0-100 on y) of one or more samples, overlaid."""
    series = []
    for i, (name, vs) in enumerate(samples):
        v = _finite_sorted(vs, positive=x_log)
        if not v.size:
            continue
        n = int(v.size)
        if n <= max_points:
            idx = list(range(n))
        else:
            idx = sorted({min(n - 1, round(k * (n - 1) / (max_points - 1))) for k in range(max_points)})
        xs, ys = [float(v[k]) for k in idx], [100.0 * (k + 1) / n for k in idx]
        series.append(Series(name, xs, ys, PALETTE[i % len(PALETTE)], step=True, markers=False))
    refs = [*refs, RefLine(50.0, "P50", "y", _MUTED), RefLine(99.0, "P99", "y", _MUTED)]
    return line_chart(
        series,
        title=title,
        x_label=x_label,
        y_label="percentile",
        subtitle=subtitle,
        width=width,
        height=height,
        x_log=x_log,
        refs=refs,
    )
