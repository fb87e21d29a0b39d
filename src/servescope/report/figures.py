"""Results -> named SVG charts (pure: loaded results in, {name: svg} out, in a stable order)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from servescope.report.charts import cdf_chart, histogram_chart, line_chart
from servescope.report.data import (
    SweepResult,
    inflight_series,
    samples_ms,
    tokens_per_s_series,
)
from servescope.report.gantt import gantt_columns
from servescope.report.svgplot import PALETTE, RefLine, Series
from servescope.results.metrics import dig
from servescope.results.schema import Summary
from servescope.results.store import RunResult

__all__ = ["get", "run_figures", "runs_overlay_figures", "slo_of", "sweep_figures", "sweep_limits"]

_MAX_CDF_SERIES = 8


get = dig  # the report's name for it


def slo_of(summary: Summary) -> dict[str, float]:
    slo = get(summary, "goodput", "slo") or summary.get("slo") or {}
    return {str(k): float(v) for k, v in slo.items() if isinstance(v, (int, float))} if isinstance(slo, dict) else {}


def _slo_ref(slo: dict[str, float], key: str, axis: str = "x", scale: float = 1.0) -> list[RefLine]:
    if key in slo:
        return [RefLine(slo[key] * scale, f"SLO {key.removesuffix('_ms').upper()} {slo[key]:g} ms", axis)]
    return []


def _use_log(xs: Sequence[float]) -> bool:
    pos = [x for x in xs if x > 0]
    return len(pos) == len(xs) and len(xs) > 2 and max(pos) / min(pos) >= 8


def _thin_points(xs: np.ndarray, ys: np.ndarray, k: int = 4000) -> tuple[list[float], list[float], str]:
    """At most k points of a scatter (an evenly spaced, deterministic subset: point int(i·n/k) for
    i < k) and a note saying so."""
    n = int(xs.size)
    if n <= k:
        return xs.tolist(), ys.tolist(), ""
    idx = (np.arange(k) * n / k).astype(np.int64)
    return xs[idx].tolist(), ys[idx].tolist(), f"{k} of {n} requests shown"


def run_figures(run: RunResult) -> dict[str, str]:
    """Distributions, timeline and client charts of one run."""
    s = samples_ms(run.columns)
    slo = slo_of(run.summary)
    figs: dict[str, str] = {}
    figs["ttft_hist"] = histogram_chart(
        [("TTFT", s["ttft"])], title="Time to first token", x_label="TTFT (ms)", refs=_slo_ref(slo, "ttft_ms")
    )
    figs["itl_hist"] = histogram_chart(
        [("ITL", s["itl"])], title="Inter-token latency (per token)", x_label="ITL (ms)", refs=_slo_ref(slo, "tpot_ms")
    )
    figs["e2e_hist"] = histogram_chart(
        [("E2E", s["e2e"])], title="End-to-end latency", x_label="E2E (ms)", refs=_slo_ref(slo, "e2e_ms")
    )
    pairs = [("TTFT", s["ttft"]), ("E2E", s["e2e"]), ("ITL", s["itl"])]
    if len(s["ttfat"]) and len(s["ttft"]) and float(s["ttfat"].sum()) != float(s["ttft"].sum()):
        pairs.insert(1, ("TTFAT", s["ttfat"]))
    figs["latency_cdf"] = cdf_chart(pairs, title="Latency CDFs", x_label="latency (ms, log scale)", x_log=True)

    c = run.columns
    tx, ty = inflight_series(c)
    figs["inflight"] = line_chart(
        [Series("in flight", tx, ty, step=True, fill=True, markers=False)],
        title="Requests in flight",
        x_label="run time (s)",
        y_label="requests",
        x_zero=True,
    )
    kx, ky = tokens_per_s_series(c)
    out_tps = get(run.summary, "throughput", "output_tokens_per_s")
    refs = [RefLine(float(out_tps), f"run average {out_tps:.0f} tok/s", "y", "#6b7280")] if out_tps else []
    figs["tokens_per_s"] = line_chart(
        [Series("output tokens/s", kx, ky, fill=True, markers=False)],
        title="Output tokens per second",
        x_label="run time (s)",
        y_label="tokens/s",
        x_zero=True,
        refs=refs,
    )
    m = c.measured  # sent, not warm-up; id order
    send, first, ok_m = c.t_send[m], c.t_first[m], c.ok[m]
    end = np.where(np.isnan(c.t_end[m]), np.where(np.isnan(c.t_last[m]), send, c.t_last[m]), c.t_end[m])
    # (send, first token or None, end, failed) of each request, in the order gantt_chart sorts them
    order = np.lexsort((~ok_m, end, np.nan_to_num(first, nan=-np.inf), send))
    good = ok_m & ~np.isnan(first)  # completed: time to first token; failed: time to failure
    bad_end = np.where(np.isnan(c.t_end[m]) | (c.t_end[m] == 0), send, c.t_end[m])[~ok_m]
    bad_send = send[~ok_m]
    figs["requests_gantt"] = gantt_columns(
        send[order] / 1e9, first[order] / 1e9, end[order] / 1e9, ~ok_m[order], title="Requests over the run"
    )
    sx, sy, note = _thin_points(send[good] / 1e9, (first[good] - send[good]) / 1e6)
    series = [Series("TTFT", sx, sy, lines=False, markers=True)]
    if bad_send.size:
        series.append(
            Series(
                "failed (time to failure)",
                (bad_send / 1e9).tolist(),
                ((bad_end - bad_send) / 1e6).tolist(),
                color="#dc2626",
                lines=False,
                markers=True,
            )
        )
    figs["ttft_over_time"] = line_chart(
        series,
        title="TTFT by send time",
        x_label="send time (s)",
        subtitle=note,
        y_label="TTFT (ms)",
        x_zero=True,
        refs=_slo_ref(slo, "ttft_ms", "y"),
    )
    lx, ly, note = _thin_points(c.t_sched[m] / 1e9, (send - c.t_sched[m]) / 1e6)
    figs["schedule_lag"] = line_chart(
        [Series("schedule lag", lx, ly, lines=False, markers=True)],
        subtitle=note,
        title="Client schedule lag (send − scheduled)",
        x_label="scheduled time (s)",
        y_label="lag (ms)",
        x_zero=True,
    )
    return figs


def _sweep_metric(sw: SweepResult, *path: str, scale: float = 1.0) -> tuple[list[float], list[float], list[str]]:
    xs, ys, labs = [], [], []
    for p in sw.points:
        v = get(p.run.summary, *path)
        if isinstance(v, (int, float)) and math.isfinite(v):
            xs.append(p.x)
            ys.append(float(v) * scale)
            labs.append(p.label)
    return xs, ys, labs


def sweep_limits(sw: SweepResult) -> list[RefLine]:
    """SLO lines for the sweep charts: the sweep's aggregate limits (e.g. P99 ITL ≤ 50 ms), else
    the per-request limits of its runs' goodput. RefLine.label carries the metric for `_refs_for`."""
    agg = get(sw.meta, "slo", "aggregate")
    out = []
    if isinstance(agg, list) and agg:
        for a in agg:
            if isinstance(a, dict) and isinstance(a.get("limit_ms"), (int, float)):
                out.append(
                    RefLine(
                        float(a["limit_ms"]),
                        f"{a.get('metric', '')}|SLO {str(a.get('stat', '')).upper()} "
                        f"{str(a.get('metric', '')).upper()} {a['limit_ms']:g} ms",
                    )
                )
        return out
    slo = slo_of(sw.points[0].run.summary) if sw.points else {}
    return [
        RefLine(v, f"{k.removesuffix('_ms')}|SLO {k.removesuffix('_ms').upper()} {v:g} ms (per request)")
        for k, v in slo.items()
    ]


