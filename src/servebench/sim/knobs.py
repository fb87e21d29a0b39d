"""Calibration knobs of the step-time model, and engine scheduler defaults by family and version. Pure.

A deployment resolves to a handful of step-time knobs (`StepKnobs`) from a small table of fitted
factors (`KnobTable`, one flat name -> value mapping, fitted by `plan/validate.py` and stored in
`deploy/calibration.yaml`). Each knob is a product of a base and factors per group, so a group the
fit has not seen falls back to the base (factor 1)::

    mem_efficiency     = mem.base  * mem.gpu.<gen>  * mem.eng.<family>          (clipped to 0.05..0.95)
    compute_efficiency = comp.base * comp.gpu.<gen> * comp.eng.<family>
                         [* comp.arch.<class> for a class other than dense]  (clipped to 0.02..0.95)
                                              (the share of peak a class's prompt steps reach: MoE
                                               grouped GEMMs over a few hundred rows per expert and
                                               MLA's prefill attention of the time are not a dense
                                               GEMM; prior 1, mla-moe-early and mla-moe-late falling
                                               back to mla-moe as for layer.arch)
    step_overhead_s    = step.eng.<family>
    layer_overhead_s   = layer.eng.<family> * layer.arch.dense [* layer.arch.<class> for an MoE class]
                                              (an MoE class is a factor relative to dense layers, whose
                                               prior is 1: it moves only as far as its points say, and
                                               a class no training point ran falls back to the dense
                                               layer; mla-moe-early and mla-moe-late to mla-moe,
                                               plan/fitting.py)
    prefill_layer_overhead_s = pfl.eng.<family> [* pfl.arch.<class> for a class other than dense]
                                              (per layer, on a step with prompt tokens: prompt batches
                                               run their kernels from the host where decode replays
                                               CUDA graphs, sim/steptime.py; an MoE class is a factor
                                               relative to dense layers, prior 1, mla-moe-early and
                                               mla-moe-late falling back to mla-moe as for layer.arch)
    seq_overhead_s     = seq.eng.<family>     (per running sequence per step: scheduling, block tables,
                                               sampling, detokenization; large in Python-side schedulers)
    comm_efficiency    = comm.eff * comm.gpu.<gen>  (share of the scale-up link bandwidth a collective
                                               reaches with decode's small messages: NVLink/NVSwitch
                                               and AMD's xGMI full mesh differ)
    comm_prefill_efficiency = comm.prefill.gpu.<gen>
                                              (the same share for prompt tokens, whose all-reduce
                                               messages are thousands of tokens x hidden: large
                                               messages reach most of the bus bandwidth, small ones
                                               a fraction (nccl-tests PERFORMANCE.md: bus bandwidth
                                               by message size), so one share cannot serve both.
                                               Not fitted where the bus bandwidth is published
                                               (`PINNED`): all_reduce_perf at large sizes reaches
                                               460-480 GB/s on 8xH100 SXM5 and 230-250 on 8xA100
                                               SXM4, 0.52 and 0.40 of the catalogue's links;
                                               Blackwell's and CDNA3's factors are fitted, prior 0.45)
    frontend_s         = admit.eng.<family>   (the API server's work per request before the engine
                                               sees it -- parsing, chat template, tokenization, the
                                               hand-off to the engine process -- which the requests
                                               inside share: processor sharing with this service time
                                               (`EngineConfig.frontend_s`, `sim.frontend.FrontEnd`);
                                               served points only)
    collective_s       = comm.latency_s       (fixed cost of one collective, per call)
    internode_collective_s = comm.latency_s.internode
                                              (the same for a collective that spans nodes: TP wider
                                               than a node; prior 22 us, NCCL's small all-reduce
                                               over InfiniBand, sim/steptime.py)
    mtp_accept         = spec.accept          (chance a draft token is accepted; DeepSeek-V3 report: 0.85-0.9)
    first_token_s      = ttft.base * ttft.eng.<family>
                                              (added to every request's TTFT: the API server's path around the
                                               engine -- HTTP, tokenization, the hand-off to the scheduler
                                               process and back through detokenization -- which no step
                                               time holds. One latency shared by the engines, with a factor
                                               per family whose prior is 1: a family whose own TTFT points
                                               say little (vLLM V1 once GPUStack is held out: its other
                                               sources' TTFTs are queueing) keeps the engines' common
                                               latency instead of an uncalibrated default)

Groups: engine family (`engine_family`: vllm-v0 = vLLM before V1, vllm-v1, sglang, trtllm, tgi),
GPU generation (`gpu_generation`: ampere, hopper, blackwell, cdna3) and architecture class
(`arch_class`: dense, moe = GQA MoE, mla-moe = DeepSeek-V3/R1, mla-moe-early = DeepSeek on SGLang
before 0.4.3, mla-moe-late = DeepSeek on SGLang >= 0.5, vLLM >= 0.10, TensorRT-LLM >= 1.0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["StepKnobs", "EngineDefaults", "DEFAULT_KNOBS", "ENGINE_VERSIONS", "engine_family", "gpu_generation",
           "arch_class", "resolve_knobs", "engine_defaults", "sglang_max_running", "sglang_dp_prefill_chunk",
           "prefill_cap", "chunked_budget_switched_on", "prefix_caching_by_default", "graph_max_seqs",
           "mla_absorbed_prefix", "UNBOUNDED", "sglang_chunked_prefill_size", "sglang_speculative_max_running",
           "knob_names_for", "PINNED", "admission_reserve",
           "FAMILIES", "GENERATIONS", "ARCH_CLASSES", "RELEASE_CLASSES"]

FAMILIES = ("vllm-v0", "vllm-v1", "sglang", "trtllm", "tgi")
GENERATIONS = ("ampere", "hopper", "blackwell", "cdna3")
ARCH_CLASSES = ("dense", "moe", "mla-moe", "mla-moe-early", "mla-moe-late")
# DeepSeek classes split by release: a table that does not hold their factors reads mla-moe's
RELEASE_CLASSES = ("mla-moe-early", "mla-moe-late")

# Uncalibrated starting point (and the prior the fit shrinks towards): HBM ~75% of datasheet bandwidth
# in decode GEMVs, tensor cores ~50% of dense peak in prefill GEMMs, ~3 ms of scheduling and sampling
# per step, 20 us per layer of kernel launches (plan's defaults before calibration), 70% of NVLink
# bandwidth in NCCL ring all-reduce (NCCL's nccl-tests report bus bandwidth ~ 70-80% of link peak on
# H100 NVLink at large messages), 10 us per collective call (NCCL small-message latency on NVLink),
# 45% of the catalogue's (bidirectional) link bandwidth for prompt tokens' large all-reduces (nccl-tests
# ring all-reduce bus bandwidth ~480 of 900 GB/s on 8 x H100, ~230 of 600 on 8 x A100), 2 ms per
# admitted request, 100 us per layer of a prompt step's host-launched kernels (a few dozen launches
# of ~5 us each per layer),
# 20 ms of first-token path around the engine (HTTP, tokenization, hand-offs) shared by the engines.
DEFAULT_KNOBS: Mapping[str, float] = {
    "mem.base": 0.75,
    "comp.base": 0.5,
    **{f"step.eng.{f}": 0.003 for f in FAMILIES},
    **{f"layer.eng.{f}": 20e-6 for f in FAMILIES},
    **{f"seq.eng.{f}": 10e-6 for f in FAMILIES},
    **{f"admit.eng.{f}": 2e-3 for f in FAMILIES},
    **{f"pfl.eng.{f}": 100e-6 for f in FAMILIES},
    "pfl.arch.moe": 1.0,
    "comp.arch.moe": 1.0,
    "comp.arch.mla-moe": 1.0,
    "comp.arch.mla-moe-early": 1.0,
    "comp.arch.mla-moe-late": 1.0,
    "pfl.arch.mla-moe": 1.0,
    "pfl.arch.mla-moe-early": 1.0,
    "pfl.arch.mla-moe-late": 1.0,
    "ttft.base": 0.02,
    **{f"ttft.eng.{f}": 1.0 for f in FAMILIES},
    "layer.arch.dense": 1.0,
    "layer.arch.moe": 1.0,
    "layer.arch.mla-moe": 1.0,
    "layer.arch.mla-moe-early": 1.0,
    "layer.arch.mla-moe-late": 1.0,
    "comm.eff": 0.7,
    "comm.prefill.gpu.blackwell": 0.45,  # Hopper's and Ampere's: PINNED
    "comm.prefill.gpu.cdna3": 0.45,
    "comm.latency_s": 10e-6,
    "comm.latency_s.internode": 22e-6,
    "spec.accept": 0.85,
}

# Knobs set by published measurements instead of the fit (a table's value for them is ignored): the
# share of the link a prompt step's large all-reduces reach, nccl-tests all_reduce_perf bus bandwidth
# at large sizes on one node (460-480 GB/s on 8xH100 SXM5 of 900, 230-250 on 8xA100 SXM4 of 600;
# alayanew's NCCL-tests guide, 2026-05, "Reference numbers"), H200 on the same NVLink 4 as H100.
PINNED: Mapping[str, float] = {
    "comm.prefill.gpu.hopper": 470 / 900,
    "comm.prefill.gpu.ampere": 240 / 600,
}


@dataclass(frozen=True, slots=True)
class StepKnobs:
    """The knobs one deployment's step cost takes (see sim/steptime.py for where each enters)."""

    mem_efficiency: float
    compute_efficiency: float
    step_overhead_s: float
    layer_overhead_s: float
    comm_efficiency: float
    collective_s: float
    mtp_accept: float
    seq_overhead_s: float = 0.0
    first_token_s: float = 0.0
    frontend_s: float = 0.0
    comm_prefill_efficiency: float = 0.0  # 0: prompt tokens' collectives at comm_efficiency
    prefill_layer_overhead_s: float = 0.0  # per layer, on a step with prompt tokens
    internode_collective_s: float = 0.0  # a collective spanning nodes (0: collective_s)


