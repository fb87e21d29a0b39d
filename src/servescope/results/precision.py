"""How well one run knows its headline percentiles: 95% confidence intervals that allow for
autocorrelation. Pure; the method is written down in docs/metrics.md ("Precision").

Requests of one run are not independent draws: a queue that builds up makes a stretch of
neighbours slow together, so an interval that treats them as independent is too narrow. The
interval here works on the empirical CDF at the estimate, by batch means in send order:

1. q̂ = the sample percentile (linear interpolation, as `metrics.distribution`).
2. The values, in send order, are cut into k consecutive batches (whole requests: a request's
   ITL gaps stay in one batch). In batch j, c_j of n_j values are ≤ q̂.
3. The standard error of F̂(q̂) = Σc/Σn is the batch-means (ratio) one,
   se² = Σ_j (c_j − F̂·n_j)² / (k·(k−1)·n̄²), never below the independent one, q(1−q)/n: the
   batches absorb the correlation between neighbours, the floor keeps a rare tail (a P99 with
   a handful of values above it per batch) from looking better known than independent draws.
4. The interval is the sample percentiles at q ∓ t·se (Student's t with k−1 degrees of freedom).
   It is asymmetric where the distribution is, and open (None) on a side where q ∓ t·se falls
   outside [0, 1]: the data do not bound the percentile there (a P99 from fewer than ~370
   values has no upper bound; see `percentile_floor`).

Checked by tests/unit/test_precision.py: over 200 simulated autocorrelated runs with known
quantiles the interval covers the true median and P99 in at least 90% of them.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeAlias

import numpy as np

from servescope.results.columns import RecordColumns
from servescope.results.perrequest import request_latencies_ms, since_send_ms, tpot_ms
from servescope.results.records import RequestRecord
from servescope.results.schema import PercentileInterval, Precision
from servescope.results.streaming import COMPACT_ABOVE, GapStats, linear_percentiles, streamed_percentiles
from servescope.results.tokenpass import GapReader, RowGaps

#: A piece of gaps in ms with their requests: (rows, gaps row after row, each row's start plus the end).
RowGapsMs: TypeAlias = tuple[np.ndarray, np.ndarray, np.ndarray]

__all__ = [
    "CONFIDENCE",
    "HEADLINE",
    "batch_count",
    "StopRule",
    "STOP_METRICS",
    "half_width_pct",
    "imprecise_columns",
    "percentile_floor",
    "per_row",
    "plus_minus",
    "precision_block_columns",
    "quantile_interval",
    "row_gaps_ms",
    "with_target_columns",
]

#: The confidence level of every interval here.
CONFIDENCE = 0.95
#: Batches in send order (fewer when there are few values; see `batch_count`).
MAX_BATCHES = 16
#: Values per batch at the least; below 2 batches' worth there is no interval.
MIN_PER_BATCH = 8
_PIECE = 1 << 22  # gaps in ms at a time, reading them from columns
#: The headline percentiles: (label, q).
HEADLINE: tuple[tuple[str, float], ...] = (("median", 0.5), ("p99", 0.99))
#: What --target-precision waits for: these metrics' headline percentiles.
STOP_METRICS = ("ttft", "tpot")
METHOD = (
    f"batch means in send order (up to {MAX_BATCHES} batches of whole requests) of the empirical "
    "CDF at the estimate, Student's t"
)

# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom 1..30; 1.96 beyond.
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t975(df: int) -> float:
    """Student's t 0.975 quantile (two-sided 95%) for `df` degrees of freedom."""
    return _T975[df - 1] if 1 <= df <= len(_T975) else 1.96


def percentile_floor(q: float, confidence: float = CONFIDENCE) -> int:
    """Fewest values from which the distribution-free `confidence` interval of the q-quantile has an
    upper end: the sample maximum lies above the true q-quantile with probability 1 − qⁿ, and a
    two-sided 95% interval needs that ≥ 97.5%, so n ≥ ln(0.025) / ln(q): 368 for the P99, 3,688 for
    the P99.9, 72 for the P95, 36 for the P90."""
    return math.ceil(math.log((1 - confidence) / 2) / math.log(q))


