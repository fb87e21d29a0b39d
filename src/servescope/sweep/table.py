"""A sweep's figures: one row per point, the saturation diagnosis, the SLO capacity, the table. Pure:
`render_table` only builds a rich Table (`sweep.summary` prints it and writes it as text).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from servescope.results.metrics import dig

__all__ = ["SATURATION_GAIN", "diagnose", "fmt_load", "point_row", "render_table", "slo_capacity", "sort_load", "x_of"]

#: Throughput has stopped growing at a point when the next load step adds less than this fraction.
SATURATION_GAIN = 0.10
#: TTFT growth (median, last point over the saturation point) that says requests queue.
_TTFT_GROWTH = 2.0


def point_row(entry: dict[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of one point that the sweep summary shows (and sweep.json keeps)."""
    lat = summary.get("latency_ms") or {}
    tp = summary.get("throughput") or {}
    offered = tp.get("offered_requests_per_s")
    if dig(summary, "load", "mode") == "concurrency":
        # Closed loop offers what it sends: requests sent over the measured window.
        total, window = dig(summary, "requests", "total"), summary.get("duration_s")
        offered = total / window if total and window else offered
    return {
        "dir": entry.get("dir"),
        "load": entry.get("load_label"),
        "input_len": entry.get("input_len"),
        "output_len": entry.get("output_len"),
        "offered_requests_per_s": offered,
        "completed_requests_per_s": tp.get("requests_per_s"),
        "output_tokens_per_s": tp.get("output_tokens_per_s"),
        "total_tokens_per_s": tp.get("total_tokens_per_s"),
        "ttft_median_ms": dig(lat, "ttft", "median"),
        "ttft_p99_ms": dig(lat, "ttft", "p99"),
        "itl_median_ms": dig(lat, "itl", "median"),
        "itl_p99_ms": dig(lat, "itl", "p99"),
        "tpot_median_ms": dig(lat, "tpot", "median"),
        "tpot_p99_ms": dig(lat, "tpot", "p99"),
        "e2e_median_ms": dig(lat, "e2e", "median"),
        "e2e_p99_ms": dig(lat, "e2e", "p99"),
        "failed": dig(summary, "requests", "failed"),
        "goodput_requests_per_s": dig(summary, "goodput", "requests_per_s"),
        "slo_passed": dig(summary, "slo_check", "passed"),
        "usd_per_1m_output_tokens": dig(summary, "cost", "usd_per_1m_output_tokens"),
        "usd_per_1m_total_tokens": dig(summary, "cost", "usd_per_1m_total_tokens"),
        "client_saturated": dig(summary, "client", "saturated"),
        "server_waiting": dig(summary, "server", "waiting"),
        "prefix_cache_hit_rate": dig(summary, "server", "prefix_cache_hit_rate"),
    }


def diagnose(
    loads: Sequence[float],
    summaries: Sequence[Mapping[str, Any]],
    *,
    label: str = "load",
    gain: float = SATURATION_GAIN,
) -> dict[str, Any]:
    """Where output throughput stops growing, and who queued: the server or the client.

    The saturation point is the first load whose next step adds less than `gain` (10%) output
    tokens/s. Past it: the client is the bottleneck when a run's client self-check says so
    (`client.saturated`: schedule lag, loop lag, CPU); the server queued when the median TTFT grew
    `_TTFT_GROWTH`× or more, when its /metrics showed waiting requests, or when open-loop runs
    completed fewer requests/s than offered.
    """
    order = sorted(range(len(loads)), key=lambda i: loads[i])
    xs = [loads[i] for i in order]
    ss = [summaries[i] for i in order]
    tput = [float(dig(s, "throughput", "output_tokens_per_s") or 0.0) for s in ss]
    out: dict[str, Any] = {
        "saturation_load": None,
        "plateau_output_tokens_per_s": None,
        "next_step_gain": None,
        "bottleneck": None,
        "evidence": [],
        "text": "",
    }
    if len(xs) < 2:
        out["text"] = "one point: no saturation analysis"
        return out
    knee, out["next_step_gain"] = _knee(tput, gain)
    if knee is None:
        out["text"] = (
            f"throughput still grows at the highest {label} ({fmt_load(xs[-1])}: +{out['next_step_gain'] * 100:.0f}% "
            f"over the step before): not saturated; raise the {label} to find the plateau"
        )
        return out
    out["saturation_load"] = xs[knee]
    out["plateau_output_tokens_per_s"] = max(tput[knee:])
    past = ss[knee:]
    client, server, evidence = _queue_signs(past)
    # Server signs win: a client that also flags itself adds delay, but requests queued at the server.
    out["bottleneck"] = "server" if server else ("client" if client else "unclear")
    out["client_flagged"] = client
    out["evidence"] = evidence
    who = {
        "client": "the client is the bottleneck",
        "server": "the server queues",
        "unclear": "no queueing sign found",
    }[out["bottleneck"]]
    out["text"] = (
        f"throughput stops growing at {label} {fmt_load(xs[knee])} "
        f"(~{tput[knee]:,.0f} output tok/s; the next step adds {out['next_step_gain'] * 100:+.0f}%): "
        f"{who}" + (f" ({'; '.join(evidence)})" if evidence else "")
    )
    return out


def _knee(tput: Sequence[float], gain: float) -> tuple[int | None, float]:
    """The first point whose next step adds less than `gain` and that step's gain; (None, the last
    step's gain) when every step adds more."""
    for i in range(len(tput) - 1):
        step = tput[i + 1] / tput[i] - 1 if tput[i] > 0 else float("inf")
        if step < gain:
            return i, step
    return None, tput[-1] / tput[-2] - 1 if tput[-2] > 0 else 0.0


