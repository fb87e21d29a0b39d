"""Service-level objectives: per-request limits (goodput) and limits on a run's distributions.

Two kinds of limit share one `--slo` flag, comma-separated:

- per-request, `<metric>_ms=LIMIT` (`ttft_ms=2000,tpot_ms=80`): a request meets the SLO when every
  limit holds for it; goodput counts those requests per second (`colsummary.summarize_columns`).
- aggregate, `<metric>_<stat>_ms=LIMIT` (`ttft_p99_ms=2000,itl_p99_ms=50,tpot_median_ms=30`): the
  statistic of the run's distribution (summary.json `latency_ms.<metric>.<stat>`) must not exceed the
  limit. The run passes when every aggregate limit holds. `goodput_fraction=0.99` asks that at least
  that fraction of measured requests meet the per-request limits.
- presets, `mlperf:<benchmark>`: MLPerf Inference's Server-scenario limits, P99 TTFT and P99 TPOT.

Metrics: ttft, tpot, itl, e2e, ttfat. Stats: mean, median (p50), p90, p95, p99, min, max.
Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from servescope.errors import ConfigError
from servescope.results.metrics import dig
from servescope.results.schema import AggregateCheck, GoodputCheck, LatencyMetric, SloCheck, Summary

__all__ = [
    "MLPERF_PRESETS",
    "AggregateLimit",
    "SloSpec",
    "evaluate",
    "failing",
    "parse_slo_spec",
]

METRICS: tuple[LatencyMetric, ...] = ("ttft", "tpot", "itl", "e2e", "ttfat")
_STATS = {
    "mean": "mean",
    "median": "median",
    "p50": "median",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
    "min": "min",
    "max": "max",
}
_LABEL = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E", "ttfat": "TTFAT"}

# MLPerf Inference, Server scenario, LLM benchmarks: (P99 TTFT ms, P99 TPOT ms).
# Source: mlcommons/inference, loadgen/mlperf.conf, keys `<model>.Server.ttft_latency` and
# `<model>.Server.tpot_latency` (all times in ms; `*.Server.target_latency_percentile = 99`).
# MLPerf's TPOT excludes the first token, as ours does (docs/metrics.md).
MLPERF_PRESETS: dict[str, tuple[float, float]] = {
    "llama2-70b": (2000.0, 200.0),
    "llama2-70b-interactive": (450.0, 40.0),
    "mixtral-8x7b": (2000.0, 200.0),
    "llama3.1-405b": (6000.0, 175.0),
    "llama3.1-405b-interactive": (4500.0, 80.0),
    "llama3.1-8b": (2000.0, 100.0),
    "llama3.1-8b-interactive": (500.0, 30.0),
    "deepseek-r1": (2000.0, 80.0),
    "deepseek-r1-interactive": (1500.0, 15.0),
}


@dataclass(frozen=True)
class AggregateLimit:
    """`stat` of the run's `metric` distribution must be <= `limit_ms`."""

    metric: LatencyMetric
    stat: str  # key of summary latency_ms.<metric>: mean, median, p90, p95, p99, min, max
    limit_ms: float
    source: str = ""  # "mlperf:llama2-70b" for a preset

    @property
    def label(self) -> str:
        stat = "median" if self.stat == "median" else self.stat.upper()
        return f"{_LABEL[self.metric]} {stat}"

    def describe(self) -> str:
        return f"{self.label} ≤ {self.limit_ms:g} ms"


@dataclass
class SloSpec:
    """Everything one `--slo` value asks for."""

    per_request: dict[str, float] = field(default_factory=dict)  # ttft_ms=... (goodput)
    aggregate: list[AggregateLimit] = field(default_factory=list)
    goodput_fraction: float | None = None  # at least this fraction of requests meet per_request
    presets: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.per_request or self.aggregate or self.goodput_fraction is not None)

    @property
    def has_run_limits(self) -> bool:
        """Limits a whole run passes or fails (what a capacity search needs)."""
        return bool(self.aggregate) or self.goodput_fraction is not None

    def describe(self) -> str:
        parts = [a.describe() for a in self.aggregate]
        if self.goodput_fraction is not None:
            per = ", ".join(f"{k.removesuffix('_ms').upper()} ≤ {v:g} ms" for k, v in self.per_request.items())
            parts.append(f"≥ {self.goodput_fraction * 100:g}% of requests with {per}")
        elif self.per_request:
            parts.append("goodput: " + ", ".join(f"{k}={v:g}" for k, v in self.per_request.items()))
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "per_request": dict(self.per_request),
            "aggregate": [
                {
                    "metric": a.metric,
                    "stat": a.stat,
                    "limit_ms": a.limit_ms,
                    **({"source": a.source} if a.source else {}),
                }
                for a in self.aggregate
            ],
            "goodput_fraction": self.goodput_fraction,
            "presets": list(self.presets),
            "text": self.describe(),
        }


def _preset_name(name: str) -> str:
    n = name.strip().lower().replace("_", ".").replace("llama3-1", "llama3.1")
    n = n.replace("llama3.1.", "llama3.1-")  # llama3_1-405b -> llama3.1-405b
    return n


