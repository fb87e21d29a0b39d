"""The self-contained HTML report: one file, inline CSS and SVG, no script, no network.

Everything that came from the server or the user (model names, URLs, error bodies) is escaped.
Rendering is deterministic (no clock, no random ids): re-rendering the same results gives the same
bytes. Each chart is also written as `charts/<name>.svg` beside the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servescope.report.data import (
    RepeatsResult,
    SweepResult,
    failed_rows,
    load_results,
    run_title,
)
from servescope.report.engineview import engine_view_section
from servescope.report.figures import get, run_figures, slo_of
from servescope.report.layout import (
    REPORT,
    card,
    esc,
    figures_grid,
    flatten,
    fmt,
    kv_table,
    page,
    table,
)
from servescope.report.multi import render_overlay, render_repeats, render_sweep
from servescope.report.ticks import format_number
from servescope.results.interactivity import DEFAULT_LEVELS
from servescope.results.precision import plus_minus
from servescope.results.schema import ServerMetrics, Summary
from servescope.results.selfcheck import summary_line
from servescope.results.store import RunResult

__all__ = [
    "esc",
    "fmt",
    "page",
    "render_overlay",
    "render_run",
    "render_sweep",
    "write_overlay_report",
    "write_page",
    "write_report",
]

_SAMPLE_BODIES = 3
_MAX_BODY_CHARS = 2000


def _slo_verdict(summary: Summary) -> tuple[str, str]:
    gp = summary.get("goodput")
    if not isinstance(gp, dict):
        return "", ""
    slo = slo_of(summary)
    frac = gp.get("fraction")
    limits = ", ".join(f"{k.removesuffix('_ms').upper()} ≤ {v:g} ms" for k, v in slo.items())
    if not isinstance(frac, (int, float)):
        return "", ""
    cls = "good" if frac >= 0.99 else ("warn" if frac >= 0.9 else "bad")
    word = {"good": "met", "warn": "mostly met", "bad": "missed"}[cls]
    text = (
        f"SLO {word}: {frac * 100:.1f}% of requests met every limit ({esc(limits)}); goodput "
        f"{fmt(gp.get('requests_per_s'), 'req/s')}."
    )
    return cls, text


def _slo_check(summary: Summary) -> str:
    """The aggregate SLO check a sweep attaches to each point (`slo_check`): pass/fail per limit."""
    check = summary.get("slo_check")
    if not isinstance(check, dict) or check.get("passed") is None:
        return ""
    parts = []
    for c in check.get("checks") or []:
        if not isinstance(c, dict):
            continue
        if c.get("metric") == "goodput":
            got, limit = fmt(c.get("value"), digits=3), fmt(c.get("limit"), digits=3)
        else:
            got = "∞ (failed requests)" if c.get("infinite") else fmt(c.get("value_ms"), "ms")
            limit = fmt(c.get("limit_ms"), "ms")
        parts.append(f"{esc(c.get('name') or c.get('metric'))} {got} (limit {limit}) {'✓' if c.get('passed') else '✗'}")
    cls = "good" if check["passed"] else "bad"
    return f'<p class="verdict {cls}">SLO check {"passed" if check["passed"] else "failed"}: {"; ".join(parts)}.</p>'


def _client_verdict(summary: Summary) -> tuple[str, str]:
    client = summary.get("client") or {}
    lag_p99 = get(client, "schedule_lag_ms", "p99")
    if client.get("saturated"):
        advice = client.get("advice")
        advice = " ".join(str(a) for a in advice) if isinstance(advice, list) else str(advice or "")
        if not advice:
            reasons = client.get("reasons") or []
            why = "; ".join(str(r) for r in reasons) if isinstance(reasons, list) else str(reasons)
            advice = (
                f"the client, not the server, may be limiting this run{f' ({why})' if why else ''}. "
                "Lower the load per client process or split it over more processes."
            )
        return "bad", f"Client check: {advice[:1].upper()}{advice[1:]} Schedule lag P99 {fmt(lag_p99, 'ms')}."
    if isinstance(lag_p99, (int, float)) and lag_p99 > 10:
        return "warn", f"Schedule lag P99 is {fmt(lag_p99, 'ms')}: the client sent some requests late."
    if unvouched := client.get("unvouched"):
        what = "; ".join(str(u) for u in unvouched)
        return "warn", f"The client kept up, but cannot vouch for every figure: {what}."
    return "good", f"The client kept up: schedule lag P99 {fmt(lag_p99, 'ms')}."


def _cost_cards(summary: Summary) -> list[str]:
    cost = summary.get("cost")
    if not isinstance(cost, dict):
        return []
    out = []
    for k, v in cost.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(card(k.replace("_", " "), fmt(v), "cost"))
    return out


def _server_table(server: ServerMetrics) -> str:
    used = server.get("metrics_used") or {}
    rows = []
    for k, v in flatten({k: v for k, v in server.items() if k != "metrics_used"}):
        value = format_number(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else esc(v)
        rows.append([esc(k), value, f"<code>{esc(used.get(k, ''))}</code>" if used.get(k) else ""])
    return table(["figure", "value", "server metric"], rows, txt_cols=1)


_LAT_ROWS = (
    ("ttft", "TTFT"),
    ("ttfat", "TTFAT (first answer token)"),
    ("tpot", "TPOT"),
    ("itl", "ITL"),
    ("e2e", "E2E"),
)
_LAT_COLS = ("mean", "median", "p90", "p95", "p99", "min", "max", "std")


def _latency_table(summary: Summary) -> str:
    rows = []
    for key, name in _LAT_ROWS:
        d = get(summary, "latency_ms", key) or {}
        if not d or d.get("count") == 0 or d.get("median") is None:
            continue
        ivs = get(summary, "precision", "metrics", key) or {}  # 95% intervals (results.precision)
        rows.append(
            [esc(name)]
            + [fmt(d.get(c), digits=1) + (f" {plus_minus(ivs.get(c))}" if ivs.get(c) else "") for c in _LAT_COLS]
        )
    note = (
        '<p class="muted">± a 95% interval from this run alone (batch means in send order, '
        "docs/metrics.md); ±?: too few requests to bound it.</p>"
        if summary.get("precision")
        else ""
    )
    return table(["ms"] + [c.upper() if c.startswith("p") else c for c in _LAT_COLS], rows) + note


def _validation(summary: Summary) -> str:
    """The run's self-checks (results.validation): a verdict line and one row per check."""
    checks = summary.get("validation") or []
    if not checks:
        return ""
    cls = "good" if all(c["status"] != "fail" for c in checks) else "warn"
    rows = [
        [
            esc(c["name"]),
            esc(c["status"]),
            esc(c["why"]),
            esc(
                ", ".join(
                    f"{k} {format_number(float(v)) if isinstance(v, (int, float)) else v}"
                    for k, v in c["figures"].items()
                )
            ),
        ]
        for c in checks
    ]
    return f'<h2>Self-validation</h2><p class="verdict {cls}">Validation: {esc(summary_line(checks))}.</p>' + table(
        ["check", "result", "why", "figures"], rows, txt_cols=4
    )


