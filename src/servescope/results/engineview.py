"""The engine's own view of latency beside the client's (summary `engine_view`). Pure.

Engines that expose request-level histograms (vLLM, SGLang, TensorRT-LLM: TTFT, ITL, E2E and the
phases of a request inside the engine) say what they measured over the run's window: the scrape
before the clock and the one after give, per histogram, Δ_sum, Δ_count and each bucket's Δ
(`HistogramWindow`, made by `target.servermetrics.histogram_window` from the two pages). From them:

- the engine's mean = Δ_sum / Δ_count (exact: `_sum` is the sum of the observed values);
- the median and P90 estimated from the buckets as Prometheus's `histogram_quantile` does: the rank
  q·n falls in one bucket, and the estimate interpolates linearly between that bucket's bounds
  (the +Inf bucket: its lower bound); the bucket's bounds go with the estimate;
- the client's mean of the same metric over the same requests, and client − engine.

The client's TTFT and E2E means here are over every request that completed between the two scrapes
(warm-up included, as the engine saw them); without warm-up they are the summary's `latency_ms` means
to the bit. The client's ITL mean is the summary's (measured requests: the warm-up's gaps are not
kept). docs/metrics.md ("The engine's view") has the definitions; `selfcheck.engine_agreement`
judges the TTFT difference and the request counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from servescope.results.columns import RecordColumns
from servescope.results.engineschema import SpecDecodeView, SpecPosition
from servescope.results.perrequest import request_latencies_ms
from servescope.results.schema import EngineComparison, EnginePhase, EngineView, Summary

__all__ = [
    "COMPARED",
    "PHASES",
    "HistogramWindow",
    "SpecWindow",
    "engine_view",
    "histogram_mean_ms",
    "histogram_quantile_ms",
    "requests_between_scrapes",
    "speculative_view",
]

#: The metrics the client also measures, in the order the summary lists them.
COMPARED = ("ttft", "itl", "e2e")
#: The phases of a request inside the engine (engine-side only).
PHASES = ("queue", "prefill", "decode", "inference")


@dataclass(frozen=True, slots=True)
class HistogramWindow:
    """One histogram over the run's window: after minus before. `buckets`: (upper bound in s, Δ of
    the cumulative count), in increasing bound order and ending at +Inf; empty when the page had none."""

    metric: str
    count: float
    sum_s: float
    buckets: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True, slots=True)
class SpecWindow:
    """Speculative decoding's counters over the run's window (after minus before; made by
    `target.servermetrics.spec_window`): drafts, draft tokens, accepted tokens and accepted tokens per
    draft position (position -> Δ), with the names read (role -> metric name)."""

    metrics_used: Mapping[str, str]
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_position: Mapping[int, float]


def speculative_view(w: SpecWindow, cols: RecordColumns, streamed: bool) -> SpecDecodeView:
    """The `engine_view.speculative` block: vLLM's definitions (vllm/v1/spec_decode/metrics.py) over the
    window's deltas. acceptance rate = accepted / draft tokens; mean acceptance length = 1 + accepted /
    drafts; per position, accepted there / drafts. A ratio with a zero denominator is None. Beside them,
    the client's tokens per chunk (`streamed` runs only): what speculation looks like from the stream."""
    per: list[SpecPosition] = [
        {
            "position": pos,
            "accepted_tokens": round(n),
            "acceptance_rate": n / w.drafts if w.drafts > 0 else None,
        }
        for pos, n in sorted(w.accepted_per_position.items())
    ]
    _, done = requests_between_scrapes(cols)
    chunks = float(cols.chunks[done].sum()) if streamed else 0.0
    return {
        "metrics_used": dict(w.metrics_used),
        "drafts": round(w.drafts),
        "draft_tokens": round(w.draft_tokens),
        "accepted_tokens": round(w.accepted_tokens),
        "acceptance_rate": w.accepted_tokens / w.draft_tokens if w.draft_tokens > 0 else None,
        "mean_acceptance_length": 1 + w.accepted_tokens / w.drafts if w.drafts > 0 else None,
        "per_position": per,
        "client_tokens_per_chunk": float(cols.output_tokens[done].sum()) / chunks if chunks > 0 else None,
    }


def histogram_mean_ms(sum_s: float, count: float) -> float:
    """The mean of a histogram's observations over a window, in ms: Δ_sum / Δ_count (count > 0)."""
    return sum_s / count * 1e3


