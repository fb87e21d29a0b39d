"""The target's own Prometheus metrics: scraped before and after the measured window, never during.

A run's server-side figures are deltas (counters) or end values (gauges) between two scrapes,
taken outside the clock. Names are matched with any trailing `_total` stripped (a counter `foo`
is exposed as `foo_total`), and the engines' names map onto a few common keys through the one
engine table (engines.py; docs/compatibility.md). The page is read by the one Prometheus
reader (prometheus.py): `read_page` keeps every sample's value and, for the engines' request-level
histograms (`ENGINE_HISTOGRAMS`), each bucket. `server_summary` and `histogram_window` (the
histograms' deltas over the window, for the engine's view of latency, results.engineview) are pure;
`scrape` is the only I/O, and it reads the page where the capability probe found it (TensorRT-LLM:
`/prometheus/metrics`).
"""

from __future__ import annotations

from typing import Any, cast

import aiohttp

from servescope.results.engineview import HistogramWindow, SpecWindow, histogram_mean_ms
from servescope.results.schema import ServerMetrics
from servescope.target.engines import COUNTER_ROLES, ENGINE_HISTOGRAMS, HISTOGRAMS, METRICS, METRICS_PATHS, SPEC_DECODE
from servescope.target.prometheus import buckets_of, histogram_buckets, labelled_samples, parse_prometheus
from servescope.urls import server_root

__all__ = [
    "COMMON",
    "HISTOGRAMS",
    "histogram_window",
    "parse_prometheus",
    "prefix_cache_note",
    "read_page",
    "scrape",
    "server_summary",
    "spec_window",
]

COMMON = METRICS  # common key -> metric names (without `_total`), in the order they are tried
# every engine's request-level histogram names, whose buckets a page keeps
_BUCKETED = tuple(dict.fromkeys(n for names in ENGINE_HISTOGRAMS.values() for n in names))
PREFIX_TOLERANCE = 0.05  # intended vs achieved prefix-cache hit rate: warn beyond 5 points


