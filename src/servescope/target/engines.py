"""The one table of the engines servescope knows: what each is documented to do, where it answers, what
its Prometheus page calls things (pure data).

Engines that speak "the OpenAI API" differ in ways that change a benchmark's numbers: whether
`ignore_eos` / `min_tokens` are honoured, whether `data: [DONE]` ends the stream, where `usage` arrives,
which `/tokenize`, version and metrics endpoints they expose (TensorRT-LLM's Prometheus text is at
`/prometheus/metrics`; its `/metrics` is JSON), and the names of their server-side metrics
(each engine's documented metric names). docs/compatibility.md is the human-readable form of this table.

The capability probe (capabilities.py) reads the wire facts and the probe paths; the scrape
(servermetrics.py) reads the metric names, in the common roles below, through `METRICS` and
`HISTOGRAMS` (every engine's names, in table order, so a page is understood even when the probe was off);
the engine's view of latency reads its histograms, buckets included, through `ENGINE_HISTOGRAMS`.
Metric names are written without `_total` (a counter `foo` is exposed as `foo_total`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "CACHE_RESET_PATHS",
    "COUNTER_ROLES",
    "ENGINE_HISTOGRAMS",
    "ENGINE_VIEW_ROLES",
    "HISTOGRAMS",
    "HISTOGRAM_ROLES",
    "KNOWN_ENGINES",
    "METRICS",
    "METRICS_PATHS",
    "METRIC_PREFIXES",
    "ROLES",
    "SPEC_DECODE",
    "VERSION_PATHS",
    "EngineProfile",
]

# Gauge and counter roles, in the order a summary lists them; counters are deltas over the window.
ROLES = (
    "running",
    "waiting",
    "kv_usage",
    "prompt_tokens",
    "generation_tokens",
    "prefix_queries",
    "prefix_hits",
    "preemptions",
)
COUNTER_ROLES = ("prompt_tokens", "generation_tokens", "prefix_queries", "prefix_hits", "preemptions")
# Latency histograms: the window's mean is Δ_sum / Δ_count (seconds).
HISTOGRAM_ROLES = ("ttft", "itl", "e2e", "queue")
# The request-level histograms of the engine's own view of latency (summary `engine_view`): the
# latency roles above, then the phases of a request inside the engine (vLLM's prefill, decode and
# inference = prefill + decode; engines without them leave the role out).
ENGINE_VIEW_ROLES = (*HISTOGRAM_ROLES, "prefill", "decode", "inference")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineProfile:
    """What an engine is documented to do (facts; the probe checks the ones that matter live)."""

    name: str
    accepts_ignore_eos: bool  # honoured, not merely tolerated
    accepts_min_tokens: bool
    rejects_unknown_fields: bool  # HTTP 4xx on ignore_eos/min_tokens instead of ignoring them
    sends_done: bool  # ends the stream with `data: [DONE]`
    stream_usage: str  # "always" | "include_usage" | "never"
    tokenize: tuple[str, str] | None = None  # (path, body shape: "prompt" | "content" | "inputs" | "input")
    version_path: str | None = None  # a JSON document that names the build
    metrics_path: str | None = None  # Prometheus text
    metric_prefix: str | None = None  # family prefix that identifies the engine on its metrics page
    # role -> names, first present wins (newer name first, then the names older releases used)
    metrics: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    histograms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # POST path that empties the prefix cache (`--reset-cache`), and what it needs when it is not served
    cache_reset: str | None = None
    cache_reset_hint: str | None = None


_ENGINES = (
    EngineProfile(
        name="vllm",
        accepts_ignore_eos=True,
        accepts_min_tokens=True,
        rejects_unknown_fields=False,
        sends_done=True,
        stream_usage="include_usage",
        tokenize=("/tokenize", "prompt"),
        version_path="/version",
        metrics_path="/metrics",
        metric_prefix="vllm:",
        cache_reset="/reset_prefix_cache",  # 200, empty body; 409 while requests hold blocks (newer builds)
        cache_reset_hint="vLLM serves it only when started with VLLM_SERVER_DEV_MODE=1",
        metrics={
            "running": ("vllm:num_requests_running",),
            "waiting": ("vllm:num_requests_waiting",),
            "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # renamed in 0.9
            "prompt_tokens": ("vllm:prompt_tokens",),
            "generation_tokens": ("vllm:generation_tokens",),
            "prefix_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
            "prefix_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
            "preemptions": ("vllm:num_preemptions",),
        },
        histograms={
            "ttft": ("vllm:time_to_first_token_seconds",),
            "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
            "e2e": ("vllm:e2e_request_latency_seconds",),
            "queue": ("vllm:request_queue_time_seconds",),
            "prefill": ("vllm:request_prefill_time_seconds",),
            "decode": ("vllm:request_decode_time_seconds",),
            "inference": ("vllm:request_inference_time_seconds",),
        },
    ),
    EngineProfile(
        name="sglang",
        accepts_ignore_eos=True,
        accepts_min_tokens=True,
        rejects_unknown_fields=False,
        sends_done=True,
        stream_usage="include_usage",
        tokenize=("/v1/tokenize", "prompt"),
        version_path="/version",
        metrics_path="/metrics",
        metric_prefix="sglang:",
        cache_reset="/flush_cache",  # 200 "Cache flushed. ..." (text); 400 while requests run or wait
        metrics={
            "running": ("sglang:num_running_reqs",),
            "waiting": ("sglang:num_queue_reqs",),
            "kv_usage": ("sglang:token_usage",),
            "prompt_tokens": ("sglang:prompt_tokens",),
            "generation_tokens": ("sglang:generation_tokens",),
            "prefix_queries": ("sglang:prompt_tokens",),  # the hit rate is cached / prompt tokens
            "prefix_hits": ("sglang:cached_tokens",),
            "preemptions": ("sglang:num_retracted_reqs",),
        },
        histograms={
            "ttft": ("sglang:time_to_first_token_seconds",),
            "itl": ("sglang:inter_token_latency_seconds",),
            "e2e": ("sglang:e2e_request_latency_seconds",),
            "queue": ("sglang:queue_time_seconds",),
        },
    ),
    EngineProfile(
        name="trtllm",
        accepts_ignore_eos=True,
        accepts_min_tokens=True,
        rejects_unknown_fields=False,
        sends_done=True,
        stream_usage="include_usage",
        tokenize=None,
        version_path="/version",
        metrics_path="/prometheus/metrics",
        metric_prefix="trtllm_",
        metrics={
            "running": ("trtllm_num_requests_running",),
            "waiting": ("trtllm_num_requests_waiting",),
            "kv_usage": ("trtllm_kv_cache_utilization",),
            "prompt_tokens": ("trtllm_prompt_tokens",),
            "generation_tokens": ("trtllm_generation_tokens",),
        },
        histograms={
            "ttft": ("trtllm_time_to_first_token_seconds",),
            "itl": ("trtllm_time_per_output_token_seconds",),
            "e2e": ("trtllm_e2e_request_latency_seconds",),
            "queue": ("trtllm_request_queue_time_seconds",),
        },
    ),
    EngineProfile(
        name="tgi",
        accepts_ignore_eos=False,
        accepts_min_tokens=False,
        rejects_unknown_fields=False,
        sends_done=True,
        stream_usage="include_usage",
        tokenize=("/tokenize", "inputs"),
        version_path="/info",
        metrics_path="/metrics",
        metric_prefix="tgi_",
        metrics={
            "running": ("tgi_batch_current_size",),
            "waiting": ("tgi_queue_size",),
        },
    ),
    EngineProfile(
        name="llamacpp",
        accepts_ignore_eos=True,
        accepts_min_tokens=False,
        rejects_unknown_fields=False,
        sends_done=True,
        stream_usage="include_usage",
        tokenize=("/tokenize", "content"),
        version_path="/props",
        metrics_path="/metrics",
        metric_prefix="llamacpp:",
        metrics={
            "running": ("llamacpp:requests_processing",),
            "waiting": ("llamacpp:requests_deferred",),
            "prompt_tokens": ("llamacpp:prompt_tokens",),
            "generation_tokens": ("llamacpp:tokens_predicted",),
            "prefix_queries": ("llamacpp:prompt_tokens",),
            "prefix_hits": ("llamacpp:prompt_tokens_cached",),  # newer builds only
        },
    ),
    EngineProfile(
        name="transformers",
        accepts_ignore_eos=False,
        accepts_min_tokens=False,
        rejects_unknown_fields=True,
        sends_done=False,
        stream_usage="always",
    ),
    EngineProfile(
        name="ollama",
        accepts_ignore_eos=False,
        accepts_min_tokens=False,
        rejects_unknown_fields=False,
        sends_done=True,
        stream_usage="include_usage",
        version_path="/api/version",
    ),
    EngineProfile(
        name="llama-cpp-python",
        accepts_ignore_eos=False,
        accepts_min_tokens=False,
        rejects_unknown_fields=False,
        sends_done=True,
        stream_usage="never",
        tokenize=("/extras/tokenize", "input"),
    ),
)

KNOWN_ENGINES: Mapping[str, EngineProfile] = MappingProxyType({e.name: e for e in _ENGINES})


def _unique(values: list[str | None]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v for v in values if v is not None))


def _by_role(roles: tuple[str, ...], table: str) -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType(
        {role: _unique([n for e in _ENGINES for n in getattr(e, table).get(role, ())]) for role in roles}
    )


# What the probe asks, in order (and the scrape, when no probe said where the page is).
METRICS_PATHS = _unique([e.metrics_path for e in _ENGINES])
VERSION_PATHS = _unique([e.version_path for e in _ENGINES])
# --reset-cache on an engine the probe did not recognise: each engine's reset path, in table order.
CACHE_RESET_PATHS = _unique([e.cache_reset for e in _ENGINES])
METRIC_PREFIXES: tuple[tuple[str, str], ...] = tuple((e.metric_prefix, e.name) for e in _ENGINES if e.metric_prefix)
# role -> every engine's names for it, in table order: the scrape tries them in this order.
METRICS = _by_role(ROLES, "metrics")
HISTOGRAMS = _by_role(HISTOGRAM_ROLES, "histograms")
ENGINE_HISTOGRAMS = _by_role(ENGINE_VIEW_ROLES, "histograms")

# Speculative decoding's counters (summary `engine_view.speculative`, results.engineview): role -> names
# (without `_total`), tried in order. vLLM V1 (vllm/v1/spec_decode/metrics.py, `SpecDecodingProm`):
# drafts, draft tokens, accepted tokens, and accepted tokens per draft position (label `position`,
# 0 .. num_speculative_tokens - 1). SGLang exposes its acceptance as gauges of the last interval
# (`sglang:spec_accept_length`), which give no window: not read.
SPEC_DECODE: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "drafts": ("vllm:spec_decode_num_drafts",),
        "draft_tokens": ("vllm:spec_decode_num_draft_tokens",),
        "accepted_tokens": ("vllm:spec_decode_num_accepted_tokens",),
        "accepted_per_position": ("vllm:spec_decode_num_accepted_tokens_per_pos",),
    }
)
