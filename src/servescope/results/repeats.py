"""Repeats of one configuration (`--repeat N`): how much the figures move from run to run.

Pure: summaries in, spread out. The spread is what a single run hides (sglang#8285 shows five
identical runs with P99 TTFT from 1.7 s to 47.6 s); `servescope compare` uses the repeat
directories themselves to put confidence intervals on ratios.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from servescope.results.metrics import dig
from servescope.results.schema import Summary

__all__ = ["SPREAD_METRICS", "spread", "metric_value"]

#: (label, path in summary.json)
SPREAD_METRICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("output tok/s", ("throughput", "output_tokens_per_s")),
    ("requests/s", ("throughput", "requests_per_s")),
    ("TTFT median ms", ("latency_ms", "ttft", "median")),
    ("TTFT p99 ms", ("latency_ms", "ttft", "p99")),
    ("ITL median ms", ("latency_ms", "itl", "median")),
    ("ITL p99 ms", ("latency_ms", "itl", "p99")),
    ("TPOT median ms", ("latency_ms", "tpot", "median")),
    ("E2E median ms", ("latency_ms", "e2e", "median")),
    ("E2E p99 ms", ("latency_ms", "e2e", "p99")),
)


def metric_value(summary: Summary, path: Sequence[str]) -> float | None:
    """The number at `path` (a SPREAD_METRICS path, held as data: hence dig), or None."""
    node = dig(summary, *path)
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def spread(summaries: Sequence[Summary]) -> dict[str, dict[str, Any]]:
    """Per metric: values of each repeat, mean, sample std, min, max and CV (std / mean)."""
    out: dict[str, dict[str, Any]] = {}
    for label, path in SPREAD_METRICS:
        values = [metric_value(s, path) for s in summaries]
        finite = np.array([v for v in values if v is not None], dtype=float)
        if finite.size == 0:
            continue
        mean = float(finite.mean())
        std = float(finite.std(ddof=1)) if finite.size > 1 else 0.0
        out[label] = {
            "path": ".".join(path),
            "values": values,
            "mean": mean,
            "std": std,
            "min": float(finite.min()),
            "max": float(finite.max()),
            "cv": std / mean if mean else None,
        }
    return out