def histogram_quantile_ms(h: HistogramWindow, q: float) -> tuple[float, float, float | None] | None:
    """The q-quantile estimated from the buckets (ms), as Prometheus's `histogram_quantile`: the bucket
    whose cumulative count first reaches q·n, interpolated linearly between its lower bound (the
    previous bound, 0 for the first bucket) and its upper one; in the +Inf bucket, its lower bound.
    Returns (estimate, lower, upper) with upper None for the +Inf bucket; None without buckets
    ending at +Inf, with no observation, or when every observation is in the +Inf bucket alone."""
    if not h.buckets or not math.isinf(h.buckets[-1][0]):
        return None
    total = h.buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    i = next(i for i, (_, c) in enumerate(h.buckets) if c >= rank)
    upper, cum = h.buckets[i]
    lower, below = h.buckets[i - 1] if i else (0.0, 0.0)
    if math.isinf(upper):
        return None if i == 0 else (lower * 1e3, lower * 1e3, None)
    if upper <= lower or cum <= below:
        return upper * 1e3, lower * 1e3, upper * 1e3
    return (lower + (upper - lower) * (rank - below) / (cum - below)) * 1e3, lower * 1e3, upper * 1e3


def _phase(h: HistogramWindow) -> EnginePhase:
    med, p90 = histogram_quantile_ms(h, 0.5), histogram_quantile_ms(h, 0.9)
    return {
        "metric": h.metric,
        "count": round(h.count),
        "mean_ms": histogram_mean_ms(h.sum_s, h.count),
        "median_ms": med[0] if med else None,
        "median_bucket_ms": [med[1], med[2]] if med else None,
        "p90_ms": p90[0] if p90 else None,
        "p90_bucket_ms": [p90[1], p90[2]] if p90 else None,
    }


def requests_between_scrapes(cols: RecordColumns) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the requests sent between the two scrapes (warm-up included: it runs inside them) and
    of those among them that completed."""
    sent = ~np.isnan(cols.t_send)
    return sent, sent & cols.ok


def _client_means(cols: RecordColumns, summary: Summary) -> dict[str, tuple[int, float | None]]:
    """(count, mean ms) of the client's TTFT and E2E over the completed requests between the scrapes,
    and of ITL over the summary's (measured) gaps."""
    _, done = requests_between_scrapes(cols)
    lat = request_latencies_ms(cols, done)
    out: dict[str, tuple[int, float | None]] = {}
    for key in ("ttft", "e2e"):
        v = lat[key][~np.isnan(lat[key])]
        out[key] = (int(v.size), float(v.mean()) if v.size else None)
    itl = summary["latency_ms"]["itl"]
    out["itl"] = (itl["count"], itl["mean"])
    return out


def _streamed(summary: Summary) -> bool:
    wl = summary.get("workload")
    return bool(wl.get("stream", True)) if wl is not None else True


def engine_view(
    hists: Mapping[str, HistogramWindow], summary: Summary, cols: RecordColumns, spec: SpecWindow | None = None
) -> EngineView | None:
    """The `engine_view` block from the window's histograms by role (`ttft`, `itl`, `e2e`, and the
    phases `queue`, `prefill`, `decode`, `inference`; a role the engine lacks is left out), the run's
    summary and its columns, and speculative decoding's counters over the window (`spec`, None: the
    engine has none). None when the engine exposed none of them."""
    if not any(k in hists for k in (*COMPARED, *PHASES)) and spec is None:
        return None
    client = _client_means(cols, summary)
    metrics: dict[str, EngineComparison] = {}
    for key in COMPARED:
        h = hists.get(key)
        if h is None:
            continue
        n, mean = client[key]
        engine = _phase(h)
        metrics[key] = {
            **engine,
            "client_count": n,
            "client_mean_ms": mean,
            "client_minus_engine_ms": None if mean is None else mean - engine["mean_ms"],
        }
    sent, done = requests_between_scrapes(cols)
    finished = hists.get("e2e") or hists.get("ttft")
    return {
        "requests_sent": int(sent.sum()),
        "requests_completed": int(done.sum()),
        "engine_requests": round(finished.count) if finished is not None else None,
        "engine_requests_metric": finished.metric if finished is not None else None,
        "metrics": metrics,
        "phases": {key: _phase(hists[key]) for key in PHASES if key in hists},
        "speculative": None if spec is None else speculative_view(spec, cols, _streamed(summary)),
    }
