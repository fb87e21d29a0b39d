"""SVG plotting primitives (numpy only): the palette and ink colours, the `Series` and `RefLine` a chart
is given, axes and their ticks, the SVG document, the chart's frame (title, subtitle, legend rows),
its drawn axes, legend and empty state. The chart kinds built on them are in `charts.py` and
`gantt.py`.

Pure and deterministic: the same data gives the same bytes (fixed float formatting, no ids, no
timestamps, no randomness). Every piece of text is XML-escaped; every chart carries its own
presentation attributes, so the same string works inline in HTML and as a standalone `.svg` file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import TypeAlias

import numpy as np

from servescope.report.ticks import format_number, log_ticks, nice_ticks

__all__ = [
    "Samples",
    "PALETTE",
    "FONT",
    "INK",
    "MUTED",
    "GRID",
    "Series",
    "RefLine",
    "Axis",
    "coord",
    "axis_for",
    "text_width",
    "Svg",
    "chart_frame",
    "draw_axes",
    "step_of",
    "no_data",
    "draw_legend",
]

Samples: TypeAlias = "Sequence[float] | np.ndarray"  # a chart's raw values: a list or a numpy array


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
FONT = "system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif"
INK = "#1f2937"
MUTED = "#6b7280"
GRID = "#e5e7eb"


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
class Axis:
    """One axis: its range, its ticks and whether it is logarithmic; `frac` places a value on it."""

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


def coord(v: float) -> str:
    """Fixed formatting for coordinates: one decimal, never '-0.0'."""
    s = f"{v:.1f}"
    return "0.0" if s == "-0.0" else s


def axis_for(values: Samples, *, log: bool, zero: bool, extra: Sequence[float] = ()) -> Axis:
    """The axis that covers the finite `values` (and `extra`, e.g. reference lines) on round ticks."""
    arr = np.concatenate([np.asarray(values, dtype=float).ravel(), np.asarray(extra, dtype=float).ravel()])
    arr = arr[np.isfinite(arr) & ((arr > 0) | (not log))]  # (numpy: a million values in milliseconds)
    if not arr.size:
        return Axis(1.0, 10.0, [1.0, 10.0], log) if log else Axis(0.0, 1.0, nice_ticks(0, 1), log)
    lo, hi = float(arr.min()), float(arr.max())
    if log:
        t = log_ticks(lo, hi)
        return Axis(t[0], t[-1], t, True)
    if zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    t = nice_ticks(lo, hi)
    return Axis(t[0], t[-1], t, False)


def text_width(s: str, size: float = 12.0) -> float:
    """Estimated width of `s` in pixels at font `size` (no font metrics: an average glyph width)."""
    return len(s) * size * 0.56


class Svg:
    """An SVG document being written: its parts in order, `done` closes it."""

    def __init__(self, width: int, height: int, title: str) -> None:
        self.parts: list[str] = [
            (
                f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
                f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}" '
                f'font-family="{escape(FONT)}" font-size="12" class="sb-chart">'
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
        fill: str = INK,
        weight: str = "normal",
        rotate: bool = False,
    ) -> None:
        tr = f' transform="rotate(-90 {coord(x)} {coord(y)})"' if rotate else ""
        fw = f' font-weight="{weight}"' if weight != "normal" else ""
        self.add(
            f'<text x="{coord(x)}" y="{coord(y)}" text-anchor="{anchor}" font-size="{size:g}" '
            f'fill="{fill}"{fw}{tr}>{escape(s)}</text>'
        )

    def done(self) -> str:
        return "\n".join([*self.parts, "</svg>"]) + "\n"


def _legend_rows(names: list[str], max_width: float) -> list[list[tuple[int, str, float]]]:
    rows: list[list[tuple[int, str, float]]] = [[]]
    used = 0.0
    for i, n in enumerate(names):
        w = 22 + text_width(n) + 14
        if rows[-1] and used + w > max_width:
            rows.append([])
            used = 0.0
        rows[-1].append((i, n, w))
        used += w
    return rows


def chart_frame(
    title: str, subtitle: str, names: list[str], width: int, height: int, y_label: str
) -> tuple[Svg, float, float, float, float, list]:
    """A chart's document with its title, subtitle and room for the legend rows: (svg, plot box
    left, top, right, bottom, legend rows)."""
    svg = Svg(width, height, title)
    svg.text(14, 22, title, size=15, weight="600")
    top = 32.0
    if subtitle:
        svg.text(14, 40, subtitle, size=11.5, fill=MUTED)
        top = 48.0
    rows = _legend_rows(names, width - 90) if len(names) > 1 else []
    top += 10 + 18 * len(rows)
    left = 70.0 if y_label else 56.0
    return svg, left, top, width - 24.0, height - 50.0, rows


def draw_axes(
    svg: Svg,
    xa: Axis,
    ya: Axis,
    box: tuple[float, float, float, float],
    x_label: str,
    y_label: str,
    x_fmt_step: float | None,
    y_fmt_step: float | None,
) -> None:
    """Grid lines, tick marks and labels, the two axis lines and the axis titles."""
    left, top, right, bottom = box
    for t in ya.ticks:
        y = bottom - ya.frac(t) * (bottom - top)
        svg.add(
            f'<line x1="{coord(left)}" y1="{coord(y)}" x2="{coord(right)}" y2="{coord(y)}" '
            f'stroke="{GRID}" stroke-width="1"/>'
        )
        svg.text(left - 6, y + 4, _tick_label(t, ya, y_fmt_step), anchor="end", size=11, fill=MUTED)
    for t in xa.ticks:
        x = left + xa.frac(t) * (right - left)
        svg.add(
            f'<line x1="{coord(x)}" y1="{coord(bottom)}" x2="{coord(x)}" y2="{coord(bottom + 4)}" '
            f'stroke="{MUTED}" stroke-width="1"/>'
        )
        svg.text(x, bottom + 17, _tick_label(t, xa, x_fmt_step), anchor="middle", size=11, fill=MUTED)
    axis = f'stroke="{MUTED}" stroke-width="1"/>'
    svg.add(f'<line x1="{coord(left)}" y1="{coord(bottom)}" x2="{coord(right)}" y2="{coord(bottom)}" {axis}')
    svg.add(f'<line x1="{coord(left)}" y1="{coord(top)}" x2="{coord(left)}" y2="{coord(bottom)}" {axis}')
    if x_label:
        svg.text((left + right) / 2, bottom + 38, x_label, anchor="middle", size=12, fill=INK)
    if y_label:
        svg.text(16, (top + bottom) / 2, y_label, anchor="middle", size=12, fill=INK, rotate=True)


def _tick_label(t: float, axis: Axis, step: float | None) -> str:
    if axis.log:
        return format_number(t, t if t >= 1 else None) if t >= 1e4 else f"{t:g}"
    return format_number(t, step)


def step_of(ticks: list[float]) -> float | None:
    """The step between ticks, for their labels' decimals; None for fewer than two ticks."""
    return ticks[1] - ticks[0] if len(ticks) > 1 else None


