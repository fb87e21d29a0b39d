"""`servescope compare A B [C...]`: ratios against the first side, with bootstrap intervals.

A side is one run directory, several repeats of one configuration (`DIR1,DIR2,...`), or a sweep
directory. Runs compare metric by metric; sweeps compare at every load level both have.
Output: words ("B's output throughput is 1.23× A's (95% CI 1.19–1.27)"), a rich table, and
`compare.html` with the sides' curves or distributions overlaid on shared axes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from servescope.errors import ConfigError
from servescope.report.console import print_interactivity_table
from servescope.report.data import RepeatsResult, SweepResult, load_results, split_groups
from servescope.report.html import esc, fmt, render_overlay, write_page
from servescope.report.multi import point_label
from servescope.report.pareto import frontiers, interactivity_rows
from servescope.results.bootstrap import (
    METRICS,
    MetricSpec,
    RatioEstimate,
    SideData,
    ratio_ci,
)
from servescope.results.interactivity import DEFAULT_LEVELS
from servescope.results.metrics import dig
from servescope.results.perrequest import input_counts, request_latencies_ms
from servescope.results.schema import Summary
from servescope.results.store import RunResult

__all__ = [
    "SWEEP_METRICS",
    "Comparison",
    "Side",
    "compare_sides",
    "differences",
    "load_side",
    "print_comparison",
    "print_interactivity",
    "sentence",
    "side_data",
    "write_compare_html",
    "write_compare_json",
]

#: The metrics compared at each load level of a sweep.
SWEEP_METRICS = tuple(
    m for m in METRICS if m.key in ("output_tokens_per_s", "ttft_median", "itl_median", "itl_p99", "e2e_median")
)


@dataclass(slots=True)
class Side:
    name: str
    runs: list[RunResult] = field(default_factory=list)  # one, or repeats of one configuration
    sweep: SweepResult | None = None

    @property
    def path(self) -> Path:
        return self.sweep.path if self.sweep else self.runs[0].path


@dataclass(slots=True)
class Comparison:
    baseline: str
    other: str
    label: str  # "" for runs, "concurrency 16" for a sweep point
    estimates: list[RatioEstimate]
    failed: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0))  # (failed, total) of A and of B
    differences: list[str] = field(default_factory=list)  # "output_len 256 vs 1024": what the sides changed

    def failures_text(self) -> str:
        (fa, ta), (fb, tb) = self.failed
        return (
            f"Failed requests: {self.baseline} {fa} of {ta} ({_pct(fa, ta)}), "
            f"{self.other} {fb} of {tb} ({_pct(fb, tb)})."
        )


def _pct(n: int, total: int) -> str:
    return f"{100.0 * n / total:.1f}%" if total else "n/a"


def _failed(d: SideData) -> tuple[int, int]:
    return int(d.ok.size - d.ok.sum()), int(d.ok.size)


_SETTINGS = (
    ("target", "model"),
    ("target", "url"),
    ("target", "api"),
    ("target", "profile"),
    ("load", "concurrency"),
    ("load", "rate_rps"),
    ("load", "burstiness"),
    ("workload", "dataset"),
    ("workload", "input_len"),
    ("workload", "output_len"),
)


def differences(a: Summary, b: Summary, *, with_load: bool = True) -> list[str]:
    """Settings that differ between two summaries: what the comparison is about (or a mistake)."""
    out = []
    for section, key in _SETTINGS:
        if section == "load" and not with_load:
            continue
        if key == "url" and dig(a, "target", "emulated") and dig(b, "target", "emulated"):
            continue  # each emulated run listens on a fresh loopback port
        va, vb = dig(a, section, key), dig(b, section, key)
        if va != vb:
            out.append(f"{key} {va} vs {vb}")
    return out


def _compare(
    a: SideData, b: SideData, specs: Sequence[MetricSpec], base: str, other: str, label: str, **kw: Any
) -> Comparison:
    return Comparison(base, other, label, ratio_ci(a, b, specs, **kw), (_failed(a), _failed(b)))


def load_side(spec: str, name: str) -> Side:
    """`DIR` (run or sweep) or `DIR1,DIR2,...` (repeats of one configuration)."""
    parts = [p for p in spec.split(",") if p]
    if not parts:
        raise ConfigError(f"empty side {spec!r}")
    loaded = [load_results(p) for p in parts]
    if len(loaded) == 1 and isinstance(loaded[0], SweepResult):
        return Side(name, sweep=loaded[0])
    if any(isinstance(r, SweepResult) for r in loaded):
        raise ConfigError(f"{spec}: repeats (comma-separated) must be run directories, not sweeps")
    runs: list[RunResult] = []
    for r in loaded:  # a --repeat N directory contributes every repeat
        if isinstance(r, RepeatsResult):
            runs.extend(r.runs)
        elif isinstance(r, RunResult):
            runs.append(r)
    return Side(name, runs=runs)


def _window_s(sends: np.ndarray, ends: np.ndarray) -> float:
    """The measured window (metrics.window_ns) in s: first send to the last end."""
    ends = ends[~np.isnan(ends)]
    if not sends.size or not ends.size or ends.max() <= sends.min():
        return 0.0
    return (int(ends.max()) - int(sends.min())) / 1e9


def side_data(runs: Sequence[RunResult]) -> SideData:
    """Pool the measured requests of one or more runs into bootstrap input."""
    req_run: list[int] = []
    windows: list[float] = []
    cols: dict[str, list[float]] = {k: [] for k in ("ttft", "e2e", "tpot", "out", "total", "ok", "busy")}
    itl: list[np.ndarray] = []
    owner: list[np.ndarray] = []
    for r_idx, run in enumerate(runs):
        c = run.columns
        m = c.measured
        send, ok = c.t_send[m], c.ok[m]
        windows.append(_window_s(send, c.t_end[m]))
        n0 = len(req_run)
        req_run.extend([r_idx] * int(m.sum()))
        out_tok = np.where(ok, np.nan_to_num(c.output_tokens[m]), 0.0)
        in_tok = np.where(ok, input_counts(c)[m], 0.0)
        last = c.t_last[m]
        lat = request_latencies_ms(c, m)
        for key in ("ttft", "e2e", "tpot"):
            cols[key].extend(np.where(ok, lat[key], np.nan).tolist())
        cols["out"].extend(out_tok.tolist())
        cols["total"].extend((out_tok + in_tok).tolist())
        cols["ok"].extend(ok.astype(float).tolist())
        last0 = np.where(np.isnan(last) | (last == 0), send, last)
        end = np.where(np.isnan(c.t_end[m]), last0, c.t_end[m])
        cols["busy"].extend(np.maximum(0.0, (end - send) / 1e9).tolist())
        counts = c.itl_counts[m]
        itl.append(c.itl_ms())
        owner.append(np.repeat(n0 + np.arange(int(m.sum()), dtype=np.int64), counts))
    return SideData(
        req_run=np.asarray(req_run, dtype=np.int64),
        window_s=np.asarray(windows, dtype=float),
        busy_s=np.asarray(cols["busy"]),
        ttft_ms=np.asarray(cols["ttft"]),
        e2e_ms=np.asarray(cols["e2e"]),
        tpot_ms=np.asarray(cols["tpot"]),
        output_tokens=np.asarray(cols["out"]),
        total_tokens=np.asarray(cols["total"]),
        ok=np.asarray(cols["ok"]),
        itl_ms=np.concatenate(itl) if itl else np.empty(0),
        itl_owner=np.concatenate(owner) if owner else np.empty(0, dtype=np.int64),
    )


def compare_sides(
    sides: Sequence[Side], *, resamples: int = 1000, seed: int = 0, confidence: float = 0.95
) -> list[Comparison]:
    """Every side against the first; sweeps point by point at the load levels both have."""
    if len(sides) < 2:
        raise ConfigError("compare needs at least two result directories")
    base = sides[0]
    out: list[Comparison] = []
    for other in sides[1:]:
        if (base.sweep is None) != (other.sweep is None):
            raise ConfigError(f"cannot compare a sweep with a single run ({base.name} vs {other.name})")
        if base.sweep is None:
            comp = _compare(
                side_data(base.runs),
                side_data(other.runs),
                METRICS,
                base.name,
                other.name,
                "",
                resamples=resamples,
                seed=seed,
                confidence=confidence,
            )
            comp.differences = differences(base.runs[0].summary, other.runs[0].summary)
            out.append(comp)
            continue
        assert other.sweep is not None
        theirs = {(p.group, p.x): p for p in other.sweep.points}
        common = [p for p in base.sweep.points if (p.group, p.x) in theirs]
        if not common:
            raise ConfigError(f"sweeps {base.name} and {other.name} share no load level")
        for p in common:
            where = f"{base.sweep.x_key.replace('_rps', '')} {p.label}" + (f" ({p.group})" if p.group else "")
            comp = _compare(
                side_data([p.run]),
                side_data([theirs[(p.group, p.x)].run]),
                SWEEP_METRICS,
                base.name,
                other.name,
                where,
                resamples=resamples,
                seed=seed,
                confidence=confidence,
            )
            comp.differences = differences(p.run.summary, theirs[(p.group, p.x)].run.summary, with_load=False)
            out.append(comp)
    return out


def _num(v: float) -> str:
    return "n/a" if not np.isfinite(v) else f"{v:.2f}" if v < 10 else f"{v:.1f}"


def sentence(e: RatioEstimate, a: str, b: str, confidence: float = 0.95) -> str:
    """ "B's output throughput is 1.23× A's (95% CI 1.19–1.27): better." """
    pct = f"{confidence * 100:g}%"
    if not np.isfinite(e.ratio):
        return f"{b}'s {e.spec.label} cannot be compared with {a}'s (no data on one side)."
    ci = f"{pct} CI {_num(e.lo)}–{_num(e.hi)}" if np.isfinite(e.lo) else f"{pct} CI n/a"
    tail = {
        "within noise": "within noise (the interval contains 1.00)",
        "better": f"{b} is better",
        "worse": f"{b} is worse",
        "n/a": "too few samples for an interval",
    }[e.verdict]
    return f"{b}'s {e.spec.label} is {_num(e.ratio)}× {a}'s ({ci}): {tail}."


def _value(v: float, spec: MetricSpec) -> str:
    return "–" if not np.isfinite(v) else f"{v:,.1f} {spec.unit}"


def print_comparison(
    comparisons: Sequence[Comparison], console: Console | None = None, confidence: float = 0.95
) -> None:
    console = console or Console()
    groups: dict[tuple[str, str], list[Comparison]] = {}
    for c in comparisons:
        groups.setdefault((c.baseline, c.other), []).append(c)
    style = {"better": "green", "worse": "red", "within noise": "dim", "n/a": "dim"}
    for (a, b), comps in groups.items():
        table = Table(title=f"{b} vs {a} (ratio B/A, {confidence * 100:g}% bootstrap CI)", title_justify="left")
        if any(c.label for c in comps):
            table.add_column("load")
        for col, just in (
            ("metric", "left"),
            (a, "right"),
            (b, "right"),
            ("B/A", "right"),
            ("CI", "right"),
            ("verdict", "left"),
        ):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        for c in comps:
            for i, e in enumerate(c.estimates):
                row = [
                    e.spec.label,
                    _value(e.a, e.spec),
                    _value(e.b, e.spec),
                    f"{_num(e.ratio)}×",
                    f"{_num(e.lo)}–{_num(e.hi)}",
                    f"[{style[e.verdict]}]{e.verdict}[/]",
                ]
                if any(x.label for x in comps):
                    row.insert(0, c.label if i == 0 else "")
                table.add_row(*row)
            if c.label:
                table.add_section()
        console.print(table)
        diffs = list(dict.fromkeys(d for c in comps for d in c.differences))
        if diffs:
            console.print(f"{b} differs from {a} in: {'; '.join(diffs)}", highlight=False)
        for c in comps:
            if c.failed[0][0] or c.failed[1][0]:
                console.print(("" if not c.label else f"{c.label}: ") + c.failures_text(), highlight=False)
        key = [c for c in comps if not c.label] or comps[-1:]
        for e in key[0].estimates[:1] + [x for x in key[0].estimates[1:] if x.verdict != "within noise"][:4]:
            console.print(sentence(e, a, b, confidence), highlight=False)


def _compare_table_html(comparisons: Sequence[Comparison], confidence: float) -> str:
    parts = []
    for c in comparisons:
        title = f"{c.other} vs {c.baseline}" + (f" at {c.label}" if c.label else "")
        rows = []
        for e in c.estimates:
            cls = {"better": "better", "worse": "worse"}.get(e.verdict, "noise")
            rows.append(
                f"<tr><td>{esc(e.spec.label)}</td><td>{esc(_value(e.a, e.spec))}</td>"
                f"<td>{esc(_value(e.b, e.spec))}</td><td>{esc(_num(e.ratio))}×</td>"
                f"<td>{esc(_num(e.lo))}–{esc(_num(e.hi))}</td>"
                f'<td class="txt {cls}">{esc(e.verdict)}</td></tr>'
            )
        words = "".join(f"<li>{esc(sentence(e, c.baseline, c.other, confidence))}</li>" for e in c.estimates)
        fails = c.failed[0][0] or c.failed[1][0]
        parts.append(
            f"<h3>{esc(title)}</h3>"
            + (
                f'<p class="muted">{esc(c.other)} differs from {esc(c.baseline)} in: '
                f"{esc('; '.join(c.differences))}</p>"
                if c.differences
                else ""
            )
            + (f'<p class="verdict {"bad" if fails else "good"}">{esc(c.failures_text())}</p>')
            + '<div class="tablewrap"><table><thead><tr><th class="txt">metric</th>'
            f"<th>{esc(c.baseline)}</th><th>{esc(c.other)}</th><th>B/A</th>"
            f'<th>{confidence * 100:g}% CI</th><th class="txt">verdict</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div><details><summary>In words</summary><ul>{words}</ul>"
            f"</details>"
        )
    intro = (
        f"<h2>Ratios with {confidence * 100:g}% bootstrap confidence intervals</h2>"
        '<p class="muted">Requests resampled within each run (and repeats resampled across runs when a '
        "side has several), fixed seed. A difference is <em>within noise</em> when its interval "
        f"contains 1.00; {fmt(fmt_count(comparisons))} comparisons below.</p>"
    )
    return intro + "\n".join(parts)


def fmt_count(comparisons: Sequence[Comparison]) -> int:
    return sum(len(c.estimates) for c in comparisons)


def write_compare_html(
    sides: Sequence[Side],
    comparisons: Sequence[Comparison],
    out_dir: str | Path,
    confidence: float = 0.95,
    levels: Sequence[float] = DEFAULT_LEVELS,
) -> Path:
    items: list[tuple[str, RunResult | SweepResult]] = []
    for s in sides:
        if s.sweep is not None:
            items.append((s.name, s.sweep))
        else:
            items.extend((s.name if len(s.runs) == 1 else f"{s.name} #{i + 1}", r) for i, r in enumerate(s.runs))
    html, figs = render_overlay(
        items,
        title="servescope compare · " + " vs ".join(s.name for s in sides),
        prelude=_compare_table_html(comparisons, confidence),
        levels=levels,
    )
    return write_page(Path(out_dir) / "compare.html", html, figs)


def _pareto_sides(sides: Sequence[Side]) -> list[tuple[str, list[tuple[str, Summary]]]]:
    """Each side's runs as Pareto points: a sweep's load levels (one side per length pair), or its runs."""
    named: list[tuple[str, list[tuple[str, Summary]]]] = []
    for s in sides:
        if s.sweep is not None:
            groups = split_groups(s.sweep)
            named += [
                (
                    s.name if len(groups) == 1 else f"{s.name} · {gn}",
                    [(point_label(gs, p), p.run.summary) for p in gs.points],
                )
                for gn, gs in groups
            ]
        else:
            named.append((s.name, [(r.path.name, r.summary) for r in s.runs]))
    return named


def print_interactivity(sides: Sequence[Side], levels: Sequence[float], console: Console | None = None) -> None:
    """The Pareto table in the terminal: each side's best throughput at each interactivity level."""
    fronts, per_gpu = frontiers(_pareto_sides(sides))
    print_interactivity_table(interactivity_rows(fronts, levels), per_gpu, console or Console())


