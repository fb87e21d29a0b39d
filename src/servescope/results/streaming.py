"""Exact order statistics and sums of many integer gaps, streamed: numpy's figures without numpy's
copies. Pure numerics over arrays (no records, no columns); `colsummary`, `tokenpass` and `precision`
build on them.

The inter-token gaps of a large run (128 million for a million 128-token requests) stay in their
compact form (uint32 ns): mean and standard deviation are numpy's pairwise sums evaluated piece by
piece along the same tree (`pairwise_sum`), and percentiles read the order statistics of the
integers (found by counting in two levels, `order_statistics`: buckets of 1,024 ns counted as the
gaps are read, then each integer of the few buckets that hold a percentile), which are those of the
gaps in ms, and interpolate as numpy does (`linear_percentiles`). A run that holds no gap at all
adds them up as they are read (`GapStats`, with `Windows` planned from a sample to keep the few
around each percentile) and finds its percentiles from those (`streamed_percentiles`). Every
result is bit-identical to numpy's over the same values in ms. The pieces can be computed on
threads: the caller passes a `mapper`; this module starts none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np

__all__ = [
    "BUCKET_SHIFT",
    "COMPACT_ABOVE",
    "GapParts",
    "GapStats",
    "Mapper",
    "Windows",
    "add_counts",
    "bucket_counts",
    "linear_percentiles",
    "order_statistics",
    "pairwise_sum",
    "plan_windows",
    "streamed_percentiles",
]

#: `map`, or a thread pool's `map`: how the pieces of a large array are computed.
Mapper: TypeAlias = Callable[[Callable[[Any], Any], Iterable[Any]], Iterable[Any]]

#: ITL arrays longer than this are summarised in their compact form (no float64 copy).
COMPACT_ABOVE = 16_000_000
_PW_BLOCK = 128  # numpy's pairwise summation: blocks of at most this many are summed unrolled
_PIECE = 1 << 20  # (8 MB of float64: summed or counted while in cache)
#: Gaps in ns are counted by buckets of 2**BUCKET_SHIFT ns (1.024 µs) as they are read (order_statistics).
BUCKET_SHIFT = 10
_MIN_COUNT_PIECE = 1 << 16
_STAT_PIECE = 1 << 17  # (1 MB of int64 per buffer)


def pairwise_sum(
    n: int, piece: Callable[[int, int], np.ndarray], max_piece: int = _PIECE, mapper: Mapper = map
) -> float:
    """numpy's float64 `add.reduce` over n values, the values of [i, j) given by `piece(i, j)`:
    the same recursive halving (halves rounded down to a multiple of 8), so the same result bit for
    bit, with no more than `max_piece` values in memory at once per call of `piece`. The leaves are
    summed through `mapper` (`map`, or a thread pool's: `piece` must then be safe to call at once
    from several threads) and added up along the tree in its order."""
    leaves: list[tuple[int, int]] = []
    _leaves(0, n, max(max_piece, _PW_BLOCK), leaves)
    sums = iter(list(mapper(lambda leaf: float(np.add.reduce(piece(leaf[0], leaf[0] + leaf[1]))), leaves)))
    return _add_up(n, max(max_piece, _PW_BLOCK), sums)


def _leaves(i: int, n: int, most: int, out: list[tuple[int, int]]) -> None:
    if n <= most:
        out.append((i, n))
        return
    n2 = n // 2
    n2 -= n2 % 8
    _leaves(i, n2, most, out)
    _leaves(i + n2, n - n2, most, out)


def _add_up(n: int, most: int, sums: Iterator[float]) -> float:
    if n <= most:
        return next(sums)
    n2 = n // 2
    n2 -= n2 % 8
    left = _add_up(n2, most, sums)
    return left + _add_up(n - n2, most, sums)


def bucket_counts(values: np.ndarray, shift: int = BUCKET_SHIFT, *, in_place: bool = False) -> np.ndarray:
    """How many of the non-negative integers `values` fall in each bucket `v >> shift` (int64);
    `in_place`: `values` may be overwritten (no copy)."""
    if not values.size:
        return np.zeros(0, dtype=np.int64)
    sh = np.asarray(shift, dtype=values.dtype)
    return np.bincount(np.right_shift(values, sh, out=values) if in_place else values >> sh)


def add_counts(total: np.ndarray, more: np.ndarray) -> np.ndarray:
    """`total + more` for bucket counts of different lengths (the longer kept, or grown)."""
    if more.size > total.size:
        total, more = more.copy() if total.size else more, total
    total[: more.size] += more
    return total


@dataclass(slots=True)
class Windows:
    """Where the wanted order statistics of the gaps are expected, as ranges of buckets (of
    2**BUCKET_SHIFT ns, inclusive), planned from a sample (`plan_windows`); the gaps that fall in
    them are kept as they are read, so their exact values need no second pass. A window that
    would keep more than `limit` values is given up (and its ranks found by a second pass)."""

    ranges: np.ndarray  # (k, 2) int64: first and last bucket of each window
    lut: np.ndarray  # bucket -> its window, or -1 (one entry past the last window: -1)
    limit: int = 1 << 23

    def window_of(self, buckets: np.ndarray) -> np.ndarray:
        return self.lut[np.minimum(buckets, self.lut.size - 1)]


def plan_windows(sample_counts: np.ndarray, fractions: np.ndarray, margin: float = 8.0) -> Windows:
    """Windows around the quantiles `fractions` (of 1) of a sample's bucket counts: each from the
    sample's quantile q − δ to q + δ, δ = max(0.1%, `margin` standard errors of a quantile of m
    values, √(q(1 − q)/m)); overlapping windows are merged."""
    m = int(sample_counts.sum())
    ends = np.cumsum(sample_counts)
    delta = np.maximum(1e-3, margin * np.sqrt(fractions * (1 - fractions) / max(m, 1)))
    lo = np.searchsorted(ends, np.floor(np.clip(fractions - delta, 0, 1) * (m - 1)), side="right")
    hi = np.searchsorted(ends, np.floor(np.clip(fractions + delta, 0, 1) * (m - 1)), side="right")
    lo, hi = np.maximum(0, lo - 1), hi + 1  # one bucket more each side
    merged: list[list[int]] = []
    for a, b in sorted(zip(lo.tolist(), hi.tolist())):
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    ranges = np.asarray(merged, dtype=np.int64).reshape(-1, 2)
    lut = np.full(int(ranges[:, 1].max()) + 2 if ranges.size else 1, -1, dtype=np.int8)
    for w, (a, b) in enumerate(ranges.tolist()):
        lut[a : b + 1] = w
    return Windows(ranges, lut)


@dataclass(slots=True)
class GapStats:
    """What the summary needs of many integer gaps (ns in [0, 2**32)), added up as they are read:
    their count, exact sum and sum of squares (Python integers), minimum, maximum, counts by
    bucket of 2**BUCKET_SHIFT ns, and the gaps that fall in `windows` (kept, per window). Parts
    read apart `merge` in any order to the same figures."""

    n: int = 0
    total: int = 0
    squares: int = 0
    lo: int = 0
    hi: int = 0
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    windows: Windows | None = None
    kept: dict[int, list[np.ndarray]] = field(default_factory=dict)
    scratch: list[np.ndarray] = field(default_factory=list, repr=False, compare=False)

    def add(self, values: np.ndarray, lo: int, hi: int) -> None:
        """Add int64 gaps whose minimum and maximum are `lo` and `hi`: computed `_STAT_PIECE` at a
        time in buffers kept between calls (while in cache; no allocation per batch)."""
        if not values.size:
            return
        part = GapStats(int(values.size), int(values.sum()), 0, lo, hi, windows=self.windows)
        if len(self.scratch) != 3:
            self.scratch = [np.empty(_STAT_PIECE, dtype=np.int64) for _ in range(3)]
        high_buf, low_buf, bucket_buf = self.scratch
        squares, counts = 0, np.zeros(0, dtype=np.int64)
        for i in range(0, values.size, _STAT_PIECE):
            v = values[i : i + _STAT_PIECE]
            high, low, buckets = high_buf[: v.size], low_buf[: v.size], bucket_buf[: v.size]
            np.right_shift(v, 16, out=high)  # x² = high²·2³² + 2·high·low·2¹⁶ + low², each sum < 2⁶³
            np.bitwise_and(v, 0xFFFF, out=low)
            squares += (int(np.dot(high, high)) << 32) + (int(np.dot(high, low)) << 17) + int(np.dot(low, low))
            np.right_shift(v, BUCKET_SHIFT, out=buckets)
            counts = add_counts(counts, np.bincount(buckets))
            if self.windows is not None:
                np.minimum(buckets, self.windows.lut.size - 1, out=high)
                w = self.windows.lut[high]
                hit = np.flatnonzero(w >= 0)
                if hit.size:
                    hv, hw = v[hit], w[hit]
                    for k in np.unique(hw).tolist():
                        part.kept.setdefault(k, []).append(hv[hw == k])
        part.squares, part.counts = squares, counts
        self.merge(part)

    def merge(self, other: GapStats) -> None:
        if not other.n:
            return
        self.lo = other.lo if not self.n else min(self.lo, other.lo)
        self.hi = other.hi if not self.n else max(self.hi, other.hi)
        self.n += other.n
        self.total += other.total
        self.squares += other.squares
        self.counts = add_counts(self.counts, other.counts)
        for k, arrays in other.kept.items():
            mine = self.kept.setdefault(k, [])
            if mine is not _GIVEN_UP:
                mine.extend(arrays)
                if self.windows is not None and sum(a.size for a in mine) > self.windows.limit:
                    self.kept[k] = _GIVEN_UP

    def kept_values(self, k: int) -> np.ndarray | None:
        """The gaps kept in window k, sorted; None when it was given up."""
        arrays = self.kept.get(k, [])
        if arrays is _GIVEN_UP:
            return None
        return np.sort(np.concatenate(arrays)) if arrays else np.empty(0, dtype=np.int64)


_GIVEN_UP: list[np.ndarray] = []


#: Gaps again, in parts (each read on its own through a `Mapper`), each an iterable of int64 arrays.
GapParts: TypeAlias = Callable[[], Sequence[Iterable[np.ndarray]]]


def order_statistics(
    values: np.ndarray,
    ranks: np.ndarray,
    max_piece: int = _PIECE,
    *,
    counts: np.ndarray | None = None,
    mapper: Mapper = map,
) -> np.ndarray:
    """`np.sort(values)[ranks]` of an integer array without sorting it, copying it or changing it.

    Level 1: how many values fall in each bucket of 2**shift consecutive integers (`counts`, the
    buckets of `bucket_counts(values)` when the caller counted them as it read the values; else
    counted here over [min, max] in at most 2**22 buckets). Level 2, one more pass: for the few
    buckets that hold a rank, how many values equal each of their 2**shift integers. A rank's value
    is then read off the two levels: exact, whatever the data, in bounded memory. `max_piece`
    values at a time (at least 65,536: each piece's counts span every bucket), the pieces through
    `mapper` (counts add up in any order)."""
    n = values.size
    step = max(max_piece, _MIN_COUNT_PIECE)

    def parts() -> list[list[np.ndarray]]:
        return [[values[i : i + step]] for i in range(0, n, step)]

    if counts is None:
        lo = int(values.min())
        shift = max(0, (int(values.max()) - lo).bit_length() - 22)
        base, sh = np.asarray(lo, dtype=values.dtype), np.asarray(shift, dtype=values.dtype)
        counts = _sum_counts(mapper(lambda p: np.bincount((p[0] - base) >> sh), parts()))
    else:
        lo, shift = 0, BUCKET_SHIFT
    return _refine(parts, np.asarray(ranks, dtype=np.int64), counts, lo, shift, mapper).astype(values.dtype)


def _refine(parts: GapParts, ranks: np.ndarray, counts: np.ndarray, lo: int, shift: int, mapper: Mapper) -> np.ndarray:
    """The values of `ranks` from level-1 `counts` (of (v − lo) >> shift) and one pass over `parts`."""
    ends = np.cumsum(counts)
    of_rank = np.searchsorted(ends, ranks, side="right")
    within = ranks - (ends[of_rank] - counts[of_rank])
    if shift == 0:
        return lo + of_rank
    wanted = np.unique(of_rank)
    slot = np.full(counts.size, -1, dtype=np.int16 if wanted.size < 2**15 else np.int64)
    slot[wanted] = np.arange(wanted.size)
    width = 1 << shift

    def fine(v: np.ndarray) -> np.ndarray:
        rel = v - np.asarray(lo, dtype=v.dtype) if lo else v
        b = rel >> np.asarray(shift, dtype=v.dtype)
        j = slot[np.minimum(b, counts.size - 1)]
        hit = (j >= 0) & (b < counts.size)
        if not hit.any():
            return np.zeros(0, dtype=np.int64)
        low = rel[hit].astype(np.int64) & (width - 1)
        return np.bincount(j[hit].astype(np.int64) * width + low, minlength=wanted.size * width)

    level2 = _sum_counts(mapper(lambda pieces: _sum_counts(fine(v) for v in pieces), parts()))
    level2 = np.concatenate([level2, np.zeros(wanted.size * width - level2.size, dtype=np.int64)])
    level2 = level2.reshape(wanted.size, width)
    out = np.empty(ranks.size, dtype=np.int64)
    for r, (k, w) in enumerate(zip(of_rank.tolist(), within.tolist())):
        out[r] = lo + (k << shift) + int(np.searchsorted(np.cumsum(level2[int(slot[k])]), w, side="right"))
    return out


def _sum_counts(parts: Iterable[np.ndarray]) -> np.ndarray:
    total = np.zeros(0, dtype=np.int64)
    for c in parts:
        total = add_counts(total, c)
    return total


def linear_percentiles(
    values: np.ndarray, qs: tuple[float, ...], scale: float, *, counts: np.ndarray | None = None, mapper: Mapper = map
) -> list[float]:
    """`np.percentile(values / scale, qs)` (linear method) of integers, without the float copy: the
    order statistics of the integers divided by `scale` (monotone, so the same order statistics),
    interpolated with numpy's own formula (`_lerp`). `values` is left as it was; `counts`: its
    `bucket_counts`, when known."""
    n = values.size
    q = np.true_divide(np.asarray(qs, dtype=np.float64), 100)
    virtual = (n - 1) * q
    lo = np.floor(virtual).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    gamma = virtual - np.floor(virtual)
    stats = order_statistics(values, np.concatenate([lo, hi]), counts=counts, mapper=mapper)
    return _lerp(stats[: lo.size] / scale, stats[lo.size :] / scale, gamma)


def streamed_percentiles(stats: GapStats, parts: GapParts, qs: Sequence[float], mapper: Mapper = map) -> list[float]:
    """`linear_percentiles(gaps, qs, 1e6)` of the gaps of `stats`: from its windows, else a pass over `parts`."""
    q = np.true_divide(np.asarray(qs, dtype=np.float64), 100)
    virtual = (stats.n - 1) * q
    lo = np.floor(virtual).astype(np.int64)
    hi = np.minimum(lo + 1, stats.n - 1)
    found = _windowed(stats, parts, np.concatenate([lo, hi]), mapper)
    return _lerp(found[: lo.size] / 1e6, found[lo.size :] / 1e6, virtual - np.floor(virtual))


def _windowed(stats: GapStats, parts: GapParts, ranks: np.ndarray, mapper: Mapper) -> np.ndarray:
    """The values of `ranks` from the gaps kept in the windows where each fell; the ranks no window
    holds (the sample misled it, or it was given up) from a second pass (`_refine`)."""
    counts, win = stats.counts, stats.windows
    ends = np.cumsum(counts)
    bucket = np.searchsorted(ends, ranks, side="right")
    out = np.full(ranks.size, -1, dtype=np.int64)
    if win is not None:
        sorted_kept: dict[int, np.ndarray | None] = {}
        for i, b in enumerate(bucket.tolist()):
            k = int(win.window_of(np.asarray([b]))[0])
            if k < 0:
                continue
            if k not in sorted_kept:
                sorted_kept[k] = stats.kept_values(k)
            kept = sorted_kept[k]
            first, last = win.ranges[k].tolist()
            below = int(ends[first - 1]) if first > 0 else 0
            in_window = int(ends[min(last, counts.size - 1)]) - below
            if kept is not None and kept.size == in_window:
                out[i] = kept[int(ranks[i]) - below]
    missing = out < 0
    if missing.any():
        out[missing] = _refine(parts, ranks[missing], counts, 0, BUCKET_SHIFT, mapper)
    return out


def _lerp(a: np.ndarray, b: np.ndarray, gamma: np.ndarray) -> list[float]:
    """numpy's linear interpolation between order statistics (its `_lerp`), to the bit."""
    diff = b - a
    out = np.add(a, diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    return [float(x) for x in out]