def _failures(run: RunResult) -> str:
    recs = failed_rows(run.columns)
    errors = get(run.summary, "requests", "errors") or {}
    total = get(run.summary, "requests", "total") or int(run.columns.measured.sum()) or 1
    if not recs and not errors:
        return '<p class="muted">No failed requests.</p>'
    by_kind: dict[str, list] = {}
    for r in recs:
        by_kind.setdefault(r["error_kind"] or "unknown", []).append(r)
    kinds = sorted(set(by_kind) | set(errors))
    rows = [
        [
            esc(k),
            fmt(errors.get(k, len(by_kind.get(k, [])))),
            fmt(100.0 * errors.get(k, len(by_kind.get(k, []))) / total, "%", 1),
        ]
        for k in kinds
    ]
    out = [table(["error kind", "requests", "share"], rows)]
    for k in kinds:
        samples = [r for r in by_kind.get(k, []) if r["error_detail"]][:_SAMPLE_BODIES]
        if not samples:
            continue
        out.append(f"<h3>Sample error bodies: {esc(k)}</h3>")
        for r in samples:
            body = r["error_detail"] or ""
            cut = f"… ({len(body) - _MAX_BODY_CHARS} more characters)" if len(body) > _MAX_BODY_CHARS else ""
            status = f" · HTTP {r['http_status']}" if r["http_status"] else ""
            out.append(
                f'<div class="muted">request {r["id"]}{esc(status)}</div>'
                f'<pre class="body">{esc(body[:_MAX_BODY_CHARS])}{esc(cut)}</pre>'
            )
    return "\n".join(out)