def _refs_for(limits: Sequence[RefLine], metrics: Sequence[str], scale: float = 1.0) -> list[RefLine]:
    out = []
    for r in limits:
        metric, _, label = r.label.partition("|")
        if metric in metrics:
            out.append(RefLine(r.value * scale, label, "y"))
    return out


def sweep_figures(sides: Sequence[tuple[str, SweepResult]], limits: Sequence[RefLine] = ()) -> dict[str, str]:
    """Curves against the swept variable; several sweeps overlay on shared axes (colour per sweep)."""
    if not sides:
        return {}
    multi = len(sides) > 1
    x_label = sides[0][1].x_label
    all_x = [p.x for _, sw in sides for p in sw.points if math.isfinite(p.x)]
    x_log = _use_log(all_x)

    def pair(metrics: Sequence[tuple[str, tuple[str, ...], float]], labels: bool = False) -> list[Series]:
        out = []
        for i, (side, sw) in enumerate(sides):
            for j, (name, path, scale) in enumerate(metrics):
                xs, ys, labs = _sweep_metric(sw, *path, scale=scale)
                color = PALETTE[i % len(PALETTE)] if multi else PALETTE[j % len(PALETTE)]
                out.append(
                    Series(
                        f"{side} · {name}" if multi else name,
                        xs,
                        ys,
                        color=color,
                        dashed=multi and j > 0,
                        labels=labs if labels else None,
                    )
                )
        return out

    kw: dict[str, Any] = {"x_label": x_label, "x_log": x_log}
    figs: dict[str, str] = {}
    figs["sweep_throughput"] = line_chart(
        pair(
            [
                ("output tok/s", ("throughput", "output_tokens_per_s"), 1.0),
                ("total tok/s", ("throughput", "total_tokens_per_s"), 1.0),
            ]
        ),
        title="Token throughput",
        y_label="tokens/s",
        **kw,
    )
    figs["sweep_itl"] = line_chart(
        pair([("median ITL", ("latency_ms", "itl", "median"), 1.0), ("P99 ITL", ("latency_ms", "itl", "p99"), 1.0)]),
        title="Inter-token latency",
        y_label="ITL (ms)",
        refs=_refs_for(limits, ("itl", "tpot")),
        **kw,
    )
    figs["sweep_ttft"] = line_chart(
        pair(
            [("median TTFT", ("latency_ms", "ttft", "median"), 1.0), ("P99 TTFT", ("latency_ms", "ttft", "p99"), 1.0)]
        ),
        title="Time to first token",
        y_label="TTFT (ms)",
        refs=_refs_for(limits, ("ttft",)),
        **kw,
    )
    figs["sweep_e2e"] = line_chart(
        pair([("median E2E", ("latency_ms", "e2e", "median"), 1e-3), ("P99 E2E", ("latency_ms", "e2e", "p99"), 1e-3)]),
        title="End-to-end latency",
        y_label="E2E (s)",
        refs=_refs_for(limits, ("e2e",), 1e-3),
        **kw,
    )
    figs["sweep_request_rate"] = line_chart(
        pair(
            [
                ("completed req/s (server)", ("throughput", "requests_per_s"), 1.0),
                ("offered req/s (client)", ("throughput", "offered_requests_per_s"), 1.0),
            ]
        ),
        title="Server vs client request rate",
        y_label="requests/s",
        **kw,
    )
    figs["sweep_throughput_vs_latency"] = line_chart(
        [
            Series(s.name, s.xs, s.ys, s.color, s.dashed, labels=s.labels)
            for s in _xy_pairs(sides, ("latency_ms", "e2e", "median"), 1e-3, ("throughput", "output_tokens_per_s"))
        ],
        title="Throughput vs latency",
        x_label="median E2E latency (s)",
        y_label="output tokens/s",
    )
    figs["sweep_per_user"] = line_chart(
        _xy_pairs(sides, ("per_user_output_tokens_per_s", "median"), 1.0, ("throughput", "output_tokens_per_s")),
        title="Per-user speed vs total throughput",
        x_label="median tokens/s per user",
        y_label="output tokens/s (all users)",
    )
    if any(
        isinstance(get(p.run.summary, "cost", "usd_per_1m_output_tokens"), (int, float))
        for _, sw in sides
        for p in sw.points
    ):
        figs["sweep_cost"] = line_chart(
            pair(
                [
                    ("$ per 1M output tokens", ("cost", "usd_per_1m_output_tokens"), 1.0),
                    ("$ per 1M total tokens", ("cost", "usd_per_1m_total_tokens"), 1.0),
                ]
            ),
            title="Cost per million tokens",
            y_label="USD per 1M tokens",
            **kw,
        )
    if not multi:
        sw = sides[0][1]
        pts = _thin(sw.points)
        for key, title, xl in (
            ("ttft", "TTFT distribution by load", "TTFT (ms, log scale)"),
            ("itl", "ITL distribution by load", "ITL (ms, log scale)"),
        ):
            figs[f"sweep_{key}_cdf"] = cdf_chart(
                [(f"{sw.x_key.replace('_rps', '')} {p.label}", samples_ms(p.run.columns)[key]) for p in pts],
                title=title,
                x_label=xl,
                x_log=True,
            )
    return figs


