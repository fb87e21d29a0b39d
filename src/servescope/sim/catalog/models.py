"""Model catalogue: `ModelSpec` (a transformer decoder's architecture and parameter counts) and the
models servescope knows by name. Pure: the catalogue is code, not files. A model given by its Hugging
Face `config.json` is mapped by `catalog.hfconfig.parse_hf_config`; reading the file is
`deploy.loader.load_hf_config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from servescope.errors import ConfigError

__all__ = ["ModelSpec", "MODELS", "get_model", "params_b"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """One transformer decoder. Counts are whole-model (not per GPU); params are in units, not billions."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int  # dense FFN size (also the size of DeepSeek's first dense layers)
    attention: str = "gqa"  # "gqa" | "mla"
    # MLA (DeepSeek-V2/V3): KV cache holds the compressed latent (kv_lora_rank) + the RoPE key part.
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    q_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # MoE layout
    n_routed_experts: int = 0
    experts_per_token: int = 0
    n_shared_experts: int = 0
    moe_intermediate: int = 0
    first_dense_layers: int = 0  # DeepSeek-V3: 3 dense layers before the MoE layers
    mtp_layers: int = 0  # DeepSeek-V3: 1 multi-token-prediction module
    mtp_params: float = 0.0  # computed from mtp_layers when 0
    tie_embeddings: bool = False
    qkv_bias: bool = False
    hf_id: str = ""
    default_quant: str = "bf16"  # the precision of the published checkpoint
    fp8_scheme: str = "all"  # "all": every linear FP8 | "ffn": FFN FP8, attention BF16 (Meta 405B-FP8)
    context_len: int = 131_072  # max_position_embeddings: the engines' default max_model_len
    # Sliding-window attention (gpt-oss: every other layer attends to the last 128 tokens only). The
    # engines' KV pools treat those layers apart (sim/memory/kvsize.py, kv_pool_bytes_per_token_per_gpu).
    sliding_window: int = 0
    sliding_layers: int = 0
    params_total: float = 0.0  # computed when 0 (excludes MTP)
    params_active: float = 0.0  # per token, computed when 0

    def __post_init__(self) -> None:
        if self.attention not in ("gqa", "mla"):
            raise ConfigError(f"model {self.name}: attention must be gqa or mla, not {self.attention!r}")
        if self.layers <= 0 or self.hidden <= 0 or self.heads <= 0 or self.kv_heads <= 0:
            raise ConfigError(f"model {self.name}: layers, hidden, heads and kv_heads must be positive")
        if self.attention == "mla" and (self.kv_lora_rank <= 0 or self.qk_rope_head_dim <= 0):
            raise ConfigError(f"model {self.name}: MLA needs kv_lora_rank and qk_rope_head_dim")
        if self.n_routed_experts and (self.experts_per_token <= 0 or self.moe_intermediate <= 0):
            raise ConfigError(f"model {self.name}: MoE needs experts_per_token and moe_intermediate")
        if self.sliding_layers and (self.sliding_window <= 0 or self.sliding_layers >= self.layers):
            raise ConfigError(
                f"model {self.name}: sliding_layers needs a positive sliding_window and at least "
                "one full-attention layer"
            )
        if self.mtp_params == 0.0 and self.mtp_layers:
            object.__setattr__(self, "mtp_params", float(self._mtp_params()))
        if self.params_total == 0.0:
            object.__setattr__(self, "params_total", float(sum(self.weight_params_breakdown().values())))
        if self.params_active == 0.0:
            object.__setattr__(self, "params_active", float(self.active_params_per_token()))

    # -- per-layer building blocks (whole model, unsharded) ---------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense_layers if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    def attention_params_per_layer(self) -> tuple[int, int]:
        """(params TP can shard, params every TP rank replicates) of one attention block.

        MLA: q_a_proj and kv_a_proj_with_mqa are replicated (vLLM `ReplicatedLinear`), q_b/kv_b/o
        are split by heads. GQA: q/o split by heads; k/v split by kv heads (replication beyond
        kv_heads is accounted for in sim/memory/weights.py). Norms count as replicated.
        """
        h = self.hidden
        if self.attention == "mla":
            qk_head = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q_rep = h * self.q_lora_rank + self.q_lora_rank
                q_shard = self.q_lora_rank * self.heads * qk_head
            else:
                q_rep, q_shard = 0, h * self.heads * qk_head
            kv_rep = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv_shard = self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
            o_shard = self.heads * self.v_head_dim * h
            return q_shard + kv_shard + o_shard, q_rep + kv_rep + 2 * h
        q = h * self.heads * self.head_dim
        kv = 2 * h * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * h
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        return q + kv + o + bias, 2 * h

    def expert_params(self) -> int:
        """One routed expert (gate, up, down)."""
        return 3 * self.hidden * self.moe_intermediate

    def weight_params_breakdown(self) -> dict[str, int]:
        """Whole-model parameter counts by part (MTP excluded; see `mtp_params`)."""
        attn_shard, attn_rep = self.attention_params_per_layer()
        emb = self.vocab * self.hidden * (1 if self.tie_embeddings else 2)
        out = {
            "attention": (attn_shard + attn_rep) * self.layers,
            "dense_ffn": 3 * self.hidden * self.intermediate * self.dense_layers,
            "shared_experts": self.n_shared_experts * self.expert_params() * self.moe_layers,
            "routed_experts": self.n_routed_experts * self.expert_params() * self.moe_layers,
            "router": self.hidden * self.n_routed_experts * self.moe_layers,
            "embedding": emb + self.hidden,  # embed + lm_head (+ final norm)
        }
        return out

    def active_params_per_token(self) -> int:
        """Parameters touched per token: everything except the routed experts not chosen."""
        b = self.weight_params_breakdown()
        return sum(b.values()) - b["routed_experts"] + self.routed_active_params()

    def routed_active_params(self) -> int:
        """Routed-expert parameters one token touches: its top-k experts in every MoE layer."""
        return self.experts_per_token * self.expert_params() * self.moe_layers

    def _mtp_params(self) -> int:
        """DeepSeek-V3 MTP module: one MoE decoder layer + eh_proj (2h x h) + its own embedding and head
        copies in the checkpoint (model.layers.61.*). About 14B for V3, matching the model card."""
        attn_shard, attn_rep = self.attention_params_per_layer()
        layer = attn_shard + attn_rep + (self.n_routed_experts + self.n_shared_experts) * self.expert_params()
        layer += self.hidden * self.n_routed_experts
        per = layer + 2 * self.hidden * self.hidden + 2 * self.vocab * self.hidden + 3 * self.hidden
        return per * self.mtp_layers