def _run_cards(s: Summary) -> list[str]:
    req = s.get("requests") or {}
    lat = s.get("latency_ms") or {}
    failed = req.get("failed") or 0
    total = req.get("total") or 0
    cards = [
        card(
            "Output throughput",
            fmt(get(s, "throughput", "output_tokens_per_s"), "tok/s"),
            f"total {fmt(get(s, 'throughput', 'total_tokens_per_s'), 'tok/s')}",
        ),
        card(
            "Requests",
            f"{fmt(req.get('completed'))} / {fmt(total)}",
            f"{fmt(get(s, 'throughput', 'requests_per_s'), 'req/s')} over {fmt(s.get('duration_s'), 's')}",
        ),
        card("TTFT median", fmt(get(lat, "ttft", "median"), "ms"), f"P99 {fmt(get(lat, 'ttft', 'p99'), 'ms')}"),
        card("ITL median", fmt(get(lat, "itl", "median"), "ms"), f"P99 {fmt(get(lat, 'itl', 'p99'), 'ms')}"),
        card("E2E median", fmt(_s(get(lat, "e2e", "median")), "s"), f"P99 {fmt(_s(get(lat, 'e2e', 'p99')), 's')}"),
        card(
            "Per-user speed",
            fmt(get(s, "per_user_output_tokens_per_s", "median"), "tok/s"),
            f"P10 {fmt(get(s, 'per_user_output_tokens_per_s', 'p10'), 'tok/s')}",
        ),
        card(
            "Failures",
            fmt(failed),
            f"{fmt(100.0 * failed / total if total else 0.0, '%', 1)} of requests",
            "bad" if failed else "good",
        ),
    ]
    return cards + _interactivity_cards(s) + _cost_cards(s)


def _interactivity_cards(s: Summary) -> list[str]:
    """Tokens/s per user (1000 / median TPOT) and output tokens/s per GPU, when the summary has them."""
    ia = s.get("interactivity")
    if not isinstance(ia, dict):
        return []
    gpus = ia.get("gpus")
    per_gpu = (
        f"{fmt(ia.get('output_tokens_per_s_per_gpu'), 'out tok/s', 1)} per GPU ({fmt(gpus)} GPU"
        f"{'s' if gpus != 1 else ''})"
        if gpus
        else "GPU count unknown (--gpus)"
    )
    return [
        card(
            "Interactivity",
            fmt(ia.get("tokens_per_s_per_user"), "tok/s/user", 1),
            f"1000 / median TPOT · {esc(per_gpu)}",
        )
    ]


def _s(ms: Any) -> Any:
    return ms / 1e3 if isinstance(ms, (int, float)) else ms


