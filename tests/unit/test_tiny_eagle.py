"""tests/support/tiny_eagle.py's EAGLE-3 draft does what its docstring says: run as vLLM's
`Eagle3LlamaForCausalLM` runs its layer (llama_eagle3.py, `norm_before_residual`; neox RoPE; causal
attention over the draft's own positions), it proposes the token it was given at every position, whatever
the hidden state it is handed. Written in numpy here, on a target embedding made as tiny_model makes its
own (channel 0 constant, the rest small and random)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from tests.support.tiny_eagle import EAGLE3_ARCHITECTURE, make_tiny_eagle3

H, HEADS, VOCAB, EPS = 256, 4, 512, 1e-5
HD = H // HEADS


def _rms(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * g


def _rope(x: np.ndarray, pos: np.ndarray) -> np.ndarray:  # (T, heads, HD), rotate-half (neox)
    ang = pos[:, None] * 10000.0 ** (-np.arange(0, HD, 2) / HD)[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def _target(tmp: Path) -> Path:
    rng = np.random.default_rng(0)
    emb = (rng.standard_normal((VOCAB, H)) * 0.05).astype(np.float32)
    emb[:, 0] = 1.0
    cfg = {"hidden_size": H, "intermediate_size": 512, "vocab_size": VOCAB, "num_hidden_layers": 4}
    cfg |= {"num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": HD}
    cfg |= {"max_position_embeddings": 8192, "rms_norm_eps": EPS, "rope_theta": 10000.0}
    tmp.mkdir()
    (tmp / "config.json").write_text(json.dumps(cfg))
    save_file({"model.embed_tokens.weight": emb}, str(tmp / "model.safetensors"))
    return tmp


def test_the_draft_proposes_the_token_it_was_given(tmp_path: Path) -> None:
    target = _target(tmp_path / "target")
    draft = make_tiny_eagle3(target, tmp_path / "draft")
    cfg = json.loads((draft / "config.json").read_text())
    assert cfg["architectures"] == [EAGLE3_ARCHITECTURE] and cfg["num_hidden_layers"] == 1
    assert cfg["norm_before_residual"] is True and cfg["draft_vocab_size"] == VOCAB
    w = load_file(str(draft / "model.safetensors"))
    assert "embed_tokens.weight" not in w  # vLLM shares the target's
    emb = load_file(str(target / "model.safetensors"))["model.embed_tokens.weight"]
    rng = np.random.default_rng(1)
    t_len = 700
    ids = rng.integers(0, VOCAB, t_len)
    pos = np.arange(t_len, dtype=np.float64) + 1500  # any offset: RoPE scores depend on m - n only
    hidden = rng.standard_normal((t_len, 3 * H)) * 4  # the target's three states, then fused by fc
    p = "midlayer."
    fused = hidden @ w["fc.weight"].T
    h = _rms(fused, w[p + "hidden_norm.weight"])  # norm_before_residual: the residual is this too
    x = np.concatenate([_rms(emb[ids], w[p + "input_layernorm.weight"]), h], -1)
    q = _rope((x @ w[p + "self_attn.q_proj.weight"].T).reshape(t_len, HEADS, HD), pos)
    k = _rope((x @ w[p + "self_attn.k_proj.weight"].T).reshape(t_len, HEADS, HD), pos)
    v = (x @ w[p + "self_attn.v_proj.weight"].T).reshape(t_len, HEADS, HD)
    s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(HD) + np.triu(np.full((t_len, t_len), -np.inf), 1)
    off = np.where(np.eye(t_len, dtype=bool), -np.inf, s).max(-1)[:, 1:]
    assert (np.einsum("hqq->hq", s)[:, 1:] - off).min() > 30  # attention on its own position, sharply
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    attn = np.einsum("hqk,khd->qhd", a, v).reshape(t_len, H) @ w[p + "self_attn.o_proj.weight"].T
    resid = attn + h
    m = _rms(resid, w[p + "post_attention_layernorm.weight"])
    g = m @ w[p + "mlp.gate_proj.weight"].T
    mlp = (g / (1 + np.exp(-g)) * (m @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    logits = _rms(mlp + resid, w["norm.weight"]) @ w["lm_head.weight"].T
    assert (logits.argmax(-1) == ids).all()
