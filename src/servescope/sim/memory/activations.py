"""The engine reserve: the activation peak of the engine's memory-profiling forward, its token count,
and what the engine keeps out of the KV pool besides (non-torch memory, CUDA graphs). Pure."""

from __future__ import annotations

from servescope.sim.catalog.models import ModelSpec
from servescope.sim.memory.accounting import engine_profile
from servescope.sim.placement import Layout

__all__ = ["activation_bytes_per_token", "activation_bytes", "profile_tokens", "reserve_bytes_per_gpu"]

# Activation peak of a profile forward over T batched tokens, bytes (docs/plan.md, "Engine reserve"):
#   dense: a handful of hidden-sized BF16 buffers live at once inside one layer (hidden states, residual,
#     attention projections) plus the gate/up output split by TP, all proportional to T;
#   MoE:   fused-MoE per-(token, expert) buffers, allocated per chunk of at most 32,768 tokens (vLLM's
#     VLLM_FUSED_MOE_CHUNK_SIZE default, vllm/envs.py), so they stop growing past one chunk;
#   MoE pool: a fixed pool the size of the MoE buffers of an 8,192-token batch (workspaces, quantized
#     copies, allocator slack), fitted with the dense and MoE terms to two vLLM DeepSeek logs: 8xH100
#     AWQ 151,072 tokens at T = 8,000 (seed 001) and 8xH200 FP8 ~512k tokens at T = 8,192. The pool
#     does not grow with T: vLLM 0.7 ran DeepSeek-R1 on 8xH200 at its default max_model_len 163,840,
#     whose profile run (chunked prefill off for MLA: T = max_model_len) could not have fit otherwise.
# Treat the result as +-10%.
_ACT_HIDDEN_BUFFERS = 4
_ACT_FFN_BUFFERS = 3
_ACT_MOE_BUFFERS = 1.5
_ACT_MOE_POOL_BUFFERS = 13.5
_ACT_MOE_POOL_TOKENS = 8192
_MOE_CHUNK_TOKENS = 32768


def activation_bytes_per_token(model: ModelSpec, layout: Layout) -> float:
    """Activation bytes per batched token of a profile forward (the part that grows with every token)."""
    dense = _ACT_HIDDEN_BUFFERS * model.hidden + _ACT_FFN_BUFFERS * model.intermediate / layout.tp
    return 2.0 * dense


def activation_bytes(model: ModelSpec, layout: Layout, tokens: int) -> int:
    """Activation peak of a profile forward over `tokens` batched tokens (see the constants above)."""
    total = activation_bytes_per_token(model, layout) * tokens
    if model.is_moe:
        per_tok_moe = 2.0 * model.experts_per_token * model.hidden
        total += per_tok_moe * (
            _ACT_MOE_BUFFERS * min(tokens, _MOE_CHUNK_TOKENS) + _ACT_MOE_POOL_BUFFERS * _ACT_MOE_POOL_TOKENS
        )
    return int(total)


def profile_tokens(
    model: ModelSpec, *, max_model_len: int, engine: str = "vllm", max_num_batched_tokens: int | None = None
) -> int:
    """Tokens of the engine's memory-profiling forward: its batch budget (`max_num_batched_tokens`).
    With chunked prefill that budget is small and independent of max_model_len; vLLM V0 without
    chunked prefill raises it to max(max_model_len, 2048) (vllm/config.py SchedulerConfig)."""
    prof = engine_profile(engine)
    return max_num_batched_tokens or prof.default_max_num_batched_tokens or max(max_model_len, 2048)


def reserve_bytes_per_gpu(
    model: ModelSpec,
    layout: Layout,
    *,
    max_model_len: int,
    engine: str = "vllm",
    max_num_batched_tokens: int | None = None,
) -> int:
    """Memory the engine keeps out of the KV pool: activation peak + non-torch memory + graphs."""
    prof = engine_profile(engine)
    if prof.name == "sglang":
        return 0
    tokens = profile_tokens(
        model, max_model_len=max_model_len, engine=engine, max_num_batched_tokens=max_num_batched_tokens
    )
    non_torch = prof.non_torch_bytes_multi if layout.tp * layout.pp > 1 else prof.non_torch_bytes_tp1
    return int(activation_bytes(model, layout, tokens) + non_torch + prof.cuda_graph_bytes)
