"""Bootstrap confidence intervals for ratios of run metrics (pure; numpy only).

A side of a comparison is one run or several repeats of the same configuration. One bootstrap
replicate of a side draws weights: with R repeats, run counts c ~ Multinomial(R, 1/R) (resampling
repeats), and within each run r, request counts w ~ Multinomial(n_r, 1/n_r) (resampling requests);
request i then weighs W_i = c[run(i)] · w_i. Every metric of the replicate is computed from the
same weights, so metrics stay jointly consistent:

- a per-request metric (TTFT, E2E, TPOT) is a weighted mean or weighted quantile of its values;
- ITL is per token: each gap carries the weight of the request it belongs to;
- a throughput uses Little's law: tokens per busy second times the mean number of requests in
  flight, Σ W_i·tokens_i / Σ W_i·busy_i × L̄, where busy_i is request i's send-to-end time and
  L_r = Σ busy_i / window_r of run r (L̄ its c-weighted mean). With unit weights this is exactly
  tokens / window; resampling then carries the variability of both token counts and latencies
  (resampling token counts over a fixed window alone would give request throughput no spread).

Quantiles are inverted-CDF (the smallest value whose cumulative weight reaches q), for the point
estimate too, so the interval is centred on the figure it qualifies. The ratio B/A of two sides
uses independent replicates of each; its 95% interval is the 2.5th..97.5th percentile of the
replicate ratios. Seeds are fixed: the same inputs give the same intervals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "METRICS",
    "MetricSpec",
    "RatioEstimate",
    "SideData",
    "bootstrap_side",
    "ratio_ci",
    "weighted_quantile_rows",
]


@dataclass(slots=True)
class SideData:
    """Everything the bootstrap needs of one side, pooled over its runs.

    `req_run[i]` is the run index of request i (all measured requests, failed ones too);
    per-request arrays hold NaN where a metric is undefined (a failed request has no TTFT);
    `itl_ms` are per-token gaps with `itl_owner` the request each belongs to.
    """

    req_run: np.ndarray  # int, (N,)
    window_s: np.ndarray  # float, (R,)
    busy_s: np.ndarray  # float, (N,): send to end (or failure) of each request
    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    tpot_ms: np.ndarray
    output_tokens: np.ndarray  # 0 for failed requests
    total_tokens: np.ndarray  # input + output of completed requests, 0 for failed
    ok: np.ndarray  # 1.0 completed, 0.0 failed
    itl_ms: np.ndarray
    itl_owner: np.ndarray

    @property
    def runs(self) -> int:
        return int(self.window_s.size)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    key: str  # stable identifier, e.g. "itl_p99"
    label: str  # words: "P99 ITL"
    source: str  # SideData attribute
    stat: str  # "mean" | "q" | "rate"
    q: float = 0.5
    higher_is_better: bool = False
    unit: str = "ms"


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "output_tokens_per_s", "output throughput", "output_tokens", "rate", higher_is_better=True, unit="tok/s"
    ),
    MetricSpec(
        "total_tokens_per_s", "total token throughput", "total_tokens", "rate", higher_is_better=True, unit="tok/s"
    ),
    MetricSpec("requests_per_s", "request throughput", "ok", "rate", higher_is_better=True, unit="req/s"),
    MetricSpec("ttft_median", "median TTFT", "ttft_ms", "q", 0.5),
    MetricSpec("ttft_p99", "P99 TTFT", "ttft_ms", "q", 0.99),
    MetricSpec("itl_median", "median ITL", "itl_ms", "q", 0.5),
    MetricSpec("itl_p99", "P99 ITL", "itl_ms", "q", 0.99),
    MetricSpec("tpot_median", "median TPOT", "tpot_ms", "q", 0.5),
    MetricSpec("e2e_median", "median E2E", "e2e_ms", "q", 0.5),
    MetricSpec("e2e_p99", "P99 E2E", "e2e_ms", "q", 0.99),
)


@dataclass(frozen=True, slots=True)
class RatioEstimate:
    spec: MetricSpec
    a: float  # point estimate on side A
    b: float
    ratio: float  # b / a
    lo: float
    hi: float

    @property
    def within_noise(self) -> bool:
        return self.lo <= 1.0 <= self.hi

    @property
    def verdict(self) -> str:
        """'better' / 'worse' for B against A, or 'within noise'."""
        if not np.isfinite(self.ratio) or not (np.isfinite(self.lo) and np.isfinite(self.hi)):
            return "n/a"
        if self.within_noise:
            return "within noise"
        up = self.lo > 1.0
        return "better" if up == self.spec.higher_is_better else "worse"


def weighted_quantile_rows(
    sorted_values: np.ndarray, weights: np.ndarray, q: float, cum: np.ndarray | None = None
) -> np.ndarray:
    """Per row of `weights` (B, n) over ascending `sorted_values` (n,): the inverted-CDF quantile."""
    if cum is None:
        cum = np.cumsum(weights, axis=1)
    total = cum[:, -1]
    target = q * total
    idx = np.minimum(
        (cum < target[:, None] - 1e-12 * np.maximum(total[:, None], 1.0)).sum(axis=1), sorted_values.size - 1
    )
    out = sorted_values[idx].astype(float)
    out[total <= 0] = np.nan
    return out


def _weights(side: SideData, b: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(B, N) request weights and (B, R) run counts for `b` replicates."""
    r = side.runs
    c = rng.multinomial(r, np.full(r, 1.0 / r), size=b).astype(float) if r > 1 else np.ones((b, 1))
    n = side.req_run.size
    w = np.zeros((b, n))
    for run in range(r):
        members = np.flatnonzero(side.req_run == run)
        if members.size == 0:
            continue
        picks = rng.integers(0, members.size, size=(b, members.size))
        flat = (picks + (np.arange(b) * members.size)[:, None]).ravel()
        counts = np.bincount(flat, minlength=b * members.size).reshape(b, members.size).astype(float)
        w[:, members] = counts * c[:, [run]]
    return w, c