def _queue_signs(past: Sequence[Mapping[str, Any]]) -> tuple[bool, bool, list[str]]:
    """From the saturation point on (`past`): whether a client self-check flagged, whether the server
    queued, and the evidence, in the order the diagnosis states it."""
    evidence: list[str] = []
    client = [s for s in past if dig(s, "client", "saturated")]
    for s in client[:1]:
        reasons = dig(s, "client", "reasons") or []
        evidence.append("client self-check flagged: " + ("; ".join(reasons) or "saturated"))
    t0 = dig(past[0], "latency_ms", "ttft", "median")
    t1 = dig(past[-1], "latency_ms", "ttft", "median")
    server = False
    if t0 and t1 and t1 / t0 >= _TTFT_GROWTH:
        server = True
        evidence.append(f"TTFT median grew {t1 / t0:.1f}× past saturation ({t0:.0f} → {t1:.0f} ms): requests queue")
    waiting = [w for w in (dig(s, "server", "waiting") for s in past) if w]
    if waiting:
        server = True
        evidence.append(f"server /metrics: up to {max(waiting):g} requests waiting")
    kv = [k for k in (dig(s, "server", "kv_usage") for s in past) if k is not None]
    if kv and max(kv) >= 0.9:
        evidence.append(f"KV cache {max(kv) * 100:.0f}% used")
    pre = sum(p for p in (dig(s, "server", "preemptions") for s in past) if p)
    if pre:
        evidence.append(f"{pre:g} preemptions")
    for s in past:
        off = dig(s, "throughput", "offered_requests_per_s")
        done = dig(s, "throughput", "requests_per_s")
        if dig(s, "load", "mode") == "rate" and off and done is not None and done < 0.9 * off:
            server = True
            evidence.append(f"completed {done:.2f} of {off:.2f} offered req/s")
            break
    return bool(client), server, evidence


def _n(v: Any, fmt: str = "{:,.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def render_table(rows: Sequence[dict[str, Any]], *, title: str = "sweep") -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    goodput = any(r.get("goodput_requests_per_s") is not None for r in rows)
    cache = any(r.get("prefix_cache_hit_rate") is not None for r in rows)  # the server's counters
    cols = [
        "load",
        "in:out",
        "req/s offered",
        "req/s done",
        "out tok/s",
        "TTFT med",
        "TTFT p99",
        "ITL med",
        "ITL p99",
        "E2E med",
        "E2E p99",
        *(["goodput/s"] if goodput else []),
        *(["prefix hit"] if cache else []),
        "SLO",
        "$/1M out",
    ]
    for col in cols:
        t.add_column(col, justify="left" if col in ("load", "in:out") else "right")
    for r in rows:
        passed = r.get("slo_passed")
        slo = "[green]pass[/green]" if passed is True else ("[red]fail[/red]" if passed is False else "-")
        t.add_row(
            str(r.get("load")),
            f"{r.get('input_len')}:{r.get('output_len')}",
            _n(r.get("offered_requests_per_s"), "{:,.2f}"),
            _n(r.get("completed_requests_per_s"), "{:,.2f}"),
            _n(r.get("output_tokens_per_s"), "{:,.0f}"),
            _n(r.get("ttft_median_ms")),
            _n(r.get("ttft_p99_ms")),
            _n(r.get("itl_median_ms")),
            _n(r.get("itl_p99_ms")),
            _n(r.get("e2e_median_ms"), "{:,.0f}"),
            _n(r.get("e2e_p99_ms"), "{:,.0f}"),
            *([_n(r.get("goodput_requests_per_s"), "{:,.2f}")] if goodput else []),
            *([_n(r.get("prefix_cache_hit_rate"), "{:.1%}")] if cache else []),
            slo,
            _n(r.get("usd_per_1m_output_tokens"), "${:,.3f}"),
        )
    return t


def slo_capacity(pts: list[dict[str, Any]], summaries: Sequence[Mapping[str, Any]], x_key: str) -> dict[str, Any]:
    """The highest load of the passing run from the lowest load up (a pass above a failure is noted)."""
    ordered = sorted(zip(pts, summaries), key=lambda t: sort_load(t[0], x_key))
    best: tuple[dict[str, Any], Mapping[str, Any]] | None = None
    first_fail: dict[str, Any] | None = None
    note = None
    for e, s in ordered:
        ok = bool((s.get("slo_check") or {}).get("passed"))
        if ok and first_fail is None:
            best = (e, s)
        elif not ok and first_fail is None:
            first_fail = e
        elif ok and first_fail is not None:
            again, failed_at = fmt_load(x_of(e, x_key)), fmt_load(x_of(first_fail, x_key))
            note = (
                f"{again} passed again above the failure at {failed_at}: "
                "noisy near the limit; repeat or lengthen the runs"
            )
            break
    out: dict[str, Any] = {
        "load": x_of(best[0], x_key) if best else None,
        "dir": best[0]["dir"] if best else None,
        "cost": best[1].get("cost") if best else None,
    }
    if note:
        out["note"] = note
    return out


def x_of(entry: dict[str, Any], x_key: str) -> float | None:
    v = entry.get(x_key)
    if v == "inf":
        return None
    return float(v) if v is not None else None


def sort_load(entry: dict[str, Any], x_key: str) -> float:
    v = x_of(entry, x_key)
    return math.inf if v is None else v


def fmt_load(x: float | None) -> str:
    if x is None:
        return "-"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
