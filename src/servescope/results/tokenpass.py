"""The token lists of a run read once: per-token gaps, the tokens/s histogram, the ITL sums and
counts the summary needs, and a sample of gaps for the charts. Arrow and numpy; no file I/O here
(the batches come from `columnar.token_parts` or from an in-memory table).

The lists are read in parts (consecutive row groups), one thread each: Arrow decodes and numpy
computes without the GIL. What each part adds up is order-free (integer counts and exact integer
sums), so the threads change no figure.

A run of up to `HOLD_UP_TO` gaps keeps every gap (uint32 ns, in id order: 64 MB at most). A larger
one keeps none: `streaming.GapStats` (exact sums, min, max, counts by 1.024 µs bucket) is enough
for the mean, the standard deviation, the minimum and maximum, and for the percentiles together
with one more pass over the lists (`RecordColumns.gap_parts`, a `GapReader`:
colsummary.streamed_gap_distribution; precision and validation read the per-request figures they
need the same way, a batch at a time);
`RecordColumns.itl` reads every gap again when something asks for them (compare's bootstrap). So a
million 128-token requests (127 million gaps, 508 MB as uint32) are summarised in the memory of
their per-request columns.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa

from servescope.results.columns import CHART_SAMPLE, THREADS, RecordColumns, TokenParts
from servescope.results.metrics import PERCENTILES
from servescope.results.streaming import COMPACT_ABOVE, GapStats, Windows, add_counts, bucket_counts, plan_windows

__all__ = ["HOLD_UP_TO", "GapReader", "RowGaps", "ordered_map", "parallel_map", "token_pass"]

#: Runs with at most this many gaps keep them all in memory (uint32: 64 MB); larger ones stream.
HOLD_UP_TO = COMPACT_ABOVE
_U32_MAX = int(np.iinfo(np.uint32).max)
#: The sample that places the percentile windows: every PILOT_EVERY-th group of rows.
PILOT_EVERY = 16


def parallel_map(fn: Callable[[Any], Any], items: Iterable[Any], threads: int = THREADS) -> list[Any]:
    """`list(map(fn, items))` on up to `threads` threads (numpy and Arrow release the GIL in their
    loops; a machine of one core runs them one after the other)."""
    work = list(items)
    n = min(threads, len(work), os.cpu_count() or 1)
    if n <= 1:
        return [fn(x) for x in work]
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="servescope-columns") as pool:
        return list(pool.map(fn, work))


def ordered_map(
    fn: Callable[[Any], Any], items: Iterable[Any], threads: int = THREADS, ahead: int = 4
) -> Iterator[Any]:
    """`map(fn, items)` with fn on up to `threads` threads, results in order, at most `ahead` items
    taken from `items` before their results are used (bounded memory)."""
    if threads <= 1 or (os.cpu_count() or 1) <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="servescope-columns") as pool:
        pending: deque[Future[Any]] = deque()
        for x in items:
            pending.append(pool.submit(fn, x))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


class _Widen(Exception):
    """A gap that does not fit uint32 ns (over 4.29 s, or negative): the pass runs again, in int64."""


@dataclass(slots=True)
class _Plan:
    """What the pass knows before it reads: each row's gap count and its place in id order."""

    cols: RecordColumns
    counts: np.ndarray
    starts: np.ndarray
    t_end: int
    split: bool
    step: int  # the chart sample: every step-th gap in id order


@dataclass(slots=True)
class _PartResult:
    hist: _Hist
    seen_max: int
    stats: GapStats | None
    sample: list[tuple[np.ndarray, np.ndarray]]  # (positions in the sample, values in ns)


