"""A record-by-record ORACLE of the column path: a deliberately naive per-record reimplementation of
the summary (`summarize`), the self-checks (`validate`, `concurrency_held`), the precision block
(`precision_block`, `imprecise`, `with_target`) and the per-request figures they read
(`request_latencies_ms`, `itl_gaps_ms`, `window_ns`), as Python loops over `RequestRecord`s.

Used only to check the column path (`colsummary.summarize_columns`, `selfcheck.validate_columns`,
`precision.precision_block_columns` ...), which is the one implementation that runs: the tests hold
the two equal to the bit, and tests that build records by hand read their figures from here. It
shares with src/ only what is not a per-request formula: the statistics (`metrics.distribution`,
`error_adjusted`, `offered_rate`), the interval method (`precision.quantile_interval`) and the
checks' verdicts (how figures are judged once computed).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from servescope.results.interactivity import interactivity_block
from servescope.results.metrics import SCHEMA, _closed_loop, distribution, error_adjusted, offered_rate
from servescope.results.precision import (
    CONFIDENCE,
    HEADLINE,
    METHOD,
    STOP_METRICS,
    _imprecise,
    _with_missing,
    quantile_interval,
)
from servescope.results.records import RequestRecord
from servescope.results.schema import (
    Client,
    ClientMeasures,
    Goodput,
    PercentileInterval,
    Precision,
    RunInfo,
    Summary,
    Throughput,
    ValidationCheck,
)
from servescope.results.selfcheck import (
    E2E_TOLERANCE,
    Bounds,
    _check,
    _e2e_verdict,
    _littles_verdict,
    _token_verdict,
    engine_agreement,
    percentile_floors,
    physical_bounds,
)

__all__ = [
    "concurrency_held",
    "e2e_consistency",
    "imprecise",
    "in_flight_mean",
    "itl_gaps_ms",
    "littles_law",
    "meets_slo",
    "precision_block",
    "request_latencies_ms",
    "run_intervals",
    "summarize",
    "token_counts",
    "validate",
    "window_ns",
    "with_target",
]

# Failures that say nothing about the server: requests cut short by the user or by --duration.
_NOT_A_SERVER_FAILURE = frozenset({"cancelled"})


# ----------------------------------------------------------------------------- the summary
def itl_gaps_ms(record: RequestRecord) -> np.ndarray:
    """Inter-token gaps of one request, per token.

    A chunk arriving `gap` after the previous one and carrying k tokens contributes k gaps of
    gap/k. Tokens of the first chunk arrive with the first token and are part of TTFT, not ITL.
    """
    t = record.chunk_ns
    if len(t) < 2:
        return np.empty(0)
    gaps = np.diff(np.asarray(t, dtype=np.int64)) / 1e6
    k = np.asarray(record.chunk_tokens[1:], dtype=np.int64) if record.chunk_tokens else None
    if k is None or k.size != gaps.size or np.all(k == 1):
        return gaps
    k = np.maximum(k, 1)
    return np.repeat(gaps / k, k)


def request_latencies_ms(r: RequestRecord) -> dict[str, float | None]:
    """TTFT, TTFAT, E2E and TPOT of one completed request (None where undefined)."""
    send = r.t_send_ns
    ttft = (r.t_first_ns - send) / 1e6 if r.t_first_ns is not None and send is not None else None
    ttfat = (r.t_first_answer_ns - send) / 1e6 if r.t_first_answer_ns is not None and send is not None else None
    e2e = (r.t_last_ns - send) / 1e6 if r.t_last_ns is not None and send is not None else None
    n = r.output_tokens or 0
    tpot = None
    if n > 1 and r.t_last_ns is not None and r.t_first_ns is not None:
        tpot = (r.t_last_ns - r.t_first_ns) / 1e6 / (n - 1)
    return {"ttft": ttft, "ttfat": ttfat, "e2e": e2e, "tpot": tpot}


def meets_slo(lat: Mapping[str, float | None], slo: Mapping[str, float]) -> bool:
    """Per-request SLO check for goodput: every `<metric>_ms` limit in `slo` holds.

    A limit on a metric the request does not have (TPOT of a 1-token answer) is not violated.
    """
    for key, limit in slo.items():
        value = lat.get(key.removesuffix("_ms"))
        if value is not None and value > limit:
            return False
    return True


def window_ns(measured: Iterable[RequestRecord]) -> tuple[int, int] | None:
    """The measured window: first send of a measured request to the last end of one."""
    sends = [r.t_send_ns for r in measured if r.t_send_ns is not None]
    ends = [r.t_end_ns for r in measured if r.t_end_ns is not None]
    if not sends or not ends:
        return None
    return min(sends), max(ends)


def summarize(
    records: Sequence[RequestRecord],
    *,
    run: RunInfo | None = None,
    slo: Mapping[str, float] | None = None,
    client: ClientMeasures | None = None,
    gpus: int | None = None,
    gpus_source: str | None = None,
) -> Summary:
    """The `summary.json` document (schema servescope.summary/1, results.schema.Summary) of a run's records.

    `run` carries what the records cannot know (run_id, started_at, target, load, workload); it is
    merged in as given. `slo` holds per-request limits (`ttft_ms`, `tpot_ms`, `e2e_ms`, `ttfat_ms`)
    for goodput. `client` holds the client's self-measurements (CPU, loop lag). `gpus`: the GPUs
    serving the target, for the per-GPU throughputs (None: unknown; `gpus_source` says who said so).
    """
    measured = [r for r in records if not r.warmup and r.t_send_ns is not None]
    completed = [r for r in measured if r.status == "ok"]
    failed = [r for r in measured if r.status != "ok"]
    errors = Counter(r.error_kind or "unknown" for r in failed)
    server_failures = sum(n for kind, n in errors.items() if kind not in _NOT_A_SERVER_FAILURE)

    win = window_ns(measured)
    window_s = (win[1] - win[0]) / 1e9 if win and win[1] > win[0] else 0.0

    lats = [request_latencies_ms(r) for r in completed]
    col = {k: [v for x in lats if (v := x[k]) is not None] for k in ("ttft", "ttfat", "e2e", "tpot")}
    itl = np.concatenate([itl_gaps_ms(r) for r in completed]) if completed else np.empty(0)

    out_tokens = sum(r.output_tokens or 0 for r in completed)
    in_tokens = sum((r.input_tokens if r.input_tokens is not None else r.input_len) for r in completed)
    reasoning = sum(r.reasoning_tokens for r in completed)
    per_user = [
        (r.output_tokens or 0) / (e2e / 1e3)
        for r, x in zip(completed, lats)
        if (e2e := x["e2e"]) and (r.output_tokens or 0) > 0
    ]
    lag_ms = [(r.t_send_ns - r.t_sched_ns) / 1e6 for r in measured if r.t_send_ns is not None]

    def rate(n: float) -> float:
        return n / window_s if window_s > 0 else 0.0

    offered = offered_rate([r.t_sched_ns for r in measured], window_s, closed_loop=_closed_loop(run))

    goodput: Goodput | None = None
    if slo:
        good = sum(1 for x in lats if meets_slo(x, slo))
        goodput = {
            "slo": dict(slo),
            "requests_meeting_slo": good,
            "fraction": good / len(measured) if measured else 0.0,
            "requests_per_s": rate(good),
        }

    client_doc: Client = {**(client or ClientMeasures()), "schedule_lag_ms": distribution(lag_ms)}
    throughput: Throughput = {
        "requests_per_s": rate(len(completed)),
        "offered_requests_per_s": offered,
        "input_tokens_per_s": rate(in_tokens),
        "output_tokens_per_s": rate(out_tokens),
        "total_tokens_per_s": rate(in_tokens + out_tokens),
    }
    return {
        "schema": SCHEMA,
        **(run or RunInfo()),
        "duration_s": window_s,
        "requests": {
            "total": len(measured),
            "completed": len(completed),
            "failed": len(failed),
            "errors": dict(sorted(errors.items())),
            "warmup": sum(1 for r in records if r.warmup),
        },
        "throughput": throughput,
        "latency_ms": {
            "ttft": distribution(col["ttft"]),
            "tpot": distribution(col["tpot"]),
            "itl": distribution(itl),
            "e2e": distribution(col["e2e"]),
            "ttfat": distribution(col["ttfat"]),
        },
        "latency_ms_error_adjusted": {
            "ttft": error_adjusted(col["ttft"], server_failures),
            "e2e": error_adjusted(col["e2e"], server_failures),
        },
        "tokens": {
            "input_total": in_tokens,
            "output_total": out_tokens,
            "reasoning_total": reasoning,
            "answer_total": out_tokens - reasoning,
            "input_source": _input_source(completed),
            "output_source": _output_source(completed),
        },
        "per_user_output_tokens_per_s": {
            "median": float(np.median(per_user)) if per_user else None,
            "p10": float(np.percentile(per_user, 10)) if per_user else None,
            "mean": float(np.mean(per_user)) if per_user else None,
        },
        "interactivity": interactivity_block(col["tpot"], throughput, gpus, gpus_source),
        "goodput": goodput,
        "client": client_doc,
    }


def _input_source(completed: Sequence[RequestRecord]) -> Literal["usage", "requested", "mixed", "none"]:
    """usage: every completed request's input count came from usage; requested: none did."""
    n_usage = sum(1 for r in completed if r.input_tokens is not None)
    if not completed:
        return "none"
    return "usage" if n_usage == len(completed) else "requested" if n_usage == 0 else "mixed"