def batch_count(n: int) -> int:
    """Batches for n values: MAX_BATCHES, fewer when batches would hold under MIN_PER_BATCH; 0 when
    even two batches would (no interval)."""
    k = min(MAX_BATCHES, n // MIN_PER_BATCH)
    return k if k >= 2 else 0


def _cuts(sizes: np.ndarray, k: int) -> np.ndarray:
    """Indices into `sizes` (per-request value counts, send order) that split them into k batches of
    about equal value counts, at request boundaries."""
    ends = np.cumsum(sizes)
    targets = ends[-1] * np.arange(1, k) / k
    cuts = np.searchsorted(ends, targets, side="left") + 1
    return np.unique(np.clip(cuts, 1, len(sizes) - 1)) if len(sizes) > 1 else np.empty(0, dtype=int)


def quantile_interval(
    values: Sequence[float] | np.ndarray, q: float, *, sizes: Sequence[int] | np.ndarray | None = None
) -> PercentileInterval | None:
    """The q-quantile of `values` (in send order) with its 95% interval (module docstring).

    `sizes`: values per request, in order, when a request holds several (ITL gaps); batches then cut
    between requests only. None: one value per request. Returns None with too few values to batch.
    """
    x = np.asarray(values, dtype=float)
    n = x.size
    per = np.ones(n, dtype=np.int64) if sizes is None else np.asarray(sizes, dtype=np.int64)
    per = per[per > 0]
    if n == 0 or batch_count(int(per.size)) == 0 or int(per.sum()) != n:
        return None
    estimate = float(np.percentile(x, 100 * q))
    below = (x <= estimate).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(per)[:-1]])
    return _interval(
        q, estimate, np.add.reduceat(below, starts), per, lambda level: float(np.percentile(x, 100 * level))
    )


def _interval(
    q: float, estimate: float, below: np.ndarray, per: np.ndarray, percentile: Callable[[float], float]
) -> PercentileInterval | None:
    """Steps 2-4 of the module docstring: `below[i]` of request i's `per[i]` values (send order, every
    `per` > 0) are <= `estimate`; `percentile(level)` is the sample's quantile at a level in [0, 1]."""
    levels = _levels(q, below, per)
    if levels is None:
        return None
    lo, hi = levels
    return _ends(estimate, percentile(lo) if lo >= 0 else None, percentile(hi) if hi <= 1 else None)


def _levels(q: float, below: np.ndarray, per: np.ndarray) -> tuple[float, float] | None:
    """Steps 2-3: the levels q ∓ t·se whose percentiles are the interval's ends (outside [0, 1]: open)."""
    n = int(per.sum())
    k = batch_count(int(per.size))
    if k == 0:
        return None
    cuts = _cuts(per, k)
    bounds = np.concatenate([[0], cuts, [per.size]])
    c = np.add.reduceat(below, bounds[:-1])
    m = np.add.reduceat(per, bounds[:-1]).astype(float)
    k = int(m.size)
    if k < 2:
        return None
    f = float(c.sum()) / n
    se2 = float(np.sum((c - f * m) ** 2)) / (k * (k - 1) * (n / k) ** 2)
    se = math.sqrt(max(se2, q * (1 - q) / n))
    t = t975(k - 1)
    return q - t * se, q + t * se


def _ends(estimate: float, low: float | None, high: float | None) -> PercentileInterval:
    return {"estimate": estimate, "low": low, "high": high, "half_width_pct": _half_width_pct(estimate, low, high)}


def _half_width_pct(estimate: float, low: float | None, high: float | None) -> float | None:
    if low is None or high is None or estimate <= 0:
        return None
    return 100 * max(high - estimate, estimate - low) / estimate


def half_width_pct(iv: PercentileInterval | None) -> float | None:
    """The interval's larger half-width as % of the estimate; None when a side is open (or no interval)."""
    return None if iv is None else iv["half_width_pct"]