# --- Models (from each checkpoint's config.json on Hugging Face) ----------------------------
def _deepseek_v3(name: str, hf_id: str, default_quant: str) -> ModelSpec:
    # deepseek-ai/DeepSeek-V3 config.json: 61 layers, hidden 7168, 128 heads, q_lora_rank 1536,
    # kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128, 256 routed experts, 8 per token,
    # 1 shared, moe_intermediate 2048, first_k_dense_replace 3, num_nextn_predict_layers 1.
    return ModelSpec(
        name=name,
        layers=61,
        hidden=7168,
        heads=128,
        kv_heads=128,
        head_dim=192,
        vocab=129_280,
        intermediate=18_432,
        attention="mla",
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        q_lora_rank=1536,
        qk_nope_head_dim=128,
        v_head_dim=128,
        n_routed_experts=256,
        experts_per_token=8,
        n_shared_experts=1,
        moe_intermediate=2048,
        first_dense_layers=3,
        mtp_layers=1,
        hf_id=hf_id,
        default_quant=default_quant,
        context_len=163_840,
    )


def _llama(
    name: str, hf_id: str, layers: int, hidden: int, heads: int, inter: int, vocab: int = 128_256, **kw: Any
) -> ModelSpec:
    return ModelSpec(
        name=name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kw.pop("kv_heads", 8),
        head_dim=kw.pop("head_dim", 128),
        vocab=vocab,
        intermediate=inter,
        hf_id=hf_id,
        **kw,
    )