def _output_source(completed: Sequence[RequestRecord]) -> Literal["usage", "counted", "mixed", "none"]:
    """usage: every completed request's output count came from usage; counted: none did."""
    n_usage = sum(1 for r in completed if r.output_tokens_source == "usage")
    if not completed:
        return "none"
    return "usage" if n_usage == len(completed) else "counted" if n_usage == 0 else "mixed"


# -------------------------------------------------------------------------- the self-checks
def token_counts(records: Sequence[RequestRecord], server: Mapping[str, Any] | None) -> ValidationCheck:
    """Client-counted chunks vs server usage (per request), Σ usage vs the server's counter."""
    sent = [r for r in records if r.t_send_ns is not None]
    with_usage = [r for r in sent if r.status == "ok" and r.output_tokens_source == "usage" and r.chunk_ns]
    usage = None
    if with_usage:
        usage = (
            sum(r.chunks for r in with_usage),
            sum(r.output_tokens or 0 for r in with_usage),
            sum(1 for r in with_usage if r.chunks > (r.output_tokens or 0)),
        )
    return _token_verdict(
        usage,
        server,
        client=sum(r.output_tokens or 0 for r in sent),  # warm-up included: the server counted it too
        shortfall=sum(max(r.output_len - (r.output_tokens or 0), 0) for r in sent if r.status != "ok"),
        client_input=sum(r.input_tokens if r.input_tokens is not None else r.input_len for r in sent),
    )


