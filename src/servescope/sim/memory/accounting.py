"""How each serving engine accounts its memory: `EngineProfile` (what its utilization fraction covers,
non-torch memory, profile batch, block size, sliding-window pool, MXFP4 repacking) and `ENGINES`. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from servescope.errors import ConfigError

__all__ = ["EngineProfile", "ENGINES", "engine_profile", "sim_block_tokens"]

_GIB = 1 << 30


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


def engine_profile(engine: str) -> EngineProfile:
    """The memory accounting of `engine` (a key of `ENGINES`); ConfigError for an unknown engine."""
    try:
        return ENGINES[engine]
    except KeyError:
        raise ConfigError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}") from None


def sim_block_tokens(engine: str = "vllm") -> int:
    """The KV block the engine simulator pages by for this engine: its own (vLLM 16, TensorRT-LLM's
    tokens_per_block 32), and 16 for SGLang's one-token pages, which the simulator does not page by."""
    block = engine_profile(engine).block_tokens
    return 16 if block == 1 else block
