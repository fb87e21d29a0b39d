"""Pages over several runs: a sweep, the repeats of one configuration, and overlays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servescope.report.data import (
    RepeatsResult,
    SweepPoint,
    SweepResult,
    run_title,
    split_groups,
)
from servescope.report.figures import (
    get,
    runs_overlay_figures,
    slo_of,
    sweep_figures,
    sweep_limits,
)
from servescope.report.layout import REPORT, card, esc, figures_grid, fmt, page, table
from servescope.report.pareto import pareto_section
from servescope.report.ticks import format_number
from servescope.results.interactivity import DEFAULT_LEVELS
from servescope.results.schema import Summary
from servescope.results.store import RunResult

__all__ = ["point_label", "render_overlay", "render_repeats", "render_sweep"]


def _capacity(sw: SweepResult) -> tuple[SweepPoint | None, str]:
    slo = slo_of(sw.points[0].run.summary) if sw.points else {}
    metric_of = {"ttft_ms": "ttft", "tpot_ms": "tpot", "e2e_ms": "e2e", "ttfat_ms": "ttfat", "itl_ms": "itl"}
    checks = [(metric_of[k], v) for k, v in slo.items() if k in metric_of]
    if not checks:
        return None, ""
    ok = [
        p
        for p in sw.points
        if all(
            isinstance(get(p.run.summary, "latency_ms", m, "p99"), (int, float))
            and get(p.run.summary, "latency_ms", m, "p99") <= v
            for m, v in checks
        )
    ]
    words = " and ".join(f"P99 {m.upper()} ≤ {v:g} ms" for m, v in checks)
    return (ok[-1] if ok else None), words


def _sweep_verdicts(sw: SweepResult) -> list[str]:
    """The sweep's own answers (saturation, SLO capacity, find-max), else a P99 capacity check."""
    out = []
    for sat in sw.meta.get("saturation") or []:
        if isinstance(sat, dict) and sat.get("text"):
            out.append(f'<p class="verdict">Saturation{_lens(sat)}: {esc(sat["text"])}</p>')
    slo_text = get(sw.meta, "slo", "text") or ""
    for cap in sw.meta.get("slo_capacity") or []:
        if not isinstance(cap, dict):
            continue
        lens = "" if sw.sessions else _lens(cap)  # an agent workload's lengths are its own
        usd = get(cap, "cost", "usd_per_1m_output_tokens")
        if cap.get("load") is None:
            out.append(f'<p class="verdict bad">SLO capacity{lens}: no load level meets {esc(slo_text)}.</p>')
        else:
            out.append(
                f'<p class="verdict good">SLO capacity{lens}: highest {esc(sw.x_label)} meeting '
                f"{esc(slo_text)} is {fmt(cap['load'])}"
                + (f", ${usd:,.3f} per 1M output tokens" if isinstance(usd, (int, float)) else "")
                + ".</p>"
            )
    for fm in sw.meta.get("find_max") or []:
        if isinstance(fm, dict) and fm.get("line"):
            out.append(f'<p class="verdict {"good" if fm.get("best") is not None else "bad"}">{esc(fm["line"])}</p>')
    if not out:
        cap_pt, words = _capacity(sw)
        if words and cap_pt:
            out.append(
                f'<p class="verdict good">Highest {esc(sw.x_label)} meeting {esc(words)}: {esc(cap_pt.label)} '
                f"({fmt(get(cap_pt.run.summary, 'throughput', 'output_tokens_per_s'), 'output tok/s')}).</p>"
            )
        elif words:
            out.append(f'<p class="verdict bad">No load level met {esc(words)}.</p>')
    notes = [str(n) for n in sw.meta.get("notes") or [] if n]  # points whose prefix cache was warm (sweep.summary)
    if notes:
        out.append('<div class="verdict warn"><ul>' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul></div>")
    return out


def _lens(doc: dict[str, Any]) -> str:
    if doc.get("input_len") is None and doc.get("output_len") is None:
        return ""
    return f" (in {esc(doc.get('input_len'))}, out {esc(doc.get('output_len'))})"


def _slo_cell(s: Summary) -> str:
    passed = get(s, "slo_check", "passed")
    if passed is None:
        return "–"
    return '<span class="better">pass</span>' if passed else '<span class="worse">fail</span>'


def point_label(sw: SweepResult, p: SweepPoint) -> str:
    """ "c=16", "4 req/s", "in 1024": a load level as the Pareto chart labels it."""
    given = p.entry.get("load_label")
    if isinstance(given, str) and given:
        return given
    return {
        "concurrency": f"c={p.label}",
        "rate_rps": f"{p.label} req/s",
        "input_len": f"in {p.label}",
        "output_len": f"out {p.label}",
    }.get(sw.x_key, p.label)


def _pareto_sides(curves: Sequence[tuple[str, SweepResult]]) -> list[tuple[str, list[tuple[str, Summary]]]]:
    return [(name, [(point_label(sw, p), p.run.summary) for p in sw.points]) for name, sw in curves]


def render_sweep(
    sw: SweepResult, links: bool = True, levels: Sequence[float] = DEFAULT_LEVELS
) -> tuple[str, dict[str, str]]:
    groups = split_groups(sw)
    figs = sweep_figures(groups, sweep_limits(sw))
    pareto_html, pareto_figs = pareto_section(_pareto_sides(groups), levels)
    pts = sw.points
    best = max(pts, key=lambda p: get(p.run.summary, "throughput", "output_tokens_per_s") or 0.0) if pts else None
    cards = []
    if best:
        where = f"at {sw.x_key.replace('_rps', '')} {best.label}" + (f" ({best.group})" if best.group else "")
        cards.append(
            card(
                "Peak output throughput",
                fmt(get(best.run.summary, "throughput", "output_tokens_per_s"), "tok/s"),
                esc(where),
            )
        )
    cards.append(card("Load levels", fmt(len(pts)), esc(", ".join(dict.fromkeys(p.label for p in pts)))))
    if len(groups) > 1:
        cards.append(card("Length pairs", fmt(len(groups)), esc(", ".join(g for g, _ in groups))))
    has_slo = any(get(p.run.summary, "slo_check", "passed") is not None for p in pts)
    has_cost = any(isinstance(get(p.run.summary, "cost", "usd_per_1m_output_tokens"), (int, float)) for p in pts)
    rows = []
    for p in pts:
        s = p.run.summary
        name = esc(p.label)
        if links:
            name = f'<a href="{esc(p.run.path.name)}/{REPORT}">{name}</a>'
        row = (
            [name]
            + ([esc(p.group)] if len(groups) > 1 else [])
            + [
                fmt(get(s, "requests", "completed")),
                fmt(get(s, "requests", "failed")),
                fmt(get(s, "throughput", "offered_requests_per_s"), digits=2),
                fmt(get(s, "throughput", "requests_per_s"), digits=2),
                fmt(get(s, "throughput", "output_tokens_per_s"), digits=1),
                fmt(get(s, "throughput", "total_tokens_per_s"), digits=1),
                fmt(get(s, "latency_ms", "ttft", "median"), digits=1),
                fmt(get(s, "latency_ms", "ttft", "p99"), digits=1),
                fmt(get(s, "latency_ms", "itl", "median"), digits=1),
                fmt(get(s, "latency_ms", "itl", "p99"), digits=1),
                fmt(get(s, "latency_ms", "e2e", "median"), digits=0),
                fmt(get(s, "client", "schedule_lag_ms", "p99"), digits=2),
            ]
        )
        if has_slo:
            row.append(_slo_cell(s))
        if has_cost:
            row.append(fmt(get(s, "cost", "usd_per_1m_output_tokens"), digits=3))
        rows.append(row)
    head = (
        [sw.x_key.replace("_rps", " (req/s)")]
        + (["lengths"] if len(groups) > 1 else [])
        + [
            "done",
            "failed",
            "offered req/s",
            "req/s",
            "out tok/s",
            "total tok/s",
            "TTFT p50 ms",
            "TTFT p99 ms",
            "ITL p50 ms",
            "ITL p99 ms",
            "E2E p50 ms",
            "lag p99 ms",
        ]
        + (["SLO"] if has_slo else [])
        + (["$/1M out"] if has_cost else [])
    )
    points_table = table(head, rows, txt_cols=2 if len(groups) > 1 else 1)
    body = [
        f'<div class="cards">{"".join(cards)}</div>',
        *_sweep_verdicts(sw),
        "<h2>Load levels</h2>",
        points_table,
        pareto_html,
        figures_grid(pareto_figs) if pareto_figs else "",
        "<h2>Throughput and latency against load</h2>",
        figures_grid(figs),
    ]
    first = pts[0].run.summary if pts else None
    title = f"servescope sweep · {get(first, 'target', 'model') or sw.path.name}"
    loads = ", ".join(dict.fromkeys(p.label for p in pts))
    sub = (
        f"{run_title(first, with_load=False, with_workload=len(groups) == 1)} · {sw.x_label} {loads}"
        if pts
        else "empty sweep"
    )
    return page(title, sub, "\n".join(b for b in body if b)), {**pareto_figs, **figs}


def _as_sweep(run: RunResult) -> SweepResult:
    c = get(run.summary, "load", "concurrency")
    x = float(c) if isinstance(c, (int, float)) else 1.0
    return SweepResult(run.path, {}, "concurrency", [SweepPoint(x, f"{x:g}", run)])


def render_overlay(
    sides: Sequence[tuple[str, RunResult | SweepResult | RepeatsResult]],
    *,
    title: str = "servescope overlay",
    prelude: str = "",
    levels: Sequence[float] | None = DEFAULT_LEVELS,
) -> tuple[str, dict[str, str]]:
    """Several runs or sweeps on shared axes (sweeps as curves; single runs as distributions).

    With `levels` (None: left out, as for repeats of one configuration), the Pareto chart and the
    interactivity table: one front per sweep (per length pair), one front across the single runs."""
    flat: list[tuple[str, RunResult | SweepResult]] = []
    for n, r in sides:  # repeats: each repeat is a run of its own here
        if isinstance(r, RepeatsResult):
            flat += [(f"{n} · {run.path.name}", run) for run in r.runs]
        else:
            flat.append((n, r))
    sides = flat
    pareto_html, pareto_figs = "", dict[str, str]()
    if levels is not None:
        psides = _pareto_sides(
            [
                (n if len(g) == 1 else f"{n} · {gn}", gs)
                for n, r in sides
                if isinstance(r, SweepResult)
                for g in [split_groups(r)]
                for gn, gs in g
            ]
        )
        runs = [(n, r.summary) for n, r in sides if isinstance(r, RunResult)]
        if runs:
            psides.append(("runs", runs))
        pareto_html, pareto_figs = pareto_section(psides, levels)
    if any(isinstance(r, SweepResult) for _, r in sides):
        curves: list[tuple[str, SweepResult]] = []
        for n, r in sides:
            groups = split_groups(r) if isinstance(r, SweepResult) else [(n, _as_sweep(r))]
            curves += [(n if len(groups) == 1 else f"{n} · {g}", sw) for g, sw in groups]
        first_sweep = next(r for _, r in sides if isinstance(r, SweepResult))
        figs = sweep_figures(curves, sweep_limits(first_sweep))
    else:
        figs = runs_overlay_figures([(n, r) for n, r in sides if isinstance(r, RunResult)])
    rows = []
    for name, r in flat:
        first = r.summary if isinstance(r, RunResult) else (r.points[0].run.summary if r.points else None)
        kind = "run" if isinstance(r, RunResult) else f"sweep ({len(r.points)} points)"
        rows.append([esc(name), esc(kind), esc(run_title(first, with_load=isinstance(r, RunResult))), esc(str(r.path))])
    body = [
        prelude,
        "<h2>Inputs</h2>",
        table(["name", "kind", "what", "directory"], rows, txt_cols=4),
        pareto_html,
        figures_grid(pareto_figs) if pareto_figs else "",
        "<h2>Overlaid</h2>",
        figures_grid(figs),
    ]
    sub = " vs ".join(n for n, _ in flat)
    return page(title, sub, "\n".join(b for b in body if b)), {**pareto_figs, **figs}


def render_repeats(rep: RepeatsResult, links: bool = True) -> tuple[str, dict[str, str]]:
    """`--repeat N`: the run-to-run spread, and the repeats overlaid."""
    rows = []
    for label, d in (rep.meta.get("spread") or {}).items():
        if not isinstance(d, dict):
            continue
        cv = d.get("cv")
        rows.append(
            [
                esc(label),
                fmt(d.get("mean"), digits=2),
                fmt(d.get("std"), digits=2),
                fmt(d.get("min"), digits=2),
                fmt(d.get("max"), digits=2),
                fmt(100.0 * cv, "%", 1) if isinstance(cv, (int, float)) else "–",
                esc(
                    " · ".join(format_number(v) if isinstance(v, (int, float)) else "–" for v in d.get("values") or [])
                ),
            ]
        )
    names = [r.path.name for r in rep.runs]
    links_html = " · ".join(f'<a href="{esc(n)}/{REPORT}">{esc(n)}</a>' if links else esc(n) for n in names)
    prelude = (
        f"<h2>Run-to-run spread ({len(rep.runs)} repeats)</h2>"
        + (
            table(["metric", "mean", "std", "min", "max", "CV", "each repeat"], rows, txt_cols=1)
            if rows
            else '<p class="muted">No spread recorded in repeats.json.</p>'
        )
        + f'<p class="muted">Each repeat\'s own report: {links_html}. Compare two configurations with '
        "confidence intervals: <code>servescope compare DIR_A DIR_B</code> (repeats are resampled).</p>"
    )
    first = rep.runs[0].summary if rep.runs else None
    html, figs = render_overlay(
        [(n, r) for n, r in zip(names, rep.runs)],
        title=f"servescope repeats · {get(first, 'target', 'model') or rep.path.name}",
        prelude=prelude,
        levels=None,
    )
    return html, figs