def in_flight_mean(records: Sequence[RequestRecord], start_ns: int, end_ns: int) -> float:
    """Time-average of requests in flight (sent, not yet ended) over [start_ns, end_ns]."""
    if end_ns <= start_ns:
        return 0.0
    busy = 0
    for r in records:
        if r.t_send_ns is None or r.t_end_ns is None:
            continue
        a, b = max(r.t_send_ns, start_ns), min(r.t_end_ns, end_ns)
        if b > a:
            busy += b - a
    return busy / (end_ns - start_ns)


def concurrency_held(records: Sequence[RequestRecord], concurrency: int | None) -> float | None:
    """Closed loop: mean in flight between the concurrency-th send (the first wave out) and the last
    send, as a share of `concurrency`; None when no slot was refilled (nothing to judge) or when
    sessions pause between turns (think time is not the client lagging)."""
    if not concurrency:
        return None
    sent = [r for r in records if r.t_send_ns is not None and r.t_end_ns is not None]
    if any(r.session is not None for r in sent) or len(sent) <= concurrency:
        return None
    sends = sorted(r.t_send_ns for r in sent if r.t_send_ns is not None)
    start, end = sends[concurrency - 1], sends[-1]
    if end <= start:
        return None
    return in_flight_mean(sent, start, end) / concurrency


def littles_law(records: Sequence[RequestRecord], summary: Summary) -> ValidationCheck:
    """L (mean in flight over the measured window, from the records' send and end stamps) against
    λ·W: the summary's completed requests/s × the mean time from send to the end of the response of
    a completed request (E2E ends at the last token; the response ends after its last chunks, usage
    and [DONE], which the engine may take a few ms to send: both figures are given)."""
    measured = [r for r in records if not r.warmup and r.t_send_ns is not None]
    win = window_ns(measured)
    lam = summary["throughput"]["requests_per_s"]
    done = [r for r in measured if r.status == "ok" and r.t_end_ns is not None and r.t_send_ns is not None]
    if win is None or win[1] <= win[0] or not lam or not done:
        return _check("littles_law", "skipped", {}, "no completed request in a measured window")
    w_ms = sum((r.t_end_ns or 0) - (r.t_send_ns or 0) for r in done) / len(done) / 1e6
    sent = [r for r in records if r.t_send_ns is not None]
    return _littles_verdict(lam, w_ms, in_flight_mean(sent, *win), summary)


