"""Engine behaviour by family and version, as each engine's code and documentation state it. Pure.

The limits an engine runs with when the user sets none (`engine_defaults`: sequences, batched tokens,
chunked prefill, memory accounting, utilization), and what its scheduler does with them: SGLang's
request pool and chunk sizes, the prompt tokens a step may carry (`prefill_cap`), CUDA-graph capture
sizes, prefix caching by default, whether prompts and decodes share a step (`mixes_steps`), the KV set
aside at admission (`admission_reserve`) and MLA's absorbed prefix. Facts, not fits: the fitted
calibration knobs are `sim.knobs`'s. Plan, the emulator (`deploy.deployment`) and the validation
(`plan.setting`) read the same functions.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "EngineDefaults",
    "engine_defaults",
    "sglang_max_running",
    "sglang_dp_prefill_chunk",
    "prefill_cap",
    "chunked_budget_switched_on",
    "prefix_caching_by_default",
    "graph_max_seqs",
    "mla_absorbed_prefix",
    "UNBOUNDED",
    "sglang_chunked_prefill_size",
    "sglang_speculative_max_running",
    "admission_reserve",
    "mixes_steps",
    "batch_budget",
    "v0_chunked_budget",
    "SGLANG_SPECULATIVE_MAX_RUNNING",
    "patch_version",
]


def patch_version(v: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a release string ('0.4.5.post1' -> (0, 4, 5); 'v1.0' -> (1, 0, 0)); None
    when it does not start with a number."""
    parts = v.strip().lstrip("v").split(".")
    try:
        nums = [int("".join(c for c in x if c.isdigit()) or 0) for x in parts[:3]]
    except ValueError:
        return None
    if not parts[0].strip().isdigit():
        return None
    while len(nums) < 3:
        nums.append(0)
    return nums[0], nums[1], nums[2]


