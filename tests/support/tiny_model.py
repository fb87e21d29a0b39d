"""Generate a tiny random Llama model for the real-server test tier (no download, no torch).

One call writes the same weights and vocabulary twice:

- a Hugging Face directory (``config.json``, ``model.safetensors``, ``tokenizer.json``,
  ``tokenizer_config.json`` with a ChatML ``chat_template``, ``generation_config.json``), optionally laid
  out as a hub-cache repo (``models--local--tiny-llama``) so that ``transformers serve`` lists it offline;
- a GGUF file for llama.cpp's ``llama-server``, written directly with ``gguf.GGUFWriter`` (llama.cpp's own
  converter needs sentencepiece and a known pre-tokenizer hash).

The weights are random (fixed seed) except for one trick that makes the servers predictable: channel 0
of every embedding is a constant that no block writes to (``o_proj`` and ``down_proj`` have a zero row 0),
the final norm amplifies it, and ``lm_head`` gives every token that is special, EOS, or not a run of
printable ASCII a very negative weight on it. So generation never stops early and never emits a partial
UTF-8 byte: every request runs to exactly ``max_tokens`` with one non-empty text chunk per token.

Usage: ``python -m tests.support.tiny_model OUT_DIR`` or :func:`make_tiny_model`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["HUB_REPO_ID", "SPECIAL_TOKENS", "TinyModel", "TinyModelConfig", "make_tiny_model"]

HUB_REPO_ID = "local/tiny-llama"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_HUB_COMMIT = "0" * 40  # a fixed fake commit id for the hub-cache snapshot

# Local training text: fixed, ASCII, so the tokenizer is identical on every machine and Python version.
_WORDS = (
    "the quick brown fox jumps over lazy dog while servers stream tokens to many users at once "
    "latency throughput batch queue cache prefill decode request response model weights memory "
    "bandwidth compute kernel attention layer head token prompt output input length rate time "
    "first last mean median percentile benchmark engine scheduler slot block page "
    "alpha beta gamma delta epsilon zeta theta lambda sigma omega one two three four five six seven "
    "eight nine ten hundred thousand million"
).split()


@dataclass(frozen=True, slots=True)
class TinyModelConfig:
    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 4
    context_length: int = 8192
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    seed: int = 1234


@dataclass(frozen=True, slots=True)
class TinyModel:
    hf_dir: Path  # plain HF model directory
    gguf_path: Path
    hub_cache_dir: Path | None  # value for HF_HUB_CACHE; the model is listed as HUB_REPO_ID
    repo_id: str
    vocab_size: int
    allowed_token_count: int  # tokens the model can ever generate


def _training_corpus(seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(400):
        n = int(rng.integers(4, 16))
        words = [_WORDS[int(i)] for i in rng.integers(0, len(_WORDS), size=n)]
        lines.append(" ".join(words) + f" {int(rng.integers(0, 1000))}.")
    return lines


def _train_tokenizer(cfg: TinyModelConfig):  # -> tokenizers.Tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_corpus(cfg.seed), trainer=trainer)
    return tok


def _byte_decoder() -> dict[str, int]:
    """The GPT-2 byte-level map, inverted: printable stand-in character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _allowed_mask(vocab: list[str]) -> np.ndarray:
    """True for tokens whose bytes are non-empty printable ASCII (never special, never partial UTF-8)."""
    dec = _byte_decoder()
    allowed = np.zeros(len(vocab), dtype=bool)
    for i, piece in enumerate(vocab):
        if piece in SPECIAL_TOKENS:
            continue
        try:
            raw = bytes(dec[ch] for ch in piece)
        except KeyError:
            continue
        # Printable ASCII, and at least one non-space byte: some detokenizers trim lone spaces.
        allowed[i] = bool(raw) and all(0x20 <= b <= 0x7E for b in raw) and raw.strip(b" ") != b""
    return allowed


def _weights(cfg: TinyModelConfig, allowed: np.ndarray) -> dict[str, np.ndarray]:
    """HF-named float32 weights with the constant-channel trick on channel 0."""
    rng = np.random.default_rng(cfg.seed)
    h, inter, v = cfg.hidden_size, cfg.intermediate_size, len(allowed)
    head_dim = h // cfg.num_heads
    kv_dim = head_dim * cfg.num_kv_heads

    def rand(*shape: int, scale: float) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w: dict[str, np.ndarray] = {}
    emb = rand(v, h, scale=0.05)
    emb[:, 0] = 1.0  # the constant channel: dominates each RMS norm
    w["model.embed_tokens.weight"] = emb
    s = 1.0 / np.sqrt(h)
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(h, dtype=np.float32)
        w[p + "self_attn.q_proj.weight"] = rand(h, h, scale=s)
        w[p + "self_attn.k_proj.weight"] = rand(kv_dim, h, scale=s)
        w[p + "self_attn.v_proj.weight"] = rand(kv_dim, h, scale=s)
        o = rand(h, h, scale=s)
        o[0, :] = 0.0  # blocks never write the constant channel
        w[p + "self_attn.o_proj.weight"] = o
        w[p + "post_attention_layernorm.weight"] = np.ones(h, dtype=np.float32)
        w[p + "mlp.gate_proj.weight"] = rand(inter, h, scale=s)
        w[p + "mlp.up_proj.weight"] = rand(inter, h, scale=s)
        down = rand(h, inter, scale=1.0 / np.sqrt(inter))
        down[0, :] = 0.0
        w[p + "mlp.down_proj.weight"] = down
    norm = np.ones(h, dtype=np.float32)
    norm[0] = 16.0  # amplify the constant channel at the output
    w["model.norm.weight"] = norm
    head = rand(v, h, scale=1.0)
    head[:, 0] = np.where(allowed, 0.0, -1000.0).astype(np.float32)
    w["lm_head.weight"] = head
    return w


