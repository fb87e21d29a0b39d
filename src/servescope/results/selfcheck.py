"""The run checks its own figures: six self-checks written into `summary.json` (`validation`). Pure.

Each check compares figures that come from different places (the client's count of chunks, the
server's usage, the server's Prometheus counters; throughput, latency and the load held; timing and
token counts; a deployment's physics) and says pass, fail or skipped, with the figures and why.
Every check and its tolerance is written down in docs/metrics.md ("Self-validation"); `validate_columns`
runs them all, over the run's columns (records in memory go through `RecordColumns.from_records`).

- `token_counts`: chunks the client counted ≤ the server's usage per request (a chunk carries at
  least one token), and Σ usage ≈ the server's own generation counter over the window.
- `littles_law`: mean requests in flight over the measured window ≈ completed requests/s × their
  mean time in flight.
- `e2e_consistency`: per request, E2E ≈ TTFT + mean ITL · (n − 1) with n the reported output tokens.
- `physical_bounds`: with a known deployment, mean ITL ≥ the time to stream the weights once per
  decode step, and the tokens computed per second ≤ the compute roofline.
- `percentile_floors`: every reported percentile has enough values to be bounded at all (a P99 from
  fewer than 368, a P95 from fewer than 72 ...; `precision.percentile_floor`).
- `engine_agreement`: the client's mean TTFT exceeds the engine's own (its request-level histogram,
  `engine_view`) by what the client's side explains, and the engine counted the requests the client did.

`concurrency_held_columns` (the closed loop's occupancy, for the client verdict) lives here too: it
reads the same send/end intervals as Little's law. `window_columns` (the measured window, from
`perrequest`) is here too, for the callers that import it from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

import numpy as np

from servescope.results.columns import RecordColumns
from servescope.results.metrics import dig
from servescope.results.perrequest import input_counts, request_latencies_ms, window_columns
from servescope.results.precision import per_row, percentile_floor
from servescope.results.schema import Summary, ValidationCheck
from servescope.sim.steptime import StepCost, distinct_experts

__all__ = [
    "E2E_OFF_SHARE",
    "E2E_TOLERANCE",
    "ENGINE_SLACK_MS",
    "ENGINE_TOLERANCE_MS",
    "ENGINE_TOLERANCE_SHARE",
    "LITTLE_TOLERANCE",
    "TOKEN_TOLERANCE",
    "Bounds",
    "bounds_from_cost",
    "concurrency_held_columns",
    "e2e_consistency_columns",
    "engine_agreement",
    "littles_law_columns",
    "percentile_floors",
    "physical_bounds",
    "summary_line",
    "token_counts_columns",
    "validate_columns",
    "window_columns",
]

#: Σ usage vs the server's generation counter: relative tolerance (plus the tokens of failed requests).
TOKEN_TOLERANCE = 0.01
#: Little's law: |λ·W − L| / L.
LITTLE_TOLERANCE = 0.05
#: E2E vs TTFT + ITL·(n − 1): a request is off beyond this relative error (or 1 ms, the larger) ...
E2E_TOLERANCE = 0.05
#: ... and the check fails when more than this share of requests is off.
E2E_OFF_SHARE = 0.01
#: Client − engine mean TTFT: below −1 ms is impossible (the client's TTFT holds the engine's) ...
ENGINE_SLACK_MS = 1.0
#: ... and above max(10 ms, 20% of the engine's mean) is time outside the engine worth a word.
ENGINE_TOLERANCE_MS = 10.0
ENGINE_TOLERANCE_SHARE = 0.20
_PERCENTILES = (("p90", 0.90), ("p95", 0.95), ("p99", 0.99))
_LATENCY_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E", "ttfat": "TTFAT"}


class Bounds(TypedDict):
    """Physical limits of a known deployment (computed where the deployment is loaded: run.assemble).

    `itl_floor_ms`: weights (dense + the routed experts one token needs) streamed once from HBM at
    the datasheet bandwidth, per token a decode step yields; `tokens_per_s_ceiling`: replicas ×
    peak FLOP/s ÷ FLOPs per token, both at 100% efficiency. `source` names the deployment."""

    itl_floor_ms: float
    tokens_per_s_ceiling: float
    source: str


def bounds_from_cost(cost: StepCost, *, replicas: float, source: str) -> Bounds:
    """Bounds of one engine (per-GPU `StepCost`, every GPU of a replica working on each token) × replicas."""
    weights = cost.dense_weight_bytes + cost.routed_expert_bytes * distinct_experts(cost, 1)
    per_step_s = weights / cost.hbm_bytes_per_s
    return {
        "itl_floor_ms": 1e3 * per_step_s / max(cost.decode_tokens_per_seq, 1.0),
        "tokens_per_s_ceiling": replicas * cost.flops_per_s / cost.flops_per_token,
        "source": source,
    }


def _check(
    name: str,
    status: Literal["pass", "fail", "marked", "skipped"],
    figures: Mapping[str, float | int | str | None],
    why: str,
) -> ValidationCheck:
    figs = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in figures.items()}
    return {"name": name, "status": status, "figures": figs, "why": why}


# ---------------------------------------------------------------------------- the requests
# The checks that read the requests read their columns (`columns.RecordColumns`, what a run reads back from
# requests.parquet), so the run keeps no record in memory. Times in the columns are float64 ns, exact
# (< 2**53); sums run over int64.


def _ns(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64)


def _in_flight_ns(send: np.ndarray, end: np.ndarray, start_ns: int, end_ns: int) -> float:
    """Time-average of requests in flight (sent, not yet ended) over [start_ns, end_ns], from their
    int64 send and end times."""
    if end_ns <= start_ns:
        return 0.0
    busy = np.maximum(np.minimum(end, end_ns) - np.maximum(send, start_ns), 0)
    return int(busy.sum()) / (end_ns - start_ns)


# ------------------------------------------------------------------------------------ tokens
def token_counts_columns(cols: RecordColumns, server: Mapping[str, Any] | None) -> ValidationCheck:
    """Client-counted chunks vs server usage (per request), Σ usage vs the server's counter."""
    sent = ~np.isnan(cols.t_send)
    out = np.nan_to_num(cols.output_tokens)
    chunks = np.nan_to_num(cols.chunks)
    with_usage = sent & cols.ok & cols.usage_output & (chunks > 0)
    usage = None
    if with_usage.any():
        usage = (
            int(chunks[with_usage].sum()),
            int(out[with_usage].sum()),
            int(np.count_nonzero(chunks[with_usage] > out[with_usage])),
        )
    failed = sent & ~cols.ok
    inputs = input_counts(cols)
    return _token_verdict(
        usage,
        server,
        client=int(out[sent].sum()),
        shortfall=int(np.maximum(cols.output_len[failed] - out[failed], 0).sum()),
        client_input=int(inputs[sent].sum()),
    )


