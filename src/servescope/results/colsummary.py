"""Columns -> the summary: `summarize_columns` builds `summary.json` (results.schema.Summary) with
numpy over `RecordColumns`, the one implementation of the summary's figures. Pure.

Records held in memory are summarised through `RecordColumns.from_records`. The ITL distribution
of a large run is computed from its gaps' compact form (`streaming`): the figures numpy gives over
the gaps in ms, without their float copy. The pieces can be computed on threads: the caller passes
a `mapper` (on the columns); this module starts none.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import cast

import numpy as np

from servescope.results.columns import RecordColumns
from servescope.results.interactivity import interactivity_block
from servescope.results.metrics import PERCENTILES, SCHEMA, _closed_loop, distribution, error_adjusted, offered_rate
from servescope.results.perrequest import input_counts, request_latencies_ms, since_send_ms, window_columns
from servescope.results.schema import (
    Client,
    ClientMeasures,
    Distribution,
    Goodput,
    RunInfo,
    Setup,
    Summary,
    Throughput,
)
from servescope.results.streaming import (
    COMPACT_ABOVE,
    GapParts,
    GapStats,
    Mapper,
    linear_percentiles,
    pairwise_sum,
    streamed_percentiles,
)

__all__ = [
    "COMPACT_ABOVE",
    "gap_distribution",
    "setup_block",
    "streamed_gap_distribution",
    "summarize_columns",
    "tokens_read_together",
]

# Failures that say nothing about the server: requests cut short by the user or by --duration.
_NOT_A_SERVER_FAILURE = frozenset({"cancelled"})


def tokens_read_together(cols: RecordColumns, rows: np.ndarray | None = None) -> float | None:
    """The share of per-token gaps that are exactly 0: two chunks of a stream that came in one socket
    read carry one receive stamp (client/transport.py). Tokens merged by a client stall are among
    them, and so are chunks a server wrote together. None for a run too large to hold its gaps
    (`RecordColumns.held_itl`), or one without gaps. `rows`: only those rows' gaps (a boolean mask:
    one shard's requests)."""
    gaps = cols.held_itl
    if gaps is not None and rows is not None:
        if cols.itl_counts.size != len(cols) or int(cols.itl_counts.sum()) != gaps.size:
            return None  # (gaps not held row by row)
        gaps = gaps[np.repeat(rows, cols.itl_counts)]
    if gaps is None or not gaps.size:
        return None
    return float(np.count_nonzero(gaps == 0)) / gaps.size


def setup_block(cols: RecordColumns) -> Setup:
    """The connections opened inside the window (`client.setup`): the measured requests that waited for one
    (records' `setup_ns`), its time in ms, and its share of those completed requests' set-up + TTFT."""
    measured = cols.measured
    done = measured & cols.ok
    setup = cols.setup if cols.setup.size == len(cols) else np.full(len(cols), np.nan)
    late = measured & ~np.isnan(setup)
    both = late & done & ~np.isnan(cols.t_first)
    setup_ms = setup[both] / 1e6
    ttft_ms = since_send_ms(cols.t_send[both], cols.t_first[both])
    whole = float(setup_ms.sum() + ttft_ms.sum())
    return {
        "requests": int(late.sum()),
        "ms": distribution(setup[late] / 1e6),
        "share_of_time_to_first_token": float(setup_ms.sum()) / whole if whole > 0 else None,
    }


