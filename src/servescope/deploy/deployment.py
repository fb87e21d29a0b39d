"""A deployment: model, GPU, count, engine and version, parallelism, quantization and engine limits,
resolved to one engine configuration. The one place `servescope plan` and the emulator get it from.

    dep = Deployment.build(model="Llama-3.1-8B", gpu="h100", gpus=1)          # or deployment_from_mapping
    dep.layout                 # sim.placement.Layout (tp x pp x dp, EP, quantization)
    dep.limits                 # max_num_seqs, max_num_batched_tokens, chunked prefill: the engine's own
                               # defaults by family and version unless set (sim.defaults.engine_defaults)
    dep.fit()                  # sim.memory.fit.FitResult: weights, reserve and KV capacity (one number)
    dep.knobs()                # step-time knobs: the fitted table deploy/calibration.yaml, or an override
    dep.engine_config()        # sim EngineConfig: what the emulator runs on the wall clock and
                               # plan's what-if on a virtual clock

A saved deployment (a packaged profile in `deploy/profiles/*.yaml`, or `servescope emulate --profile
FILE`) is a YAML of the same fields as the flags: model, gpu, gpus (per node), nodes, engine, tp, pp,
dp, ep, quant, kv_dtype, max_model_len, max_num_seqs, max_num_batched_tokens,
gpu_memory_utilization, enable_prefix_caching, chunked_prefill; optionally `knobs:` (a calibration,
e.g. from `servescope plan --calibrate`, with `StepKnobs` field names) and `kv_tokens` (pins the KV
capacity, e.g. to an engine's logged figure). Profiles carry no knobs of their own: knobs come from one
place, so the emulator and plan agree for any deployment.

This module reads the fitted knob table (I/O); everything it calls in `sim/` is pure.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from servescope.errors import ConfigError
from servescope.sim.catalog.gpus import GPUSpec, get_gpu
from servescope.sim.catalog.models import ModelSpec
from servescope.sim.config import EngineConfig
from servescope.sim.defaults import (
    admission_reserve,
    batch_budget,
    engine_defaults,
    graph_max_seqs,
    mixes_steps,
    mla_absorbed_prefix,
    prefill_cap,
    prefix_caching_by_default,
    sglang_max_running,
)
from servescope.sim.knobs import EngineSpec, StepKnobs, arch_class, gpu_generation, parse_engine, resolve_knobs
from servescope.sim.memory.accounting import sim_block_tokens
from servescope.sim.memory.fit import FitResult, fit
from servescope.sim.memory.kvsize import kv_seq_overhead_tokens
from servescope.sim.placement import Layout
from servescope.sim.profile import Profile, profile_from_dict, profile_with_engine, step_cost

__all__ = [
    "Deployment",
    "EngineLimits",
    "resolve_parallel",
    "deployment_from_mapping",
    "load_knob_table",
    "load_knob_table_meta",
    "profile_from_raw",
    "DEPLOYMENT_KEYS",
]

DEPLOYMENT_KEYS = (
    "model",
    "gpu",
    "gpus",
    "nodes",
    "engine",
    "tp",
    "pp",
    "dp",
    "ep",
    "quant",
    "kv_dtype",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "enable_prefix_caching",
    "chunked_prefill",
    "kv_tokens",
    "knobs",
)
_KNOB_FIELDS = tuple(f.name for f in dataclasses.fields(StepKnobs))
_KNOB_TABLE = "calibration.yaml"  # fitted by plan/validate.py; absent: sim.knobs.DEFAULT_KNOBS


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """The scheduler limits a deployment runs with (set by the user or the engine's defaults)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    gpu_memory_utilization: float
    max_prefill_tokens: int = 0  # prompt tokens a step may carry (0: the batch budget's rest)


def resolve_parallel(
    *, gpus: int, nodes: int, tp: int | None, pp: int | None, dp: int | None, ep: int | None, model: ModelSpec
) -> tuple[int, int, int, int]:
    """Fill in the parallelism left out: TP within a node, PP across nodes, DP 1. EP: off, except that
    data-parallel attention on an MoE model splits the experts over every rank (ep = tp * dp, as
    docs/plan.md says: DP replicates everything but the experts)."""
    total = gpus * nodes
    if tp is None and pp is None and dp is None:
        tp, pp, dp = gpus, nodes, 1
    if tp is None:
        tp = max(1, total // ((pp or 1) * (dp or 1)))
    if pp is None:
        pp = max(1, total // (tp * (dp or 1)))
    if dp is None:
        dp = max(1, total // (tp * pp))
    if ep is None:
        ep = tp * dp if (dp > 1 and model.is_moe) else 1
    return tp, pp, dp, ep


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """One serving deployment. Build with `Deployment.build` (fills defaults) or `deployment_from_mapping`."""

    model: ModelSpec
    gpu: GPUSpec
    gpus_per_node: int = 1
    nodes: int = 1
    engine: str = "vllm"  # a family, optionally with a release: vllm, vllm-0.7, vllm-0.8, sglang-0.4, trtllm-1.0
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    quant: str = "bf16"
    kv_dtype: str = "bf16"
    max_model_len: int = 8192
    max_num_seqs: int | None = None  # None: the engine's default
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    enable_prefix_caching: bool | None = None  # None: the engine's default (`prefix_caching`)
    chunked_prefill: bool | None = None
    kv_tokens: int | None = None  # pin the KV capacity (else the memory model's)
    knobs_override: StepKnobs | None = None  # a calibration (else the fitted table)

    @classmethod
    def build(
        cls,
        *,
        model: ModelSpec | str,
        gpu: GPUSpec | str = "h100",
        gpus: int = 1,
        nodes: int = 1,
        engine: str = "vllm",
        tp: int | None = None,
        pp: int | None = None,
        dp: int | None = None,
        ep: int | None = None,
        quant: str | None = None,
        **rest: Any,
    ) -> Deployment:
        """A deployment with the parallelism and quantization the user left out filled in."""
        from servescope.deploy.loader import resolve_model  # the loader imports this module's users

        spec = model if isinstance(model, ModelSpec) else resolve_model(model)
        g = gpu if isinstance(gpu, GPUSpec) else get_gpu(gpu)
        parse_engine(engine)  # ConfigError for an engine name it does not take
        tp_, pp_, dp_, ep_ = resolve_parallel(gpus=gpus, nodes=nodes, tp=tp, pp=pp, dp=dp, ep=ep, model=spec)
        dep = cls(
            model=spec,
            gpu=g,
            gpus_per_node=gpus,
            nodes=nodes,
            engine=engine,
            tp=tp_,
            pp=pp_,
            dp=dp_,
            ep=ep_,
            quant=quant or spec.default_quant,
            **rest,
        )
        _ = dep.layout  # validate now: a bad layout is a bad input, not a later surprise
        return dep

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def engine_spec(self) -> EngineSpec:
        """The engine family and release the name stands for (`sim.knobs.parse_engine`): its `version`
        (defaults, kernels, knobs), `family` and `memory_engine` (sim.memory's accounting)."""
        return parse_engine(self.engine)

    family = property(lambda self: self.engine_spec.family)
    version = property(lambda self: self.engine_spec.version)
    memory_engine = property(lambda self: self.engine_spec.memory_engine)

    @property
    def arch(self) -> str:
        """The architecture class the knobs are read for (`sim.knobs.arch_class`), by release."""
        return arch_class(self.model.is_moe, self.model.attention, self.family, self.version)

    @property
    def layout(self) -> Layout:
        return Layout(
            gpu=self.gpu,
            gpus_per_node=self.gpus_per_node,
            nodes=self.nodes,
            tp=self.tp,
            pp=self.pp,
            dp=self.dp,
            ep=self.ep,
            quant=self.quant,
            kv_dtype=self.kv_dtype,
        )

    @property
    def prefix_caching(self) -> bool:
        """Whether the engine reuses cached prompt blocks: as set, else the engine's default
        (`sim.defaults.prefix_caching_by_default`, the validation's too). vLLM 0.7 (V0) has it off for MLA
        models whatever is given ("MLA is enabled; forcing chunked prefill and prefix caching to be
        disabled", vllm/config.py 0.7.x)."""
        if self.family == "vllm-v0" and self.model.attention == "mla":
            return False
        if self.enable_prefix_caching is None:
            return prefix_caching_by_default(self.family)
        return self.enable_prefix_caching

    @property
    def limits(self) -> EngineLimits:
        """The engine's limits: what the user set, else the engine's defaults by version.

        vLLM 0.7 (V0) turns chunked prefill off for MLA models ("MLA is enabled; forcing chunked
        prefill and prefix caching to be disabled", vllm/config.py 0.7.x) and for contexts up to 32K
        (EngineArgs switches it on only above 32K); without it the batch budget is raised to
        max(max_model_len, 2048) (SchedulerConfig), so a whole prompt always fits one step. The
        version is the one the engine name stands for (`sim.knobs.ENGINE_VERSIONS`): `vllm` on a GPU of
        >= 70 GiB other than an A100 runs 1024 sequences, as vLLM >= 0.9 does and as the validation
        states every vLLM >= 0.9 point (one `engine_defaults` for plan, the emulator and validation)."""
        d = engine_defaults(
            self.family,
            max_model_len=self.max_model_len,
            version=self.version,
            gpu=self.gpu.name,
            gpu_memory_gib=self.gpu.memory_bytes / 2**30,
        )
        chunked = d.chunked_prefill if self.chunked_prefill is None else self.chunked_prefill
        if self.family == "vllm-v0" and self.model.attention == "mla":
            chunked = False
        seqs = self.max_num_seqs or d.max_num_seqs
        if self.max_num_seqs is None and self.family == "sglang":
            # SGLang sizes its request pool from the KV pool (sim.defaults.sglang_max_running); its KV
            # pool does not depend on the batch budget (activations live outside mem_fraction_static)
            kv = self.kv_tokens
            if kv is None:
                res = fit(
                    self.model,
                    self.layout,
                    max_model_len=self.max_model_len,
                    gpu_memory_utilization=self.gpu_memory_utilization or d.gpu_memory_utilization,
                    engine=self.memory_engine,
                    max_num_batched_tokens=d.max_num_batched_tokens,
                    suggest=False,
                )
                kv = res.kv_tokens if res.fits else 0
            seqs = sglang_max_running(kv, self.model.context_len)
        if self.max_num_batched_tokens is not None:
            batched = self.max_num_batched_tokens
            if not chunked and batched < self.max_model_len:
                raise ConfigError(
                    f"max_num_batched_tokens {batched:,} is smaller than max_model_len "
                    f"{self.max_model_len:,} without chunked prefill: {self.engine} would refuse "
                    "to start (a whole prompt must fit one step); raise it or drop it"
                )
        else:
            batched = batch_budget(d, self.family, self.version, chunked=chunked, max_model_len=self.max_model_len)
        util = self.gpu_memory_utilization or d.gpu_memory_utilization
        # SGLang's DP attention divides the chunked prefill size among the ranks; a replica is one rank
        prefill = prefill_cap(self.family, batched, self.dp, moe=self.model.is_moe, version=self.version)
        return EngineLimits(
            max_num_seqs=seqs,
            max_num_batched_tokens=max(batched, seqs),
            chunked_prefill=chunked,
            gpu_memory_utilization=util,
            max_prefill_tokens=prefill,
        )

    def fit(self, *, suggest: bool = True) -> FitResult:
        """Weights, engine reserve and KV capacity per GPU; the reserve's profile batch is the engine's
        real batch budget (`limits`), so the fit and the engine configuration hold one KV figure."""
        lim = self.limits
        return fit(
            self.model,
            self.layout,
            max_model_len=self.max_model_len,
            gpu_memory_utilization=lim.gpu_memory_utilization,
            engine=self.memory_engine,
            max_num_batched_tokens=lim.max_num_batched_tokens,
            suggest=suggest,
        )

    def knobs(self) -> StepKnobs:
        """Step-time knobs: the override (a calibration) or the fitted table for this engine family,
        GPU generation and architecture class."""
        if self.knobs_override is not None:
            return self.knobs_override
        return resolve_knobs(load_knob_table(), self.family, gpu_generation(self.gpu.name), self.arch, self.quant)

    def with_knobs(self, knobs: StepKnobs | None) -> Deployment:
        return dataclasses.replace(self, knobs_override=knobs)

    def kv_tokens_per_replica(self) -> int:
        if self.kv_tokens is not None:
            return self.kv_tokens
        res = self.fit(suggest=False)
        if not res.fits:
            raise ConfigError(f"{self.describe()}: {res.reason}")
        return res.kv_tokens

    def engine_config(self, knobs: StepKnobs | None = None) -> EngineConfig:
        """The engine of one model replica (DP replicas are identical engines sharing the load)."""
        lim = self.limits
        block = sim_block_tokens(self.memory_engine)
        k = knobs or self.knobs()
        graphs = graph_max_seqs(
            self.family,
            version=self.version,
            gpu_memory_gib=self.gpu.memory_bytes / 2**30,
            tp=self.layout.tp,
        )
        absorbed = mla_absorbed_prefix(
            self.family,
            version=self.version,
            generation=gpu_generation(self.gpu.name),
            attention=self.model.attention,
        )
        cost = dataclasses.replace(
            step_cost(self.model, self.layout, k, engine=self.memory_engine),
            graph_max_seqs=graphs,
            absorbed_prefix=absorbed,
        )
        overhead = kv_seq_overhead_tokens(self.model, engine=self.memory_engine)
        try:
            return EngineConfig(
                cost=cost,
                kv_blocks=max(1, self.kv_tokens_per_replica() // block),
                block_size=block,
                max_num_seqs=lim.max_num_seqs,
                max_num_batched_tokens=lim.max_num_batched_tokens,
                max_prefill_tokens=lim.max_prefill_tokens,
                max_model_len=self.max_model_len,
                enable_prefix_caching=self.prefix_caching,
                chunked_prefill=lim.chunked_prefill,
                mixed_steps=mixes_steps(self.family, lim.chunked_prefill),
                seq_overhead_blocks=-(-overhead // block),
                first_token_s=k.first_token_s,
                frontend_s=k.frontend_s * self.dp,
                reserve_output=admission_reserve(self.family),
            )
        except ValueError as e:
            raise ConfigError(f"{self.describe()}: {e}") from None

    def describe(self) -> str:
        return f"{self.model.name} on {self.layout.describe()} ({self.engine})"

    def to_mapping(self) -> dict[str, Any]:
        """The saved-deployment fields (what `deployment_from_mapping` reads back)."""
        lim = self.limits
        out: dict[str, Any] = {
            "model": self.model.name,
            "gpu": self.gpu.name,
            "gpus": self.gpus_per_node,
            "nodes": self.nodes,
            "engine": self.engine,
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "ep": self.ep,
            "quant": self.quant,
            "kv_dtype": self.kv_dtype,
            "max_model_len": self.max_model_len,
            "max_num_seqs": lim.max_num_seqs,
            "max_num_batched_tokens": lim.max_num_batched_tokens,
            "gpu_memory_utilization": lim.gpu_memory_utilization,
            "enable_prefix_caching": self.prefix_caching,
            "chunked_prefill": lim.chunked_prefill,
        }
        if self.kv_tokens is not None:
            out["kv_tokens"] = self.kv_tokens
        if self.knobs_override is not None:
            out["knobs"] = dataclasses.asdict(self.knobs_override)
        return out


def _knobs_from(raw: Mapping[str, Any], base: StepKnobs, where: str) -> StepKnobs:
    if "admit_overhead_s" in raw and "frontend_s" not in raw:  # its name before it became the front end's
        raw = {("frontend_s" if k == "admit_overhead_s" else k): v for k, v in raw.items()}
    unknown = set(raw) - set(_KNOB_FIELDS)
    if unknown:
        raise ConfigError(f"{where}: unknown knobs {sorted(unknown)}; known: {', '.join(_KNOB_FIELDS)}")
    return dataclasses.replace(base, **{k: float(v) for k, v in raw.items()})


def deployment_from_mapping(data: Mapping[str, Any], *, where: str = "deployment") -> Deployment:
    """A deployment from saved fields (a profile YAML, or flags gathered into a mapping). Legacy
    `efficiency: {memory, compute}` / `overhead: {step_s, layer_s}` blocks are read as a knob override."""
    if "model" not in data:
        raise ConfigError(f"{where}: 'model' is required")
    ints = {
        k: int(data[k])
        for k in ("tp", "pp", "dp", "ep", "max_num_seqs", "max_num_batched_tokens", "kv_tokens")
        if data.get(k) is not None
    }
    rest: dict[str, Any] = {}
    for k in ("max_num_seqs", "max_num_batched_tokens", "kv_tokens"):
        if k in ints:
            rest[k] = ints.pop(k)
    if data.get("gpu_memory_utilization") is not None:
        rest["gpu_memory_utilization"] = float(data["gpu_memory_utilization"])
    if data.get("chunked_prefill") is not None:
        rest["chunked_prefill"] = bool(data["chunked_prefill"])
    if data.get("enable_prefix_caching") is not None:
        rest["enable_prefix_caching"] = bool(data["enable_prefix_caching"])
    spec = data["model"]
    dep = Deployment.build(
        model=spec if isinstance(spec, ModelSpec) else str(spec),
        gpu=str(data.get("gpu", "h100")),
        gpus=int(data.get("gpus", 1)),
        nodes=int(data.get("nodes", 1)),
        engine=str(data.get("engine", "vllm")),
        quant=str(data["quant"]) if data.get("quant") else None,
        kv_dtype=str(data.get("kv_dtype", "bf16")),
        max_model_len=int(data.get("max_model_len", 8192)),
        **ints,
        **rest,
    )
    knob_raw: dict[str, Any] = dict(data.get("knobs") or {})
    eff, ovh = data.get("efficiency") or {}, data.get("overhead") or {}
    legacy = {
        "mem_efficiency": eff.get("memory"),
        "compute_efficiency": eff.get("compute"),
        "step_overhead_s": ovh.get("step_s"),
        "layer_overhead_s": ovh.get("layer_s"),
    }
    knob_raw.update({k: v for k, v in legacy.items() if v is not None and k not in knob_raw})
    if knob_raw:
        dep = dep.with_knobs(_knobs_from(knob_raw, dep.knobs(), where))
    return dep


@functools.lru_cache(maxsize=1)
def load_knob_table_meta() -> Mapping[str, Any]:
    """The whole parsed `deploy/calibration.yaml` (empty when absent). Besides the knob table (top-level
    numbers, or a `knobs:` mapping) plan reads `heldout_median_abs_error: {output_tokens_per_s, itl_ms,
    ttft_ms}` (fractions) and `heldout_source` (words) as the what-if's uncertainty band."""
    res = resources.files("servescope.deploy") / _KNOB_TABLE
    if not res.is_file():
        return {}
    data = yaml.safe_load(res.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"deploy/{_KNOB_TABLE}: expected a mapping")
    return data


def load_knob_table() -> Mapping[str, float]:
    """The fitted knob table (`deploy/calibration.yaml`: a flat name -> value mapping, written by
    plan/validate.py); empty when absent, which resolves to `sim.knobs.DEFAULT_KNOBS`."""
    data = load_knob_table_meta()
    table = data.get("knobs", data)
    if not isinstance(table, dict):
        raise ConfigError(f"deploy/{_KNOB_TABLE}: expected a mapping of knob names to numbers")
    return {str(k): float(v) for k, v in table.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def profile_from_raw(data: Mapping[str, Any]) -> Profile:
    """A profile from its parsed YAML: a saved deployment resolved to its engine configuration (with
    the profile's naming and output settings), or a cost-only test profile (`sim.profile`)."""
    if "name" not in data:
        raise ConfigError("profile: 'name' is required")
    if "model" not in data:
        return profile_from_dict(data)
    name = str(data["name"])
    unknown = set(data) - set(DEPLOYMENT_KEYS) - _PROFILE_KEYS
    if unknown:
        raise ConfigError(f"profile {name}: unknown keys {sorted(unknown)}")
    dep = deployment_from_mapping(data, where=f"profile {name}")
    return profile_with_engine({**data, "gpu": dep.gpu.name}, dep.engine_config(), gpus=dep.gpus)


_PROFILE_KEYS = frozenset({"name", "description", "served_model_name", "output", "efficiency", "overhead"})