def _thin(points: list, k: int = _MAX_CDF_SERIES) -> list:
    if len(points) <= k:
        return points
    idx = sorted({round(i * (len(points) - 1) / (k - 1)) for i in range(k)})
    return [points[i] for i in idx]


def _xy_pairs(
    sides: Sequence[tuple[str, SweepResult]], xpath: tuple[str, ...], xscale: float, ypath: tuple[str, ...]
) -> list[Series]:
    out = []
    for i, (side, sw) in enumerate(sides):
        xs, ys, labs = [], [], []
        for p in sw.points:
            x, y = get(p.run.summary, *xpath), get(p.run.summary, *ypath)
            if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                xs.append(float(x) * xscale)
                ys.append(float(y))
                labs.append(p.label)
        out.append(Series(side, xs, ys, PALETTE[i % len(PALETTE)], labels=labs))
    return out


def runs_overlay_figures(sides: Sequence[tuple[str, RunResult]]) -> dict[str, str]:
    """Several single runs on shared axes: latency CDFs and tokens/s over time."""
    samples = [(name, samples_ms(run.columns)) for name, run in sides]
    figs: dict[str, str] = {}
    for key, title in (
        ("ttft", "Time to first token"),
        ("itl", "Inter-token latency"),
        ("e2e", "End-to-end latency"),
        ("tpot", "Time per output token"),
    ):
        figs[f"overlay_{key}_cdf"] = cdf_chart(
            [(n, s[key]) for n, s in samples],
            title=f"{title} CDF",
            x_label=f"{key.upper()} (ms, log scale)",
            x_log=True,
        )
    series = []
    for i, (name, run) in enumerate(sides):
        kx, ky = tokens_per_s_series(run.columns)
        series.append(Series(name, kx, ky, PALETTE[i % len(PALETTE)], markers=False))
    figs["overlay_tokens_per_s"] = line_chart(
        series, title="Output tokens per second over the run", x_label="run time (s)", y_label="tokens/s", x_zero=True
    )
    return figs