def e2e_consistency(records: Sequence[RequestRecord]) -> ValidationCheck:
    """Per completed streamed request with n > 1 tokens over ≥ 2 chunks: E2E vs TTFT + mean ITL·(n − 1)."""
    off = judged = 0
    worst = 0.0
    for r in records:
        if r.warmup or r.status != "ok" or len(r.chunk_ns) < 2 or (r.output_tokens or 0) < 2:
            continue
        lat = request_latencies_ms(r)
        gaps = itl_gaps_ms(r)
        ttft, e2e = lat["ttft"], lat["e2e"]
        if ttft is None or e2e is None or gaps.size == 0:
            continue
        judged += 1
        predicted = ttft + float(gaps.mean()) * ((r.output_tokens or 0) - 1)
        err = abs(predicted - e2e)
        worst = max(worst, err / e2e if e2e > 0 else 0.0)
        if err > max(E2E_TOLERANCE * e2e, 1.0):
            off += 1
    return _e2e_verdict(judged, off, worst)


def validate(
    records: Sequence[RequestRecord], summary: Summary, *, bounds: Bounds | None = None
) -> list[ValidationCheck]:
    """Every self-check, in a fixed order, for `summary["validation"]`."""
    return [
        token_counts(records, summary.get("server")),
        littles_law(records, summary),
        e2e_consistency(records),
        physical_bounds(summary, bounds),
        percentile_floors(summary),
        engine_agreement(summary),  # reads the summary alone: the one implementation serves both paths
    ]


# ---------------------------------------------------------------------------- the precision
def run_intervals(
    per_request: Mapping[str, Sequence[float | None]], itl: Sequence[np.ndarray] | None = None
) -> dict[str, dict[str, PercentileInterval | None]]:
    """Intervals of the headline percentiles per metric: `per_request` maps a metric to one value per
    completed request in send order (None where the request has none, e.g. TPOT of one token);
    `itl` holds each request's ITL gaps in send order."""
    out: dict[str, dict[str, PercentileInterval | None]] = {}
    for name, vals in per_request.items():
        x = np.array([v for v in vals if v is not None], dtype=float)
        out[name] = {label: quantile_interval(x, q) for label, q in HEADLINE}
    if itl is not None:
        sizes = np.array([g.size for g in itl], dtype=np.int64)
        flat = np.concatenate(list(itl)) if len(itl) else np.empty(0)
        out["itl"] = {label: quantile_interval(flat, q, sizes=sizes) for label, q in HEADLINE}
    return out


def _completed_in_send_order(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    done = [r for r in records if not r.warmup and r.status == "ok" and r.t_send_ns is not None]
    done.sort(key=lambda r: r.t_send_ns or 0)
    return done


def precision_block(records: Sequence[RequestRecord]) -> Precision:
    """The summary's `precision` block: headline intervals of TTFT, TPOT, E2E (per request) and ITL
    (per token, batched by request) over completed measured requests in send order."""
    done = _completed_in_send_order(records)
    lats = [request_latencies_ms(r) for r in done]
    per = {m: [x[m] for x in lats] for m in ("ttft", "tpot", "e2e")}
    return {"method": METHOD, "confidence": CONFIDENCE, "metrics": run_intervals(per, [itl_gaps_ms(r) for r in done])}


def imprecise(records: Sequence[RequestRecord], target_pct: float) -> list[str]:
    """The headline percentiles of STOP_METRICS not yet known to ±target_pct % (empty: all are), for
    --target-precision. Only what the stop rule needs is computed (no ITL)."""
    done = [r for r in records if not r.warmup and r.status == "ok" and r.t_send_ns is not None]
    lats = [request_latencies_ms(r) for r in done]
    return _imprecise(
        np.array([r.t_send_ns or 0 for r in done], dtype=np.int64),
        {m: np.array([_nan(x[m]) for x in lats], dtype=float) for m in STOP_METRICS},
        target_pct,
    )


def _nan(v: float | None) -> float:
    return math.nan if v is None else v


def with_target(
    block: Precision, records: Sequence[RequestRecord], target_pct: float, stopped_by: str | None, otherwise: str
) -> Precision:
    """`block` with the --target-precision outcome: the target, whether it was met (the rule stopped
    the run, or the final records meet it), and why the run stopped (`stopped_by` from the rule, else
    `otherwise`: the limit, an interrupt). The block's intervals cover every completed request,
    those still in flight at the stop included, so they may differ a little from the rule's last look."""
    return _with_missing(block, imprecise(records, target_pct), target_pct, stopped_by, otherwise)
