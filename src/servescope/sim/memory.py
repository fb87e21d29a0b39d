"""Memory model: weights per GPU, engine reserve, KV bytes per token and KV capacity. Pure.

Formulas and sources are written out in docs/plan.md. In short, per GPU:

    usable    = memory_bytes * gpu_memory_utilization          (vLLM, SGLang mem_fraction_static)
    kv_bytes  = usable - weights_per_gpu - reserve              (TensorRT-LLM: util * (memory - weights - reserve))
    kv_tokens = floor(kv_bytes / kv_bytes_per_token_per_gpu / block) * block
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from servescope.errors import ConfigError
from servescope.sim.catalog import GPUSpec, ModelSpec

__all__ = [
    "Layout",
    "EngineProfile",
    "ENGINES",
    "QUANTS",
    "FitResult",
    "kv_bytes_per_token",
    "kv_bytes_per_token_per_gpu",
    "kv_pool_bytes_per_token_per_gpu",
    "kv_seq_overhead_tokens",
    "sim_block_tokens",
    "weight_bytes_per_gpu",
    "weight_bytes_breakdown_per_gpu",
    "routed_bytes",
    "reserve_bytes_per_gpu",
    "fit",
    "bytes_per_param",
    "checkpoint_bytes",
    "candidate_layouts",
    "suggest_layouts",
    "activation_bytes_per_token",
    "activation_bytes",
    "profile_tokens",
]

_GIB = 1 << 30
# NVIDIA GPUs without FP4 tensor cores, where vLLM repacks MXFP4 experts for weight-only kernels
# (EngineProfile.mxfp4_moe_repack); Blackwell runs them as stored, ROCm has its own path (not modelled).
_REPACK_MXFP4_GPUS = frozenset({"a100", "h100", "h200"})
QUANTS = ("bf16", "fp8", "fp8-ffn", "awq", "int4", "mxfp4", "nvfp4")
_KV_DTYPE_BYTES = MappingProxyType({"bf16": 2.0, "fp16": 2.0, "auto": 2.0, "fp8": 1.0})


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """How one deployment spreads a model: tp x pp x dp GPUs over `nodes` nodes of `gpus_per_node`.

    Routed experts are always split over all tp x dp GPUs of a pipeline stage: `ep` of those ranks
    each hold whole experts (n_experts / ep of them) and each expert is sliced over the remaining
    moe_tp = tp * dp / ep ranks (TensorRT-LLM's MoE TP x EP, e.g. attention TP8 = MoE TP2 x EP4).
    `ep` = 1 slices every expert over tp * dp: with data-parallel attention (dp > 1) the MoE layers
    still span every rank (vLLM and SGLang run the experts over the tp x dp group), so experts are
    never replicated per DP rank. vLLM --enable-expert-parallel is ep = tp * dp.
    """

    gpu: GPUSpec
    gpus_per_node: int = 8
    nodes: int = 1
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    quant: str = "bf16"
    kv_dtype: str = "bf16"
    load_mtp: bool = False  # DeepSeek MTP weights load only when MTP speculative decoding is on

    def __post_init__(self) -> None:
        for k in ("gpus_per_node", "nodes", "tp", "pp", "dp", "ep"):
            if getattr(self, k) < 1:
                raise ConfigError(f"{k} must be >= 1")
        if self.quant not in QUANTS:
            raise ConfigError(f"quant must be one of {', '.join(QUANTS)}, not {self.quant!r}")
        if self.kv_dtype not in _KV_DTYPE_BYTES:
            raise ConfigError(f"kv_dtype must be one of {', '.join(_KV_DTYPE_BYTES)}, not {self.kv_dtype!r}")
        if self.tp * self.pp * self.dp != self.gpus_per_node * self.nodes:
            raise ConfigError(
                f"tp*pp*dp = {self.tp}*{self.pp}*{self.dp} = {self.tp * self.pp * self.dp} "
                f"but the layout has {self.nodes}x{self.gpus_per_node} = "
                f"{self.nodes * self.gpus_per_node} GPUs"
            )
        if self.ep > 1 and self.ep > self.tp * self.dp:
            raise ConfigError(f"ep={self.ep} exceeds tp*dp={self.tp * self.dp}")
        if (self.tp * self.dp) % self.ep:
            raise ConfigError(f"ep={self.ep} must divide tp*dp={self.tp * self.dp} (MoE TP x EP = tp*dp ranks)")

    @property
    def moe_tp(self) -> int:
        """Ranks each routed expert is sliced over: tp * dp / ep."""
        return self.tp * self.dp // self.ep

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def kv_dtype_bytes(self) -> float:
        return _KV_DTYPE_BYTES[self.kv_dtype]

    def describe(self) -> str:
        parts = [
            f"{self.nodes}x{self.gpus_per_node} {self.gpu.name.upper()}"
            if self.nodes > 1
            else f"{self.gpus}x{self.gpu.name.upper()}",
            f"TP{self.tp}",
        ]
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        if self.dp > 1:
            parts.append(f"DP{self.dp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}" + (f" (MoE TP{self.moe_tp})" if self.moe_tp > 1 else ""))
        parts.append(self.quant)
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """Per-engine memory accounting. Constants and their origin are in docs/plan.md."""

    name: str
    util_semantics: str  # "total": util * memory holds weights + reserve + KV; "free": util * (free after weights)
    non_torch_bytes_tp1: int  # CUDA context extras, cuBLAS workspace
    non_torch_bytes_multi: int  # + NCCL and custom all-reduce buffers when tp*pp > 1
    default_max_num_batched_tokens: int  # profile-run batch; 0 = max(max_model_len, 2048) (vLLM V0)
    cuda_graph_bytes: int  # graph pool inside the budget (0 where captured after the KV allocation)
    block_tokens: int
    mla_absorb_copies: bool = False  # vLLM 0.7.x V0 MLA: extra W_Q_UK and W_UV_O per layer
    # Sliding-window layers in the KV pool (`kv_pool_bytes_per_token_per_gpu`): None = each request holds
    # only its window of them (vLLM V1's hybrid KV cache manager); a number r = they get a pool of r x the
    # full layers' tokens (SGLang's SWA pool, --swa-full-tokens-ratio, 0.8 by default); 1.0 = counted at
    # full length like every other layer.
    swa_pool_ratio: float | None = 1.0
    mxfp4_moe_repack: float = 1.0  # in-memory / checkpoint bytes of MXFP4 experts (before Blackwell)


ENGINES: Mapping[str, EngineProfile] = MappingProxyType(
    {
        # vLLM V1 (>= 0.8): KV = util*total - weights - torch activation peak (profile run over
        # max_num_batched_tokens, 8192 default for the OpenAI server) - non-torch memory; CUDA graphs are
        # captured after the KV allocation and live in the (1 - util) headroom. Block size 16.
        # MXFP4 experts: GPUs before Blackwell have no FP4 tensor cores and vLLM repacks the experts for its
        # weight-only kernels (Marlin in 0.10.x, Triton matmul_ogs later) with padding and wider scales. Its
        # log for gpt-oss-120b on one H100: "Model loading took 65.97 GiB" (0.10.1, Marlin; vllm issue 23278)
        # and 64.38 GiB (0.14.1, Triton; issue 33155), against a 60.7 GiB checkpoint whose experts are
        # 56.7 GiB: the experts take (65.97 - 4.0) / 56.7 = 1.093x their checkpoint bytes (0.10.x, which
        # the corpus runs; 1.065x with the later Triton path).
        "vllm": EngineProfile(
            "vllm", "total", int(0.5 * _GIB), int(2.0 * _GIB), 8192, 0, 16, swa_pool_ratio=None, mxfp4_moe_repack=1.093
        ),
        # vLLM 0.7.x (V0): profile batch max(max_model_len, 2048) without chunked prefill; MLA matrix
        # absorption (VLLM_MLA_PERFORM_MATRIX_ABSORPTION=1 default then) kept BF16 W_Q_UK / W_UV_O.
        # Non-torch 2.5 GiB at TP > 1 is fitted to the seed's vLLM 0.7.3 log (docs/plan.md).
        "vllm-0.7": EngineProfile("vllm-0.7", "total", int(0.5 * _GIB), int(2.5 * _GIB), 0, 0, 16, True),
        # SGLang: mem_fraction_static * total holds weights + KV pool; activations and CUDA graphs live in
        # the remaining fraction, so nothing more is subtracted inside it. Page size 1.
        "sglang": EngineProfile("sglang", "total", 0, 0, 0, 0, 1, swa_pool_ratio=0.8),
        # TensorRT-LLM PyTorch backend: kv_cache_free_gpu_memory_fraction (0.9 default) of the memory
        # free after weights and a warm-up forward; tokens_per_block 32.
        "trtllm": EngineProfile("trtllm", "free", int(1.0 * _GIB), int(2.0 * _GIB), 8192, 0, 32),
    }
)

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


def bytes_per_param(quant: str, part: str, model: ModelSpec) -> float:
    """Bytes per parameter of one model part under a quantization scheme, following the real checkpoints.

    bf16: 2. fp8 (DeepSeek-V3, llm-compressor FP8): every linear FP8 + an FP32 scale per 128x128 block;
    embeddings, lm_head, router, norms BF16. fp8 on a model whose published FP8 checkpoint is FFN-only
    (Meta Llama-3.1-405B-FP8, fbgemm row-wise scales), or quant "fp8-ffn": FFN FP8, attention BF16.
    awq: 4-bit weights, group 128, FP16 scale + 4-bit zero per group: 0.5 + 2.5/128. int4 (GPTQ-style
    symmetric): 0.5 + 2/128. mxfp4 (gpt-oss's published checkpoints: the MoE weights in MXFP4, the
    rest BF16, per OpenAI's gpt-oss model card): FFN/expert weights 0.5 + 1/32 (one E8M0 scale byte per
    block of 32 FP4 values, OCP Microscaling Formats spec v1.0), attention BF16. nvfp4 (NVIDIA's
    ModelOpt FP4 checkpoints, e.g. DeepSeek-R1-FP4): every linear 0.5 + 1/16 (one FP8 E4M3 scale per
    16 values; the per-tensor FP32 scale is negligible). Embeddings, lm_head, router, norms stay BF16
    in every scheme.
    """
    if quant == "bf16" or part in ("embedding", "router", "replicated_norms"):
        return 2.0
    ffn_parts = ("dense_ffn", "shared_experts", "routed_experts")
    if quant in ("fp8", "fp8-ffn"):
        if part == "attention" and (quant == "fp8-ffn" or model.fp8_scheme == "ffn"):
            return 2.0
        if part in ffn_parts and (quant == "fp8-ffn" or model.fp8_scheme == "ffn"):
            return 1.0 + 4.0 / model.hidden  # row-wise FP32 scale
        return 1.0 + 4.0 / (128 * 128)
    if quant == "mxfp4":
        return 0.5 + 1.0 / 32 if part in ffn_parts else 2.0
    if quant == "nvfp4":
        return 0.5 + 1.0 / 16
    if quant == "awq":
        return 0.5 + 2.5 / 128
    if quant == "int4":
        return 0.5 + 2.0 / 128
    raise ConfigError(f"unknown quant {quant!r}")


def checkpoint_bytes(model: ModelSpec, quant: str, *, include_mtp: bool = True) -> int:
    """Whole-model weight bytes in `quant` (what the checkpoint weighs, scales included)."""
    b = model.weight_params_breakdown()
    total = sum(n * bytes_per_param(quant, part, model) for part, n in b.items())
    if include_mtp:
        total += model.mtp_params * bytes_per_param(quant, "routed_experts", model)
    return int(total)


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
    ratio = _engine(engine).swa_pool_ratio
    full = model.layers - model.sliding_layers
    share = (full + (ratio or 0.0) * model.sliding_layers) / model.layers
    return max(1, int(per_tok * share))


def kv_seq_overhead_tokens(model: ModelSpec, *, engine: str = "vllm") -> int:
    """Pool tokens each running request holds besides its context: under vLLM V1's hybrid KV cache
    manager a request's sliding-window layers keep the blocks covering its last `sliding_window`
    tokens (one more while the window straddles a block boundary), in pages the size of the full
    layers' pages (vllm/v1/core/kv_cache_utils.py groups layers into equal-sized pages). In units of
    full-layer tokens: sliding/full layers x (window + one block). 0 for other engines and models."""
    prof = _engine(engine)
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


def weight_bytes_breakdown_per_gpu(model: ModelSpec, layout: Layout, *, engine: str = "vllm") -> dict[str, int]:
    """Weight bytes on the most loaded GPU, by part.

    TP splits attention heads, dense FFN, shared experts and the vocab (embedding and lm_head).
    Routed experts are split over all tp x dp ranks (EP ranks x MoE TP slices; see `Layout`).
    Attention and the rest are per DP rank (split by TP only). Replicated on every TP rank:
    MLA's q_a/kv_a projections, the router, norms; GQA K/V projections past kv_heads.
    PP: the worst stage holds ceil(layers/pp) layers and one of embedding / lm_head (both when pp = 1).
    """
    q, tp, pp = layout.quant, layout.tp, layout.pp
    share = math.ceil(model.layers / pp) / model.layers
    attn_shard, attn_rep = model.attention_params_per_layer()
    if model.attention == "gqa":
        kv_proj = 2 * model.hidden * model.kv_heads * model.head_dim
        kv_per_gpu = kv_proj / min(tp, model.kv_heads)
        attn_gpu = (attn_shard - kv_proj) / tp + kv_per_gpu
    else:
        attn_gpu = attn_shard / tp
    b = model.weight_params_breakdown()
    expert_div = tp * layout.dp  # = ep x moe_tp
    emb_one = model.vocab * model.hidden
    emb_params = (emb_one * (1 if model.tie_embeddings else 2)) if pp == 1 else emb_one
    out = {
        "attention": attn_gpu * model.layers * share * bytes_per_param(q, "attention", model),
        "attention_replicated": attn_rep * model.layers * share * bytes_per_param(q, "attention", model),
        "dense_ffn": b["dense_ffn"] * share / tp * bytes_per_param(q, "dense_ffn", model),
        "shared_experts": b["shared_experts"] * share / tp * bytes_per_param(q, "shared_experts", model),
        "routed_experts": b["routed_experts"] * share / expert_div * bytes_per_param(q, "routed_experts", model),
        "router": b["router"] * share * 2.0,
        "embedding": emb_params / tp * 2.0,
    }
    prof = _engine(engine)
    if prof.mla_absorb_copies and model.attention == "mla":
        heads_gpu = model.heads / tp
        absorbed = model.q_lora_rank * heads_gpu * model.kv_lora_rank + heads_gpu * model.kv_lora_rank * model.hidden
        out["mla_absorbed"] = absorbed * model.layers * share * (1.0 if q == "fp8" else 2.0)
    if q == "mxfp4" and prof.mxfp4_moe_repack != 1.0 and layout.gpu.name in _REPACK_MXFP4_GPUS:
        out["mxfp4_repack"] = out["routed_experts"] * (prof.mxfp4_moe_repack - 1.0)
    if layout.load_mtp and model.mtp_params:
        out["mtp"] = model.mtp_params / (tp * pp) * bytes_per_param(q, "routed_experts", model)
    return {k: int(v) for k, v in out.items()}


def routed_bytes(breakdown: Mapping[str, int]) -> int:
    """The routed experts' bytes of a weight breakdown, as the MoE kernels read them (the engine's
    repacked MXFP4 form included); the step-time model reads only the experts a batch hits."""
    return breakdown.get("routed_experts", 0) + breakdown.get("mxfp4_repack", 0)


def weight_bytes_per_gpu(model: ModelSpec, layout: Layout, *, engine: str = "vllm") -> int:
    return sum(weight_bytes_breakdown_per_gpu(model, layout, engine=engine).values())


def sim_block_tokens(engine: str = "vllm") -> int:
    """The KV block the engine simulator pages by for this engine: its own (vLLM 16, TensorRT-LLM's
    tokens_per_block 32), and 16 for SGLang's one-token pages, which the simulator does not page by."""
    block = _engine(engine).block_tokens
    return 16 if block == 1 else block