def _interactivity_json(sides: Sequence[Side], levels: Sequence[float]) -> dict[str, Any]:
    """Each side's best output throughput (per GPU when every run knows its GPUs) at each level."""
    fronts, per_gpu = frontiers(_pareto_sides(sides))
    return {
        "per_gpu": per_gpu,
        "levels": list(levels),
        "readings": [
            {
                "side": f.name,
                "tokens_per_s_per_user": r.level,
                "status": r.status,
                "extrapolated": r.extrapolated,
                "output_tokens_per_s": r.y,
                "usd_per_1m_output_tokens": r.usd_per_1m_tokens,
                "j_per_output_token": r.j_per_token,
            }
            for f, r in interactivity_rows(fronts, levels)
        ],
    }


def write_compare_json(
    sides: Sequence[Side],
    comparisons: Sequence[Comparison],
    path: str | Path,
    confidence: float = 0.95,
    levels: Sequence[float] = DEFAULT_LEVELS,
) -> Path:
    """Ratios as JSON (schema servescope.compare/1): what the table shows, for scripts; `interactivity`
    holds the Pareto table (output_tokens_per_s is per GPU when `per_gpu`)."""
    doc = {
        "schema": "servescope.compare/1",
        "confidence": confidence,
        "sides": [
            {
                "name": s.name,
                "dirs": [str(r.path) for r in s.runs] if s.runs else [str(s.path)],
                "kind": "sweep" if s.sweep else ("repeats" if len(s.runs) > 1 else "run"),
            }
            for s in sides
        ],
        "comparisons": [
            {
                "baseline": c.baseline,
                "other": c.other,
                "at": c.label or None,
                "differences": c.differences,
                "failed": {
                    "a": c.failed[0][0],
                    "a_total": c.failed[0][1],
                    "b": c.failed[1][0],
                    "b_total": c.failed[1][1],
                },
                "metrics": [
                    {
                        "metric": e.spec.key,
                        "label": e.spec.label,
                        "unit": e.spec.unit,
                        "higher_is_better": e.spec.higher_is_better,
                        "a": _json_num(e.a),
                        "b": _json_num(e.b),
                        "ratio": _json_num(e.ratio),
                        "ci_low": _json_num(e.lo),
                        "ci_high": _json_num(e.hi),
                        "verdict": e.verdict,
                    }
                    for e in c.estimates
                ],
            }
            for c in comparisons
        ],
        "interactivity": _interactivity_json(sides, levels),
    }
    p = Path(path)
    p.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return p


def _json_num(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None