def _token_verdict(
    usage: tuple[int, int, int] | None,
    server: Mapping[str, Any] | None,
    *,
    client: int,
    shortfall: int,
    client_input: int,
) -> ValidationCheck:
    """`token_counts` judged from its totals over sent requests: (chunks, usage tokens, requests with more
    chunks than usage) of completed ones with usage (None: none has), every output token the client
    saw, the tokens failed ones were asked for and did not get, the input tokens."""
    figures: dict[str, float | int | str | None] = {}
    problems: list[str] = []
    checked: list[str] = []
    if usage is not None:
        chunks, used, over = usage
        figures.update({"client_chunks": chunks, "usage_tokens": used, "requests_more_chunks_than_usage": over})
        checked.append("usage")
        if over:
            problems.append(f"{over} requests carried more token chunks than their usage reports tokens")
    gen = (server or {}).get("generation_tokens")
    if gen is not None:
        slack = TOKEN_TOLERANCE * client + shortfall
        figures.update({"client_output_tokens": client, "server_generation_tokens": gen, "tolerance_tokens": slack})
        checked.append("server metrics")
        if abs(gen - client) > slack:
            problems.append(
                f"the server's counter saw {gen:,.0f} generated tokens, the client {client:,} "
                f"(more than ±{slack:,.0f} apart: other traffic on the server, or tokens "
                "the client did not see)"
            )
    prompt = (server or {}).get("prompt_tokens")
    if prompt is not None:  # reported, not judged: engines differ on whether cached tokens count
        figures["server_prompt_tokens"] = prompt
        figures["client_input_tokens"] = client_input
    if not checked:
        return _check(
            "token_counts",
            "skipped",
            figures,
            "no usage in the responses and no generation counter on the server: nothing to compare",
        )
    if problems:
        return _check("token_counts", "fail", figures, "; ".join(problems))
    return _check(
        "token_counts",
        "pass",
        figures,
        f"chunks ≤ usage per request; Σ usage within {TOKEN_TOLERANCE:.0%} of the server's counter"
        if len(checked) == 2
        else f"compared with {checked[0]} only",
    )


