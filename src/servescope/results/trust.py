"""How far each bias of the client could move a reported percentile, against a stated tolerance. Pure.

The client verdict (`metrics.assess_client`) says a run is not to be trusted where one cause could move
a reported percentile of TTFT or ITL by more than the tolerance (docs/metrics.md, "Client self-check").
Each cause is a share `f` of the requests (or of the token arrivals) that it may have put off, each by at
most `b`. Put off one way (late) by any amount up to `b`, such a share moves the q-quantile of what was
observed by at most

    min(b, Q(q) − Q(q − f))          (late only: the true quantile is at least the observed (q − f)-quantile)
    min(b, max(Q(q + f) − Q(q), Q(q) − Q(q − f)))       (either way)

where Q is the observed distribution's quantile function, so the bound is read off the run's own figures:
a small share in a flat part of the distribution moves a percentile little, the same share in a steep
tail a lot. The causes:

- `late_connections`: requests sent on a connection opened inside the window (records' `setup_ns`). Their
  own set-up is outside TTFT, but a connection that the server's full accept queue held (its handshake's
  last step dropped, sent again after 1 s, then 3 s) waits on the server's side, after the send, where the
  client cannot see it: `b` is unbounded. TTFT, late only.
- `loop_stalls`: with kernel receive stamps, two token chunks of a stream that arrive in one stall of the
  event loop longer than the gap between them are read together and take the newer one's stamp. The share
  of arrivals a stall may merge is the share of stamped reads that ran more than the median TPOT `g`
  after their bytes came (each read's lateness, counted by the transport); without those counts, the
  share of time in a stall with more than `g` still to run, Σ max(0, ℓ − g) / Σ (interval + ℓ) over the
  loop-lag samples ℓ (taken every 10-30 ms). Never more than the share of gaps read together where the
  records hold it; `b` = g. A merged pair puts
  two gaps off (one to 0, the next longer): ITL with 2f either way; TTFT late only with f. With arrivals
  stamped at read time (`rx_timestamps` "read") every arrival in a stall is late by what is left of it:
  f = Σ max(0, ℓ − t) / Σ (interval + ℓ) with t the tolerance, `b` the longest stall.
- `read_pauses`: read coalescing pauses the loop ~0.1 ms at a time (client/coalesce.py); a pause can merge
  a stream's chunks only where it is longer than their gap, so only where the mean pause is longer than
  the median TPOT: the arrivals in a pause are the share of the window paused, each off by at most the
  mean pause; ITL either way, TTFT late. (A pause stretched by the host's scheduler is a loop stall.)

Over several shards each shard's stall share is weighted by its share of the requests (the merged view).
With kernel stamps the verdict reports the loop-stall bound without counting it (`metrics.assess_client`):
neither share tells a pair a stall merged from a pair the server wrote together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from servescope.results.columns import RecordColumns
from servescope.results.perrequest import since_send_ms
from servescope.results.schema import Bias

__all__ = [
    "LAG_SAMPLE_INTERVAL_MS",
    "QUANTILES",
    "TOLERANCE_MS",
    "TOLERANCE_SHARE",
    "biases",
    "late_share",
    "load_deficit",
    "quantile",
    "shift_bound",
    "stall_share",
    "tolerance_ms",
]

#: A reported percentile may be off by at most the larger of these: 1 ms, or 1% of its value.
TOLERANCE_MS = 1.0
TOLERANCE_SHARE = 0.01
#: The reported percentiles that are judged.
QUANTILES = {"median": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}
#: The mean interval of the event loop's lag samples (client.shard: drawn in 10-30 ms).
LAG_SAMPLE_INTERVAL_MS = 20.0


def tolerance_ms(figure: float) -> float:
    """The most a reported figure may be off: max(`TOLERANCE_MS`, `TOLERANCE_SHARE` × |figure|)."""
    return max(TOLERANCE_MS, TOLERANCE_SHARE * abs(figure))


def quantile(sorted_values: np.ndarray, q: float) -> float:
    """The q-quantile of sorted values, interpolated linearly (as `np.percentile`); q is clipped to [0, 1]."""
    n = sorted_values.size
    pos = min(max(q, 0.0), 1.0) * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def shift_bound(sorted_values: np.ndarray, q: float, share: float, size_ms: float, *, both: bool = False) -> float:
    """How far the q-quantile could move if `share` of the values were each put off by at most `size_ms`
    (math.inf: any amount), late only or `both` ways (module docstring)."""
    if share <= 0 or sorted_values.size == 0 or size_ms <= 0:
        return 0.0
    at = quantile(sorted_values, q)
    move = at - quantile(sorted_values, q - share)
    if both:
        move = max(move, quantile(sorted_values, q + share) - at)
    return min(size_ms, move)


def stall_share(lags_ms: Sequence[float] | np.ndarray, longer_than_ms: float) -> float:
    """The share of arrivals that fall in a loop stall with more than `longer_than_ms` still to run, from
    the loop-lag samples: Σ max(0, ℓ − x) / Σ (interval + ℓ)."""
    lags = np.asarray(lags_ms, dtype=float)
    if lags.size == 0:
        return 0.0
    whole = float(lags.size * LAG_SAMPLE_INTERVAL_MS + lags.sum())
    return float(np.clip(lags - longer_than_ms, 0.0, None).sum()) / whole


def late_share(counts: Sequence[int], bucket_ms: float, later_than_ms: float) -> float:
    """The share of stamped reads that ran more than `later_than_ms` after their newest bytes came, from
    their counts in buckets of `bucket_ms` (the last bucket open-ended: counted whole), uniform within a bucket."""
    total = sum(counts)
    if not total:
        return 0.0
    k = int(later_than_ms // bucket_ms)
    if k >= len(counts) - 1:
        return counts[-1] / total
    part = counts[k] * (1.0 - (later_than_ms - k * bucket_ms) / bucket_ms)
    return (part + sum(counts[k + 1 :])) / total


def load_deficit(
    cols: RecordColumns, concurrency: int | None, window_s: float, rows: np.ndarray | None = None
) -> float | None:
    """A closed loop's slots left empty by the client over the run: Σ (send − slot free) over the measured
    requests (a request's set-up inside the window is part of it) / (concurrency × window). None without
    a closed loop or a window. `rows`: a shard's (a boolean mask)."""
    if not concurrency or window_s <= 0:
        return None
    rows = cols.measured if rows is None else rows & cols.measured
    lag_s = float(np.nansum(cols.t_send[rows] - cols.t_sched[rows])) / 1e9
    return max(lag_s, 0.0) / (concurrency * window_s)


def _worst(cause: str, share: float, figures: dict[str, np.ndarray], size_ms: float, both: dict[str, bool]) -> Bias:
    """The figure `cause` could move the most against its tolerance, over `figures` (name -> sorted values)."""
    best: Bias | None = None
    best_ratio = -1.0
    over: list[str] = []
    for name, values in figures.items():
        if values.size == 0:
            continue
        for label, q in QUANTILES.items():
            f = 2 * share if both[name] else share
            bound = shift_bound(values, q, f, size_ms, both=both[name])
            tol = tolerance_ms(quantile(values, q))
            if bound > tol:
                over.append(f"{name} {label}")
            if bound / tol > best_ratio:
                best_ratio = bound / tol
                best = {
                    "cause": cause,
                    "affected_share": share,
                    "figure": f"{name} {label}",
                    "bound_ms": bound,
                    "tolerance_ms": tol,
                }
    assert best is not None
    best["over"] = over
    return best


def biases(
    cols: RecordColumns,
    *,
    shard_lags_ms: Sequence[tuple[float, Sequence[float]]],
    gap_ms: float | None,
    tokens_read_together: float | None,
    rx_timestamps: str,
    read_pauses: int,
    read_pause_ms: float,
    elapsed_s: float,
    read_lateness: Sequence[int] = (),
    lateness_bucket_ms: float = 0.131072,
) -> tuple[list[Bias], float | None]:
    """Each cause's worst bound on a reported TTFT or ITL percentile (module docstring), and the share of
    arrivals a loop stall may have put off (None where nothing was sampled). `shard_lags_ms`: each shard's
    share of the requests and its loop-lag samples (one shard: (1.0, samples))."""
    done = cols.completed & ~np.isnan(cols.t_first)
    ttft = np.sort(since_send_ms(cols.t_send[done], cols.t_first[done]))
    gaps = cols.held_itl if cols.held_itl is not None else None
    itl = np.sort(gaps / (1e6 / cols.itl_unit_ns) if gaps is not None else cols.itl_chart_ms)
    both = {"ttft": False, "itl": True}
    out: list[Bias] = []
    n = int(done.sum())
    setup = cols.setup if cols.setup.size == len(cols) else np.full(len(cols), np.nan)
    late = int((done & ~np.isnan(setup)).sum())
    if n and late:
        out.append(_worst("late_connections", late / n, {"ttft": ttft}, math.inf, both))
    stalls: float | None = None
    size = 0.0
    sampled = [(w, lags) for w, lags in shard_lags_ms if len(lags)]
    if sampled and ttft.size:
        if rx_timestamps == "kernel":
            if gap_ms and any(read_lateness):
                stalls = late_share(read_lateness, lateness_bucket_ms, gap_ms)
            elif gap_ms:
                stalls = sum(w * stall_share(lags, gap_ms) for w, lags in sampled)
            if stalls is not None and gap_ms:
                if tokens_read_together is not None:
                    stalls = min(stalls, tokens_read_together)
                size = gap_ms
        else:
            tol = tolerance_ms(quantile(ttft, 0.5))
            stalls = sum(w * stall_share(lags, tol) for w, lags in sampled)
            size = max(float(np.max(lags)) for _, lags in sampled)
        if stalls:
            out.append(_worst("loop_stalls", stalls, {"ttft": ttft, "itl": itl}, size, both))
    pause_ms = read_pause_ms / read_pauses if read_pauses else 0.0
    if pause_ms > (gap_ms or 0.0) and elapsed_s > 0 and ttft.size:  # pauses longer than a stream's gap
        share = min(1.0, read_pause_ms / (elapsed_s * 1e3))
        out.append(_worst("read_pauses", share, {"ttft": ttft, "itl": itl}, pause_ms, both))
    return out, stalls