def _permute_qk(weight: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotate-half row order -> GGUF interleaved order (as llama.cpp's converter does for Llama)."""
    rows = weight.shape[0]
    return weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _write_hf(out: Path, cfg: TinyModelConfig, tok, vocab: list[str], w: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(vocab),
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.hidden_size // cfg.num_heads,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.context_length,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "torch_dtype": "float32",
        "dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps(
            {
                "bos_token_id": config["bos_token_id"],
                "eos_token_id": config["eos_token_id"],
                "pad_token_id": config["pad_token_id"],
                "do_sample": False,
            },
            indent=2,
        )
        + "\n"
    )
    save_file(w, str(out / "model.safetensors"), metadata={"format": "pt"})
    tok.save(str(out / "tokenizer.json"))
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": cfg.context_length,
        "chat_template": CHATML_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}) + "\n"
    )


def _write_gguf(path: Path, cfg: TinyModelConfig, tok, vocab: list[str], w: dict[str, np.ndarray]) -> None:
    import gguf

    tok_json = json.loads(tok.to_str())
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok_json["model"]["merges"]]
    types = [int(gguf.TokenType.CONTROL) if t in SPECIAL_TOKENS else int(gguf.TokenType.NORMAL) for t in vocab]
    head_dim = cfg.hidden_size // cfg.num_heads

    wr = gguf.GGUFWriter(str(path), "llama")
    wr.add_name("tiny-llama")
    wr.add_context_length(cfg.context_length)
    wr.add_embedding_length(cfg.hidden_size)
    wr.add_block_count(cfg.num_layers)
    wr.add_feed_forward_length(cfg.intermediate_size)
    wr.add_head_count(cfg.num_heads)
    wr.add_head_count_kv(cfg.num_kv_heads)
    wr.add_rope_dimension_count(head_dim)
    wr.add_rope_freq_base(cfg.rope_theta)
    wr.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    wr.add_vocab_size(len(vocab))
    wr.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("gpt-2")
    wr.add_token_list(vocab)
    wr.add_token_types(types)
    wr.add_token_merges(merges)
    wr.add_bos_token_id(tok.token_to_id("<|endoftext|>"))
    wr.add_eos_token_id(tok.token_to_id("<|im_end|>"))
    wr.add_pad_token_id(tok.token_to_id("<|endoftext|>"))
    wr.add_add_bos_token(False)
    wr.add_chat_template(CHATML_TEMPLATE)

    names = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    wr.add_tensor("token_embd.weight", w["model.embed_tokens.weight"])
    for i in range(cfg.num_layers):
        for hf, gg in names.items():
            t = w[f"model.layers.{i}.{hf}.weight"]
            if hf == "self_attn.q_proj":
                t = _permute_qk(t, cfg.num_heads)
            elif hf == "self_attn.k_proj":
                t = _permute_qk(t, cfg.num_kv_heads)
            wr.add_tensor(f"blk.{i}.{gg}.weight", np.ascontiguousarray(t))
    wr.add_tensor("output_norm.weight", w["model.norm.weight"])
    wr.add_tensor("output.weight", w["lm_head.weight"])
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def _write_hub_cache(hub: Path, hf_dir: Path, repo_id: str) -> None:
    """Lay ``hf_dir`` out as a Hugging Face hub-cache repo (blobs + snapshot symlinks + refs/main)."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / _HUB_COMMIT
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(_HUB_COMMIT)
    for f in sorted(hf_dir.iterdir()):
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        if not blob.exists():
            shutil.copyfile(f, blob)
        link = snap / f.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path("..") / ".." / "blobs" / blob.name)


def make_tiny_model(out_dir: Path | str, cfg: TinyModelConfig | None = None, *, hub_cache: bool = True) -> TinyModel:
    """Write the tiny model under ``out_dir`` (``hf/``, ``tiny.gguf``, ``hub/``); deterministic in ``cfg.seed``."""
    cfg = cfg or TinyModelConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(cfg)
    size = tok.get_vocab_size()
    id_to_tok = {i: t for t, i in tok.get_vocab().items()}
    vocab = [id_to_tok[i] for i in range(size)]
    allowed = _allowed_mask(vocab)
    w = _weights(cfg, allowed)
    hf_dir = out / "hf"
    _write_hf(hf_dir, cfg, tok, vocab, w)
    gguf_path = out / "tiny.gguf"
    _write_gguf(gguf_path, cfg, tok, vocab, w)
    hub = None
    if hub_cache:
        hub = out / "hub"
        _write_hub_cache(hub, hf_dir, HUB_REPO_ID)
    return TinyModel(
        hf_dir=hf_dir,
        gguf_path=gguf_path,
        hub_cache_dir=hub,
        repo_id=HUB_REPO_ID,
        vocab_size=size,
        allowed_token_count=int(allowed.sum()),
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=128)
    args = ap.parse_args(argv)
    cfg = TinyModelConfig(
        hidden_size=args.hidden,
        num_layers=args.layers,
        num_heads=args.heads,
        num_kv_heads=args.kv_heads,
        intermediate_size=args.intermediate,
    )
    m = make_tiny_model(args.out_dir, cfg)
    print(json.dumps({"hf_dir": str(m.hf_dir), "gguf": str(m.gguf_path), "hub": str(m.hub_cache_dir)}))


if __name__ == "__main__":
    main()
