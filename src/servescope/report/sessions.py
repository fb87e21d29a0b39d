"""The agent-sessions part of a run's report: the session timeline (Gantt by session), TTFT against
turn index and context length, durations, waits and designed prefix reuse (`results.sessions`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servescope.report.charts import line_chart
from servescope.report.gantt import session_gantt
from servescope.report.layout import card, esc, figures_grid, fmt, table
from servescope.report.svgplot import Series
from servescope.results.sessions import TurnTimes, session_metrics, turns_of
from servescope.results.store import read_records, read_session_plan

__all__ = ["load_session_metrics", "sessions_section"]


def _times(run_dir: Path) -> list[TurnTimes]:
    out = []
    for r in read_records(run_dir):
        if r.session is None or r.turn is None or r.warmup:
            continue
        out.append(
            TurnTimes(
                int(r.session),
                int(r.turn),
                int(r.t_send_ns or 0),
                r.t_first_ns,
                r.t_last_ns,
                int(r.t_end_ns or r.t_send_ns or 0),
                r.status == "ok",
            )
        )
    return out


def load_session_metrics(run_dir: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[TurnTimes]] | None:
    """(metrics, plan, records' times) of a run of agent sessions, or None for any other run."""
    path = Path(run_dir)
    plan = read_session_plan(path)
    if not plan:
        return None
    times = _times(path)
    return session_metrics(plan, times), plan, times


def _gantt(plan: list[dict[str, Any]], times: list[TurnTimes]) -> str:
    turns = turns_of(plan, times)
    lanes: list[str] = []
    lane_of: dict[tuple[int, int], int] = {}
    for t in turns:
        if (t.session, t.agent) not in lane_of:
            lane_of[(t.session, t.agent)] = len(lanes)
            lanes.append(f"s{t.session}" + (f".{t.agent}" if t.agent else ""))
    bars = [
        (
            lane_of[(t.session, t.agent)],
            t.rec.send_ns / 1e9,
            None if t.rec.first_ns is None else t.rec.first_ns / 1e9,
            t.rec.end_ns / 1e9,
            not t.rec.ok,
        )
        for t in turns
        if t.rec is not None
    ]
    sub = f"{len({t.session for t in turns})} sessions, {len(lanes)} lanes; gaps on a lane are tool waits"
    return session_gantt(lanes, bars, title="Sessions over time", subtitle=sub)


def _by(groups: list[dict[str, Any]], title: str, x_label: str) -> str:
    xs = [float(g["key"]) for g in groups]
    return line_chart(
        [
            Series("median", xs, [g["median_ms"] for g in groups], markers=True),
            Series("p90", xs, [g["p90_ms"] for g in groups], dashed=True, markers=True),
        ],
        title=title,
        x_label=x_label,
        y_label="TTFT (ms)",
    )


def sessions_section(run_dir: str | Path) -> tuple[str, dict[str, str]]:
    """The section's HTML and its charts; ("", {}) for a run without agent sessions."""
    loaded = load_session_metrics(run_dir)
    if loaded is None:
        return "", {}
    m, plan, times = loaded
    figs = {
        "sessions_gantt": _gantt(plan, times),
        "ttft_by_turn": _by(m["ttft_by_turn"], "TTFT by turn index", "turn index in its agent's thread"),
        "ttft_by_context": _by(m["ttft_by_context"], "TTFT by context length", "prompt tokens (power-of-two bin)"),
    }
    dur = m["session_duration_s"]
    cards = [
        card("sessions", f"{m['sessions_completed']} / {m['sessions']}", "completed / planned"),
        card("turns", f"{m['turns_ok']} / {m['turns_planned']}", "answered / planned"),
        card("session duration", f"{fmt(dur['median'])} s", f"median; p90 {fmt(dur['p90'])} s"),
        card("turn latency", f"{fmt(m['turn_latency_ms']['median'])} ms", "median E2E of a turn"),
        card(
            "tool waits",
            f"{fmt(m['wait_measured_s'])} s",
            f"measured, planned {fmt(m['wait_planned_s'])} s; median error {fmt(m['wait_error_ms']['median'])} ms",
        ),
        card(
            "designed prefix reuse",
            f"{fmt(100 * (m['designed_prefix_hit_rate'] or 0))}%",
            "of prompt tokens; the server's achieved rate is under Server metrics",
        ),
    ]
    rows = [
        [
            esc(r["session"]),
            esc(r["turns"]),
            esc(r["sub_agents"]),
            "yes" if r["completed"] else "no",
            fmt(r["duration_s"]),
            esc(r["prompt_tokens"]),
            "-" if r["designed_hit_rate"] is None else f"{100 * r['designed_hit_rate']:.1f}%",
        ]
        for r in m["per_session"][:200]
    ]
    html = (
        "<h2>Agent sessions</h2>"
        f'<div class="cards">{"".join(cards)}</div>'
        + figures_grid(figs)
        + "<h3>Per session</h3>"
        + table(["session", "turns", "sub-agents", "completed", "duration (s)", "prompt tokens", "designed hit"], rows)
    )
    return html, figs