# ------------------------------------------------------------------------------ Little's law
def littles_law_columns(cols: RecordColumns, summary: Summary) -> ValidationCheck:
    """L (mean in flight over the measured window, from the requests' send and end stamps) against
    λ·W: the summary's completed requests/s × the mean time from send to the end of the response of
    a completed request (E2E ends at the last token; the response ends after its last chunks, usage
    and [DONE], which the engine may take a few ms to send: both figures are given)."""
    win = window_columns(cols)
    lam = summary["throughput"]["requests_per_s"]
    done = cols.measured & cols.ok & ~np.isnan(cols.t_end)
    if win is None or win[1] <= win[0] or not lam or not done.any():
        return _check("littles_law", "skipped", {}, "no completed request in a measured window")
    w_ms = int((_ns(cols.t_end[done]) - _ns(cols.t_send[done])).sum()) / int(done.sum()) / 1e6
    sent = ~np.isnan(cols.t_send) & ~np.isnan(cols.t_end)
    return _littles_verdict(lam, w_ms, _in_flight_ns(_ns(cols.t_send[sent]), _ns(cols.t_end[sent]), *win), summary)


def concurrency_held_columns(
    cols: RecordColumns, concurrency: int | None, rows: np.ndarray | None = None
) -> float | None:
    """Closed loop: mean in flight between the concurrency-th send (the first wave out) and the last
    send, as a share of `concurrency` (of the rows in the boolean mask `rows`, if given); None when no
    slot was refilled (nothing to judge) or when sessions pause between turns (think time is not the
    client lagging)."""
    if not concurrency:
        return None
    sent = ~np.isnan(cols.t_send) & ~np.isnan(cols.t_end)
    if rows is not None:
        sent &= rows
    if (~np.isnan(cols.session[sent])).any() or int(sent.sum()) <= concurrency:
        return None
    send, end = _ns(cols.t_send[sent]), _ns(cols.t_end[sent])
    sends = np.sort(send)
    start, last = int(sends[concurrency - 1]), int(sends[-1])
    if last <= start:
        return None
    return _in_flight_ns(send, end, start, last) / concurrency


def _littles_verdict(lam: float, w_ms: float, L: float, summary: Summary) -> ValidationCheck:
    """Little's law judged: throughput `lam` (req/s) × mean response time `w_ms` against `L` in flight."""
    lw = lam * w_ms / 1e3
    err = abs(lw - L) / L if L > 0 else float("inf")
    figures: dict[str, float | int | str | None] = {
        "mean_in_flight": L,
        "throughput_rps": lam,
        "mean_response_ms": w_ms,
        "mean_e2e_ms": summary["latency_ms"]["e2e"]["mean"],
        "throughput_x_latency": lw,
        "relative_error": err,
        "tolerance": LITTLE_TOLERANCE,
    }
    load = summary.get("load")
    if load is not None and load.get("mode") == "concurrency" and load["concurrency"]:
        figures["concurrency"] = load["concurrency"]
    if err <= LITTLE_TOLERANCE:
        return _check(
            "littles_law",
            "pass",
            figures,
            f"throughput × mean response time = {lw:.2f} ≈ {L:.2f} requests in flight (within {LITTLE_TOLERANCE:.0%})",
        )
    return _check(
        "littles_law",
        "fail",
        figures,
        f"throughput × mean response time = {lw:.2f} but {L:.2f} requests were in flight on average: "
        "time in flight that the throughput and latency figures do not count (failed requests "
        "holding their slots, warm-up overlapping the window)",
    )


# --------------------------------------------------------------------------- E2E consistency
def e2e_consistency_columns(cols: RecordColumns) -> ValidationCheck:
    """Per completed streamed request with n > 1 tokens over ≥ 2 chunks: E2E vs TTFT + mean ITL·(n − 1),
    each request's mean gap its gaps' sum over their count. The sums are taken a piece of requests at
    a time (`precision.per_row`: a large run's gaps read again from the token lists, never all at once)."""
    sums = per_row(cols, _gap_sums, 1, np.float64)[0]
    n = np.nan_to_num(cols.output_tokens)
    rows = (
        cols.completed
        & (np.nan_to_num(cols.chunks) >= 2)
        & (n >= 2)
        & ~np.isnan(cols.t_first)
        & ~np.isnan(cols.t_last)
        & (cols.itl_counts > 0)
    )
    lat = request_latencies_ms(cols, rows)
    ttft, e2e = lat["ttft"], lat["e2e"]
    predicted = ttft + sums[rows] / cols.itl_counts[rows] * (n[rows] - 1)
    err = np.abs(predicted - e2e)
    rel = np.divide(err, e2e, out=np.zeros(err.size), where=e2e > 0)
    off = int(np.count_nonzero(err > np.maximum(E2E_TOLERANCE * e2e, 1.0)))
    return _e2e_verdict(int(rows.sum()), off, max(0.0, float(rel.max())) if rel.size else 0.0)