def _imprecise(t_send_ns: np.ndarray, values: Mapping[str, np.ndarray], target_pct: float) -> list[str]:
    """The headline percentiles of STOP_METRICS not yet known to ±target_pct % (empty: all are), over
    arrays of completed measured requests in any order (NaN: no value): sorted by send time (stably,
    so ties keep the given order)."""
    order = np.argsort(t_send_ns, kind="stable")
    out = []
    for metric in STOP_METRICS:
        x = values[metric][order]
        x = x[~np.isnan(x)]
        for label, q in HEADLINE:
            hw = half_width_pct(quantile_interval(x, q))
            if hw is None or hw > target_pct:
                out.append(f"{metric} {label}")
    return out


class StopRule:
    """The --target-precision stop rule (client.shard asks it every few seconds, off the hot path): why
    the run may stop now, or None. The target must hold at two checks in a row, so one lucky check
    (a tail that looked quiet for a moment) does not end the run.

    It keeps what it needs of each completed measured request as it finishes (`observe`): its send,
    first-token and last-token stamps and its output tokens, four numbers in packed arrays, never the
    record; TTFT and TPOT are computed from them at each check (`perrequest`)."""

    def __init__(self, target_pct: float) -> None:
        self.target_pct = target_pct
        self._streak = 0
        self._t_send = array("q")
        self._stamps = {k: array("d") for k in ("first", "last", "out")}

    def observe(self, record: RequestRecord) -> None:
        """A finished request (any: only completed measured ones count)."""
        if record.warmup or record.status != "ok" or record.t_send_ns is None:
            return
        self._t_send.append(record.t_send_ns)
        self._stamps["first"].append(math.nan if record.t_first_ns is None else record.t_first_ns)
        self._stamps["last"].append(math.nan if record.t_last_ns is None else record.t_last_ns)
        self._stamps["out"].append(record.output_tokens or 0)

    @property
    def observed(self) -> int:
        """Completed measured requests observed so far."""
        return len(self._t_send)

    def __call__(self, records: Sequence[RequestRecord] | None = None) -> str | None:
        """The verdict over `records` (through their columns), or (None) over the requests observed."""
        if records is not None:
            cols = RecordColumns.from_records(records)
            missing = imprecise_columns(cols, self.target_pct)
            n = int(np.count_nonzero(~cols.warmup & cols.ok))
        else:
            t_send = np.frombuffer(self._t_send, dtype=np.int64)
            first, last, out = (np.frombuffer(self._stamps[k], dtype=float) for k in ("first", "last", "out"))
            send = t_send.astype(float)
            lat = {"ttft": since_send_ms(send, first), "tpot": tpot_ms(first, last, out)}
            missing = _imprecise(t_send, lat, self.target_pct)
            n = t_send.size
        if missing:
            self._streak = 0
            return None
        self._streak += 1
        if self._streak < 2:
            return None
        return (
            f"target precision reached: the median and P99 of TTFT and TPOT known to ±{self.target_pct:g}% "
            f"(95%) at two checks in a row, after {n:,} completed requests"
        )


def _with_missing(
    block: Precision, missing: list[str], target_pct: float, stopped_by: str | None, otherwise: str
) -> Precision:
    reason = stopped_by or (
        otherwise + (f"; still wider than ±{target_pct:g}%: {', '.join(missing)}" if missing else "")
    )
    return {**block, "target_pct": target_pct, "met": stopped_by is not None or not missing, "stop_reason": reason}


# ----------------------------------------------------------------------------------- columns
def _completed_rows_in_send_order(cols: RecordColumns) -> np.ndarray:
    """Rows of completed measured requests, in send order (stably: rows are in id order, as records
    sorted by id)."""
    done = np.flatnonzero(cols.completed)
    return done[np.argsort(cols.t_send[done], kind="stable")]


def row_gaps_ms(cols: RecordColumns, max_piece: int | None = None) -> list[Iterator[RowGapsMs]]:
    """The gaps in ms with the requests they belong to, a piece at a time, in parts that may be read at
    once (through `cols.mapper`): (rows, their gaps in ms row after row, each row's start in the piece
    plus the piece's end), only rows with gaps, every row once. Held gaps (`cols.itl`): one part, rows
    in id order, about `max_piece` gaps a piece (default `_PIECE`). A run that keeps none
    (tokenpass.GapReader): its token lists read again a batch at a time, no gap array kept."""
    reader = cols.gap_parts
    if cols.held_itl is None and isinstance(reader, GapReader):
        return [_ms_pieces(part) for part in reader.rows()]
    return [_held_pieces(cols, max_piece or _PIECE)]


