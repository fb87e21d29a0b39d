"""SVG charts with no plotting library (numpy only): data in, SVG text out. The chart kinds: lines
(markers, steps, scatter, shaded areas, reference lines), histograms and empirical CDFs; they are drawn
with the primitives of `svgplot.py`, as is the requests' Gantt chart (`gantt.py`).

Pure and deterministic: the same data gives the same bytes (fixed float formatting, no ids, no
timestamps, no randomness), so a report re-rendered from the same results is byte-identical.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from html import escape

import numpy as np

from servescope.report.svgplot import (
    MUTED,
    PALETTE,
    RefLine,
    Samples,
    Series,
    axis_for,
    chart_frame,
    coord,
    draw_axes,
    draw_legend,
    no_data,
    step_of,
    text_width,
)
from servescope.report.ticks import format_number, nice_ticks

__all__ = ["line_chart", "histogram_chart", "cdf_chart"]

_MAX_MARKERS = 80  # more points than this: draw the line only
_MAX_TOOLTIPS = 400  # more markers than this: one path of dots without per-point tooltips


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
    svg, left, top, right, bottom, rows = chart_frame(title, subtitle, [s.name for s in clean], width, height, y_label)
    box = (left, top, right, bottom)
    all_x = [x for s in clean for x in s.xs]
    all_y = [y for s in clean for y in s.ys]
    if not all_x:
        return no_data(svg, box)
    xa = axis_for(all_x, log=x_log, zero=x_zero, extra=[r.value for r in refs if r.axis == "x"])
    ya = axis_for(all_y, log=y_log, zero=y_zero, extra=[r.value for r in refs if r.axis == "y"])
    draw_axes(svg, xa, ya, box, x_label, y_label, step_of(xa.ticks), step_of(ya.ticks))

    def px(x: float) -> float:
        return left + xa.frac(x) * (right - left)

    def py(y: float) -> float:
        return bottom - ya.frac(y) * (bottom - top)

    for r in refs:
        if r.axis == "y":
            y = py(r.value)
            svg.add(
                f'<line x1="{coord(left)}" y1="{coord(y)}" x2="{coord(right)}" y2="{coord(y)}" stroke="{r.color}" '
                f'stroke-width="1.2" stroke-dasharray="6 4"/>'
            )
            if r.label:
                svg.text(right - 4, y - 5, r.label, anchor="end", size=11, fill=r.color)
        else:
            x = px(r.value)
            svg.add(
                f'<line x1="{coord(x)}" y1="{coord(top)}" x2="{coord(x)}" y2="{coord(bottom)}" stroke="{r.color}" '
                f'stroke-width="1.2" stroke-dasharray="6 4"/>'
            )
            if r.label and x + 4 + text_width(r.label, 11) > right:  # no room right of the line: left of it
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
            d = " ".join(f"{coord(x)},{coord(y)}" for x, y in pts_line)
            svg.add(
                f'<polygon points="{coord(pts_line[0][0])},{coord(bottom)} {d} '
                f'{coord(pts_line[-1][0])},{coord(bottom)}" '
                f'fill="{color}" fill-opacity="0.15" stroke="none"/>'
            )
        if s.lines and len(pts_line) > 1:
            d = "M" + " L".join(f"{coord(x)},{coord(y)}" for x, y in pts_line)
            dash = ' stroke-dasharray="7 4"' if s.dashed else ""
            svg.add(
                f'<path d="{d}" fill="none" stroke="{color}" stroke-width="2" stroke-linejoin="round"{dash}{faint}/>'
            )
        markers = s.markers if s.markers is not None else (len(pts) <= _MAX_MARKERS or not s.lines)
        if markers and len(pts) > _MAX_TOOLTIPS:  # a dense scatter: one path of dots, no tooltips
            d = "".join(f"M{coord(x - 1.6)},{coord(y)}a1.6,1.6 0 1,0 3.2,0a1.6,1.6 0 1,0 -3.2,0" for x, y in pts)
            svg.add(f'<path d="{d}" fill="{color}" fill-opacity="0.75" stroke="none"{faint}/>')
        elif markers:
            radius = 3.5 if s.lines else 2.5
            for j, ((x, y), (dx, dy)) in enumerate(zip(pts, zip(s.xs, s.ys))):
                tip = f"{s.name}: {format_number(dx)}, {format_number(dy)}"
                if s.labels and j < len(s.labels):
                    tip = f"{s.name} [{s.labels[j]}]: x={format_number(dx)}, y={format_number(dy)}"
                svg.add(
                    f'<circle cx="{coord(x)}" cy="{coord(y)}" r="{radius}" fill="{color}" stroke="#ffffff" '
                    f'stroke-width="1"{faint}><title>{escape(tip)}</title></circle>'
                )
        if s.labels:
            for (x, y), lab in zip(pts, s.labels):
                if lab:
                    svg.text(x + 5, y - 6, lab, size=10, fill=color)
    draw_legend(svg, rows, clean, top)
    return svg.done()


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
        svg, left, top, right, bottom, _ = chart_frame(title, subtitle, [], width, height, "share")
        return no_data(svg, (left, top, right, bottom))
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
    refs = [*refs, RefLine(50.0, "P50", "y", MUTED), RefLine(99.0, "P99", "y", MUTED)]
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