def parse_slo_spec(text: str | None) -> SloSpec:
    """`ttft_p99_ms=2000,itl_p99_ms=50,ttft_ms=2000,mlperf:llama2-70b` -> SloSpec."""
    spec = SloSpec()
    if not text:
        return spec
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        if part.lower().startswith("mlperf:"):
            name = _preset_name(part.split(":", 1)[1])
            if name not in MLPERF_PRESETS:
                raise ConfigError(f"--slo {part}: unknown MLPerf preset; known: {', '.join(MLPERF_PRESETS)}")
            ttft, tpot = MLPERF_PRESETS[name]
            src = f"mlperf:{name}"
            spec.aggregate += [AggregateLimit("ttft", "p99", ttft, src), AggregateLimit("tpot", "p99", tpot, src)]
            spec.presets.append(name)
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ConfigError(f"--slo {part!r}: expected METRIC=LIMIT (ttft_ms=2000, itl_p99_ms=50) or mlperf:NAME")
        key = key.strip().lower()
        try:
            limit = float(value)
        except ValueError:
            raise ConfigError(f"--slo {part!r}: {value!r} is not a number") from None
        if key == "goodput_fraction":
            if not 0 < limit <= 1:
                raise ConfigError(f"--slo {part!r}: goodput_fraction must be in (0, 1]")
            spec.goodput_fraction = limit
            continue
        if not key.endswith("_ms"):
            raise ConfigError(f"--slo {part!r}: limits are in milliseconds and end in _ms (ttft_p99_ms=2000)")
        words = key.removesuffix("_ms").split("_")
        if len(words) == 1 and words[0] in METRICS:
            spec.per_request[key] = limit
        elif len(words) == 2 and words[0] in METRICS and words[1] in _STATS:
            metric = METRICS[METRICS.index(words[0])]  # the Literal equal to words[0]
            spec.aggregate.append(AggregateLimit(metric, _STATS[words[1]], limit))
        else:
            raise ConfigError(
                f"--slo {part!r}: unknown limit; use <metric>_ms (per request) or <metric>_<stat>_ms, "
                f"metric one of {', '.join(METRICS)}, stat one of {', '.join(_STATS)}"
            )
    if spec.goodput_fraction is not None and not spec.per_request:
        raise ConfigError(
            "--slo goodput_fraction needs per-request limits too, e.g. ttft_ms=2000,goodput_fraction=0.99"
        )
    return spec


def _value(summary: Summary, metric: str, stat: str) -> float | None:
    """The statistic, error-adjusted (failures as +inf) where the summary has that figure."""
    failed = dig(summary, "requests", "failed") or 0
    adjusted = dig(summary, "latency_ms_error_adjusted", metric) or {}
    if failed and stat in adjusted:
        v = adjusted[stat]
        return math.inf if v is None else float(v)
    v = dig(summary, "latency_ms", metric, stat)
    return None if v is None else float(v)


def evaluate(summary: Summary, spec: SloSpec) -> SloCheck:
    """Pass/fail of a run's summary against the aggregate limits (and the goodput fraction).

    A statistic the run does not have (no completed request) fails its limit; with failed requests
    the error-adjusted TTFT/E2E percentiles are used (a failure counts as +inf).
    """
    checks: list[AggregateCheck | GoodputCheck] = []
    for a in spec.aggregate:
        v = _value(summary, a.metric, a.stat)
        ok = v is not None and v <= a.limit_ms
        check: AggregateCheck = {
            "name": a.label,
            "metric": a.metric,
            "stat": a.stat,
            "limit_ms": a.limit_ms,
            "value_ms": None if v is None or math.isinf(v) else v,
            "infinite": v is not None and math.isinf(v),
            "passed": ok,
        }
        if a.source:
            check["source"] = a.source
        checks.append(check)
    goodput = summary.get("goodput")
    if spec.goodput_fraction is not None:
        frac = goodput["fraction"] if goodput else None
        ok = frac is not None and frac >= spec.goodput_fraction
        checks.append(
            {
                "name": "goodput fraction",
                "metric": "goodput",
                "stat": "fraction",
                "limit": spec.goodput_fraction,
                "value": frac,
                "passed": ok,
            }
        )
    return {
        "passed": all(c["passed"] for c in checks) if checks else None,
        "checks": checks,
        "goodput_requests_per_s": goodput["requests_per_s"] if goodput else None,
        "goodput_fraction": goodput["fraction"] if goodput else None,
    }


def failing(result: SloCheck) -> str:
    """`ITL P99 53.1 ms` for the checks that failed (for one-line answers)."""
    out = []
    for c in result.get("checks", []):
        if c["passed"]:
            continue
        if c["metric"] == "goodput":
            v = c["value"]
            out.append(f"goodput fraction {v:.3f}" if v is not None else "goodput fraction n/a")
        elif c.get("infinite"):
            out.append(f"{c['name']} ∞ (failed requests)")
        elif c.get("value_ms") is None:
            out.append(f"{c['name']} n/a")
        else:
            out.append(f"{c['name']} {c['value_ms']:.1f} ms")
    return ", ".join(out)