# The release a deployment's engine name stands for when no version is given (plan, the emulator):
# `vllm` is current vLLM (V1 with the EngineArgs defaults by device of 0.9 and later), `vllm-0.7` the
# V0 engine of 0.7.x, `sglang` and `trtllm` current releases (every SGLang default here reads a version
# not given as a current one; `arch_class` needs it stated). Validation passes each source's own version
# to the same functions.
ENGINE_VERSIONS: Mapping[str, str] = {"vllm": "0.10", "vllm-0.7": "0.7.3", "sglang": "0.5.12", "trtllm": "1.3"}


def engine_family(engine: str, version: str = "") -> str:
    """vllm before 0.8 is V0 (vLLM 0.8.0 made the V1 engine the default); 'other' (NVIDIA NIM) runs a
    TensorRT-LLM engine for the Llama profiles in the corpus; tgi and sglang as named."""
    e = engine.lower()
    if e.startswith("vllm"):
        v = version.strip().lstrip("v")
        parts = v.split(".")
        try:
            major, minor = int(parts[0]), int(parts[1][:2].rstrip("abcdefghijklmnopqrstuvwxyz") or 0)
        except (ValueError, IndexError):
            return "vllm-v1" if e == "vllm" and not v else ("vllm-v0" if e == "vllm-0.7" else "vllm-v1")
        return "vllm-v0" if (major, minor) < (0, 8) else "vllm-v1"
    if e in ("trtllm", "tensorrt-llm", "other", "nim"):
        return "trtllm"
    if e in ("sglang", "tgi"):
        # One SGLang group: a split at 0.4.4 (before FlashInfer/FlashMLA MLA backends) was tried; its
        # early group held only DataCrunch's two sources, so each was predicted from the other alone.
        return e
    return "vllm-v1"