def no_data(svg: Svg, box: tuple[float, float, float, float]) -> str:
    """Close `svg` with a grey 'no data' plot box."""
    left, top, right, bottom = box
    svg.add(
        f'<rect x="{coord(left)}" y="{coord(top)}" width="{coord(right - left)}" height="{coord(bottom - top)}" '
        f'fill="#f9fafb" stroke="{GRID}"/>'
    )
    svg.text((left + right) / 2, (top + bottom) / 2, "no data", anchor="middle", fill=MUTED)
    return svg.done()


def draw_legend(svg: Svg, rows: list, series: Sequence[Series], top: float) -> None:
    """One swatch and name per series, in the rows `chart_frame` made room for above the plot."""
    y = top - 10 - 18 * len(rows) + 12
    for row in rows:
        x = 70.0
        for i, name, w in row:
            s = series[i]
            color = s.color or PALETTE[i % len(PALETTE)]
            dash = ' stroke-dasharray="5 3"' if s.dashed else ""
            faint = f' opacity="{s.opacity:.2f}"' if s.opacity < 1 else ""
            svg.add(
                f'<line x1="{coord(x)}" y1="{coord(y - 4)}" x2="{coord(x + 16)}" y2="{coord(y - 4)}" stroke="{color}" '
                f'stroke-width="3"{dash}{faint}/>'
            )
            svg.text(x + 22, y, name, size=12, fill=INK)
            x += w
        y += 18
