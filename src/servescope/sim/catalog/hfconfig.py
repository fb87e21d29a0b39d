"""A Hugging Face `config.json` (already loaded as a dict) as a `ModelSpec`. Pure; reading the file is
`deploy.loader.load_hf_config`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from servescope.errors import ConfigError
from servescope.sim.catalog.models import ModelSpec

__all__ = ["parse_hf_config"]


_SUPPORTED_TYPES = ("llama", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3", "deepseek_v2", "mistral")


def parse_hf_config(cfg: Mapping[str, Any], *, name: str = "custom") -> ModelSpec:
    """Pure: map Hugging Face config fields (llama, qwen2, qwen3, qwen3_moe, deepseek_v2/v3) to a ModelSpec."""
    if "text_config" in cfg and "hidden_size" not in cfg:
        cfg = cfg["text_config"]
    mtype = str(cfg.get("model_type", ""))
    if mtype not in _SUPPORTED_TYPES:
        raise ConfigError(f"config.json model_type {mtype!r} not supported; supported: {', '.join(_SUPPORTED_TYPES)}")
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        layers = int(cfg["num_hidden_layers"])
        vocab = int(cfg["vocab_size"])
        inter = int(cfg.get("intermediate_size") or 0)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"config.json lacks a required field: {exc}") from exc
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    kw: dict[str, Any] = {"tie_embeddings": bool(cfg.get("tie_word_embeddings", False))}
    if cfg.get("max_position_embeddings"):
        kw["context_len"] = int(cfg["max_position_embeddings"])
    quant = _checkpoint_quant(cfg.get("quantization_config"))
    if quant:
        kw["default_quant"] = quant
    if mtype.startswith("deepseek"):
        nope, rope = int(cfg.get("qk_nope_head_dim", 128)), int(cfg.get("qk_rope_head_dim", 64))
        kw.update(
            attention="mla",
            kv_lora_rank=int(cfg["kv_lora_rank"]),
            qk_rope_head_dim=rope,
            q_lora_rank=int(cfg.get("q_lora_rank") or 0),
            qk_nope_head_dim=nope,
            v_head_dim=int(cfg.get("v_head_dim", 128)),
            mtp_layers=int(cfg.get("num_nextn_predict_layers", 0)),
        )
        head_dim = nope + rope
        kv_heads = heads
    if cfg.get("n_routed_experts") or cfg.get("num_experts"):
        kw.update(
            n_routed_experts=int(cfg.get("n_routed_experts") or cfg.get("num_experts") or 0),
            experts_per_token=int(cfg.get("num_experts_per_tok", 0)),
            n_shared_experts=int(cfg.get("n_shared_experts") or 0),
            moe_intermediate=int(cfg.get("moe_intermediate_size", 0)),
            first_dense_layers=int(cfg.get("first_k_dense_replace", 0)),
        )
        if not inter:
            inter = kw["moe_intermediate"]
    if mtype == "qwen2":
        kw["qkv_bias"] = True
    # Per-layer attention kinds (gpt-oss, newer Qwen/Gemma configs): only layers named sliding_attention
    # slide; a config-wide sliding_window with use_sliding_window false (Qwen2/3) slides nothing.
    types = cfg.get("layer_types")
    if isinstance(types, list) and cfg.get("sliding_window"):
        sliding = sum(1 for t in types if t == "sliding_attention")
        if 0 < sliding < layers:
            kw.update(sliding_window=int(cfg["sliding_window"]), sliding_layers=sliding)
    return ModelSpec(
        name=name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        intermediate=inter,
        **kw,
    )


def _checkpoint_quant(qc: Any) -> str:
    if not isinstance(qc, Mapping):
        return ""
    method = str(qc.get("quant_method", "")).lower()
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8"
    if method in ("awq", "awq_marlin"):
        return "awq"
    if method in ("gptq", "gptq_marlin"):
        return "int4"
    if method == "compressed-tensors":
        text = json.dumps(qc).lower()
        return "fp8" if '"num_bits": 8' in text and "float" in text else ("int4" if '"num_bits": 4' in text else "")
    return ""
