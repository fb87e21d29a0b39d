"""How a sweep chooses its points, each mode driving a `Sweep`: a fixed grid; `--rate auto` (a
synchronous and a saturation run, then rates spread between them); `--find-max` (double the load
until an SLO fails, then bisect), with the capacity answer and its cost recorded in sweep.json.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from servescope.results import slo as slomod
from servescope.results.metrics import dig
from servescope.sweep.points import Point, SearchResult, auto_rates, find_max
from servescope.sweep.runner import Sweep
from servescope.sweep.table import fmt_load
from servescope.workload.spec import session_workload

__all__ = ["run_grid", "run_auto", "run_find_max"]


def run_grid(sweep: Sweep, points: list[Point], loop: asyncio.Runner) -> None:
    """Every point of the grid, in order."""
    for p in points:
        sweep.run_point(p, loop)


def run_auto(sweep: Sweep, pairs: list[tuple[int, int | None]], cap: int | None, n: int, loop: asyncio.Runner) -> None:
    """Per length pair: a synchronous and a saturation run, then `n` rates spread between their request rates."""
    auto = []
    for i, o in pairs:
        sync = sweep.run_point(Point(1, None, i, o, "synchronous"), loop)
        peak = sweep.run_point(Point(None, math.inf, i, o, "throughput"), loop)
        lo = (sync.get("throughput") or {}).get("requests_per_s") or 0.0
        hi = (peak.get("throughput") or {}).get("requests_per_s") or 0.0
        rates = auto_rates(lo, hi, n)
        auto.append({"input_len": i, "output_len": o, "synchronous_rps": lo, "saturation_rps": hi, "rates": rates})
        sweep.doc["auto"] = auto
        for r in rates:
            sweep.run_point(Point(cap, r, i, o, "auto"), loop)


def run_find_max(
    sweep: Sweep,
    axis: str,
    pairs: list[tuple[int, int | None]],
    cap: int | None,
    *,
    start: float,
    max_load: float,
    rel_tol: float,
    loop: asyncio.Runner,
) -> None:
    """Per length pair: the highest load on `axis` meeting the SLO (double until it fails, then bisect)."""
    results = sweep.doc.setdefault("find_max", [])
    for i, o in pairs:

        def point_at(x: float, i: int = i, o: int | None = o) -> Point:
            return Point(int(x), None, i, o, "search") if axis == "concurrency" else Point(cap, x, i, o, "search")

        def measure(x: float) -> bool:
            return bool(dig(sweep.run_point(point_at(x), loop), "slo_check", "passed"))

        res = find_max(measure, integer=axis == "concurrency", start=start, max_load=max_load, rel_tol=rel_tol)
        doc = _find_max_doc(sweep, axis, res, point_at, i, o, max_load)
        results[:] = [r for r in results if (r["input_len"], r["output_len"]) != (i, o)] + [doc]
        sweep.save()
        if not sweep.quiet:
            sweep.console.print(f"[bold]{doc['line']}[/bold]", highlight=False)


def _find_max_doc(
    sweep: Sweep,
    axis: str,
    res: SearchResult,
    point_at: Callable[[float], Point],
    i: int,
    o: int | None,
    max_load: float,
) -> dict[str, Any]:
    """The search's sweep.json record: the answer, its bracket, every probe, the cost at the answer."""
    sessions = axis == "concurrency" and session_workload(sweep.base.get("dataset"))
    what = "concurrent sessions" if sessions else "concurrency" if axis == "concurrency" else "request rate"
    unit = "" if axis == "concurrency" else " req/s"
    slo_text = sweep.spec.describe()
    best_summary = sweep.summaries.get(point_at(res.best).dir_name) if res.best is not None else None
    fail_summary = sweep.summaries.get(point_at(res.fail).dir_name) if res.fail is not None else None
    fail_check = fail_summary.get("slo_check") if fail_summary else None
    why = slomod.failing(fail_check) if fail_check else ""
    lens = "" if sessions else f" (in {i}, out {o})"  # an agent workload's lengths are its own
    if res.best is None:
        line = f"no {what} meets {slo_text}{lens}: {fmt_load(res.fail)}{unit} fails ({why})"
    elif res.fail is None:
        line = (
            f"max {what} meeting {slo_text}{lens}: ≥ {fmt_load(res.best)}{unit} "
            f"(nothing failed up to --max-load {fmt_load(max_load)})"
        )
    else:
        line = f"max {what} meeting {slo_text}{lens}: {fmt_load(res.best)}{unit} ({fmt_load(res.fail)} fails: {why})"
    cost_at = best_summary.get("cost") if best_summary else None
    if cost_at and cost_at.get("usd_per_1m_output_tokens") is not None:
        line += f"; ${cost_at['usd_per_1m_output_tokens']:.3f} per 1M output tokens there"
    return {
        "axis": axis,
        "unit": "sessions" if sessions else None,  # agent sessions: each concurrency slot runs one session
        "input_len": i,
        "output_len": o,
        "slo": slo_text,
        "best": res.best,
        "fail": res.fail,
        "bounded": res.bounded,
        "tolerance": res.tolerance,
        "best_dir": point_at(res.best).dir_name if res.best is not None else None,
        "probes": [{"load": x, "passed": ok, "dir": point_at(x).dir_name} for x, ok in res.probes],
        "cost_at_best": cost_at,
        "line": line,
    }