def token_pass(cols: RecordColumns, tokens: pa.ChunkedArray, parts: TokenParts) -> None:
    """Read every part of the token lists once (module docstring) and set the gap fields of `cols`."""
    counts, split = _per_token_counts(cols, tokens)
    starts = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    total = int(starts[-1])
    last = cols.t_last[~np.isnan(cols.t_last)]
    t_end = int(last.max()) if last.size else 0  # the last chunk's arrival (client records: t_last_ns)
    plan = _Plan(cols, counts, starts, t_end, split, max(1, -(-total // CHART_SAMPLE)))
    dtype: type[np.generic] = np.float64 if split else np.uint32
    hold = split or total <= HOLD_UP_TO
    windows = None if hold else _plan_windows(plan, parts)
    while True:
        out = np.empty(total if hold else 0, dtype=dtype)

        def read(
            part: Iterable[pa.RecordBatch], out: np.ndarray = out, hold: bool = hold, windows: Windows | None = windows
        ) -> _PartResult:
            return _read_part(plan, part, out if hold else None, windows)

        try:
            done = parallel_map(read, parts(1))
            break
        except _Widen:
            dtype, hold, windows = np.int64, True, None
    hist, seen_max = _Hist(t_end), 0
    stats: GapStats | None = GapStats(windows=windows) if dtype == np.uint32 else None
    for r in done:  # (integer counts in float64 and integer sums: exact, in any order)
        hist.counts += r.hist.counts
        seen_max = max(seen_max, r.seen_max)
        if stats is not None and r.stats is not None:
            stats.merge(r.stats)
    if seen_max != t_end:  # records whose t_last_ns is not their last chunk: histogram again, exactly
        hist = _Hist(seen_max)
        for part in parts(1):
            for batch in part:
                hist.add(_Batch(cols, batch), cols)
    cols.itl_unit_ns, cols.itl_counts, cols.itl_size = (1e6 if split else 1.0), counts, total
    cols.gap_stats, cols.mapper = stats, parallel_map
    cols.tokens_hist = hist.series()
    if hold:
        cols.itl = out
        cols.itl_chart_ms = (out[:: plan.step].copy() if split else out[:: plan.step] / 1e6) if total else np.empty(0)
        return
    cols.gap_parts = GapReader(plan, parts)
    cols.itl_loader = lambda: _load_all(plan, parts)
    chart = np.empty(-(-total // plan.step))
    for r in done:
        for pos, values in r.sample:
            chart[pos] = values / 1e6
    cols.itl_chart_ms = chart


def _load_all(plan: _Plan, parts: TokenParts) -> np.ndarray:
    """Every gap in id order (uint32 ns): the pass again, keeping them."""
    out = np.empty(int(plan.starts[-1]), dtype=np.uint32)
    parallel_map(lambda part: _read_part(plan, part, out), parts(1))
    return out


#: One batch's gaps with the requests they belong to: the rows (indices into the columns, in the
#: batch's order, only rows with gaps), each row's gap count, and the gaps (int64 ns, row after row).
RowGaps: TypeAlias = tuple[np.ndarray, np.ndarray, np.ndarray]


class GapReader:
    """The gaps of a run that keeps none (`RecordColumns.gap_parts`), read again from the token lists
    a batch at a time, in the parts that can be read at once. Called: the parts as int64 arrays
    (`streaming.GapParts`: percentiles); `rows()`: the same parts with each batch's rows and their
    gap counts (per-request figures: precision's batches, validation's per-request sums). Each array
    is valid until the next one of its part is taken (one buffer a part)."""

    def __init__(self, plan: _Plan, parts: TokenParts) -> None:
        self._plan, self._parts = plan, parts

    def __call__(self) -> list[Iterator[np.ndarray]]:
        return [_gap_values(self._plan, part) for part in self._parts(1)]

    def rows(self) -> list[Iterator[RowGaps]]:
        return [_batch_gaps(self._plan, part) for part in self._parts(1)]


def _batch_gaps(plan: _Plan, batches: Iterable[pa.RecordBatch]) -> Iterator[RowGaps]:
    """Each batch's `RowGaps`, for another pass over the gaps."""
    scratch = np.empty(0, dtype=np.int64)
    for batch in batches:
        b = _Batch(plan.cols, batch)
        if scratch.size < b.vals.size:
            scratch = np.empty(b.vals.size, dtype=np.int64)
        want = plan.counts[b.rows]
        sel = want > 0
        yield b.rows[sel], want[sel], _gaps(b, want, False, scratch)


def _gap_values(plan: _Plan, batches: Iterable[pa.RecordBatch]) -> Iterator[np.ndarray]:
    """The gaps of each batch (int64 ns, in batch order)."""
    return (gaps for _, _, gaps in _batch_gaps(plan, batches))


def _plan_windows(plan: _Plan, parts: TokenParts) -> Windows | None:
    """Where the percentiles of the gaps will lie, from every `PILOT_EVERY`-th group of rows (a
    sample spread over the run); None when a sampled gap does not fit uint32 ns."""
    sample = GapStats()
    for counts in parallel_map(lambda part: _pilot_counts(plan, part), parts(PILOT_EVERY)):
        if counts is None:
            return None
        sample.counts = add_counts(sample.counts, counts)
    if not sample.counts.sum():
        return None
    q = np.true_divide(np.asarray(PERCENTILES, dtype=np.float64), 100)
    return plan_windows(sample.counts, q)


def _pilot_counts(plan: _Plan, batches: Iterable[pa.RecordBatch]) -> np.ndarray | None:
    counts = np.zeros(0, dtype=np.int64)
    for values in _gap_values(plan, batches):
        if values.size and not 0 <= int(values.min()) <= int(values.max()) <= _U32_MAX:
            return None
        counts = add_counts(counts, bucket_counts(values))
    return counts


def _read_part(
    plan: _Plan, batches: Iterable[pa.RecordBatch], out: np.ndarray | None, windows: Windows | None = None
) -> _PartResult:
    """One part: its histogram, its gaps placed in `out` (when kept) or sampled, its sums and counts."""
    cols = plan.cols
    hist, seen_max = _Hist(plan.t_end), 0
    stats = None if plan.split or (out is not None and out.dtype == np.int64) else GapStats(windows=windows)
    sample: list[tuple[np.ndarray, np.ndarray]] = []
    scratch = np.empty(0, dtype=np.int64)  # (one buffer for every batch's gaps: no allocation per batch)
    for batch in batches:
        b = _Batch(cols, batch)
        seen_max = max(seen_max, hist.add(b, cols))
        if scratch.size < b.vals.size:
            scratch = np.empty(b.vals.size, dtype=np.int64)
        want = plan.counts[b.rows]
        values = _gaps(b, want, plan.split, scratch)
        if not values.size:
            continue
        lo, hi = (int(values.min()), int(values.max())) if stats is not None else (0, 0)
        if stats is not None and not 0 <= lo <= hi <= _U32_MAX:
            raise _Widen
        if out is not None:
            _place(out, b.rows, want, plan.starts, values)
        else:
            sample.append(_sample(plan, b.rows, want, values))
        if stats is not None:
            stats.add(values, lo, hi)
    return _PartResult(hist, seen_max, stats, sample)


def _sample(plan: _Plan, rows: np.ndarray, want: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gaps of these rows whose place in id order is a multiple of `plan.step`: (their index in
    the chart sample, their values)."""
    sel = want > 0
    rows, w = rows[sel], want[sel]
    first = (-plan.starts[rows]) % plan.step  # the first sampled gap of each row, from its start
    n = np.maximum(0, -(-(w - first) // plan.step))  # how many of each row's gaps are sampled
    k = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)  # 0, 1, ... within each row
    offset_in_row = np.repeat(first, n) + k * plan.step
    at = np.repeat(np.cumsum(w) - w, n) + offset_in_row  # index in `values`
    pos = (np.repeat(plan.starts[rows], n) + offset_in_row) // plan.step
    return pos, values[at].copy()


def _place(out: np.ndarray, rows_all: np.ndarray, want_all: np.ndarray, starts: np.ndarray, values: np.ndarray) -> None:
    """Write the gaps of a batch's rows at their places in `out` (rows in id order)."""
    sel = want_all > 0
    rows, w = rows_all[sel], want_all[sel]
    first = int(starts[rows[0]])
    if (
        np.all(np.diff(rows) > 0)
        and int(starts[rows[-1]]) + int(w[-1]) - first == values.size
        and np.all(starts[rows[1:]] == starts[rows[:-1]] + w[:-1])
    ):
        out[first : first + values.size] = values  # rows in id order, none skipped: one slice
    else:
        out[np.repeat(starts[rows] - (np.cumsum(w) - w), w) + np.arange(values.size)] = values


def _per_token_counts(cols: RecordColumns, tokens: pa.ChunkedArray) -> tuple[np.ndarray, bool]:
    """ITL values each row contributes (its chunks − 1, or the tokens after its first chunk where
    chunks carry several), and whether any row splits gaps over several tokens."""
    chunks = np.nan_to_num(cols.chunks).astype(np.int64)
    counts = np.where(cols.completed, np.maximum(chunks - 1, 0), 0)
    split = False
    if tokens.null_count < len(tokens):
        for i, k in enumerate(tokens.to_pylist()):
            if k is None or not counts[i] or len(k) != chunks[i]:
                continue
            tail = np.asarray(k[1:], dtype=np.int64)
            if np.any(tail != 1):
                counts[i] = int(np.maximum(tail, 1).sum())
                split = True
    return counts, split


class _Batch:
    """One batch of token lists: its rows (indices into the columns), flat chunk offsets, list
    offsets from 0, tokens per chunk (None: one each), and the common chunk count when every row has
    the same (then `vals` reshapes to a matrix, the fast path)."""

    def __init__(self, cols: RecordColumns, batch: pa.RecordBatch) -> None:
        ids = batch.column("id").to_numpy()
        rows = np.searchsorted(cols.id, ids)
        if rows.size and (np.any(rows >= cols.id.size) or np.any(cols.id[np.minimum(rows, cols.id.size - 1)] != ids)):
            raise ValueError("token batches name ids the per-request columns lack")
        lists = batch.column("chunk_offsets_ns")
        offs = lists.offsets.to_numpy().astype(np.int64)
        vals = lists.values.to_numpy()[offs[0] : offs[-1]] if len(lists) else np.empty(0, dtype=np.int64)
        offs = offs - offs[0]
        self.lens = np.diff(offs)
        if np.any(self.lens != np.nan_to_num(cols.chunks[rows]).astype(np.int64)):
            raise ValueError("records whose `chunks` differs from the length of their chunk list")
        tok_col = batch.column("chunk_tokens")
        self.has_toks = tok_col.null_count < len(batch)
        self.toks: list[Any] = tok_col.to_pylist() if self.has_toks else [None] * len(batch)
        self.rows, self.vals, self.offs = rows, np.asarray(vals, dtype=np.int64), offs
        self.width = int(self.lens[0]) if self.lens.size and bool(np.all(self.lens == self.lens[0])) else 0

    def absolute(self, cols: RecordColumns, rows: np.ndarray | None = None) -> np.ndarray:
        """Every chunk's arrival, ns from the run origin (of the rows in the boolean mask `rows`, in
        the matrix case)."""
        base = np.nan_to_num(cols.t_send[self.rows]).astype(np.int64)
        if self.width:
            mat = self.vals.reshape(-1, self.width)
            if rows is not None:
                mat, base = mat[rows], base[rows]
            return (mat + base[:, None]).ravel()
        return self.vals + np.repeat(base, self.lens)


class _Hist:
    """Output tokens per second over run time, as `report.data.tokens_per_s_series` draws it: every
    chunk's arrival weighted by its tokens, in slices of at least 50 ms (at most 100)."""

    def __init__(self, t_end_ns: int) -> None:
        self.t_end_ns = t_end_ns
        self.t_end_s = t_end_ns / 1e9
        self.nb = max(1, min(100, int(np.ceil(self.t_end_s / 0.05)))) if self.t_end_s > 0 else 1
        self.counts = np.zeros(self.nb)

    def _bins(self, t: np.ndarray) -> np.ndarray:
        """Slice of each time: [i, i+1) · t_end / nb, the last one closed (as np.histogram)."""
        return np.minimum((t * (self.nb / self.t_end_ns)).astype(np.int64), self.nb - 1)

    def add(self, b: _Batch, cols: RecordColumns) -> int:
        """Count a batch's tokens; returns its last chunk's arrival (0 without chunks). A request whose
        first and last chunk fall in one slice is counted whole; only those across a boundary chunk by
        chunk."""
        if not b.vals.size:
            return 0
        base = np.nan_to_num(cols.t_send[b.rows]).astype(np.int64)
        nonempty = b.lens > 0
        firsts = b.vals[b.offs[:-1][nonempty]] + base[nonempty]
        lasts = b.vals[b.offs[1:][nonempty] - 1] + base[nonempty]
        seen = int(lasts.max())
        if self.t_end_ns <= 0 or seen > self.t_end_ns or int(firsts.min()) < 0:
            return seen  # (the caller counts again with the right end)
        if b.has_toks or not b.width:  # the general case: chunk by chunk
            weights = None
            if b.has_toks:
                weights = np.ones(b.vals.size)
                for j, k in enumerate(b.toks):
                    if k is not None and len(k) == b.lens[j]:
                        weights[b.offs[j] : b.offs[j + 1]] = k
            self.counts += np.bincount(self._bins(b.absolute(cols)), weights=weights, minlength=self.nb)
            return seen
        first_bin, last_bin = self._bins(firsts), self._bins(lasts)
        whole = first_bin == last_bin
        self.counts += np.bincount(first_bin[whole], minlength=self.nb) * float(b.width)
        if not whole.all():
            self.counts += np.bincount(self._bins(b.absolute(cols, ~whole)), minlength=self.nb)
        return seen

    def series(self) -> tuple[list[float], list[float]]:
        if self.t_end_s <= 0:
            return [], []
        width = self.t_end_s / self.nb
        return [round((i + 0.5) * width, 9) for i in range(self.nb)], [float(c) / width for c in self.counts]


def _gaps(b: _Batch, want: np.ndarray, split: bool, scratch: np.ndarray) -> np.ndarray:
    """The per-token gaps of the batch's rows that have any (`want` > 0), in row order: int64 ns (in
    `scratch` when the rows are a matrix), or float ms where chunks carry several tokens."""
    sel = want > 0
    if not sel.any():
        return np.empty(0, dtype=np.int64)
    if not split and b.width >= 2:  # every row the same chunk count: a matrix
        mat = b.vals.reshape(-1, b.width)
        if not sel.all():
            mat = mat[sel]
        shape = (mat.shape[0], b.width - 1)
        return np.subtract(mat[:, 1:], mat[:, :-1], out=scratch[: shape[0] * shape[1]].reshape(shape)).reshape(-1)
    return _row_gaps(split, b, want)


def _row_gaps(split: bool, b: _Batch, want: np.ndarray) -> np.ndarray:
    """The general path: rows of different lengths, or chunks carrying several tokens (then float ms:
    a chunk arriving `gap` after the previous one and carrying k tokens gives k gaps of gap/k; the
    first chunk's tokens arrive with the first token, part of TTFT, not ITL)."""
    lens = b.lens
    gaps = np.diff(b.vals)
    keep = np.ones(gaps.size, dtype=bool)  # the difference across two rows is no gap
    inner = b.offs[1:-1]
    keep[inner[(inner > 0) & (inner <= gaps.size)] - 1] = False
    gaps = gaps[keep][np.repeat(want > 0, np.maximum(lens - 1, 0))]
    if not split:
        return gaps
    pieces, pos = [], 0
    for j in np.flatnonzero(want > 0).tolist():
        g = gaps[pos : pos + lens[j] - 1] / 1e6
        pos += int(lens[j]) - 1
        k = b.toks[j]
        if k is not None and len(k) == lens[j] and any(x != 1 for x in k[1:]):
            kk = np.maximum(np.asarray(k[1:], dtype=np.int64), 1)
            g = np.repeat(g / kk, kk)
        pieces.append(g)
    return np.concatenate(pieces)