def _gap_sums(ms: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Each row's sum of its gaps (ms) in a piece of `precision.row_gaps_ms`."""
    return np.add.reduceat(ms, bounds[:-1])[None, :]


def _e2e_verdict(judged: int, off: int, worst: float) -> ValidationCheck:
    if not judged:
        return _check(
            "e2e_consistency", "skipped", {}, "no completed streamed request with two or more chunks and tokens"
        )
    share = off / judged
    figures = {
        "requests": judged,
        "requests_off": off,
        "share_off": share,
        "worst_relative_error": worst,
        "tolerance": E2E_TOLERANCE,
        "max_share_off": E2E_OFF_SHARE,
    }
    if share <= E2E_OFF_SHARE:
        return _check(
            "e2e_consistency",
            "pass",
            figures,
            f"{off} of {judged} requests off by more than {E2E_TOLERANCE:.0%} (or 1 ms)",
        )
    return _check(
        "e2e_consistency",
        "fail",
        figures,
        f"{off} of {judged} requests ({share:.1%}) have E2E off TTFT + ITL·(n − 1) by more than "
        f"{E2E_TOLERANCE:.0%}: the reported token counts disagree with the chunks that carried them",
    )


# ---------------------------------------------------------------------------- physical bounds
def physical_bounds(summary: Summary, bounds: Bounds | None) -> ValidationCheck:
    """Mean ITL ≥ the weight-streaming floor; tokens computed per second ≤ the compute roofline."""
    if bounds is None:
        return _check(
            "physical_bounds",
            "skipped",
            {},
            "the deployment behind the target is not known (the built-in emulator's is)",
        )
    itl = summary["latency_ms"]["itl"]["mean"]
    thr = summary["throughput"]
    server = summary.get("server")
    hit = server.get("prefix_cache_hit_rate") if server else None
    # prompt tokens served from a prefix cache cost no FLOPs: unknown hit rate, count none of them
    computed = thr["output_tokens_per_s"] + thr["input_tokens_per_s"] * (1.0 - hit if hit is not None else 0.0)
    floor, ceiling = bounds["itl_floor_ms"], bounds["tokens_per_s_ceiling"]
    figures = {
        "deployment": bounds["source"],
        "itl_mean_ms": itl,
        "itl_floor_ms": floor,
        "computed_tokens_per_s": computed,
        "tokens_per_s_ceiling": ceiling,
    }
    problems = []
    if itl is not None and itl < floor:
        problems.append(f"mean ITL {itl:.3f} ms is below the {floor:.3f} ms it takes to stream the weights")
    if computed > ceiling:
        problems.append(f"{computed:,.0f} tokens/s computed exceeds the compute roofline {ceiling:,.0f}")
    if problems:
        return _check("physical_bounds", "fail", figures, "; ".join(problems))
    return _check(
        "physical_bounds",
        "pass",
        figures,
        f"ITL above the weight-streaming floor, throughput under the roofline of {bounds['source']}",
    )


# -------------------------------------------------------------------------- percentile floors
def percentile_floors(summary: Summary) -> ValidationCheck:
    """Every reported P90/P95/P99 has at least `percentile_floor(q)` values behind it."""
    under: list[str] = []
    figures: dict[str, float | int | str | None] = {}
    for metric, label in _LATENCY_LABELS.items():
        n = dig(summary, "latency_ms", metric, "count")
        if not n:
            continue
        figures[f"{metric}_count"] = n
        short = [p for p, q in _PERCENTILES if n < percentile_floor(q)]
        if short:
            under.append(f"{label} {'/'.join(s.upper() for s in short)} from {n:,}")
    figures.update({f"floor_{p}": percentile_floor(q) for p, q in _PERCENTILES})
    figures["floor_p99.9"] = percentile_floor(0.999)
    if not figures.get("ttft_count") and not under:
        return _check("percentile_floors", "skipped", figures, "no completed request")
    if under:
        return _check(
            "percentile_floors",
            "marked",
            figures,
            "under-sampled, shown as such (the data cannot bound them from above): "
            + "; ".join(under)
            + f" values (a P99 needs {percentile_floor(0.99)}, a P95 {percentile_floor(0.95)})",
        )
    return _check("percentile_floors", "pass", figures, "every reported percentile has enough values")


# --------------------------------------------------------------------------- engine agreement
def engine_agreement(summary: Summary) -> ValidationCheck:
    """The client's mean TTFT against the engine's (`engine_view`, its histogram over the window):
    client − engine < −ENGINE_SLACK_MS fails (the client's TTFT holds the engine's), above
    max(ENGINE_TOLERANCE_MS, ENGINE_TOLERANCE_SHARE × the engine's mean) is marked (HTTP/SSE, the API
    server's front end, the network or a busy client cost more); the engine's count of finished
    requests outside [completed, sent] of the client's fails (other traffic, requests not seen)."""
    view = summary.get("engine_view")
    if not view:
        return _check("engine_agreement", "skipped", {}, "the target exposes no request-level latency histograms")
    figs: dict[str, float | int | str | None] = {}
    fails, marks, oks = [], [], []
    n, done, sent = view["engine_requests"], view["requests_completed"], view["requests_sent"]
    if n is not None:
        figs.update({"engine_requests": n, "client_completed": done, "client_sent": sent})
        if done <= n <= sent:
            oks.append(f"the engine counted {n:,} requests, the client completed {done:,} of {sent:,}")
        else:
            fails.append(
                f"the engine counted {n:,} requests ({view['engine_requests_metric']}), the client completed "
                f"{done:,} of {sent:,}: other traffic on the server, or requests the client did not see"
            )
    ttft = view["metrics"].get("ttft")
    diff = ttft["client_minus_engine_ms"] if ttft is not None else None
    if ttft is not None and diff is not None and dig(summary, "workload", "stream") is not False:
        engine = ttft["mean_ms"]
        tol = max(ENGINE_TOLERANCE_MS, ENGINE_TOLERANCE_SHARE * engine)
        figs.update({"engine_ttft_mean_ms": engine, "client_ttft_mean_ms": ttft["client_mean_ms"]})
        figs.update({"client_minus_engine_ms": diff, "slack_ms": ENGINE_SLACK_MS, "tolerance_ms": tol})
        said = f"client − engine mean TTFT {diff:.2f} ms (engine {engine:.2f} ms)"
        if diff < -ENGINE_SLACK_MS:
            fails.append(f"{said}: below the engine's, which the client's holds (different requests, or a clock off)")
        elif diff > tol:
            marks.append(f"{said}: more than {tol:.1f} ms outside the engine (HTTP/SSE, the API front end, network)")
        else:
            oks.append(f"{said}, within −{ENGINE_SLACK_MS:g} to {tol:.1f} ms")
    if not figs:
        return _check("engine_agreement", "skipped", figs, "no TTFT or request count to compare")
    status: Literal["pass", "fail", "marked"] = "fail" if fails else "marked" if marks else "pass"
    return _check("engine_agreement", status, figs, "; ".join(fails + marks + oks))


def validate_columns(cols: RecordColumns, summary: Summary, *, bounds: Bounds | None = None) -> list[ValidationCheck]:
    """Every self-check, in a fixed order, for `summary["validation"]`."""
    return [
        token_counts_columns(cols, summary.get("server")),
        littles_law_columns(cols, summary),
        e2e_consistency_columns(cols),
        physical_bounds(summary, bounds),
        percentile_floors(summary),
        engine_agreement(summary),
    ]


def summary_line(checks: Sequence[ValidationCheck]) -> str:
    """One line for the terminal and the report: "5 checks pass", or the failures and why."""
    passed = [c for c in checks if c["status"] == "pass"]
    failed = [c for c in checks if c["status"] == "fail"]
    marked = [c for c in checks if c["status"] == "marked"]
    skipped = [c["name"] for c in checks if c["status"] == "skipped"]
    skip = f" ({len(skipped)} skipped: {', '.join(skipped)})" if skipped else ""
    mark = "".join(f"; {c['name']}: {c['why']}" for c in marked)
    judged = len(passed) + len(failed)
    if not failed:
        return f"{len(passed)} check{'s' if len(passed) != 1 else ''} pass{skip}{mark}"
    fails = "; ".join(f"{c['name']}: {c['why']}" for c in failed)
    return f"{len(failed)} of {judged} checks fail{skip}: {fails}{mark}"
