"""The requests' Gantt chart as SVG (one row per request in send order: waiting for the first token,
generating, failed), drawn with the frame, axes and legend of `svgplot.py`; pure and deterministic
as the other charts (the same data gives the same bytes)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from servescope.report.svgplot import (
    PALETTE,
    Axis,
    Series,
    Svg,
    axis_for,
    chart_frame,
    coord,
    draw_axes,
    draw_legend,
    no_data,
    step_of,
)
from servescope.report.ticks import nice_ticks

__all__ = ["gantt_chart", "gantt_columns", "session_gantt"]

_NAMES = ["waiting for first token", "generating", "failed"]
_COLORS = ["#fdba74", PALETTE[0], "#dc2626"]


def gantt_chart(
    bars: Sequence[tuple[float, float | None, float, bool]],
    *,
    title: str,
    x_label: str = "run time (s)",
    subtitle: str = "",
    width: int = 640,
    height: int = 360,
    max_rows: int = 2000,
    presorted: bool = False,
) -> str:
    """One row per request, top to bottom in send order: (send, first token or None, end, failed).

    Waiting for the first token is drawn light, generating dark, failures red. With more than
    `max_rows` requests an evenly spaced subset is drawn and the subtitle says so.
    """
    # presorted: the caller gives them in send order, every send and end finite
    rows = list(bars) if presorted else sorted(b for b in bars if all(math.isfinite(v) for v in (b[0], b[2])))
    first = [math.nan if r[1] is None else r[1] for r in rows]
    return gantt_columns(
        np.asarray([r[0] for r in rows], dtype=float),
        np.asarray(first, dtype=float),
        np.asarray([r[2] for r in rows], dtype=float),
        np.asarray([r[3] for r in rows], dtype=bool),
        title=title,
        x_label=x_label,
        subtitle=subtitle,
        width=width,
        height=height,
        max_rows=max_rows,
    )


def gantt_columns(
    send: np.ndarray,
    first: np.ndarray,
    end: np.ndarray,
    failed: np.ndarray,
    *,
    title: str,
    x_label: str = "run time (s)",
    subtitle: str = "",
    width: int = 640,
    height: int = 360,
    max_rows: int = 2000,
) -> str:
    """`gantt_chart` of requests given as columns in send order (every send and end finite; `first`
    NaN where there was no first token): the axis from every request, the rows drawn only for the
    evenly spaced subset, so a million requests cost no Python object each."""
    n = int(send.size)
    order = np.arange(n)
    if n > max_rows:  # an evenly spaced subset, each drawn at its own position in send order
        order = np.arange(max_rows) * n // max_rows
        subtitle = "; ".join(p for p in (subtitle, f"{max_rows} of {n} requests shown") if p)
    svg, left, top, right, bottom, legend_rows = chart_frame(title, subtitle, _NAMES, width, height, "request")
    box = (left, top, right, bottom)
    if not n:
        return no_data(svg, box)
    xa = axis_for(np.concatenate([end, send]), log=False, zero=True)
    ticks = [t for t in nice_ticks(0, n) if t <= n]
    ya = Axis(float(n), 0.0, ticks, False)
    draw_axes(svg, xa, ya, box, x_label, "request (send order)", step_of(xa.ticks), step_of(ticks))
    row_h = (bottom - top) / n
    stroke = max(0.6, min(6.0, row_h * 0.75))
    stroke = max(stroke, min(6.0, (bottom - top) / order.size * 0.75))
    rows = zip(order.tolist(), send[order].tolist(), first[order].tolist(), end[order].tolist(), failed[order].tolist())
    return _bars(svg, rows, xa, box, row_h, stroke, 3.0, legend_rows)


def session_gantt(
    lanes: Sequence[str],
    bars: Sequence[tuple[int, float, float | None, float, bool]],
    *,
    title: str,
    subtitle: str = "",
    width: int = 640,
    height: int = 360,
    max_lanes: int = 200,
) -> str:
    """Agent sessions over time: one lane per agent of each session (`lanes`, top to bottom: a
    session's main agent, then its sub-agents), each turn a bar (lane, send, first token or None, end,
    failed) drawn as in `gantt_columns`; the gaps between a lane's bars are its tool waits. With more
    than `max_lanes` lanes the first ones are drawn and the subtitle says so."""
    n = min(len(lanes), max_lanes)
    if len(lanes) > max_lanes:
        subtitle = "; ".join(p for p in (subtitle, f"the first {max_lanes} of {len(lanes)} lanes shown") if p)
    svg, left, top, right, bottom, legend_rows = chart_frame(title, subtitle, _NAMES, width, height, "session")
    box = (left, top, right, bottom)
    shown = [b for b in bars if b[0] < n and math.isfinite(b[1]) and math.isfinite(b[3])]
    if not shown:
        return no_data(svg, box)
    xa = axis_for(np.array([v for b in shown for v in (b[1], b[3])], dtype=float), log=False, zero=True)
    ticks = [t for t in nice_ticks(0, n) if t <= n and float(t).is_integer()]  # lanes are whole
    ya = Axis(float(n), 0.0, ticks, False)
    draw_axes(
        svg, xa, ya, box, "run time (s)", "lane (session, then its sub-agents)", step_of(xa.ticks), step_of(ticks)
    )
    row_h = (bottom - top) / n
    stroke = max(0.8, min(8.0, row_h * 0.7))
    return _bars(svg, shown, xa, box, row_h, stroke, 2.0, legend_rows)


def _bars(
    svg: Svg,
    rows: Iterable[tuple[int, float, float | None, float, bool]],
    xa: Axis,
    box: tuple[float, float, float, float],
    row_h: float,
    stroke: float,
    min_px: float,
    legend_rows: list,
) -> str:
    """Draw each row's bar (row, send, first token or None/NaN, end, failed) as waiting then generating,
    or one bar of at least `min_px` where it failed or had no first token; then the legend."""
    left, top, right, _ = box
    paths: list[list[str]] = [[], [], []]
    for row, s, f, e, bad in rows:
        y = top + (row + 0.5) * row_h
        x0 = left + xa.frac(s) * (right - left)
        x2 = left + xa.frac(e) * (right - left)
        if bad or f is None or math.isnan(f):
            paths[2 if bad else 0].append(f"M{coord(x0)},{coord(y)}H{coord(max(x2, x0 + min_px))}")
            continue
        x1 = left + xa.frac(f) * (right - left)
        paths[0].append(f"M{coord(x0)},{coord(y)}H{coord(max(x1, x0 + 0.5))}")
        paths[1].append(f"M{coord(x1)},{coord(y)}H{coord(max(x2, x1 + 0.5))}")
    for d, color in zip(paths, _COLORS):
        if d:
            svg.add(f'<path d="{"".join(d)}" fill="none" stroke="{color}" stroke-width="{stroke:.2f}"/>')
    draw_legend(svg, legend_rows, [Series(nm, [], [], c) for nm, c in zip(_NAMES, _COLORS)], top)
    return svg.done()
