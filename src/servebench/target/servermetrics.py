"""The target's own Prometheus metrics: scraped before and after the measured window, never during.

A run's server-side figures are deltas (counters) or end values (gauges) between two scrapes,
taken outside the clock. Names are matched with any trailing `_total` stripped (a counter `foo`
is exposed as `foo_total`), and the engines' names map onto a few common keys
(../shared/SERVER-METRICS.md). `parse_prometheus` is pure; `scrape` is the only I/O.
"""

from __future__ import annotations

import math
import re
from typing import Any

import aiohttp

__all__ = ["COMMON", "HISTOGRAMS", "parse_prometheus", "prefix_cache_note", "scrape", "server_summary"]

# common key -> metric names (without `_total`), in the order they are tried
COMMON: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "trtllm_num_requests_running",
                "tgi_batch_current_size", "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "trtllm_num_requests_waiting",
                "tgi_queue_size", "llamacpp:requests_deferred"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
                 "trtllm_kv_cache_utilization"),
    "prompt_tokens": ("vllm:prompt_tokens", "sglang:prompt_tokens", "trtllm_prompt_tokens",
                      "llamacpp:prompt_tokens"),
    "generation_tokens": ("vllm:generation_tokens", "sglang:generation_tokens", "trtllm_generation_tokens",
                          "llamacpp:tokens_predicted"),
    "prefix_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries", "sglang:prompt_tokens",
                       "llamacpp:prompt_tokens"),
    "prefix_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits", "sglang:cached_tokens",
                    "llamacpp:prompt_tokens_cached"),
    "preemptions": ("vllm:num_preemptions", "sglang:num_retracted_reqs"),
}
_COUNTERS = ("prompt_tokens", "generation_tokens", "prefix_queries", "prefix_hits", "preemptions")
# server-side latency histograms: common key -> names; the window's mean is Δ_sum / Δ_count (seconds)
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds",
             "trtllm_time_to_first_token_seconds"),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
            "sglang:inter_token_latency_seconds", "trtllm_time_per_output_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds",
            "trtllm_e2e_request_latency_seconds"),
    "queue": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds", "trtllm_request_queue_time_seconds"),
}
PREFIX_TOLERANCE = 0.05  # intended vs achieved prefix-cache hit rate: warn beyond 5 points
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Sample name (without `_total`) -> value summed over label sets. Histogram series are kept
    as `<name>_sum` / `<name>_count`; buckets are dropped (deltas of sums/counts suffice here)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _LINE.match(line)
        if not m:
            continue
        name, value = m.group(1), m.group(3)
        if name.endswith("_bucket") or name.endswith("_created"):
            continue
        try:
            v = float(value)
        except ValueError:
            continue
        if math.isnan(v):
            continue
        name = name.removesuffix("_total")
        out[name] = out.get(name, 0.0) + v
    return out


async def scrape(root_url: str, headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> dict[str, float] | None:
    """GET <root>/metrics (root = base URL without /v1); None when the target exposes none."""
    root = root_url[: -len("/v1")] if root_url.endswith("/v1") else root_url
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s:
            async with s.get(f"{root}/metrics", headers=headers or {}) as r:
                if r.status != 200:
                    return None
                text = await r.text(errors="replace")
    except (aiohttp.ClientError, TimeoutError):
        return None
    parsed = parse_prometheus(text)
    return parsed or None


def _pick(sample: dict[str, float], key: str) -> tuple[str, float] | None:
    for name in COMMON[key]:
        if name in sample:
            return name, sample[name]
    return None


def server_summary(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any] | None:
    """Counter deltas and end-of-run gauges over the window, in common keys; names used are listed."""
    if not after:
        return None
    doc: dict[str, Any] = {"metrics_used": {}}
    for key in COMMON:
        hit = _pick(after, key)
        if hit is None:
            continue
        name, value = hit
        doc["metrics_used"][key] = name
        if key in _COUNTERS:
            doc[key] = value - (before or {}).get(name, 0.0)
        else:
            doc[key] = value
    q, h = doc.get("prefix_queries"), doc.get("prefix_hits")
    doc["prefix_cache_hit_rate"] = (h / q) if q and h is not None and q > 0 else None
    means: dict[str, float] = {}
    for key, names in HISTOGRAMS.items():
        for name in names:
            if f"{name}_count" in after:
                dn = after[f"{name}_count"] - (before or {}).get(f"{name}_count", 0.0)
                ds = after.get(f"{name}_sum", 0.0) - (before or {}).get(f"{name}_sum", 0.0)
                if dn > 0:
                    means[f"{key}_mean_ms"] = ds / dn * 1e3
                    doc["metrics_used"][f"{key}_hist"] = name
                break
    if means:
        doc["latency_ms"] = means
    return doc


def prefix_cache_note(intended: float | None, server: dict[str, Any] | None,
                      tolerance: float = PREFIX_TOLERANCE) -> str | None:
    """A warning when the workload's intended prefix-cache hit rate and the server's achieved one
    disagree by more than `tolerance` (a fraction: 0.05 = 5 points); None when they agree or when
    either is unknown."""
    if intended is None or not server:
        return None
    achieved = server.get("prefix_cache_hit_rate")
    if achieved is None:
        return None
    if abs(achieved - intended) <= tolerance:
        return None
    why = ("prefix caching may be off, the cache too small for the shared prefixes, or requests evicted "
           "before reuse" if achieved < intended else
           "the server reused more than the workload shares (e.g. template tokens, repeated prompts or a "
           "warm cache from an earlier run)")
    return (f"prefix cache: intended hit rate {intended:.1%}, achieved {achieved:.1%} "
            f"(server {server.get('metrics_used', {}).get('prefix_hits', 'counters')}); they differ by more than "
            f"{tolerance * 100:.0f} points: {why}")