class _Quantiles:
    """Exact weighted quantiles of per-token (or per-request) values under request weights.

    Values are sorted once and cut into K equal-count rank bins; H[i, k] counts request i's values
    in bin k. A replicate finds the bin holding its quantile from w @ H (cheap: K columns), then
    walks that one bin's values in order. Exact (the same answer as a cumulative sum over every
    value) at a cost of O(N·K + G/K) per replicate instead of O(G).
    """

    def __init__(self, sorted_values: np.ndarray, owner: np.ndarray, n_requests: int) -> None:
        g = sorted_values.size
        self.sorted = sorted_values
        self.owner = owner
        k = int(max(1, min(g, 1024, max(64, 2_000_000 // max(n_requests, 1)))))
        self.edges = (np.arange(k + 1, dtype=np.int64) * g) // k
        bin_of_rank = np.repeat(np.arange(k, dtype=np.int64), np.diff(self.edges))
        self.k = k
        # Bin weights as (B,N)@(N,K) when values are many per request (ITL), else a segmented sum.
        self.h = None
        if g > 4 * n_requests:
            h = np.bincount(owner * k + bin_of_rank, minlength=n_requests * k).reshape(n_requests, k)
            self.h = h.astype(float)
        self.span = int(np.diff(self.edges).max()) if g else 0
        self._memo: tuple[int, np.ndarray, np.ndarray] | None = None

    def _bins(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._memo is not None and self._memo[0] == id(w):  # median and P99 of one replicate batch
            return self._memo[1], self._memo[2]
        bw = w @ self.h if self.h is not None else np.add.reduceat(w[:, self.owner], self.edges[:-1], axis=1)
        cum = np.cumsum(bw, axis=1)
        self._memo = (id(w), bw, cum)
        return bw, cum

    def evaluate(self, w: np.ndarray, qs: Sequence[float]) -> list[np.ndarray]:
        b = w.shape[0]
        rows = np.arange(b)
        bw, cum = self._bins(w)
        total = cum[:, -1]
        tol = 1e-12 * np.maximum(total, 1.0)
        out = []
        for q in qs:
            target = q * total - tol
            kb = np.minimum((cum < target[:, None]).sum(axis=1), self.k - 1)
            base = cum[rows, kb] - bw[rows, kb]
            start = self.edges[kb]
            size = self.edges[kb + 1] - start
            offs = np.arange(self.span)
            idx = np.minimum(start[:, None] + offs, self.sorted.size - 1)
            ww = w[rows[:, None], self.owner[idx]] * (offs < size[:, None])
            inner = base[:, None] + np.cumsum(ww, axis=1)
            j = np.minimum((inner < target[:, None]).sum(axis=1), np.maximum(size - 1, 0))
            val = self.sorted[start + j].astype(float)
            val[total <= 0] = np.nan
            out.append(val)
        return out


class _Prepared:
    """Per-metric data prepared once, so each replicate is a few matrix products."""

    def __init__(self, side: SideData, spec: MetricSpec, shared: dict) -> None:
        self.spec = spec
        values = np.asarray(getattr(side, spec.source), dtype=float)
        n = side.req_run.size
        if spec.stat == "rate":
            self.values = np.nan_to_num(values)
            self.busy = np.nan_to_num(side.busy_s)
            busy_per_run = np.bincount(side.req_run, weights=self.busy, minlength=side.runs)
            with np.errstate(divide="ignore", invalid="ignore"):
                self.inflight = np.where(side.window_s > 0, busy_per_run / side.window_s, 0.0)
            return
        owner = side.itl_owner if spec.source == "itl_ms" else np.arange(values.size)
        keep = np.isfinite(values)
        if spec.stat == "mean":  # per-request sums and counts: Σ W_i·sum_i / Σ W_i·count_i
            self.sums = np.bincount(owner[keep], weights=values[keep], minlength=n)
            self.counts = np.bincount(owner[keep], minlength=n).astype(float)
            return
        if spec.source not in shared:  # median and P99 of one source share the sorted data
            order = np.argsort(values[keep], kind="stable")
            shared[spec.source] = _Quantiles(values[keep][order], owner[keep][order].astype(np.int64), n)
        self.quantiles: _Quantiles = shared[spec.source]

    def evaluate(self, w: np.ndarray, c: np.ndarray) -> np.ndarray:
        spec = self.spec
        with np.errstate(divide="ignore", invalid="ignore"):
            if spec.stat == "rate":
                busy = w @ self.busy
                inflight = (c @ self.inflight) / c.sum(axis=1)
                return np.where(busy > 0, (w @ self.values) / busy * inflight, np.nan)
            if spec.stat == "mean":
                cnt = w @ self.counts
                return np.where(cnt > 0, (w @ self.sums) / cnt, np.nan)
        if self.quantiles.sorted.size == 0:
            return np.full(w.shape[0], np.nan)
        return self.quantiles.evaluate(w, [spec.q])[0]


def bootstrap_side(
    side: SideData, specs: Sequence[MetricSpec], *, resamples: int, seed: int, side_index: int
) -> tuple[np.ndarray, np.ndarray]:
    """Point estimates (M,) and replicates (M, B) of every metric of one side."""
    rng = np.random.default_rng([seed, side_index])
    shared: dict = {}
    prepared = [_Prepared(side, s, shared) for s in specs]
    ones_w = np.ones((1, side.req_run.size))
    ones_c = np.ones((1, side.runs))
    points = np.array([p.evaluate(ones_w, ones_c)[0] for p in prepared])
    width = max([side.req_run.size, 1] + [q.span for q in shared.values()] + [q.k for q in shared.values()])
    batch = int(max(1, min(resamples, 2_000_000 // width)))
    reps = np.empty((len(specs), resamples))
    done = 0
    while done < resamples:
        b = min(batch, resamples - done)
        w, c = _weights(side, b, rng)
        for m, p in enumerate(prepared):
            reps[m, done : done + b] = p.evaluate(w, c)
        done += b
    return points, reps


def ratio_ci(
    a: SideData,
    b: SideData,
    specs: Sequence[MetricSpec] = METRICS,
    *,
    resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> list[RatioEstimate]:
    """B/A for every metric with a percentile-bootstrap interval at `confidence`."""
    pa, ra = bootstrap_side(a, specs, resamples=resamples, seed=seed, side_index=0)
    pb, rb = bootstrap_side(b, specs, resamples=resamples, seed=seed, side_index=1)
    alpha = (1.0 - confidence) / 2.0
    out = []
    for m, spec in enumerate(specs):
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = rb[m] / ra[m]
            point = pb[m] / pa[m] if pa[m] else float("nan")
        finite = ratios[np.isfinite(ratios)]
        if finite.size < max(10, resamples // 2):
            lo = hi = float("nan")
        else:
            lo, hi = (float(x) for x in np.quantile(finite, [alpha, 1.0 - alpha]))
        out.append(RatioEstimate(spec, float(pa[m]), float(pb[m]), float(point), lo, hi))
    return out