_MODEL_LIST = (
    _deepseek_v3("DeepSeek-V3", "deepseek-ai/DeepSeek-V3", "fp8"),
    _deepseek_v3("DeepSeek-R1", "deepseek-ai/DeepSeek-R1", "fp8"),
    _deepseek_v3("DeepSeek-V3-AWQ", "cognitivecomputations/DeepSeek-V3-AWQ", "awq"),
    _deepseek_v3("DeepSeek-R1-AWQ", "cognitivecomputations/DeepSeek-R1-AWQ", "awq"),
    _llama("Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct", 32, 4096, 32, 14_336),
    _llama("Llama-3.1-70B", "meta-llama/Llama-3.1-70B-Instruct", 80, 8192, 64, 28_672),
    _llama("Llama-3.1-405B", "meta-llama/Llama-3.1-405B-Instruct", 126, 16_384, 128, 53_248, fp8_scheme="ffn"),
    # Meta's FP8 checkpoint quantizes the feed-forward weights only; attention stays BF16.
    _llama(
        "Llama-3.1-405B-FP8",
        "meta-llama/Llama-3.1-405B-Instruct-FP8",
        126,
        16_384,
        128,
        53_248,
        fp8_scheme="ffn",
        default_quant="fp8",
    ),
    # meta-llama/Llama-3.3-70B-Instruct config.json: the Llama-3.1-70B architecture (80 layers, hidden 8192,
    # 64 heads, 8 KV heads, FFN 28672, vocab 128256), new weights.
    _llama("Llama-3.3-70B", "meta-llama/Llama-3.3-70B-Instruct", 80, 8192, 64, 28_672),
    _llama("Llama-2-70B", "meta-llama/Llama-2-70b-chat-hf", 80, 8192, 64, 28_672, vocab=32_000, context_len=4096),
    # mistralai/Mixtral-8x7B-Instruct-v0.1 config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads,
    # 8 experts (FFN 14336 each), 2 per token, vocab 32000, no shared experts, every layer MoE.
    _llama(
        "Mixtral-8x7B",
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        32,
        4096,
        32,
        14_336,
        vocab=32_000,
        n_routed_experts=8,
        experts_per_token=2,
        moe_intermediate=14_336,
        context_len=32_768,
    ),
    # openai/gpt-oss-120b config.json: 36 layers, hidden 2880, 64 heads of 64, 8 KV heads, attention
    # biases, 128 experts (FFN 2880) with 4 per token, vocab 201088; layer_types alternates
    # sliding_attention (window 128) and full_attention: 18 of 36 layers slide. Published with MXFP4
    # experts (see sim/memory/weights.py for how FP4 is priced).
    _llama(
        "gpt-oss-120b",
        "openai/gpt-oss-120b",
        36,
        2880,
        64,
        2880,
        vocab=201_088,
        head_dim=64,
        qkv_bias=True,
        n_routed_experts=128,
        experts_per_token=4,
        moe_intermediate=2880,
        default_quant="mxfp4",
        sliding_window=128,
        sliding_layers=18,
    ),
    _llama(
        "Qwen2.5-72B",
        "Qwen/Qwen2.5-72B-Instruct",
        80,
        8192,
        64,
        29_568,
        vocab=152_064,
        qkv_bias=True,
        context_len=32_768,
    ),
    # openai/gpt-oss-20b config.json: 24 layers, hidden 2880, 64 heads of 64, 8 KV heads, 32 experts (FFN
    # 2880) with 4 per token, vocab 201088; 12 of 24 layers slide (window 128). MXFP4 experts.
    _llama(
        "gpt-oss-20b",
        "openai/gpt-oss-20b",
        24,
        2880,
        64,
        2880,
        vocab=201_088,
        head_dim=64,
        qkv_bias=True,
        n_routed_experts=32,
        experts_per_token=4,
        moe_intermediate=2880,
        default_quant="mxfp4",
        sliding_window=128,
        sliding_layers=12,
    ),
    _llama("Qwen3-8B", "Qwen/Qwen3-8B", 36, 4096, 32, 12_288, vocab=151_936, context_len=40_960),
    # Qwen/Qwen3-32B config.json: 64 layers, hidden 5120, 64 heads, 8 KV heads (head_dim 128), FFN 25600.
    _llama("Qwen3-32B", "Qwen/Qwen3-32B", 64, 5120, 64, 25_600, vocab=151_936, context_len=40_960),
    # Qwen/Qwen3-30B-A3B config.json: 48 layers, hidden 2048, 32 heads, 4 KV heads (head_dim 128), 128
    # experts (FFN 768) with 8 per token, every layer MoE.
    _llama(
        "Qwen3-30B-A3B",
        "Qwen/Qwen3-30B-A3B",
        48,
        2048,
        32,
        6_144,
        vocab=151_936,
        kv_heads=4,
        n_routed_experts=128,
        experts_per_token=8,
        moe_intermediate=768,
        context_len=40_960,
    ),
    # Qwen/Qwen3-235B-A22B config.json: 94 layers, 64 heads, 4 kv heads, 128 experts, 8 per token.
    _llama(
        "Qwen3-235B-A22B",
        "Qwen/Qwen3-235B-A22B",
        94,
        4096,
        64,
        12_288,
        vocab=151_936,
        kv_heads=4,
        n_routed_experts=128,
        experts_per_token=8,
        moe_intermediate=1536,
        context_len=40_960,
    ),
)

MODELS: Mapping[str, ModelSpec] = MappingProxyType({m.name: m for m in _MODEL_LIST})


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(" ", "")


def get_model(name: str) -> ModelSpec:
    """A catalogue name (case-insensitive; HF ids too). Paths to a config.json: `deploy.loader.resolve_model`."""
    key = _norm(name)
    for m in _MODEL_LIST:
        if key in (_norm(m.name), _norm(m.hf_id), _norm(m.hf_id.split("/")[-1])):
            return m
    raise ConfigError(
        f"unknown model {name!r}; known: {', '.join(MODELS)} (or give a path to a Hugging Face config.json)"
    )


def params_b(x: float) -> str:
    """Parameter count as '671.0B'."""
    return f"{x / 1e9:.1f}B" if x >= 1e9 else f"{x / 1e6:.0f}M"
