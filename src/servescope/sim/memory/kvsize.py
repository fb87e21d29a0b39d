"""KV cache bytes per token: whole model, per GPU of a layout, as each engine sizes its pool (sliding-
window layers), and the pool tokens a request holds besides its context. Pure."""

from __future__ import annotations

import math

from servescope.sim.catalog.models import ModelSpec
from servescope.sim.memory.accounting import engine_profile
from servescope.sim.placement import Layout

__all__ = [
    "kv_bytes_per_token",
    "kv_bytes_per_token_per_gpu",
    "kv_pool_bytes_per_token_per_gpu",
    "kv_seq_overhead_tokens",
]


def kv_bytes_per_token(model: ModelSpec, kv_dtype_bytes: float) -> int:
    """Whole model, one token. MLA: layers x (kv_lora_rank + qk_rope_head_dim) x bytes (one latent,
    shared by all heads). GQA: 2 (K and V) x layers x kv_heads x head_dim x bytes."""
    if model.attention == "mla":
        return int(model.layers * (model.kv_lora_rank + model.qk_rope_head_dim) * kv_dtype_bytes)
    return int(2 * model.layers * model.kv_heads * model.head_dim * kv_dtype_bytes)


def kv_pool_bytes_per_token_per_gpu(model: ModelSpec, layout: Layout, *, engine: str = "vllm") -> int:
    """KV pool bytes one token of context costs on one GPU, as the engine sizes its pool. Equal to
    `kv_bytes_per_token_per_gpu` except for sliding-window layers: vLLM V1 keeps only each request's
    window of them (`kv_seq_overhead_tokens`), so a token costs the full-attention layers only; SGLang
    gives them a pool of 0.8x the full layers' tokens; other engines count them at full length."""
    per_tok = kv_bytes_per_token_per_gpu(model, layout)
    if not model.sliding_layers:
        return per_tok
    ratio = engine_profile(engine).swa_pool_ratio
    full = model.layers - model.sliding_layers
    share = (full + (ratio or 0.0) * model.sliding_layers) / model.layers
    return max(1, int(per_tok * share))


def kv_seq_overhead_tokens(model: ModelSpec, *, engine: str = "vllm") -> int:
    """Pool tokens each running request holds besides its context: under vLLM V1's hybrid KV cache
    manager a request's sliding-window layers keep the blocks covering its last `sliding_window`
    tokens (one more while the window straddles a block boundary), in pages the size of the full
    layers' pages (vllm/v1/core/kv_cache_utils.py groups layers into equal-sized pages). In units of
    full-layer tokens: sliding/full layers x (window + one block). 0 for other engines and models."""
    prof = engine_profile(engine)
    if not model.sliding_layers or prof.swa_pool_ratio is not None:
        return 0
    full = model.layers - model.sliding_layers
    block = prof.block_tokens
    window_blocks = -(-model.sliding_window // block) + 1
    return math.ceil(model.sliding_layers / full * window_blocks) * block


def kv_bytes_per_token_per_gpu(model: ModelSpec, layout: Layout) -> int:
    """One token's KV on one GPU. PP splits layers (worst stage: ceil). MLA's latent is replicated on
    every TP rank (not divided). GQA shards by KV head up to kv_heads; past that heads are replicated."""
    layers = math.ceil(model.layers / layout.pp)
    b = layout.kv_dtype_bytes
    if model.attention == "mla":
        return int(layers * (model.kv_lora_rank + model.qk_rope_head_dim) * b)
    heads_per_gpu = model.kv_heads / min(layout.tp, model.kv_heads)
    return int(2 * layers * heads_per_gpu * model.head_dim * b)