def render_run(run: RunResult) -> tuple[str, dict[str, str]]:
    s = run.summary
    figs = run_figures(run)
    slo_cls, slo_text = _slo_verdict(s)
    cl_cls, cl_text = _client_verdict(s)
    body = [f'<div class="cards">{"".join(_run_cards(s))}</div>']
    if slo_text:
        body.append(f'<p class="verdict {slo_cls}">{slo_text}</p>')
    check = _slo_check(s)
    if check:
        body.append(check)
    body.append(f'<p class="verdict {cl_cls}">{esc(cl_text)}</p>')
    notes = [str(n) for n in (s.get("notes") or []) if n]
    if s.get("interrupted"):
        notes.insert(0, "This run was interrupted: the figures cover the requests that completed before the stop.")
    if notes:
        body.append('<div class="verdict warn"><ul>' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul></div>")
    body.append("<h2>Latency distributions</h2>")
    body.append(figures_grid({k: figs[k] for k in ("ttft_hist", "itl_hist", "e2e_hist", "latency_cdf")}))
    body.append("<h3>Latency summary (completed requests)</h3>" + _latency_table(s))
    body.append(_validation(s))
    body.append("<h2>Timeline</h2>")
    body.append(figures_grid({k: figs[k] for k in ("requests_gantt", "inflight", "tokens_per_s", "ttft_over_time")}))
    from servescope.report.gpu import gpu_section  # GPU telemetry beside the timeline (--gpu-metrics-url)

    gpu_html, gpu_figs = gpu_section(run.path, s)
    body.append(gpu_html)
    figs.update(gpu_figs)
    from servescope.report.sessions import sessions_section  # agent sessions: timeline by session, TTFT by turn

    sess_html, sess_figs = sessions_section(run.path)
    body.append(sess_html)
    figs.update(sess_figs)
    body.append("<h2>Client self-check</h2>")
    lag_fig = figures_grid({"schedule_lag": figs["schedule_lag"]}).removeprefix('<div class="grid">\n')
    body.append(f'<div class="grid"><div>{kv_table(s.get("client") or {})}</div>\n{lag_fig}')
    server = s.get("server")
    if isinstance(server, dict) and any(k != "metrics_used" for k in server):
        body.append(
            '<h2>Server metrics</h2><p class="muted">Read from the target\'s Prometheus /metrics before and '
            "after the run: counters are deltas over the run, gauges are end-of-run values.</p>" + _server_table(server)
        )
    body.append(engine_view_section(s))  # the engine's own latency beside the client's (summary engine_view)
    body.append("<h2>Failures</h2>" + _failures(run))
    body.append(
        "<h2>Run details</h2><details><summary>Manifest (configuration as run, versions, host)"
        f"</summary>{kv_table(run.manifest)}</details>"
    )
    tgt = s.get("target")
    html = page(f"servescope · {(tgt and tgt.get('model')) or run.path.name}", run_title(s), "\n".join(body))
    return html, figs


def write_page(out_html: Path, html: str, figs: dict[str, str]) -> Path:
    """Write the page and its charts (charts/<name>.svg beside it); stale chart files are removed."""
    out_html.parent.mkdir(parents=True, exist_ok=True)
    charts = out_html.parent / "charts"
    charts.mkdir(exist_ok=True)
    for old in charts.glob("*.svg"):
        if old.stem not in figs:
            old.unlink()
    for name, svg in figs.items():
        (charts / f"{name}.svg").write_text(svg, encoding="utf-8")
    out_html.write_text(html, encoding="utf-8")
    return out_html


def write_report(path: str | Path, out: str | Path | None = None, levels: Sequence[float] = DEFAULT_LEVELS) -> Path:
    """Render DIR (a run or a sweep) to DIR/report.html (or `out`); a sweep also renders each point.
    `levels`: the interactivity levels (tokens/s per user) of a sweep's Pareto table."""
    results = load_results(path)
    target = Path(out) if out else Path(path) / REPORT
    if isinstance(results, SweepResult):
        for p in results.points:
            html, figs = render_run(p.run)
            write_page(p.run.path / REPORT, html, figs)
        html, figs = render_sweep(results, links=out is None, levels=levels)
    elif isinstance(results, RepeatsResult):
        for run in results.runs:
            html, figs = render_run(run)
            write_page(run.path / REPORT, html, figs)
        html, figs = render_repeats(results, links=out is None)
    else:
        html, figs = render_run(results)
    return write_page(target, html, figs)


def write_overlay_report(
    paths: Sequence[str | Path], out: str | Path, levels: Sequence[float] = DEFAULT_LEVELS
) -> Path:
    sides = [(Path(p).resolve().name or str(p), load_results(p)) for p in paths]
    html, figs = render_overlay(sides, title="servescope · " + " vs ".join(n for n, _ in sides), levels=levels)
    return write_page(Path(out), html, figs)
