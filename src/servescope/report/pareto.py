"""Throughput per GPU against interactivity: the Pareto chart and the table read off its front.

A side is a list of runs (a sweep's load levels, or several runs of `report`/`compare`); each run is
a point: x = tokens/s per user (1000 / median TPOT), y = output tokens/s per GPU. When any run
lacks a GPU count (`--gpus`, or the emulator's deployment) every side is drawn per deployment
instead, so the axes stay one quantity. The front and the readings at interactivity levels come
from `results.interactivity` (pure); this module renders them (SVG and HTML, escaped, byte-stable).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servescope.report.charts import line_chart
from servescope.report.layout import esc, fmt
from servescope.report.svgplot import PALETTE, RefLine, Series
from servescope.results.interactivity import (
    DEFAULT_LEVELS,
    LevelReading,
    ParetoPoint,
    pareto_front,
    read_front,
)
from servescope.results.metrics import dig
from servescope.results.schema import Summary

__all__ = ["ENERGY_PATH", "Frontier", "frontiers", "interactivity_rows", "pareto_chart", "pareto_section"]

#: Where a summary carries the energy per output token (results/energy.py, with --gpu-metrics-url or
#: nvml): the table's J/token column appears only when some run has it.
ENERGY_PATH = ("energy", "joules_per_output_token")

_FAINT = 0.3
_LEVEL_COLOR = "#9ca3af"


@dataclass(slots=True)
class Frontier:
    """One side: its runs as points, and the front among them."""

    name: str
    points: list[ParetoPoint]
    front: list[ParetoPoint]


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def tokens_per_user(s: Summary) -> float | None:
    """1000 / median TPOT: the summary's own figure, or from its TPOT (summaries before it)."""
    x = _num(dig(s, "interactivity", "tokens_per_s_per_user"))
    if x is None:
        tpot = _num(dig(s, "latency_ms", "tpot", "median"))
        x = 1000.0 / tpot if tpot else None
    return x


def per_gpu_basis(summaries: Sequence[Summary]) -> bool:
    """True when every run knows its output tokens/s per GPU (the chart's y can be per GPU)."""
    return bool(summaries) and all(
        _num(dig(s, "interactivity", "output_tokens_per_s_per_gpu")) is not None for s in summaries
    )


def _point(s: Summary, label: str, per_gpu: bool) -> ParetoPoint | None:
    x = tokens_per_user(s)
    y = _num(
        dig(s, "interactivity", "output_tokens_per_s_per_gpu")
        if per_gpu
        else dig(s, "throughput", "output_tokens_per_s")
    )
    if x is None or y is None:
        return None
    price = _num(dig(s, "cost", "usd_per_gpu_hour") if per_gpu else dig(s, "cost", "usd_per_hour"))
    return ParetoPoint(x, y, label, price, _num(dig(s, *ENERGY_PATH)))


def frontiers(sides: Sequence[tuple[str, Sequence[tuple[str, Summary]]]]) -> tuple[list[Frontier], bool]:
    """(name, [(point label, summary)]) per side -> each side's points and front; and whether y is per GPU."""
    per_gpu = per_gpu_basis([s for _, runs in sides for _, s in runs])
    out = []
    for name, runs in sides:
        pts = [p for label, s in runs if (p := _point(s, label, per_gpu)) is not None]
        out.append(Frontier(name, pts, pareto_front(pts)))
    return out, per_gpu


def _y_words(per_gpu: bool) -> str:
    return "output tok/s per GPU" if per_gpu else "output tok/s (whole deployment)"


def pareto_chart(fronts: Sequence[Frontier], per_gpu: bool, levels: Sequence[float] = DEFAULT_LEVELS) -> str:
    """Every run faint, each side's front as a labelled line; the interactivity levels as dashed verticals."""
    multi = len(fronts) > 1
    series: list[Series] = []
    for i, f in enumerate(fronts):
        color = PALETTE[i % len(PALETTE)]
        on_front = set(map(id, f.front))
        dominated = [p for p in f.points if id(p) not in on_front]
        if dominated:
            series.append(
                Series(
                    f"{f.name} · dominated" if multi else "dominated runs",
                    [p.x for p in dominated],
                    [p.y for p in dominated],
                    color,
                    lines=False,
                    markers=True,
                    opacity=_FAINT,
                )
            )
        series.append(
            Series(
                f"{f.name} · Pareto front" if multi else "Pareto front",
                [p.x for p in f.front],
                [p.y for p in f.front],
                color,
                markers=True,
                labels=[p.label for p in f.front],
            )
        )
    refs = [RefLine(v, f"{v:g}/user", "x", _LEVEL_COLOR) for v in levels]
    sub = "" if per_gpu else "GPU count unknown (give --gpus): throughput of the whole deployment"
    return line_chart(
        series,
        title="Throughput per GPU vs interactivity" if per_gpu else "Throughput vs interactivity",
        subtitle=sub,
        x_label="interactivity: tokens/s per user (1000 / median TPOT)",
        y_label=_y_words(per_gpu),
        x_zero=True,
        refs=refs,
    )


