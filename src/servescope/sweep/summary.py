"""The end of a sweep: saturation diagnosis and SLO capacity per length pair into sweep.json, the
summary table and answers into sweep-summary.txt (and on the console), the HTML report.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console

from servescope.sweep.runner import CACHE_NOTE_PREFIXES, Sweep
from servescope.sweep.table import diagnose, fmt_load, render_table, slo_capacity, sort_load, x_of
from servescope.workload.spec import session_workload

__all__ = ["SUMMARY_TEXT", "cache_notes", "finish", "table_text"]

SUMMARY_TEXT = "sweep-summary.txt"


def finish(sweep: Sweep, gain: float) -> str:
    """Saturation diagnosis and SLO capacity per length pair, the table; returns the text."""
    done = [e for e in sweep.entries.values() if e.get("status") == "complete"]
    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in done:
        groups.setdefault((e.get("input_len"), e.get("output_len")), []).append(e)
    saturation, capacity = [], []
    x_key = sweep.doc["x_key"]
    sessions = x_key == "concurrency" and session_workload(sweep.base.get("dataset"))
    label = "concurrent sessions" if sessions else "concurrency" if x_key == "concurrency" else "request rate"
    for (i, o), entries in sorted(groups.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or 0)):
        pts = [e for e in entries if x_of(e, x_key) is not None]
        summaries = [sweep.summary(e) for e in pts]
        diag = diagnose([x for e in pts if (x := x_of(e, x_key)) is not None], summaries, label=label, gain=gain)
        saturation.append({"input_len": i, "output_len": o, **diag})
        if sweep.spec.has_run_limits:
            capacity.append({"input_len": i, "output_len": o, **slo_capacity(pts, summaries, x_key)})
    sweep.doc["saturation"] = saturation
    if capacity:
        sweep.doc["slo_capacity"] = capacity
    sweep.doc["notes"] = cache_notes(done, [sweep.summary(e) for e in done])
    if sweep.doc["status"] == "running":
        sweep.doc["status"] = "complete"
    sweep.save()
    rows = sorted(
        (e["figures"] for e in done),
        key=lambda r: (r["input_len"] or 0, r["output_len"] or 0, sort_load(sweep.entries[r["dir"]], x_key)),
    )
    lines = [table_text(rows, title=f"servescope sweep: {sweep.out_dir}")]
    for s in saturation:
        lines.append(f"saturation (in {s['input_len']}, out {s['output_len']}): {s['text']}")
    for c in capacity:
        lens = "" if sessions else f" (in {c['input_len']}, out {c['output_len']})"
        if c["load"] is None:
            lines.append(f"SLO capacity{lens}: no point meets {sweep.spec.describe()}")
        else:
            usd = (c.get("cost") or {}).get("usd_per_1m_output_tokens")
            lines.append(
                f"SLO capacity{lens}: highest {label} meeting "
                f"{sweep.spec.describe()}: {fmt_load(c['load'])}"
                + (f", ${usd:.3f} per 1M output tokens" if usd is not None else "")
                + (f" ({c['note']})" if c.get("note") else "")
            )
    for f in sweep.doc.get("find_max") or []:
        lines.append(f["line"])
    lines += [f"note: {n}" for n in sweep.doc["notes"]]
    text = "\n".join(lines).rstrip() + "\n"
    (sweep.out_dir / SUMMARY_TEXT).write_text(text)
    report = None
    if sweep.base.get("report", True) and done:
        from servescope.report.html import write_report

        report = write_report(sweep.out_dir)
    if not sweep.quiet:
        sweep.console.print()
        sweep.console.print(render_table(rows, title=f"servescope sweep: {sweep.out_dir}"))
        for line in lines[1:]:
            sweep.console.print(line, highlight=False)
        sweep.console.print(
            f"  results: {sweep.out_dir}  (ran {len(sweep.ran)}, skipped {len(sweep.skipped)} "
            "complete)" + (f"  report: {report}" if report else ""),
            highlight=False,
        )
    return text


def cache_notes(entries: Sequence[dict[str, Any]], summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The points whose prefix cache did not behave as designed (a warm cache from an earlier point, a
    reset that failed), one line each, from each point's notes (run.assemble): the sweep's own notes."""
    out = []
    for e, s in zip(entries, summaries):
        for note in s.get("notes") or ():
            if isinstance(note, str) and note.startswith(CACHE_NOTE_PREFIXES):
                out.append(f"{e.get('load_label')} (in {e.get('input_len')}, out {e.get('output_len')}): {note}")
    return out


def table_text(rows: Sequence[dict[str, Any]], *, title: str = "sweep", width: int = 160) -> str:
    """The table as plain text (for sweep-summary.txt)."""
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(render_table(rows, title=title))
    return console.export_text()
