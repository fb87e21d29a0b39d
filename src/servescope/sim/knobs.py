"""Calibration knobs of the step-time model, and engine scheduler defaults by family and version. Pure.

A deployment resolves to a handful of step-time knobs (`StepKnobs`) from a small table of fitted
factors (`KnobTable`, one flat name -> value mapping, fitted by `plan/validate.py` and stored in
`deploy/calibration.yaml`). Each knob is a product of a base and factors per group, so a group the
fit has not seen falls back to the base (factor 1)::

    mem_efficiency     = mem.base  * mem.gpu.<gen>  * mem.eng.<family>          (clipped to 0.05..0.95)
                         [* mem.quant.int4 for 4-bit weight-only checkpoints: AWQ/GPTQ, whose
                                              dequantizing GEMMs and MoE kernels (Marlin, the
                                              fused AWQ MoE) reach another share of HBM than
                                              FP8/BF16 GEMMs; prior 1]
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
                                               plan/knobfit.py)
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
before 0.4.3, mla-moe-late = DeepSeek on SGLang >= 0.5, vLLM >= 0.10, TensorRT-LLM >= 1.0, mla-moe-v0 =
DeepSeek on vLLM's V0 engine, < 0.8).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from servescope.errors import ConfigError
from servescope.sim.defaults import patch_version

__all__ = [
    "StepKnobs",
    "DEFAULT_KNOBS",
    "ENGINE_VERSIONS",
    "EngineSpec",
    "parse_engine",
    "engine_family",
    "gpu_generation",
    "arch_class",
    "resolve_knobs",
    "knob_names_for",
    "PINNED",
    "FAMILIES",
    "GENERATIONS",
    "ARCH_CLASSES",
    "RELEASE_CLASSES",
]

FAMILIES = ("vllm-v0", "vllm-v1", "sglang", "trtllm", "tgi")
GENERATIONS = ("ampere", "hopper", "blackwell", "cdna3")
ARCH_CLASSES = ("dense", "moe", "mla-moe", "mla-moe-early", "mla-moe-late", "mla-moe-v0")
# DeepSeek classes split by release: a table that does not hold their factors reads mla-moe's
RELEASE_CLASSES = ("mla-moe-early", "mla-moe-late", "mla-moe-v0")

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
    "comp.arch.mla-moe-v0": 1.0,
    "pfl.arch.mla-moe": 1.0,
    "pfl.arch.mla-moe-early": 1.0,
    "pfl.arch.mla-moe-late": 1.0,
    "pfl.arch.mla-moe-v0": 1.0,
    "ttft.base": 0.02,
    **{f"ttft.eng.{f}": 1.0 for f in FAMILIES},
    "layer.arch.dense": 1.0,
    "layer.arch.moe": 1.0,
    "layer.arch.mla-moe": 1.0,
    "layer.arch.mla-moe-early": 1.0,
    "layer.arch.mla-moe-late": 1.0,
    "layer.arch.mla-moe-v0": 1.0,
    "mem.quant.int4": 1.0,
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

#: engine families `--engine FAMILY-VERSION` takes, and their other spellings
ENGINE_BASES: Mapping[str, str] = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "tensorrt-llm": "trtllm"}


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """An engine as `--engine` names it, a family and optionally a release (`vllm`, `vllm-0.8`,
    `sglang-0.4.3`, `trtllm-0.17`): the release whose defaults, kernel classes (`arch_class`) and
    fitted knob group (`engine_family`) the deployment gets, and the memory accounting it uses."""

    name: str
    base: str  # vllm, sglang, trtllm: the recipes' engine
    version: str  # the release the name stands for: ENGINE_VERSIONS' for the names it lists, else as given
    # (X.Y: X.Y.0); a bare family, its current release
    stated: bool  # the name gave a version

    @property
    def family(self) -> str:
        return engine_family(self.base, self.version)

    @property
    def memory_engine(self) -> str:
        """The `sim.memory.accounting.ENGINES` key: V0 vLLM's accounting is its own."""
        return "vllm-0.7" if self.family == "vllm-v0" else self.base


