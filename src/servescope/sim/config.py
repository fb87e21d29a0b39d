"""`EngineConfig`: the serving engine's scheduler and KV-cache settings plus its step cost model.

Usually built by `sim.profile` from a deployment profile; `sim.engine.Engine` runs on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servescope.sim.steptime import StepCost

__all__ = ["EngineConfig"]


@dataclass(slots=True)
class EngineConfig:
    """Scheduler and cache settings plus the step cost model."""

    cost: StepCost
    kv_blocks: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    # prompt tokens one step may carry (0: whatever the batch budget leaves): SGLang's per-rank
    # chunked_prefill_size under DP attention, the global one divided by the ranks
    # (`sim.defaults.prefill_cap`); its decode batch is not bound by it
    max_prefill_tokens: int = 0
    max_model_len: int = 8192
    enable_prefix_caching: bool = True
    chunked_prefill: bool = True
    # whether one step may carry prompt tokens and decodes together (`sim.defaults.mixes_steps`): vLLM V0
    # without chunked prefill and TGI run a prompt batch as a step of its own, the decodes waiting
    mixed_steps: bool = True
    # blocks every running sequence holds besides its context's (vLLM's sliding-window pages:
    # sim.memory.kvsize.kv_seq_overhead_tokens / block_size)
    seq_overhead_blocks: int = 0
    # the deployment's first-token latency (sim.knobs first_token_s): the path around the engine that no
    # step holds. The engine does not use it; plan's what-if and the validation add it to TTFT, and the
    # emulator holds each stream's first tokens this long (throughput and a response's end do not move)
    first_token_s: float = 0.0
    # the API server's serial work per request before the engine sees it (parse, chat template,
    # tokenize): requests share it (`sim.frontend.FrontEnd`, processor sharing), each needing this long
    frontend_s: float = 0.0
    # share of a request's output tokens whose KV the scheduler sets aside when it admits the request
    # (`sim.defaults.admission_reserve`): 0 admits on the prompt alone and preempts under pressure (vLLM);
    # TensorRT-LLM's GUARANTEED_NO_EVICT reserves prompt + max_tokens (1.0, never preempts); SGLang
    # new_token_ratio x max_new_tokens (0.7 at start)
    reserve_output: float = 0.0

    def __post_init__(self) -> None:
        if self.kv_blocks < 1 or self.block_size < 1 or self.max_num_seqs < 1:
            raise ValueError("kv_blocks, block_size and max_num_seqs must be >= 1")
        if self.seq_overhead_blocks < 0:
            raise ValueError("seq_overhead_blocks must be >= 0")
        if not self.first_token_s >= 0.0:
            raise ValueError("first_token_s must be >= 0")
        if not 0.0 <= self.reserve_output <= 1.0:
            raise ValueError("reserve_output must be within [0, 1]")
        if self.max_prefill_tokens < 0:
            raise ValueError("max_prefill_tokens must be >= 0 (0: the batch budget)")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs")
        if not self.chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError("without chunked prefill, max_num_batched_tokens must be >= max_model_len")

    @property
    def kv_tokens(self) -> int:
        return self.kv_blocks * self.block_size

    def reserve_blocks(self, context_tokens: int, output_left: int) -> int:
        """Blocks the scheduler sets aside when it admits a request with this context (prompt, plus what
        it had generated before a preemption) and `output_left` tokens still to make: its context and
        `reserve_output` of those, plus the per-sequence overhead (0 without a reserve). At most the
        whole cache: a request that asks for more than the cache holds runs alone."""
        if not self.reserve_output:
            return 0
        tokens = context_tokens + math.ceil(self.reserve_output * output_left)
        return min(self.kv_blocks, -(-tokens // self.block_size) + self.seq_overhead_blocks)