def gpu_generation(gpu: str) -> str:
    g = gpu.lower()
    if g.startswith(("b200", "gb200", "b300")):
        return "blackwell"
    if g.startswith("mi3"):
        return "cdna3"
    if g.startswith("a100"):
        return "ampere"
    return "hopper"


def arch_class(is_moe: bool, attention: str, family: str = "", version: str = "") -> str:
    """dense, moe (GQA MoE) or mla-moe (DeepSeek-V3/R1). DeepSeek on SGLang before 0.4.3 is a class of
    its own, mla-moe-early: that release line ran MLA decode on its Triton kernels and block-FP8 GEMMs
    and fused MoE on untuned Triton kernels; 0.4.3 brought FlashInfer MLA and later releases FlashMLA,
    DeepGEMM and CUDA graphs under DP attention (SGLang release notes), so its per-layer cost is not
    the later releases' and must not set theirs.

    The releases from the second half of 2025 on (SGLang >= 0.5.0, vLLM >= 0.10, TensorRT-LLM >= 1.0) are
    a class of their own too, mla-moe-late, whose per-layer factors fall back to mla-moe's where no point
    informs them. The corpus's DeepSeek measurements of those releases (GPUStack's, the SGLang cookbook's,
    InferenceX's) and of the first half's (R1-Benchmark's, TensorRT-LLM issue 5929's, the attention-backend
    doc's) ask for per-layer costs 1.7x apart -- with InferenceX left out the one mla-moe factor fitted
    2.8, with it 1.6 -- which one factor cannot give. The split is by release, for fitted knobs; no one
    stated kernel change is claimed for it. A version not stated is not taken for a late one (the
    corpus's unversioned DeepSeek sources are of 2025-H1); plan states its engines' current releases
    (`ENGINE_VERSIONS`)."""
    if not is_moe:
        return "dense"
    if attention != "mla":
        return "moe"
    v = _patch_version(version)
    if v is None:
        return "mla-moe"
    if family == "sglang" and v < (0, 4, 3):
        return "mla-moe-early"
    late = {"sglang": (0, 5, 0), "vllm-v1": (0, 10, 0), "trtllm": (1, 0, 0)}.get(family)
    return "mla-moe-late" if late is not None and v >= late else "mla-moe"


def _patch_version(v: str) -> tuple[int, int, int] | None:
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