def _ms_pieces(part: Iterator[RowGaps]) -> Iterator[RowGapsMs]:
    for rows, sizes, ns in part:
        if rows.size:
            bounds = np.zeros(sizes.size + 1, dtype=np.int64)
            np.cumsum(sizes, out=bounds[1:])
            yield rows, ns / 1e6, bounds


def _held_pieces(cols: RecordColumns, max_piece: int) -> Iterator[RowGapsMs]:
    counts = cols.itl_counts
    ends = np.cumsum(counts)
    starts = ends - counts
    r, rows = 0, int(counts.size)
    while r < rows:
        r1 = max(r + 1, int(np.searchsorted(ends, starts[r] + max_piece, side="right")))
        a, b = int(starts[r]), int(ends[r1 - 1])
        has = counts[r:r1] > 0
        if has.any():
            seg = cols.itl[a:b]
            ms = seg if cols.itl_unit_ns == 1e6 else seg / 1e6
            yield np.arange(r, r1)[has], np.asarray(ms, dtype=float), np.append((starts[r:r1] - a)[has], b - a)
        r = r1


def per_row(
    cols: RecordColumns, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], width: int, dtype: type[np.generic]
) -> np.ndarray:
    """(`width`, rows) figures of each request from its gaps: `fn(ms, bounds)` of a piece of
    `row_gaps_ms` gives the (`width`, its rows) figures of its rows; rows without gaps: 0."""
    out = np.zeros((width, cols.itl_counts.size), dtype=dtype)

    def part(pieces: Iterator[RowGapsMs]) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(rows, fn(ms, bounds)) for rows, ms, bounds in pieces]

    for done in cols.mapper(part, row_gaps_ms(cols)):
        for rows, figures in done:
            out[:, rows] = figures
    return out


