"""Catalogue facts: parameter counts against the model cards, GPU datasheets, HF config parsing."""

from __future__ import annotations

import json

import pytest

from servescope.deploy.loader import load_hf_config, resolve_model
from servescope.errors import ConfigError
from servescope.sim.catalog.gpus import GPUS, get_gpu
from servescope.sim.catalog.hfconfig import parse_hf_config
from servescope.sim.catalog.models import MODELS, get_model


@pytest.mark.parametrize(
    ("name", "total_b", "active_b"),
    [
        ("DeepSeek-V3", 671, 37),
        ("DeepSeek-R1", 671, 37),
        ("Llama-3.1-8B", 8.0, 8.0),
        ("Llama-3.1-70B", 70.6, 70.6),
        ("Llama-3.1-405B", 405.9, 405.9),
        ("Llama-2-70B", 69.0, 69.0),
        ("Qwen2.5-72B", 72.7, 72.7),
        ("Qwen3-8B", 8.2, 8.2),
        ("Qwen3-235B-A22B", 235, 22),
        ("Qwen3-32B", 32.8, 32.8),
        ("Qwen3-30B-A3B", 30.5, 3.3),
    ],
)
def test_param_counts_match_model_cards(name: str, total_b: float, active_b: float) -> None:
    m = get_model(name)
    assert m.params_total / 1e9 == pytest.approx(total_b, rel=0.02)
    assert m.params_active / 1e9 == pytest.approx(active_b, rel=0.03)


def test_gpt_oss_20b_layout() -> None:
    """openai/gpt-oss-20b: 21B parameters (model card), 24 layers of which 12 slide, 32 experts, 4 per token."""
    m = get_model("gpt-oss-20b")
    assert m.params_total / 1e9 == pytest.approx(20.9, rel=0.02)
    assert (m.layers, m.sliding_layers, m.n_routed_experts, m.experts_per_token) == (24, 12, 32, 4)
    assert m.default_quant == "mxfp4"


def test_deepseek_layout_and_mtp() -> None:
    m = get_model("DeepSeek-R1")
    assert (m.layers, m.attention, m.kv_lora_rank, m.qk_rope_head_dim) == (61, "mla", 512, 64)
    assert (m.n_routed_experts, m.experts_per_token, m.n_shared_experts, m.first_dense_layers) == (256, 8, 1, 3)
    assert m.moe_layers == 58
    # model card: 671B main + 14B MTP = 685B
    assert 13e9 < m.mtp_params < 15e9
    b = m.weight_params_breakdown()
    assert b["routed_experts"] > 0.97 * m.params_total
    assert sum(b.values()) == m.params_total


def test_lookup_is_case_insensitive_and_accepts_hf_ids() -> None:
    assert get_model("deepseek-r1") is MODELS["DeepSeek-R1"]
    assert get_model("meta-llama/Llama-3.1-70B-Instruct").name == "Llama-3.1-70B"
    assert get_gpu("H100").name == "h100"
    assert set(GPUS) == {"h100", "h200", "b200", "gb200", "mi300x", "a100"}
    with pytest.raises(ConfigError):
        get_model("no-such-model")
    with pytest.raises(ConfigError):
        get_gpu("tpu")


def test_gpu_datasheets() -> None:
    h100, h200, mi = get_gpu("h100"), get_gpu("h200"), get_gpu("mi300x")
    assert 79 < h100.memory_gib < 80.5 and h100.hbm_bytes_per_s == 3.35e12
    assert h100.bf16_flops == pytest.approx(989.5e12) and h100.fp8_flops == pytest.approx(1979e12)
    assert 139 < h200.memory_gib < 141 and h200.hbm_bytes_per_s == 4.8e12
    assert mi.memory_gib == 192 and mi.hbm_bytes_per_s == 5.3e12
    assert not get_gpu("a100").fp8_native
    gb = get_gpu("gb200")  # NVL72 datasheet / 72; nvidia-smi 189,471 MiB
    assert gb.memory_bytes == 189_471 * 2**20 and gb.hbm_bytes_per_s == 8e12 and gb.nvlink_domain == 72
    assert (gb.bf16_flops, gb.fp8_flops, gb.fp4_flops) == (2.5e15, 5e15, 1e16)
    assert get_gpu("b200").nvlink_domain == 0  # an HGX board: the node's GPUs


_LLAMA_70B_CONFIG = {
    "model_type": "llama",
    "hidden_size": 8192,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 80,
    "intermediate_size": 28672,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}


def test_parse_llama_config_equals_catalogue() -> None:
    m = parse_hf_config(_LLAMA_70B_CONFIG, name="x")
    ref = get_model("Llama-3.1-70B")
    assert (m.layers, m.kv_heads, m.head_dim, m.params_total) == (
        ref.layers,
        ref.kv_heads,
        ref.head_dim,
        ref.params_total,
    )


def test_parse_deepseek_and_qwen3_moe_configs(tmp_path) -> None:
    ds = {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "num_hidden_layers": 61,
        "intermediate_size": 18432,
        "vocab_size": 129280,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "n_shared_experts": 1,
        "moe_intermediate_size": 2048,
        "first_k_dense_replace": 3,
        "num_nextn_predict_layers": 1,
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    }
    path = tmp_path / "DeepSeek-R1" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(ds))
    m = resolve_model(str(path))
    assert m.name == "DeepSeek-R1" and m.attention == "mla" and m.default_quant == "fp8"
    assert m.params_total == get_model("DeepSeek-R1").params_total
    assert load_hf_config(path.parent).params_total == m.params_total
    qwen = {
        "model_type": "qwen3_moe",
        "hidden_size": 4096,
        "num_attention_heads": 64,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "num_hidden_layers": 94,
        "intermediate_size": 12288,
        "vocab_size": 151936,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 1536,
    }
    q = parse_hf_config(qwen)
    assert q.params_total == pytest.approx(235e9, rel=0.01) and q.params_active == pytest.approx(22e9, rel=0.03)


def test_bad_configs_raise_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError):
        parse_hf_config({"model_type": "gpt2", "hidden_size": 1})
    with pytest.raises(ConfigError):
        parse_hf_config({"model_type": "llama"})
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError):
        load_hf_config(bad)


def test_context_length_comes_from_the_config() -> None:
    """The engines' default max_model_len is the checkpoint's max_position_embeddings."""
    cfg = {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "vocab_size": 128_256,
        "intermediate_size": 14_336,
        "max_position_embeddings": 32_768,
    }
    assert parse_hf_config(cfg).context_len == 32_768
    assert get_model("DeepSeek-R1").context_len == 163_840
    assert get_model("Llama-3.1-405B").context_len == 131_072