async def _get_page(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> dict[str, float] | None:
    async with session.get(url, headers=headers) as r:
        if r.status != 200:
            return None
        text = await r.text(errors="replace")
    return read_page(text) or None  # JSON (TensorRT-LLM's /metrics) parses to nothing


def read_page(text: str) -> dict[str, float]:
    """A scraped page as `scrape` returns it: `parse_prometheus`'s samples (sums and counts of
    histograms, buckets dropped) plus the buckets of the engines' request-level histograms, one
    `prometheus.bucket_key` each (`<family>_bucket{le="<bound>"}`, summed over the other labels)."""
    page = parse_prometheus(text)
    if page:
        page.update(histogram_buckets(text, _BUCKETED))
        page.update(_per_position(text))
    return page


def _per_position(text: str) -> dict[str, float]:
    """Speculative decoding's accepted tokens per draft position, one flat sample per position
    (`<family>{position="<p>"}`, summed over the other labels: engines, models)."""
    wanted = {n + "_total" for n in SPEC_DECODE["accepted_per_position"]} | set(SPEC_DECODE["accepted_per_position"])
    out: dict[str, float] = {}
    for name, labels, value in labelled_samples(text):
        pos = labels.get("position")
        if name in wanted and pos is not None:
            key = f'{name.removesuffix("_total")}{{position="{pos}"}}'
            try:
                out[key] = out.get(key, 0.0) + float(value)
            except ValueError:
                continue
    return out


def spec_window(before: dict[str, float] | None, after: dict[str, float] | None) -> SpecWindow | None:
    """Speculative decoding's counters over the window (pages read by `read_page`): None when the page
    after has no drafts counter (no speculative decoding), or when a counter went down (a restart)."""
    if not after:
        return None
    was = before or {}
    used: dict[str, str] = {}
    delta: dict[str, float] = {}
    for role in ("drafts", "draft_tokens", "accepted_tokens"):
        name = next((n for n in SPEC_DECODE[role] if n in after), None)
        if name is None:
            return None
        used[role] = name
        delta[role] = after[name] - was.get(name, 0.0)
    per: dict[int, float] = {}
    for family in SPEC_DECODE["accepted_per_position"]:
        head = family + '{position="'
        for key, value in after.items():
            if key.startswith(head) and key.endswith('"}') and key[len(head) : -2].isdigit():
                per[int(key[len(head) : -2])] = value - was.get(key, 0.0)
        if per:
            used["accepted_per_position"] = family
            break
    if any(v < 0 for v in (*delta.values(), *per.values())):
        return None
    return SpecWindow(
        metrics_used=used,
        drafts=delta["drafts"],
        draft_tokens=delta["draft_tokens"],
        accepted_tokens=delta["accepted_tokens"],
        accepted_per_position=per,
    )


async def scrape(
    base_url: str, headers: dict[str, str] | None = None, timeout_s: float = 5.0, path: str | None = None
) -> dict[str, float] | None:
    """GET <root><path> (root = base URL without /v1; `path`: where the probe found the page, else each
    of the engines' metrics paths in turn); None when the target exposes no Prometheus page."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s:
            for p in (path,) if path else METRICS_PATHS:
                page = await _get_page(s, server_root(base_url) + p, headers or {})
                if page:
                    return page
    except (aiohttp.ClientError, TimeoutError):
        return None
    return None


def _pick(sample: dict[str, float], key: str) -> tuple[str, float] | None:
    for name in COMMON[key]:
        if name in sample:
            return name, sample[name]
    return None


def server_summary(before: dict[str, float] | None, after: dict[str, float] | None) -> ServerMetrics | None:
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
        if key in COUNTER_ROLES:
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
                    means[f"{key}_mean_ms"] = histogram_mean_ms(ds, dn)
                    doc["metrics_used"][f"{key}_hist"] = name
                break
    if means:
        doc["latency_ms"] = means
    return cast(ServerMetrics, doc)  # common keys only (COMMON, HISTOGRAMS): the open ServerMetrics block


def histogram_window(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, HistogramWindow]:
    """The engine's request-level histograms over the window (pages read by `read_page`), by role
    (`engines.ENGINE_VIEW_ROLES`): for each role the first of its names on the page after, Δ_count,
    Δ_sum and each bucket's Δ (after minus before; a bound missing before counts 0 there). A role is
    left out when nothing was observed over the window, or when a count went down (the server
    restarted between the scrapes: the deltas mean nothing)."""
    if not after:
        return {}
    was = before or {}
    out: dict[str, HistogramWindow] = {}
    for role, names in ENGINE_HISTOGRAMS.items():
        name = next((n for n in names if f"{n}_count" in after), None)
        if name is None:
            continue
        dn = after[f"{name}_count"] - was.get(f"{name}_count", 0.0)
        ds = after.get(f"{name}_sum", 0.0) - was.get(f"{name}_sum", 0.0)
        old = dict(buckets_of(was, name))
        buckets = tuple((le, c - old.get(le, 0.0)) for le, c in buckets_of(after, name))
        if dn <= 0 or any(c < 0 for _, c in buckets):
            continue
        out[role] = HistogramWindow(metric=name, count=dn, sum_s=ds, buckets=buckets)
    return out


def prefix_cache_note(
    intended: float | None, server: ServerMetrics | None, tolerance: float = PREFIX_TOLERANCE, *, at_most: bool = False
) -> str | None:
    """A warning when the workload's intended (designed) prefix-cache hit rate and the server's achieved
    one disagree by more than `tolerance` (a fraction: 0.05 = 5 points); None when they agree or when
    either is unknown. `at_most`: the designed rate is a ceiling (a random workload shares only the chat
    template, and caches hit whole blocks), so only an achieved rate above it is worth a word: the
    server then served prompts, or parts of them, from a cache warmed before this run's requests."""
    if intended is None or not server:
        return None
    achieved = server.get("prefix_cache_hit_rate")
    if achieved is None:
        return None
    if abs(achieved - intended) <= tolerance or (at_most and achieved < intended):
        return None
    why = (
        "prefix caching may be off, the cache too small for the shared prefixes, or requests evicted before reuse"
        if achieved < intended
        else "the server reused more than the workload shares (repeated prompts, or a cache warmed by an "
        "earlier run or sweep point: TTFT and throughput look better than a cold server gives; give "
        "each run its own prompts (sweeps and repeats do unless --same-prompts) or --reset-cache)"
    )
    return (
        f"prefix cache: intended hit rate {intended:.1%}, achieved {achieved:.1%} "
        f"(server {server.get('metrics_used', {}).get('prefix_hits', 'counters')}); they differ by more than "
        f"{tolerance * 100:.0f} points: {why}"
    )