@dataclass(frozen=True, slots=True)
class EngineDefaults:
    """Scheduler limits an engine runs with when the user sets none."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    memory_engine: str  # sim.memory.accounting ENGINES key for KV accounting
    gpu_memory_utilization: float


def _version(v: str) -> tuple[int, int] | None:
    parts = v.strip().lstrip("v").split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (ValueError, IndexError):
        return None


def v0_chunked_budget(version: str) -> int:
    """vLLM V0's batch budget with chunked prefill on and no `--max-num-batched-tokens`: 512 before
    0.6.5, 2048 from it (vllm PR #10544); 512 for a version not given."""
    v = patch_version(version)
    return 2048 if v is not None and v >= (0, 6, 5) else 512


def chunked_budget_switched_on(family: str, version: str) -> int:
    """The batch budget of an engine whose chunked prefill a flag switched on (its default is off): vLLM
    V0's own (`v0_chunked_budget`), else 8192."""
    return v0_chunked_budget(version) if family == "vllm-v0" else 8192


def batch_budget(d: EngineDefaults, family: str, version: str, *, chunked: bool, max_model_len: int) -> int:
    """The batch token budget an engine runs when none is set: its default (`d`); with chunked prefill
    switched on by a flag, the engine's budget for it (`chunked_budget_switched_on`); switched off,
    every prompt must fit one step, so at least max(max_model_len, 2048), as vLLM's SchedulerConfig
    raises it, and never below the engine's own budget (TensorRT-LLM's max_num_tokens stays 8192)."""
    if chunked == d.chunked_prefill:
        return d.max_num_batched_tokens
    if chunked:
        return chunked_budget_switched_on(family, version)
    return max(d.max_num_batched_tokens, max_model_len, 2048)


def prefix_caching_by_default(family: str) -> bool:
    """Whether the engine reuses cached prompt blocks unless told not to: vLLM V1 (>= 0.8), SGLang's radix
    cache and TensorRT-LLM's KV block reuse do; vLLM V0 only with `--enable-prefix-caching`; TGI not
    before 3.0 (December 2024), after every TGI run in the corpus."""
    return family in ("vllm-v1", "trtllm") or family.startswith("sglang")


def sglang_dp_prefill_chunk(chunked_prefill_size: int, dp: int, version: str = "") -> int:
    """Prompt tokens a step of one SGLang DP-attention rank may carry: `--chunked-prefill-size` is the
    machine's budget, and ServerArgs divides it among the ranks "to avoid MoE kernel issues" (every
    rank's tokens meet in the MoE layers): `chunked_prefill_size // dp_size` (`_handle_data_parallelism`
    in the 0.5 releases and the 0.4 ones with DeepEP). The first releases with DP attention (0.4.0 to
    0.4.3, which also forced dp_size = tp_size) halved it instead. A version not given is a current one."""
    if dp <= 1:
        return chunked_prefill_size
    ver = patch_version(version)
    early = ver is not None and ver < (0, 4, 4)
    return max(1, chunked_prefill_size // (2 if early else dp))


def prefill_cap(family: str, chunked_prefill_size: int, dp: int, *, moe: bool, version: str = "") -> int:
    """`EngineConfig.max_prefill_tokens` of one replica: SGLang's DP attention (dp > 1 on an MoE model)
    gives each rank its share of the chunked prefill size (`sglang_dp_prefill_chunk`); 0 (no cap of its
    own) for every other engine and layout."""
    if family == "sglang" and dp > 1 and moe:
        return sglang_dp_prefill_chunk(chunked_prefill_size, dp, version)
    return 0


def graph_max_seqs(family: str, *, version: str = "", gpu_memory_gib: float = 0.0, tp: int = 1) -> int:
    """The largest decode batch the engine replays from a captured CUDA graph by default
    (`StepCost.graph_max_seqs`; 0: no limit modelled). A larger batch runs eager.

    - SGLang before 0.5.3: `cuda_graph_max_bs` 160 on GPUs of >= 25 GB (ServerArgs; sglang PR #2360 kept
      80 and 8 for smaller ones). From 0.5.3 (PR #10372, merged 2025-09, "relax max_cuda_graph_bs") by
      GPU memory: under 35 GB 24 / 80 (tp < 4 / >= 4), under 60 GB 32 / 160, under 160 GB (H100,
      A100-80, H200) 256 / 512, above (B200, MI300X) 512. A version not given (or not read) is the current one.
    - vLLM V1: 512, its compilation config's largest capture size (from 0.10 min(2 x max_num_seqs, 512),
      vllm PR #20628, the same 512 at the default 256 or 1024 sequences).
    - vLLM V0 (from 0.6 it captures up to max_num_seqs), TensorRT-LLM and TGI: no limit modelled.
    """
    if family == "vllm-v1":
        return 512
    if not family.startswith("sglang"):
        return 0
    release = patch_version(version)
    if release is not None and release < (0, 5, 3):
        if gpu_memory_gib and gpu_memory_gib < 25:
            return 8 if tp < 4 else 80
        return 160
    if gpu_memory_gib and gpu_memory_gib < 35:
        return 24 if tp < 4 else 80
    if gpu_memory_gib and gpu_memory_gib < 60:
        return 32 if tp < 4 else 160
    if not gpu_memory_gib or gpu_memory_gib < 160:
        return 256 if tp < 4 else 512
    return 512


UNBOUNDED = 1 << 62


def mla_absorbed_prefix(
    family: str, *, version: str = "", generation: str = "hopper", attention: str = "mla"
) -> tuple[int, int] | None:
    """The cached-prefix sizes at which an MLA engine runs a prompt step's attention in its absorbed form
    (`StepCost.absorbed_prefix`: absorbed where lo <= the step's summed prefix < hi; None: never).

    The absorbed form attends over the 512 + 64 latent dimensions of every head, 2,176 FLOPs a query-key
    pair per head against the decompressed (MHA) form's 640: right for decode, 3.4x the arithmetic for a
    prompt chunk. SGLang chooses per prompt batch, on the sum of its requests' cached prefixes
    (`DeepseekV2AttentionMLA.dispatch_attn_forward_method`, read in the released wheels):

    - 0.4.5 and before (MLA's default backend Triton, or FlashInfer with --enable-flashinfer-mla): MHA
      only for a batch with no prefix, so every later chunk of a chunked prompt runs absorbed: (1, inf).
    - 0.4.5.post1 (FA3 the default for MLA on Hopper; "chunked prefix cache", PR #5113 of 2025-04-15):
      MHA only from 8,192 prefix tokens (`chunked_prefix_cache_threshold`), absorbed below: (0, 8192).
    - 0.4.6 on (and a version not given) on Hopper and Blackwell: MHA with no prefix or from 8,192
      prefix tokens, absorbed between: (1, 8192).
    - Elsewhere (A100, MI300X: the Triton rule of every release): (1, inf).

    vLLM computes prompts with a cached context in the MHA form (its MLA backends' chunked-context
    prefill), TensorRT-LLM's context phase too: None."""
    if not family.startswith("sglang") or attention != "mla":
        return None
    if generation not in ("hopper", "blackwell"):
        return (1, UNBOUNDED)
    release = patch_version(version)
    if release is not None and (release < (0, 4, 5) or (release == (0, 4, 5) and "post" not in version)):
        return (1, UNBOUNDED)
    if release == (0, 4, 5):
        return (0, 8192)
    return (1, 8192)


def mixes_steps(family: str, chunked_prefill: bool) -> bool:
    """Whether the engine runs prompt tokens and decodes in one step (`EngineConfig.mixed_steps`). vLLM
    V1 and SGLang always do, as does vLLM V0 with chunked prefill (its `_schedule_chunked_prefill`
    takes the decodes first, then prompt chunks, into one batch). vLLM V0 without it does not: "Don't
    schedule decodes if prefills are scheduled" (`Scheduler._schedule_default`, vllm/core/scheduler.py,
    0.5-0.7), so a step that admits prompts carries no decode. Nor does TGI 2: its router runs a new
    batch's prefill as a forward pass of its own, then decodes the merged batch."""
    if family == "tgi":
        return False
    return not (family == "vllm-v0" and not chunked_prefill)


def admission_reserve(family: str) -> float:
    """Share of a request's output whose KV the scheduler sets aside when it admits the request
    (`EngineConfig.reserve_output`; 0: it admits on the prompt alone and preempts under pressure, as
    vLLM does). TensorRT-LLM's default capacity scheduler policy GUARANTEED_NO_EVICT admits a request
    only when its prompt + max_tokens fit (TensorRT-LLM docs, "Capacity scheduler policy"): 1. SGLang
    reserves new_token_ratio x max_new_tokens, starting at 0.7 (sglang scheduler,
    SGLANG_INIT_NEW_TOKEN_RATIO): 0.7."""
    if family == "trtllm":
        return 1.0
    if family.startswith("sglang"):
        return 0.7
    return 0.0


SGLANG_SPECULATIVE_MAX_RUNNING = 48


def sglang_speculative_max_running(dp: int = 1) -> int:
    """SGLang's running-request limit per scheduler under EAGLE / NextN (MTP) speculative decoding when
    --max-running-requests is unset: ServerArgs sets 48 (every release from 0.4.5 to 0.5.12, read in the
    wheels: "Max running requests is reset to 48 for speculative decoding"), and with DP attention each
    rank's scheduler takes its 1/dp share (tp_worker: max_running_requests // dp_size)."""
    return max(1, SGLANG_SPECULATIVE_MAX_RUNNING // max(1, dp))


def sglang_max_running(kv_tokens: int, context_len: int) -> int:
    """SGLang's default max running requests when --max-running-requests is unset: the request pool is
    sized min(max(kv_tokens / context_len x 512, 2048), 4096) (sglang model_runner, max_num_reqs)."""
    return min(max(int(kv_tokens / max(1, context_len) * 512), 2048), 4096)


def sglang_chunked_prefill_size(version: str = "", gpu_memory_gib: float = 0.0) -> int:
    """SGLang's default --chunked-prefill-size by release and GPU memory (ServerArgs, read in the released
    wheels): up to 0.4.6 2048 under 25,000 MiB and 8192 above; 0.4.7 16384 above 180,000 MiB (B200,
    MI300X); 0.4.8-0.5.2 2048 under 35 GiB, 8192 under 160 GiB, 16384 above; from 0.5.3 also 4096
    under 60 GiB (A100-40, L40). A version not given is the current one; a GPU of unknown memory 8192."""
    if gpu_memory_gib <= 0:
        return 8192
    mib = gpu_memory_gib * 1024
    release = patch_version(version)
    if release is not None and release < (0, 4, 7):
        return 2048 if mib < 25_000 else 8192
    if release is not None and release < (0, 4, 8):
        return 16384 if mib > 180_000 else 2048 if mib < 25_000 else 8192
    if gpu_memory_gib < 35:
        return 2048
    if gpu_memory_gib < 60 and (release is None or release >= (0, 5, 3)):
        return 4096
    return 8192 if gpu_memory_gib < 160 else 16384


def engine_defaults(
    family: str,
    *,
    max_model_len: int,
    version: str = "",
    gpu: str = "",
    gpu_memory_gib: float = 0.0,
    offline: bool = False,
) -> EngineDefaults:
    """Default limits by engine family and version, as each engine's documentation states them.

    - vLLM V0 (0.5-0.7): max_num_seqs 256; chunked prefill switched on automatically for contexts over
      32K with a 512-token budget (vLLM 0.6 EngineArgs), 2048 from 0.6.5 ("Update default
      max_num_batch_tokens for chunked prefill to 2048", vllm PR #10544, merged 2024-11), else off
      with the budget raised to max(max_model_len, 2048) (the 'max_num_batched_tokens must be >=
      max_model_len' rule). A version not given keeps 512.
    - vLLM V1 (>= 0.8): chunked prefill always on, max_num_seqs 256, max_num_batched_tokens 2048 for the
      OpenAI server and 8192 for the offline LLM class (EngineArgs usage-context defaults), except on a
      device whose name holds "h100" or "h200": 8192 for the server and 16384 for the LLM class there
      ("the 2K token budget for API server is too small for H100 and H200", vllm PR #12369, merged
      2025-01-24, before V1 became the default in 0.8.0). From 0.9 (defaults by device, vllm PR #17885),
      a GPU of >= 70 GiB that is not an A100 (H100, H200, MI300X) gets max_num_seqs 1024 and 8192
      batched tokens for the server, 16384 for the LLM class; an A100 keeps 256 and 2048 / 8192.
      Applied when the version is given.
    - SGLang: chunked_prefill_size by release and GPU memory (`sglang_chunked_prefill_size`: 8192 on
      an H100, H200 or A100-80, 16384 on a B200 or MI300X from 0.4.7/0.4.8), max_running_requests from
      the KV pool (`sglang_max_running` once the pool is known; 1024 here as a placeholder),
      mem_fraction_static ~0.88 on 80-192 GB GPUs (server_args.py).
    - TensorRT-LLM (trtllm-serve / trtllm-bench PyTorch): max_batch_size 2048, max_num_tokens 8192,
      KV = 0.9 of the free memory (kv_cache_free_gpu_memory_fraction).
    - TGI: max_batch_prefill_tokens 4096 (raised to the longest prompt), prompts prefilled whole.
    """
    if family == "vllm-v0":
        if max_model_len > 32768:
            return EngineDefaults(256, v0_chunked_budget(version), True, "vllm", 0.9)
        return EngineDefaults(256, max(max_model_len, 2048), False, "vllm", 0.9)
    if family.startswith("sglang"):
        return EngineDefaults(1024, sglang_chunked_prefill_size(version, gpu_memory_gib), True, "sglang", 0.88)
    if family == "trtllm":
        return EngineDefaults(2048, 8192, True, "trtllm", 0.9)
    if family == "tgi":
        return EngineDefaults(256, max(4096, max_model_len), False, "vllm", 0.9)
    ver = _version(version)
    if ver is not None and ver >= (0, 9) and gpu_memory_gib >= 70 and not gpu.lower().startswith("a100"):
        return EngineDefaults(1024, 16384 if offline else 8192, True, "vllm", 0.9)
    if ver is not None and gpu.lower().startswith(("h100", "h200")):
        return EngineDefaults(256, 16384 if offline else 8192, True, "vllm", 0.9)
    return EngineDefaults(256, 8192 if offline else 2048, True, "vllm", 0.9)
