"""Columns -> the summary: `metrics.summarize` computed with numpy over `RecordColumns` instead of a
Python loop over records. Pure. The same summary, to the bit (tests/unit/test_columnar.py): every
figure is computed with the same float operations in the same order as the record path.

The inter-token gaps of a large run (128 million for a million 128-token requests) stay in their
compact form (uint32 ns): mean and standard deviation are numpy's pairwise sums evaluated piece by
piece along the same tree (`pairwise_sum`), and percentiles read the order statistics of the
integers (found by counting, `order_statistics`), which are those of the gaps in ms, and interpolate
as numpy does (`linear_percentiles`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping

import numpy as np

from servebench.results.columns import RecordColumns
from servebench.results.interactivity import interactivity_block
from servebench.results.metrics import PERCENTILES, SCHEMA, _closed_loop, distribution, error_adjusted, offered_rate
from servebench.results.schema import Client, ClientMeasures, Distribution, Goodput, RunInfo, Summary, Throughput

__all__ = ["COMPACT_ABOVE", "gap_distribution", "linear_percentiles", "order_statistics", "pairwise_sum",
           "summarize_columns", "tpot_ms"]

#: ITL arrays longer than this are summarised in their compact form (no float64 copy).
COMPACT_ABOVE = 16_000_000
_PW_BLOCK = 128  # numpy's pairwise summation: blocks of at most this many are summed unrolled
_PIECE = 1 << 22


def pairwise_sum(n: int, piece: Callable[[int, int], np.ndarray], max_piece: int = _PIECE) -> float:
    """numpy's float64 `add.reduce` over n values, the values of [i, j) given by `piece(i, j)`:
    the same recursive halving (halves rounded down to a multiple of 8), so the same result bit for
    bit, with no more than `max_piece` values in memory at once."""
    if n <= max(max_piece, _PW_BLOCK):
        return float(np.add.reduce(piece(0, n)))
    return _pw(0, n, piece, max_piece)


def _pw(i: int, n: int, piece: Callable[[int, int], np.ndarray], max_piece: int) -> float:
    if n <= max(max_piece, _PW_BLOCK):
        return float(np.add.reduce(piece(i, i + n)))
    n2 = n // 2
    n2 -= n2 % 8
    return _pw(i, n2, piece, max_piece) + _pw(i + n2, n - n2, piece, max_piece)


def order_statistics(values: np.ndarray, ranks: np.ndarray, max_piece: int = _PIECE) -> np.ndarray:
    """`np.sort(values)[ranks]` of an integer array without sorting it or changing it: counts by the
    top bits (at most 2**18 buckets), then a sort of the few buckets that hold the ranks; `max_piece`
    values at a time."""
    n = values.size
    lo, hi = int(values.min()), int(values.max())
    shift = max(0, (hi - lo).bit_length() - 18)
    n_buckets = ((hi - lo) >> shift) + 1
    base = np.asarray(lo, dtype=values.dtype)

    def buckets(i: int) -> np.ndarray:
        return (values[i: i + max_piece] - base) >> shift

    counts = np.zeros(n_buckets, dtype=np.int64)
    for i in range(0, n, max_piece):
        counts += np.bincount(buckets(i), minlength=n_buckets)
    ends = np.cumsum(counts)
    of_rank = np.searchsorted(ends, ranks, side="right")
    wanted = np.zeros(n_buckets, dtype=bool)
    wanted[of_rank] = True
    sub = np.sort(np.concatenate([values[i: i + max_piece][wanted[buckets(i)]] for i in range(0, n, max_piece)]))
    # the wanted buckets lie in `sub` in bucket order: a rank's place is its bucket's start there plus
    # its place in the bucket
    start_in_sub = np.cumsum(np.where(wanted, counts, 0)) - np.where(wanted, counts, 0)
    return sub[start_in_sub[of_rank] + (ranks - (ends[of_rank] - counts[of_rank]))]


def linear_percentiles(values: np.ndarray, qs: tuple[float, ...], scale: float) -> list[float]:
    """`np.percentile(values / scale, qs)` (linear method) of integers, without the float copy: the
    order statistics of the integers divided by `scale` (monotone, so the same order statistics),
    interpolated with numpy's own formula (`_lerp`). `values` is left as it was."""
    n = values.size
    q = np.true_divide(np.asarray(qs, dtype=np.float64), 100)
    virtual = (n - 1) * q
    lo = np.floor(virtual).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    gamma = virtual - np.floor(virtual)
    stats = order_statistics(values, np.concatenate([lo, hi]))
    a, b = stats[: lo.size] / scale, stats[lo.size:] / scale
    diff = b - a
    out = np.add(a, diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    return [float(x) for x in out]


def gap_distribution(itl: np.ndarray, unit_ns: float, compact_above: int = COMPACT_ABOVE) -> Distribution:
    """`metrics.distribution` of the gaps in ms, from `itl` in `unit_ns` (1.0: ns integers). More
    than `compact_above` integers are summarised without a float copy."""
    if unit_ns != 1.0 or itl.size <= compact_above:
        return distribution(itl if unit_ns == 1e6 else itl / 1e6)
    n = itl.size
    buf = np.empty(min(n, _PIECE))

    def ms(i: int, j: int) -> np.ndarray:
        return np.divide(itl[i:j], 1e6, out=buf[: j - i])

    mean = pairwise_sum(n, ms) / n

    def squared(i: int, j: int) -> np.ndarray:
        x = np.subtract(ms(i, j), mean, out=buf[: j - i])
        return np.multiply(x, x, out=x)

    var = pairwise_sum(n, squared) / n
    p50, p90, p95, p99 = linear_percentiles(itl, PERCENTILES, 1e6)
    return {"count": n, "mean": mean, "median": p50, "p90": p90, "p95": p95, "p99": p99,
            "min": int(itl.min()) / 1e6, "max": int(itl.max()) / 1e6, "std": math.sqrt(var)}


def tpot_ms(first: np.ndarray, last: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Per request (last − first token) / (n − 1) in ms where n > 1 and both exist, else NaN."""
    has = (out > 1) & ~np.isnan(last) & ~np.isnan(first)
    tpot = np.full(out.shape, np.nan)
    tpot[has] = (last[has] - first[has]) / 1e6 / (out[has] - 1)
    return tpot


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
    """`metrics.summarize` of the same records, from their columns (same arguments, same document).
    The ITL distribution is kept on `cols` (computed once)."""
    measured = cols.measured
    done = measured & cols.ok
    failed = measured & ~cols.ok
    errors = Counter(k or "unknown" for k in cols.error_kind[failed].tolist())
    server_failures = sum(n for kind, n in errors.items() if kind != "cancelled")

    sends, ends = cols.t_send[measured], cols.t_end[measured]
    ends = ends[~np.isnan(ends)]
    window_s = 0.0
    if sends.size and ends.size and ends.max() > sends.min():
        window_s = (int(ends.max()) - int(sends.min())) / 1e9

    send, first, last = cols.t_send[done], cols.t_first[done], cols.t_last[done]
    ttft, ttfat, e2e = (first - send) / 1e6, (cols.t_first_answer[done] - send) / 1e6, (last - send) / 1e6
    out = np.nan_to_num(cols.output_tokens[done])
    tpot = tpot_ms(first, last, out)
    lat = {"ttft": ttft, "ttfat": ttfat, "e2e": e2e, "tpot": tpot}
    col = {k: v[~np.isnan(v)] for k, v in lat.items()}

    out_tokens = int(out.sum())
    in_tokens = int(np.where(np.isnan(cols.input_tokens[done]), cols.input_len[done], cols.input_tokens[done]).sum())
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
        goodput = {"slo": dict(slo), "requests_meeting_slo": good,
                   "fraction": good / n_measured if n_measured else 0.0, "requests_per_s": rate(good)}

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
            "ttft": error_adjusted(col["ttft"].tolist(), server_failures),
            "e2e": error_adjusted(col["e2e"].tolist(), server_failures),
        },
        "tokens": {
            "input_total": in_tokens,
            "output_total": out_tokens,
            "reasoning_total": reasoning,
            "answer_total": out_tokens - reasoning,
            "input_source": "none" if not n_done else "usage" if n_in_usage == n_done else
                            "requested" if n_in_usage == 0 else "mixed",
            "output_source": "none" if not n_done else "usage" if n_out_usage == n_done else
                             "counted" if n_out_usage == 0 else "mixed",
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
    """The ITL distribution, computed once per columns (a large array is partitioned in place)."""
    if cols.itl_summary is None:
        cols.itl_summary = gap_distribution(cols.itl, cols.itl_unit_ns, compact_above)
    return cols.itl_summary.copy()