def gap_distribution(
    itl: np.ndarray,
    unit_ns: float,
    compact_above: int = COMPACT_ABOVE,
    *,
    counts: np.ndarray | None = None,
    mapper: Mapper = map,
) -> Distribution:
    """`metrics.distribution` of the gaps in ms, from `itl` in `unit_ns` (1.0: ns integers). More
    than `compact_above` integers are summarised without a float copy (`counts`: their
    `bucket_counts`, when the reader counted them; `mapper`: how pieces are computed, e.g. on
    threads)."""
    if unit_ns != 1.0 or itl.size <= compact_above:
        return distribution(itl if unit_ns == 1e6 else itl / 1e6)
    n = itl.size

    def ms(i: int, j: int) -> np.ndarray:
        return np.divide(itl[i:j], 1e6)

    mean = pairwise_sum(n, ms, mapper=mapper) / n

    def squared(i: int, j: int) -> np.ndarray:
        x = np.subtract(ms(i, j), mean)
        return np.multiply(x, x, out=x)

    var = pairwise_sum(n, squared, mapper=mapper) / n
    p50, p90, p95, p99 = linear_percentiles(itl, PERCENTILES, 1e6, counts=counts, mapper=mapper)
    return {
        "count": n,
        "mean": mean,
        "median": p50,
        "p90": p90,
        "p95": p95,
        "p99": p99,
        "min": int(itl.min()) / 1e6,
        "max": int(itl.max()) / 1e6,
        "std": math.sqrt(var),
    }


def streamed_gap_distribution(stats: GapStats, parts: GapParts, mapper: Mapper = map) -> Distribution:
    """`metrics.distribution` of gaps in ms from their `GapStats` and one more pass over them for
    the percentiles (exact: `order_statistics`' two levels, the first already counted). The mean
    and the standard deviation are exact (correctly rounded) from the integer sums, where numpy's
    pairwise float sum over the ms values can differ in the last bit or two."""
    n = stats.n
    p50, p90, p95, p99 = streamed_percentiles(stats, parts, PERCENTILES, mapper)
    var = (n * stats.squares - stats.total * stats.total) / (n * n * 10**12)
    return {
        "count": n,
        "mean": stats.total / (n * 10**6),
        "median": p50,
        "p90": p90,
        "p95": p95,
        "p99": p99,
        "min": stats.lo / 1e6,
        "max": stats.hi / 1e6,
        "std": math.sqrt(var),
    }


