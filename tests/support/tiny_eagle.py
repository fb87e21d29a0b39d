"""Generate a tiny EAGLE-3 draft for the tiny Llama target (`tests.support.tiny_model`); no download, no torch.

vLLM (V1, its CPU build too) loads an EAGLE-3 draft as `Eagle3LlamaForCausalLM`
(vllm/model_executor/models/llama_eagle3.py) from a checkpoint whose `config.json` names the architecture
`LlamaForCausalLMEagle3` (as the published EAGLE-3 Llama checkpoints do), with the target's Llama shapes
and one decoder layer, and whose weights follow the published layout:

- `midlayer.*`: one Llama decoder layer whose q/k/v projections read `2 * hidden` (the new token's
  embedding and the target's fused state, concatenated), plus `midlayer.hidden_norm` for that state;
- `fc.weight` (`hidden x 3 * hidden`): fuses the three target hidden states vLLM hands the draft (the
  inputs of the target layers `eagle_aux_hidden_state_layer_ids`);
- `norm.weight` and the draft's own `lm_head.weight` (`draft_vocab_size x hidden`; the full vocabulary
  here, so no `d2t` map). No `embed_tokens`: vLLM then shares the target's embedding with the draft.

The weights are not random: the draft is built to propose the token it was given, again. The tiny target
repeats tokens often under greedy decoding (its continuations of random prompts repeat the previous token
~70% of the time), so this draft's proposals are accepted often enough for every draft position's counter
to move, as a trained EAGLE head's are. How, in the layer (all else zero):

- `hidden_norm` is zero and `norm_before_residual` is set, so the target's state (and, from the second
  draft step on, the draft's own) reaches neither the attention nor the residual stream;
- attention attends to its own position only: q and k read the embedding's constant channel 0 (see
  tiny_model) into the 8 fastest rotary pairs of every head, so under RoPE the score is
  `a_m a_n sum_p cos((m - n) theta_p) / sqrt(head_dim)`, largest at `m = n` by >= 1.07 a_m a_n / 8 over
  every distance up to 4096 (with `a` ~ 36, a margin of ~50 against the +-11% spread of channel 0);
- v and o are the identity, so the layer's output is the new token's normalised embedding; the final norm
  drops channel 0 and `lm_head`'s rows are the tokens' normalised embeddings (channel 0 dropped, unit
  length), so the largest logit is the token itself (Cauchy-Schwarz).

Usage: ``python -m tests.support.tiny_eagle TARGET_HF_DIR OUT_DIR`` or :func:`make_tiny_eagle3`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["EAGLE3_ARCHITECTURE", "make_tiny_eagle3"]

EAGLE3_ARCHITECTURE = "LlamaForCausalLMEagle3"
_ROTARY_PAIRS = 8  # the fastest rotary pairs q and k use: a self-attention margin at every distance
_QK_GAIN = 3.0  # q = k = _QK_GAIN * channel 0 (11.8 .. 13.1 after the RMS norm) on those pairs


def _copy_weights(target: dict[str, np.ndarray], cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    h, inter = int(cfg["hidden_size"]), int(cfg["intermediate_size"])
    heads, kv_heads = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    head_dim = int(cfg.get("head_dim") or h // heads)
    if kv_heads * head_dim != h or heads != kv_heads:
        raise ValueError("the copy draft wants as many kv heads as heads, kv_heads * head_dim == hidden")
    zeros = np.zeros
    q = zeros((heads * head_dim, 2 * h), dtype=np.float32)
    for head in range(heads):
        q[head * head_dim : head * head_dim + _ROTARY_PAIRS, 0] = _QK_GAIN  # first halves: neox rotary pairs
    v_proj = zeros((h, 2 * h), dtype=np.float32)
    v_proj[:, :h] = np.eye(h, dtype=np.float32)  # the embedding half, unchanged
    emb = target["model.embed_tokens.weight"].astype(np.float64)
    x = emb / np.sqrt((emb * emb).mean(axis=1, keepdims=True) + float(cfg["rms_norm_eps"]))
    x[:, 0] = 0.0
    head = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    norm = np.ones(h, dtype=np.float32)
    norm[0] = 0.0
    p = "midlayer."
    return {
        p + "input_layernorm.weight": np.ones(h, dtype=np.float32),
        p + "hidden_norm.weight": zeros(h, dtype=np.float32),
        p + "self_attn.q_proj.weight": q,
        p + "self_attn.k_proj.weight": q.copy(),
        p + "self_attn.v_proj.weight": v_proj,
        p + "self_attn.o_proj.weight": np.eye(h, dtype=np.float32),
        p + "post_attention_layernorm.weight": np.ones(h, dtype=np.float32),
        p + "mlp.gate_proj.weight": zeros((inter, h), dtype=np.float32),
        p + "mlp.up_proj.weight": zeros((inter, h), dtype=np.float32),
        p + "mlp.down_proj.weight": zeros((h, inter), dtype=np.float32),
        "fc.weight": zeros((h, 3 * h), dtype=np.float32),
        "norm.weight": norm,
        "lm_head.weight": head,
    }


def make_tiny_eagle3(target_hf_dir: Path | str, out_dir: Path | str) -> Path:
    """Write `config.json` and `model.safetensors` of the copy draft for the Llama in `target_hf_dir`
    (its shapes, vocabulary, rope settings and embedding) into `out_dir`; deterministic in the target."""
    from safetensors.numpy import load_file, save_file

    src = Path(target_hf_dir)
    cfg = json.loads((src / "config.json").read_text())
    if cfg["num_hidden_layers"] < 4:
        raise ValueError("the target taps layers 1, 2 and 3: it wants 4 layers or more")
    w = _copy_weights(load_file(str(src / "model.safetensors")), cfg)
    config = {
        "architectures": [EAGLE3_ARCHITECTURE],
        "model_type": "llama",
        "vocab_size": cfg["vocab_size"],
        "draft_vocab_size": cfg["vocab_size"],
        "hidden_size": cfg["hidden_size"],
        "target_hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "num_hidden_layers": 1,
        "num_attention_heads": cfg["num_attention_heads"],
        "num_key_value_heads": cfg["num_key_value_heads"],
        "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
        "hidden_act": "silu",
        "max_position_embeddings": cfg["max_position_embeddings"],
        "rms_norm_eps": cfg["rms_norm_eps"],
        "rope_theta": cfg["rope_theta"],
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "norm_before_residual": True,
        "bos_token_id": cfg.get("bos_token_id"),
        "eos_token_id": cfg.get("eos_token_id"),
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3], "use_aux_hidden_state": True},
        "torch_dtype": "float32",
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(w, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target_hf_dir")
    ap.add_argument("out_dir")
    args = ap.parse_args(argv)
    print(make_tiny_eagle3(args.target_hf_dir, args.out_dir))


if __name__ == "__main__":
    main()
