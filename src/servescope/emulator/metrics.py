"""The emulator's Prometheus metrics: vLLM's histograms and counters, fed per token and per finished
request, rendered with the engine's gauges as `GET /metrics` text (`wire.render_metrics`)."""

from __future__ import annotations

from servescope.emulator.stream import Stream
from servescope.emulator.wire import (
    E2E_BUCKETS_S,
    ITERATION_TOKENS_BUCKETS,
    ITL_BUCKETS_S,
    TTFT_BUCKETS_S,
    Histogram,
    render_metrics,
)
from servescope.sim.config import EngineConfig
from servescope.sim.engine import EngineStats

__all__ = ["Metrics"]


class Metrics:
    """vLLM-named histograms and the finished-request counter (by finish reason)."""

    def __init__(self) -> None:
        self.ttft = Histogram(TTFT_BUCKETS_S)
        self.itl = Histogram(ITL_BUCKETS_S)
        self.tpot = Histogram(ITL_BUCKETS_S)
        self.e2e = Histogram(E2E_BUCKETS_S)
        self.queue = Histogram(E2E_BUCKETS_S)
        self.prefill = Histogram(E2E_BUCKETS_S)
        self.decode = Histogram(E2E_BUCKETS_S)
        self.inference = Histogram(E2E_BUCKETS_S)  # prefill + decode: the time in vLLM's RUNNING phase
        self.iteration_tokens = Histogram(ITERATION_TOKENS_BUCKETS)
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}

    def observe_finished(self, st: Stream, t_ns: int) -> None:
        """A request's last token left at `t_ns`: count it, and its e2e, phase and per-token times."""
        self.success[st.finish] += 1
        self.e2e.observe((t_ns - st.arrival_ns) * 1e-9)
        sim = st.sim
        if sim is not None and sim.first_scheduled_s >= 0:
            sched_ns = int(sim.first_scheduled_s * 1e9)
            self.queue.observe(max(0, sched_ns - st.arrival_ns) * 1e-9)
            self.prefill.observe(max(0, st.token_ns[0] - sched_ns) * 1e-9)
            self.decode.observe((t_ns - st.token_ns[0]) * 1e-9)
            self.inference.observe(max(0, t_ns - sched_ns) * 1e-9)
        if st.n_total > 1:
            self.tpot.observe((t_ns - st.token_ns[0]) * 1e-9 / (st.n_total - 1))

    def render(self, model: str, s: EngineStats, e: EngineConfig) -> bytes:
        """Prometheus text: cache config, the engine's gauges and counters, these histograms."""
        return render_metrics(
            model=model,
            info={
                "vllm:cache_config_info": (
                    "Information of the LLMEngine CacheConfig",
                    {
                        "block_size": str(e.block_size),
                        "num_gpu_blocks": str(e.kv_blocks),
                        "enable_prefix_caching": str(e.enable_prefix_caching),
                        "cache_dtype": "auto",
                    },
                )
            },
            gauges={
                "vllm:num_requests_running": ("Number of requests in model execution batches.", s.running),
                "vllm:num_requests_waiting": ("Number of requests waiting to be processed.", s.waiting),
                "vllm:kv_cache_usage_perc": ("KV-cache usage. 1 means 100 percent usage.", s.kv_usage),
            },
            counters={
                "vllm:num_preemptions": ("Cumulative number of preemptions.", s.preemptions),
                "vllm:prompt_tokens": ("Number of prefill tokens processed.", s.prompt_tokens),
                "vllm:generation_tokens": ("Number of generation tokens processed.", s.generation_tokens),
                "vllm:prefix_cache_queries": ("Prefix cache queries, in tokens.", s.prefix_queries),
                "vllm:prefix_cache_hits": ("Prefix cache hits, in tokens.", s.prefix_hits),
                "vllm:request_success": ("Count of successfully processed requests.", dict(self.success)),
            },
            histograms={
                "vllm:time_to_first_token_seconds": ("Histogram of time to first token in seconds.", self.ttft),
                "vllm:inter_token_latency_seconds": ("Histogram of inter-token latency in seconds.", self.itl),
                "vllm:request_time_per_output_token_seconds": (
                    "Histogram of time_per_output_token_seconds per request.",
                    self.tpot,
                ),
                "vllm:e2e_request_latency_seconds": ("Histogram of e2e request latency in seconds.", self.e2e),
                "vllm:request_queue_time_seconds": (
                    "Histogram of time spent in WAITING phase for request.",
                    self.queue,
                ),
                "vllm:request_prefill_time_seconds": (
                    "Histogram of time spent in PREFILL phase for request.",
                    self.prefill,
                ),
                "vllm:request_decode_time_seconds": (
                    "Histogram of time spent in DECODE phase for request.",
                    self.decode,
                ),
                "vllm:request_inference_time_seconds": (
                    "Histogram of time spent in RUNNING phase for request.",
                    self.inference,
                ),
                "vllm:iteration_tokens_total": (
                    "Histogram of number of tokens per engine_step.",
                    self.iteration_tokens,
                ),
            },
        )