def summarize_columns(
    cols: RecordColumns,
    *,
    run: RunInfo | None = None,
    slo: Mapping[str, float] | None = None,
    client: ClientMeasures | None = None,
    gpus: int | None = None,
    gpus_source: str | None = None,
    compact_above: int = COMPACT_ABOVE,
) -> Summary:
    """The `summary.json` document (schema servescope.summary/1, results.schema.Summary) of a run's
    requests, from their columns.

    `run` carries what the records cannot know (run_id, started_at, target, load, workload); it is
    merged in as given. `slo` holds per-request limits (`ttft_ms`, `tpot_ms`, `e2e_ms`, `ttfat_ms`)
    for goodput: a request meets it when every limit on a metric it has holds (TPOT of a 1-token
    answer violates none). `client` holds the client's self-measurements (CPU, loop lag). `gpus`: the
    GPUs serving the target, for the per-GPU throughputs (None: unknown; `gpus_source` says who said
    so). The ITL distribution is kept on `cols` (computed once)."""
    measured = cols.measured
    done = measured & cols.ok
    failed = measured & ~cols.ok
    errors = Counter(k or "unknown" for k in cols.error_kind[failed].tolist())
    server_failures = sum(n for kind, n in errors.items() if kind not in _NOT_A_SERVER_FAILURE)

    win = window_columns(cols)
    window_s = (win[1] - win[0]) / 1e9 if win is not None and win[1] > win[0] else 0.0

    lat = request_latencies_ms(cols, done)
    e2e = lat["e2e"]
    out = np.nan_to_num(cols.output_tokens[done])
    col = {k: v[~np.isnan(v)] for k, v in lat.items()}

    out_tokens = int(out.sum())
    in_tokens = int(input_counts(cols)[done].sum())
    reasoning = int(cols.reasoning_tokens[done].sum())
    has_user = ~np.isnan(e2e) & (e2e != 0) & (out > 0)
    per_user = out[has_user] / (e2e[has_user] / 1e3)
    lag_ms = (cols.t_send[measured] - cols.t_sched[measured]) / 1e6

    def rate(n: float) -> float:
        return n / window_s if window_s > 0 else 0.0

    offered = offered_rate(cols.t_sched[measured].astype(np.int64).tolist(), window_s, closed_loop=_closed_loop(run))
    goodput: Goodput | None = None
    n_measured = int(measured.sum())
    if slo:
        meets = np.ones(int(done.sum()), dtype=bool)
        for key, limit in slo.items():
            v = lat.get(key.removesuffix("_ms"))
            if v is not None:
                meets &= ~(~np.isnan(v) & (v > limit))
        good = int(meets.sum())
        goodput = {
            "slo": dict(slo),
            "requests_meeting_slo": good,
            "fraction": good / n_measured if n_measured else 0.0,
            "requests_per_s": rate(good),
        }

    client_doc: Client = {**(client or ClientMeasures()), "schedule_lag_ms": distribution(lag_ms)}
    n_done = int(done.sum())
    throughput: Throughput = {
        "requests_per_s": rate(n_done),
        "offered_requests_per_s": offered,
        "input_tokens_per_s": rate(in_tokens),
        "output_tokens_per_s": rate(out_tokens),
        "total_tokens_per_s": rate(in_tokens + out_tokens),
    }
    n_in_usage = int((~np.isnan(cols.input_tokens[done])).sum())
    n_out_usage = int(cols.usage_output[done].sum())
    return {
        "schema": SCHEMA,
        **(run or RunInfo()),
        "duration_s": window_s,
        "requests": {
            "total": n_measured,
            "completed": n_done,
            "failed": int(failed.sum()),
            "errors": dict(sorted(errors.items())),
            "warmup": int(cols.warmup.sum()),
        },
        "throughput": throughput,
        "latency_ms": {
            "ttft": distribution(col["ttft"]),
            "tpot": distribution(col["tpot"]),
            "itl": _itl(cols, compact_above),
            "e2e": distribution(col["e2e"]),
            "ttfat": distribution(col["ttfat"]),
        },
        "latency_ms_error_adjusted": {
            "ttft": error_adjusted(cast(Sequence[float], col["ttft"]), server_failures),  # (as an array: no
            "e2e": error_adjusted(cast(Sequence[float], col["e2e"]), server_failures),  # list of a million floats)
        },
        "tokens": {
            "input_total": in_tokens,
            "output_total": out_tokens,
            "reasoning_total": reasoning,
            "answer_total": out_tokens - reasoning,
            "input_source": "none"
            if not n_done
            else "usage"
            if n_in_usage == n_done
            else "requested"
            if n_in_usage == 0
            else "mixed",
            "output_source": "none"
            if not n_done
            else "usage"
            if n_out_usage == n_done
            else "counted"
            if n_out_usage == 0
            else "mixed",
        },
        "per_user_output_tokens_per_s": {
            "median": float(np.median(per_user)) if per_user.size else None,
            "p10": float(np.percentile(per_user, 10)) if per_user.size else None,
            "mean": float(np.mean(per_user)) if per_user.size else None,
        },
        "interactivity": interactivity_block(col["tpot"], throughput, gpus, gpus_source),
        "goodput": goodput,
        "client": client_doc,
    }


def _itl(cols: RecordColumns, compact_above: int) -> Distribution:
    """The ITL distribution, computed once per columns (the array is left as it is)."""
    if cols.itl_summary is None:
        stats = cols.gap_stats
        if stats is not None and stats.n > compact_above and cols.gap_parts is not None:
            cols.itl_summary = streamed_gap_distribution(stats, cols.gap_parts, cols.mapper)
        else:
            cols.itl_summary = gap_distribution(
                cols.itl,
                cols.itl_unit_ns,
                compact_above,
                counts=stats.counts if stats is not None else None,
                mapper=cols.mapper,
            )
    return cols.itl_summary.copy()