def knob_names_for(family: str, generation: str, arch: str) -> tuple[str, ...]:
    """The table entries a deployment of this kind reads (a fit moves only these for its points)."""
    return ("mem.base", f"mem.gpu.{generation}", f"mem.eng.{family}", "comp.base", f"comp.gpu.{generation}",
            f"comp.eng.{family}", *((f"comp.arch.{arch}",) if arch != "dense" else ()), f"step.eng.{family}",
            f"layer.eng.{family}", "layer.arch.dense",
            *((f"layer.arch.{arch}",) if arch != "dense" else ()),
            f"pfl.eng.{family}", *((f"pfl.arch.{arch}",) if arch != "dense" else ()),
            f"seq.eng.{family}", "ttft.base", f"ttft.eng.{family}", f"admit.eng.{family}",
            "comm.eff", f"comm.gpu.{generation}", "comm.latency_s", "comm.latency_s.internode",
            f"comm.prefill.gpu.{generation}", "spec.accept")


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def resolve_knobs(table: Mapping[str, float], family: str, generation: str, arch: str) -> StepKnobs:
    """Knobs of one deployment from a fitted table (missing entries: `DEFAULT_KNOBS`, factors 1)."""
    def get(name: str, default: float = 1.0) -> float:
        if name in PINNED:
            return PINNED[name]
        return float(table.get(name, DEFAULT_KNOBS.get(name, default)))

    def arch_factor(prefix: str) -> float:  # a release class a table does not hold reads mla-moe's factor
        if arch in RELEASE_CLASSES and prefix + arch not in table and prefix + "mla-moe" in table:
            return get(prefix + "mla-moe")
        return get(prefix + arch)

    return StepKnobs(
        mem_efficiency=_clip(get("mem.base") * get(f"mem.gpu.{generation}") * get(f"mem.eng.{family}"), 0.05, 0.95),
        compute_efficiency=_clip(get("comp.base") * get(f"comp.gpu.{generation}") * get(f"comp.eng.{family}")
                                 * (arch_factor("comp.arch.") if arch != "dense" else 1.0), 0.02, 0.95),
        step_overhead_s=get(f"step.eng.{family}", 0.003),
        layer_overhead_s=get(f"layer.eng.{family}", 20e-6) * get("layer.arch.dense")
        * (arch_factor("layer.arch.") if arch != "dense" else 1.0),
        seq_overhead_s=get(f"seq.eng.{family}", 10e-6),
        prefill_layer_overhead_s=get(f"pfl.eng.{family}", 100e-6)
        * (arch_factor("pfl.arch.") if arch != "dense" else 1.0),
        first_token_s=get("ttft.base") * get(f"ttft.eng.{family}"),
        comm_efficiency=_clip(get("comm.eff") * get(f"comm.gpu.{generation}"), 0.02, 1.0),
        comm_prefill_efficiency=_clip(get(f"comm.prefill.gpu.{generation}"), 0.02, 1.0),
        frontend_s=get(f"admit.eng.{family}", 2e-3),
        collective_s=get("comm.latency_s"),
        internode_collective_s=get("comm.latency_s.internode"),
        mtp_accept=_clip(get("spec.accept"), 0.0, 0.99),
    )


@dataclass(frozen=True, slots=True)
class EngineDefaults:
    """Scheduler limits an engine runs with when the user sets none."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    memory_engine: str  # sim.memory ENGINES key for KV accounting
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
    v = _patch_version(version)
    return 2048 if v is not None and v >= (0, 6, 5) else 512


def chunked_budget_switched_on(family: str, version: str) -> int:
    """The batch budget of an engine whose chunked prefill a flag switched on (its default is off): vLLM
    V0's own (`v0_chunked_budget`), else 8192."""
    return v0_chunked_budget(version) if family == "vllm-v0" else 8192


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
    ver = _patch_version(version)
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
    release = _patch_version(version)
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


def mla_absorbed_prefix(family: str, *, version: str = "", generation: str = "hopper",
                        attention: str = "mla") -> tuple[int, int] | None:
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
    release = _patch_version(version)
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
    release = _patch_version(version)
    if release is not None and release < (0, 4, 7):
        return 2048 if mib < 25_000 else 8192
    if release is not None and release < (0, 4, 8):
        return 16384 if mib > 180_000 else 2048 if mib < 25_000 else 8192
    if gpu_memory_gib < 35:
        return 2048
    if gpu_memory_gib < 60 and (release is None or release >= (0, 5, 3)):
        return 4096
    return 8192 if gpu_memory_gib < 160 else 16384


def engine_defaults(family: str, *, max_model_len: int, version: str = "", gpu: str = "",
                    gpu_memory_gib: float = 0.0, offline: bool = False) -> EngineDefaults:
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