def _engine(engine: str) -> EngineProfile:
    try:
        return ENGINES[engine]
    except KeyError:
        raise ConfigError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}") from None


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
    prof = _engine(engine)
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
    prof = _engine(engine)
    if prof.name == "sglang":
        return 0
    tokens = profile_tokens(
        model, max_model_len=max_model_len, engine=engine, max_num_batched_tokens=max_num_batched_tokens
    )
    non_torch = prof.non_torch_bytes_multi if layout.tp * layout.pp > 1 else prof.non_torch_bytes_tp1
    return int(activation_bytes(model, layout, tokens) + non_torch + prof.cuda_graph_bytes)


@dataclass(slots=True)
class FitResult:
    fits: bool
    weights_per_gpu_bytes: int
    reserve_per_gpu_bytes: int
    kv_bytes_per_gpu: int
    kv_bytes_per_token_per_gpu: int
    kv_tokens: int  # per model replica (what the engine logs as its KV cache size)
    replicas: int  # data-parallel replicas, each with its own KV pool
    usable_per_gpu_bytes: int
    max_model_len: int
    reason: str = ""
    suggestions: list[str] = field(default_factory=list)
    weights_breakdown: dict[str, int] = field(default_factory=dict)
    seq_overhead_tokens: int = 0  # pool tokens each request holds besides its context (`kv_seq_overhead_tokens`)

    def max_concurrent_seqs(self, seq_len: int) -> int:
        """Sequences of `seq_len` tokens whose KV fits at once, across all replicas."""
        if seq_len <= 0:
            raise ConfigError("seq_len must be positive")
        return (self.kv_tokens // (seq_len + self.seq_overhead_tokens)) * self.replicas


def fit(
    model: ModelSpec,
    layout: Layout,
    *,
    max_model_len: int,
    gpu_memory_utilization: float = 0.9,
    engine: str = "vllm",
    max_num_batched_tokens: int | None = None,
    suggest: bool = True,
) -> FitResult:
    """Does `model` fit `layout`, and how many KV tokens are left? When not, `suggestions` lists the
    smallest layouts that do (more nodes, a larger GPU, a smaller quantization)."""
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ConfigError("gpu_memory_utilization must be in (0, 1]")
    if max_model_len <= 0:
        raise ConfigError("max_model_len must be positive")
    prof = _engine(engine)
    breakdown = weight_bytes_breakdown_per_gpu(model, layout, engine=engine)
    weights = sum(breakdown.values())
    reserve = reserve_bytes_per_gpu(
        model, layout, max_model_len=max_model_len, engine=engine, max_num_batched_tokens=max_num_batched_tokens
    )
    mem = layout.gpu.memory_bytes
    if prof.util_semantics == "free":
        usable = mem
        kv_bytes = int((mem - weights - reserve) * gpu_memory_utilization)
    else:
        usable = int(mem * gpu_memory_utilization)
        kv_bytes = usable - weights - reserve
    per_tok = kv_pool_bytes_per_token_per_gpu(model, layout, engine=engine)
    overhead = kv_seq_overhead_tokens(model, engine=engine)
    block = prof.block_tokens
    kv_tokens = max(0, kv_bytes) // per_tok // block * block
    res = FitResult(
        fits=True,
        weights_per_gpu_bytes=weights,
        reserve_per_gpu_bytes=reserve,
        kv_bytes_per_gpu=max(0, kv_bytes),
        kv_bytes_per_token_per_gpu=per_tok,
        kv_tokens=kv_tokens,
        replicas=layout.dp,
        usable_per_gpu_bytes=usable,
        max_model_len=max_model_len,
        weights_breakdown=breakdown,
        seq_overhead_tokens=overhead,
    )
    g = _GIB
    if weights > usable:
        ckpt = checkpoint_bytes(model, layout.quant, include_mtp=False)
        mtp = (
            f" ({ckpt / 1e9:.0f} GB; {checkpoint_bytes(model, layout.quant) / 1e9:.0f} GB with the "
            f"{model.mtp_params / 1e9:.1f}B MTP module)"
            if model.mtp_params
            else f" ({ckpt / 1e9:.0f} GB)"
        )
        res.fits = False
        if prof.util_semantics == "free":  # the fraction applies to what is left after weights
            room = (
                f"only {mem / g:.1f} GiB per GPU exists (the KV fraction {gpu_memory_utilization:.2f} "
                f"applies to what is left after weights)"
            )
        else:
            room = f"only {usable / g:.1f} GiB per GPU is usable ({gpu_memory_utilization:.2f} x {mem / g:.1f} GiB)"
        res.reason = (
            f"{model.name} weights in {layout.quant}{mtp} need {weights / g:.1f} GiB per GPU over "
            f"{layout.describe()}, but {room}; {layout.gpus} GPUs hold "
            f"{layout.gpus * mem / g:.0f} GiB in all"
        )
    elif kv_bytes <= 0 or kv_tokens < max_model_len + overhead:
        res.fits = False
        extra = f" (+{overhead} tokens of sliding-window pages per request)" if overhead else ""
        res.reason = (
            f"after {weights / g:.1f} GiB weights and {reserve / g:.1f} GiB engine reserve, the KV cache "
            f"holds {kv_tokens:,} tokens, fewer than max_model_len {max_model_len:,}{extra}"
        )
    if not res.fits and suggest:
        res.suggestions = suggest_layouts(
            model, layout, max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization, engine=engine
        )
    return res


_SMALLER_QUANT = MappingProxyType(
    {
        "bf16": ("fp8", "awq"),
        "fp8": ("awq",),
        "fp8-ffn": ("fp8", "awq"),
        "awq": (),
        "int4": (),
        "mxfp4": (),
        "nvfp4": (),
    }
)


def candidate_layouts(model: ModelSpec, layout: Layout, gpus: tuple[GPUSpec, ...] = ()) -> list[Layout]:
    """Layouts to try when `layout` does not fit: more nodes of the same GPU (TP within a node, PP
    across nodes), one node of each larger GPU, and the same GPUs with a smaller quantization."""
    out: list[Layout] = []
    per_node = layout.gpus_per_node
    for nodes in (2, 3, 4):
        if nodes > layout.nodes:
            out.append(
                Layout(
                    gpu=layout.gpu,
                    gpus_per_node=per_node,
                    nodes=nodes,
                    tp=per_node,
                    pp=nodes,
                    quant=layout.quant,
                    kv_dtype=layout.kv_dtype,
                )
            )
    for g in gpus:
        if g.memory_bytes > layout.gpu.memory_bytes:
            out.append(
                Layout(
                    gpu=g, gpus_per_node=per_node, nodes=1, tp=per_node, quant=layout.quant, kv_dtype=layout.kv_dtype
                )
            )
    for q in _SMALLER_QUANT[layout.quant]:
        out.append(
            Layout(
                gpu=layout.gpu,
                gpus_per_node=per_node,
                nodes=layout.nodes,
                tp=layout.tp,
                pp=layout.pp,
                dp=layout.dp,
                ep=layout.ep,
                quant=q,
                kv_dtype=layout.kv_dtype,
            )
        )
    return out


def suggest_layouts(
    model: ModelSpec, layout: Layout, *, max_model_len: int, gpu_memory_utilization: float, engine: str, limit: int = 5
) -> list[str]:
    from servescope.sim.catalog import GPUS  # local: keeps the import graph one-way and obvious

    # Keep the smallest fitting layout of each kind: more nodes, a larger GPU (two), a smaller quant.
    quota = {"nodes": 1, "gpu": 2, "quant": 2}
    out: list[str] = []
    for cand in candidate_layouts(model, layout, tuple(GPUS.values())):
        kind = "quant" if cand.quant != layout.quant else "gpu" if cand.gpu != layout.gpu else "nodes"
        if quota[kind] == 0:
            continue
        r = fit(
            model,
            cand,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            engine=engine,
            suggest=False,
        )
        if r.fits:
            quota[kind] -= 1
            out.append(
                f"{cand.describe()}: {r.weights_per_gpu_bytes / _GIB:.1f} GiB weights per GPU, "
                f"{r.kv_tokens:,} KV tokens"
            )
    return out[:limit]