def parse_engine(name: str) -> EngineSpec:
    """`vllm`, `vllm-0.8`, `sglang-0.4.3`, `trtllm-1.0` ... as an EngineSpec; ConfigError (with the
    accepted forms) for anything else."""
    n = name.strip().lower()
    base, _, ver = n.partition("-")
    if base == "tensorrt" and ver.startswith("llm"):
        base, _, ver = "tensorrt-llm", "-", ver[3:].lstrip("-")
    if base not in ENGINE_BASES:
        raise ConfigError(
            f"unknown engine {name!r}: give a family ({', '.join(sorted(set(ENGINE_BASES.values())))}), "
            "optionally with a release, e.g. vllm-0.7, vllm-0.8, sglang-0.4, sglang-0.4.3, trtllm-0.17, trtllm-1.0"
        )
    b = ENGINE_BASES[base]
    if f"{b}-{ver}" in ENGINE_VERSIONS:
        return EngineSpec(name, b, ENGINE_VERSIONS[f"{b}-{ver}"], stated=True)
    if not ver:
        return EngineSpec(name, b, ENGINE_VERSIONS[b], stated=False)
    ver = ver.lstrip("v")
    if patch_version(ver) is None or ver.count(".") < 1:
        raise ConfigError(f"engine {name!r}: the release after {base}- must be MAJOR.MINOR[.PATCH], e.g. {base}-0.8")
    return EngineSpec(name, b, ver, stated=True)


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
    (`ENGINE_VERSIONS`).

    DeepSeek on vLLM's V0 engine (< 0.8: the 0.7.x line, MLA from 0.7.1) is mla-moe-v0, by release as
    well: the V0 scheduler and model runner of early 2025 with the MoE and MLA kernels of that line, whose
    per-layer cost the V1 releases' points must not set; no point informing it, it reads mla-moe's."""
    if not is_moe:
        return "dense"
    if attention != "mla":
        return "moe"
    if family == "vllm-v0":
        return "mla-moe-v0"
    v = patch_version(version)
    if v is None:
        return "mla-moe"
    if family == "sglang" and v < (0, 4, 3):
        return "mla-moe-early"
    late = {"sglang": (0, 5, 0), "vllm-v1": (0, 10, 0), "trtllm": (1, 0, 0)}.get(family)
    return "mla-moe-late" if late is not None and v >= late else "mla-moe"


def _int4(quant: str) -> bool:
    return quant.lower() in ("awq", "int4", "gptq")


def knob_names_for(family: str, generation: str, arch: str, quant: str = "") -> tuple[str, ...]:
    """The table entries a deployment of this kind reads (a fit moves only these for its points)."""
    return (
        "mem.base",
        *(("mem.quant.int4",) if _int4(quant) else ()),
        f"mem.gpu.{generation}",
        f"mem.eng.{family}",
        "comp.base",
        f"comp.gpu.{generation}",
        f"comp.eng.{family}",
        *((f"comp.arch.{arch}",) if arch != "dense" else ()),
        f"step.eng.{family}",
        f"layer.eng.{family}",
        "layer.arch.dense",
        *((f"layer.arch.{arch}",) if arch != "dense" else ()),
        f"pfl.eng.{family}",
        *((f"pfl.arch.{arch}",) if arch != "dense" else ()),
        f"seq.eng.{family}",
        "ttft.base",
        f"ttft.eng.{family}",
        f"admit.eng.{family}",
        "comm.eff",
        f"comm.gpu.{generation}",
        "comm.latency_s",
        "comm.latency_s.internode",
        f"comm.prefill.gpu.{generation}",
        "spec.accept",
    )


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def resolve_knobs(table: Mapping[str, float], family: str, generation: str, arch: str, quant: str = "") -> StepKnobs:
    """Knobs of one deployment from a fitted table (missing entries: `DEFAULT_KNOBS`, factors 1); 4-bit
    weight-only checkpoints (AWQ, GPTQ) read `mem.quant.int4` too."""

    def get(name: str, default: float = 1.0) -> float:
        if name in PINNED:
            return PINNED[name]
        return float(table.get(name, DEFAULT_KNOBS.get(name, default)))

    def arch_factor(prefix: str) -> float:  # a release class a table does not hold reads mla-moe's factor
        if arch in RELEASE_CLASSES and prefix + arch not in table and prefix + "mla-moe" in table:
            return get(prefix + "mla-moe")
        return get(prefix + arch)

    return StepKnobs(
        mem_efficiency=_clip(
            get("mem.base")
            * get(f"mem.gpu.{generation}")
            * get(f"mem.eng.{family}")
            * (get("mem.quant.int4") if _int4(quant) else 1.0),
            0.05,
            0.95,
        ),
        compute_efficiency=_clip(
            get("comp.base")
            * get(f"comp.gpu.{generation}")
            * get(f"comp.eng.{family}")
            * (arch_factor("comp.arch.") if arch != "dense" else 1.0),
            0.02,
            0.95,
        ),
        step_overhead_s=get(f"step.eng.{family}", 0.003),
        layer_overhead_s=get(f"layer.eng.{family}", 20e-6)
        * get("layer.arch.dense")
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