def _where(r: LevelReading) -> str:
    if r.status == "measured" and r.left:
        return f"measured: {r.left.label}"
    if r.status == "interpolated" and r.left and r.right:
        return (
            f"between {r.left.label} ({fmt(r.left.x, digits=1)}/user) and {r.right.label} "
            f"({fmt(r.right.x, digits=1)}/user)"
        )
    if r.status == "below_range" and r.left:
        return (
            f"extrapolated: below the measured range; {r.left.label} already gives {fmt(r.left.x, digits=1)} "
            "tok/s per user (a lower bound)"
        )
    if r.status == "not_reached" and r.left:
        return f"extrapolated: not reached; the fastest run, {r.left.label}, gave {fmt(r.left.x, digits=1)}/user"
    return "no run with a TPOT"


def interactivity_rows(fronts: Sequence[Frontier], levels: Sequence[float]) -> list[tuple[Frontier, LevelReading]]:
    return [(f, read_front(f.front, level)) for f in fronts for level in levels]


def interactivity_table(fronts: Sequence[Frontier], per_gpu: bool, levels: Sequence[float]) -> str:
    """Best throughput at each level, with $/1M and J/token where known; extrapolations say so."""
    readings = interactivity_rows(fronts, levels)
    has_cost = any(r.usd_per_1m_tokens is not None for _, r in readings)
    has_energy = any(p.j_per_token is not None for f in fronts for p in f.points)
    multi = len(fronts) > 1
    rows = []
    for f, r in readings:
        bound = "≥ " if r.status == "below_range" else ""
        value = "—" if r.y is None else bound + fmt(r.y, digits=1)
        row = ([esc(f.name)] if multi else []) + [fmt(r.level, digits=0 if float(r.level).is_integer() else 1), value]
        if has_cost:
            usd = r.usd_per_1m_tokens
            row.append("—" if usd is None else ("≤ " if bound else "") + "$" + fmt(usd, digits=3))
        if has_energy:
            row.append("—" if r.j_per_token is None else fmt(r.j_per_token, digits=3))
        row.append(f'<span class="{"muted" if r.extrapolated else ""}">{esc(_where(r))}</span>')
        rows.append(row)
    head = (
        (["side"] if multi else [])
        + ["tok/s per user", f"best {_y_words(per_gpu)}"]
        + (["$ per 1M output tokens"] if has_cost else [])
        + (["J per output token"] if has_energy else [])
        + ["read off the front"]
    )
    first_txt, last = (1 if multi else 0), len(head) - 1

    def cls(i: int) -> str:
        return "txt" if i < first_txt or i == last else ""

    th = "".join(f'<th class="{cls(i)}">{esc(h)}</th>' for i, h in enumerate(head))
    trs = "".join("<tr>" + "".join(f'<td class="{cls(i)}">{c}</td>' for i, c in enumerate(r)) + "</tr>" for r in rows)
    return (
        f'<div class="tablewrap"><table class="interactivity"><thead><tr>{th}</tr></thead>'
        f"<tbody>{trs}</tbody></table></div>"
    )


def pareto_section(
    sides: Sequence[tuple[str, Sequence[tuple[str, Summary]]]], levels: Sequence[float] = DEFAULT_LEVELS
) -> tuple[str, dict[str, str]]:
    """The report's section: heading, explanation, the table and the chart (`pareto`); empty when no
    run has a TPOT to place it on the chart."""
    fronts, per_gpu = frontiers(sides)
    if not any(f.points for f in fronts):
        return "", {}
    intro = (
        "Each run is a point: what one user sees (tokens/s per user = 1000 / median TPOT) against what "
        f"the deployment delivers ({esc(_y_words(per_gpu))}). The Pareto front joins the runs no other run "
        "beats on both; dominated runs are drawn faint. The table reads the best throughput off the front at "
        "each interactivity level, linearly between the two runs around it; outside the measured range it "
        "says so (≥: a lower bound below the slowest run; —: no run was that fast)."
    )
    if not per_gpu:
        intro += " The GPU count is unknown for some run: give <code>--gpus N</code> for throughput per GPU."
    html = (
        f'<h2 id="interactivity">Interactivity: throughput{" per GPU" if per_gpu else ""} vs tokens/s per user</h2>'
        f'<p class="muted">{intro}</p>' + interactivity_table(fronts, per_gpu, levels)
    )
    return html, {"pareto": pareto_chart(fronts, per_gpu, levels)}