def _below(estimates: Sequence[float]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """`per_row`'s function: each row's count of gaps at or below each estimate."""

    def fn(ms: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        out = np.empty((len(estimates), bounds.size - 1), dtype=np.int64)
        cum = np.zeros(ms.size + 1, dtype=np.int64)
        for i, estimate in enumerate(estimates):
            np.cumsum(ms <= estimate, out=cum[1:])
            out[i] = cum[bounds[1:]] - cum[bounds[:-1]]
        return out

    return fn


def _itl_percentile(cols: RecordColumns, compact_above: int) -> Callable[[float], float]:
    """The gaps' quantile (ms) at a level in [0, 1], as np.percentile over them in ms: from their compact
    integer form when there are many (streaming.linear_percentiles), else from a copy in ms."""
    if cols.itl_unit_ns == 1.0 and cols.itl.size > compact_above:
        itl = cols.itl
        return lambda level: linear_percentiles(itl, (100 * level,), 1e6)[0]
    x = cols.itl_ms()
    return lambda level: float(np.percentile(x, 100 * level))


def _itl_intervals(cols: RecordColumns, order: np.ndarray, compact_above: int) -> dict[str, PercentileInterval | None]:
    """The ITL intervals with the gaps left where they lie (module docstring of `precision_block_columns`)."""
    per = cols.itl_counts[order]
    keep = per > 0
    if (cols.itl_size if cols.held_itl is None else cols.held_itl.size) == 0 or batch_count(int(keep.sum())) == 0:
        return {label: None for label, _ in HEADLINE}
    stats, reader = cols.gap_stats, cols.gap_parts
    if cols.held_itl is None and stats is not None and isinstance(reader, GapReader):
        return _streamed_itl_intervals(cols, order, stats, reader)
    percentile = _itl_percentile(cols, compact_above)
    estimates = [percentile(q) for _, q in HEADLINE]
    below = per_row(cols, _below(estimates), len(HEADLINE), np.int64)
    return {
        label: _interval(q, estimate, below[i][order][keep], per[keep], percentile)
        for i, ((label, q), estimate) in enumerate(zip(HEADLINE, estimates))
    }


def _streamed_itl_intervals(
    cols: RecordColumns, order: np.ndarray, stats: GapStats, reader: GapReader
) -> dict[str, PercentileInterval | None]:
    """`_itl_intervals` of a run that keeps no gap: the estimates are the summary's ITL percentiles
    (computed here when the summary has not been), each request's counts at or below them one pass over
    the token lists, and the interval's ends (every one at once) from the gaps `stats` kept around
    the percentiles, else one more pass: the figures of the in-memory path, to the bit."""
    summary = cols.itl_summary
    known = [summary["median"], summary["p99"]] if summary is not None else []
    estimates = [x for x in known if x is not None]
    if [q for _, q in HEADLINE] != [0.5, 0.99] or len(estimates) != len(HEADLINE):
        estimates = streamed_percentiles(stats, reader, [100 * q for _, q in HEADLINE], cols.mapper)
    below = per_row(cols, _below(estimates), len(HEADLINE), np.int64)
    per = cols.itl_counts[order]
    keep = per > 0
    levels = [_levels(q, below[i][order][keep], per[keep]) for i, (_, q) in enumerate(HEADLINE)]
    wanted = sorted({x for pair in levels if pair is not None for x in pair if 0 <= x <= 1})
    found = dict(zip(wanted, streamed_percentiles(stats, reader, [100 * x for x in wanted], cols.mapper)))
    out: dict[str, PercentileInterval | None] = {}
    for (label, _), estimate, pair in zip(HEADLINE, estimates, levels):
        out[label] = None if pair is None else _ends(estimate, found.get(pair[0]), found.get(pair[1]))
    return out


def precision_block_columns(cols: RecordColumns, *, compact_above: int = COMPACT_ABOVE) -> Precision:
    """The summary's `precision` block: headline intervals of TTFT, TPOT, E2E (per request) and ITL
    (per token, batched by request) over completed measured requests in send order, from the run's
    columns (`columns.RecordColumns`, as a run reads requests.parquet back; records in memory go
    through `RecordColumns.from_records`). The ITL gaps stay where they lie (rows in id order): the
    estimate and the interval's ends are percentiles of all of them, in any order, and the batches
    need only each request's count of gaps at or below the estimate, taken in send order."""
    order = _completed_rows_in_send_order(cols)
    lat = request_latencies_ms(cols, order)
    metrics: dict[str, dict[str, PercentileInterval | None]] = {
        name: {label: quantile_interval(lat[name][~np.isnan(lat[name])], q) for label, q in HEADLINE}
        for name in ("ttft", "tpot", "e2e")
    }
    metrics["itl"] = _itl_intervals(cols, order, compact_above)
    return {"method": METHOD, "confidence": CONFIDENCE, "metrics": metrics}


def imprecise_columns(cols: RecordColumns, target_pct: float) -> list[str]:
    """The headline percentiles of STOP_METRICS not yet known to ±target_pct % (empty: all are), for
    --target-precision. Only what the stop rule needs is computed (no ITL)."""
    rows = np.flatnonzero(cols.completed)
    lat = request_latencies_ms(cols, rows)
    return _imprecise(cols.t_send[rows].astype(np.int64), {m: lat[m] for m in STOP_METRICS}, target_pct)


def with_target_columns(
    block: Precision, cols: RecordColumns, target_pct: float, stopped_by: str | None, otherwise: str
) -> Precision:
    """`block` with the --target-precision outcome: the target, whether it was met (the rule stopped
    the run, or the final requests meet it), and why the run stopped (`stopped_by` from the rule, else
    `otherwise`: the limit, an interrupt). The block's intervals cover every completed request,
    those still in flight at the stop included, so they may differ a little from the rule's last look."""
    return _with_missing(block, imprecise_columns(cols, target_pct), target_pct, stopped_by, otherwise)


def plus_minus(iv: PercentileInterval | None, digits: int = 1) -> str:
    """The interval as "±x" (ms, the larger side), "±?" when the data leave a side open, "" with no
    interval (too few values to batch)."""
    if iv is None:
        return ""
    low, high, est = iv["low"], iv["high"], iv["estimate"]
    if low is None or high is None:
        return "±?"
    return f"±{max(high - est, est - low):.{digits}f}"
