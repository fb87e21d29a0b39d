"""A corpus point stated to the model (`Setting`): one replica's engine and the workload it sees.

`setting_for` builds, from a published point (`plan/corpus.py`), the deployment it describes: the model
from the catalogue, the GPU, the parallelism and quantization, the memory fit (`sim.memory`) and the
engine family's default limits by version (`sim/defaults.py`), overridden by the launch settings the
source states; the knob-free step cost (`sim.profile.step_cost`) whose fitted fields
`plan.validate` fills per knob table; and the workload (mode, mean lengths and their spread,
concurrency or rate per replica, how many requests to simulate). A point the model cannot state
raises ConfigError with the reason (`Predictor.unexpressible`). `measured_for` picks the figures a
point is compared on. Pure: the corpus is read by the caller.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from servescope.errors import ConfigError
from servescope.plan import lengths
from servescope.plan.corpus import CorpusPoint
from servescope.plan.whatif import dp_share
from servescope.sim.catalog.gpus import GPUSpec, get_gpu
from servescope.sim.catalog.models import ModelSpec, get_model
from servescope.sim.config import EngineConfig
from servescope.sim.defaults import (
    EngineDefaults,
    admission_reserve,
    batch_budget,
    engine_defaults,
    graph_max_seqs,
    mixes_steps,
    mla_absorbed_prefix,
    prefill_cap,
    prefix_caching_by_default,
    sglang_max_running,
    sglang_speculative_max_running,
)
from servescope.sim.knobs import DEFAULT_KNOBS, arch_class, engine_family, gpu_generation, knob_names_for, resolve_knobs
from servescope.sim.memory.accounting import sim_block_tokens
from servescope.sim.memory.fit import FitResult, fit
from servescope.sim.placement import Layout
from servescope.sim.profile import step_cost

__all__ = ["Setting", "setting_for", "measured_for"]

_DEFAULT_OFFLINE_PROMPTS = 1000  # vLLM benchmark_throughput.py --num-prompts default


@dataclass(frozen=True, slots=True)
class Setting:
    """A corpus point stated to the model: one replica's engine and the workload it sees."""

    key: str
    source: str  # the fold held out together: Source.fold (the source id unless it has a group)
    family: str
    generation: str
    arch: str
    base: EngineConfig  # knob-free engine (KV capacity, limits, cost coefficients)
    replicas: float  # replicas' worth of work: dp, or fewer for a closed loop of fewer users (`dp_share`)
    mode: str
    input_len: int  # mean prompt tokens
    output_len: int  # mean output tokens
    requests: int  # per replica, simulated
    concurrency: int | None  # per replica (closed loop)
    rate: float | None  # per replica, requests/s (Poisson)
    draft_tokens: int  # MTP / speculative draft length (0: none)
    comm_intra_bytes_per_s: float  # link bandwidth for the collectives (before efficiency)
    label: str
    in_dist: str = "fixed"  # per-request length distribution with the stated mean (see `_lengths`)
    out_dist: str = "fixed"
    disagg: tuple[int, int] | None = None  # (prefill workers, decode workers), each one `base` engine
    served: bool = True  # over HTTP to the engine's API server (CorpusPoint.served): admissions cost
    stream_interval: int = 1  # tokens per streamed chunk (SGLang --stream-interval): ITL is per chunk
    itl_per_token: bool = False  # the source's client split a multi-token chunk's gap over its tokens
    lockstep: int = 0  # attention-DP ranks of a MoE whose steps run together (sim.lockstep); 0: one rank simulated
    version: str = ""  # the engine release as stated, else inferred (`_engine_version`)
    quant: str = ""  # the corpus's weight quantization (awq, fp8, bf16, ...)
    date: str = ""  # the source's date (an unstated version's release line: plan.intervals.version_class)

    @property
    def knob_names(self) -> tuple[str, ...]:
        return knob_names_for(self.family, self.generation, self.arch, self.quant)


def _int_len(x: float | None) -> int | None:
    return None if x is None else max(1, round(x))


def _quant(q: str) -> str:
    """Corpus quant -> sim.memory quant: fp4 is NVIDIA's NVFP4 ('nvfp4': 0.5 + 1/16 bytes per
    parameter, FP4 tensor cores on Blackwell); MXFP4 (gpt-oss) is 'mxfp4': experts 0.5 + 1/32,
    attention BF16, as the checkpoints are. The compute peak is `sim.profile.compute_peak`'s, as plan's."""
    q = q.lower()
    if q in ("fp4", "nvfp4"):
        return "nvfp4"
    if q in ("fp8", "bf16", "awq", "int4", "mxfp4"):
        return q
    if q in ("fp16", ""):
        return "bf16"
    raise ConfigError(f"unknown quantization {q!r}")


@dataclass(frozen=True, slots=True)
class _Parallel:
    """A point's parallelism as the model states it: TP per attention rank, DP ranks (or replicas), EP,
    and for prefill/decode disaggregation (prefill workers, decode workers)."""

    tp: int
    dp: int
    ep: int
    disagg: tuple[int, int] | None

    @property
    def workers(self) -> int:
        """The engines the concurrency spreads over."""
        return self.disagg[1] if self.disagg else self.dp


@dataclass(frozen=True, slots=True)
class _Limits:
    """The engine's launch limits for a point: the source's settings, else the family's defaults."""

    version: str
    max_len: int
    dflt: EngineDefaults
    chunked: bool
    batched: int
    max_seqs: int


def setting_for(p: CorpusPoint) -> Setting:
    """The model's statement of a corpus point; ConfigError (with the reason) when not expressible."""
    model, gpu = _catalogued(p)
    inp, out = _stated_lengths(p)
    _check_modelled(p)
    version = _engine_version(p)
    family = engine_family(p.engine, version)
    quant = _quant(p.quant)
    par = _parallelism(p, model)
    in_dist, out_dist = lengths.distributions(p)
    needed = (
        lengths.max_len(in_dist, inp, lengths.SHAREGPT_MAX_PROMPT)
        + lengths.max_len(out_dist, out, lengths.SHAREGPT_MAX_TOTAL)
        + 64
    )
    lim = _limits(p, family, version, gpu, par, needed)
    layout, res = _memory_fit(p, model, gpu, par, quant, _kv_dtype(p, family), lim)
    max_seqs, max_tokens = _request_pool(p, family, model, res, par, lim)
    base = _engine(p, model, gpu, layout, res, family, par, lim, max_seqs, max_tokens)
    draft = _draft_tokens(p.speculative)
    if draft:  # MTP verifies 1 + draft tokens per decoding sequence per step
        base = dataclasses.replace(base, cost=dataclasses.replace(base.cost, decode_tokens_per_seq=float(1 + draft)))
    conc, busy = dp_share(p.concurrency, par.dp) if (p.mode == "closed" and p.concurrency) else (None, float(par.dp))
    sim_n = _sim_requests_for(p, base, par, busy, conc, inp, out, varied=in_dist != "fixed" or out_dist != "fixed")
    rate = (p.request_rate / par.dp) if (p.mode == "rate" and p.request_rate) else None
    if p.mode == "rate" and rate is None:
        raise ConfigError("rate point without a rate")
    return Setting(
        key=p.key,
        source=p.source.fold,
        family=family,
        generation=gpu_generation(gpu.name),
        arch=arch_class(model.is_moe, model.attention, family, version),
        base=base,
        replicas=busy,
        mode=p.mode,
        input_len=inp,
        output_len=out,
        requests=sim_n,
        concurrency=conc,
        rate=rate,
        draft_tokens=draft,
        comm_intra_bytes_per_s=gpu.interconnect_bytes_per_s,
        label=_label(p, par, inp, out),
        in_dist=in_dist,
        out_dist=out_dist,
        disagg=par.disagg,
        served=p.served,
        stream_interval=int(p.engine_args.get("stream_interval", 1)),
        itl_per_token=p.source.itl == "token",
        lockstep=par.dp if (par.dp > 1 and model.is_moe and not par.disagg) else 0,
        version=version,
        quant=p.quant,
        date=p.source.date,
    )


def _catalogued(p: CorpusPoint) -> tuple[ModelSpec, GPUSpec]:
    """The point's model and GPU from the catalogue."""
    try:
        return get_model(p.model), get_gpu(p.gpu)
    except ConfigError as exc:
        raise ConfigError(f"not in the catalogue: {exc}") from None


def _stated_lengths(p: CorpusPoint) -> tuple[int, int]:
    """The mean prompt and output tokens (the output generated, `lengths.output_mean`)."""
    inp, out = _int_len(p.input_len), _int_len(lengths.output_mean(p))
    if inp is None or out is None:
        raise ConfigError("input or output length not stated by the source")
    if out <= 1:
        raise ConfigError("prefill-only measurement (disaggregated prefill node)")
    return inp, out


def _check_modelled(p: CorpusPoint) -> None:
    """Refuse what the model does not simulate: wide-EP disaggregated decode, PP, non-MTP drafts."""
    if p.mode == "offline" and p.dp and p.dp > 8 and p.ep and p.ep > 8:
        raise ConfigError("multi-node disaggregated decode with wide EP (DeepEP/IB) is not modelled")
    if p.pp and p.pp > 1:
        raise ConfigError("pipeline parallelism is not modelled by the validation (its layout would run on fewer GPUs)")
    if p.speculative and not p.speculative.lower().startswith("mtp-"):
        # a draft model (EAGLE/EAGLE3 heads, trees of topk > 1) has its own acceptance and draft cost; run
        # as plain decoding it would be under-predicted by the speedup it measures
        raise ConfigError(f"speculative decoding other than MTP is not modelled ({p.speculative.split()[0]})")


def _engine_version(p: CorpusPoint) -> str:
    """The engine release: as stated, else (vLLM) the one current at the source's date."""
    version = p.engine_version
    if p.engine == "vllm" and not version and p.source.date < "2025-03":
        version = "0.6"  # unstated: the release current at the source's date (V1 became default in 0.8, 2025-03)
    elif p.engine == "vllm" and not version and p.source.date >= "2025-06":
        version = "0.9"  # unstated, after 0.9 (2025-05) brought the defaults by device (sim.defaults.engine_defaults)
    return version


def _parallelism(p: CorpusPoint, model: ModelSpec) -> _Parallel:
    dp = p.dp or 1
    ep = p.ep or 1
    tp = p.tp or max(1, p.gpus // dp)
    disagg: tuple[int, int] | None = None
    if p.disaggregated:  # prefill and decode workers, each a `tp`-wide engine (sim/disagg.py)
        pre_gpus, dec_gpus = p.disaggregated
        if pre_gpus % tp or dec_gpus % tp:
            raise ConfigError("disaggregated GPUs not a multiple of the workers' TP")
        disagg, dp, ep = (pre_gpus // tp, dec_gpus // tp), 1, 1
    if dp > 1 and ep == 1 and tp * dp > p.gpus and model.is_moe and not disagg:
        # SGLang `--tp N --enable-dp-attention --dp D`: the D attention ranks live inside the N GPUs of
        # the TP group and the MoE stays tensor-parallel over all N. Each GPU then holds 1/N of every
        # expert, the bytes per GPU of EP N, and is stated as that (the MoE's collectives are then
        # counted as EP's all-to-all, not TP's all-reduce). Taking `--tp` as the width of each DP
        # replica instead would model D x N GPUs.
        ep = tp
    if dp > 1 and ep > 1:  # DP attention + EP MoE: attention TP1 per rank, experts split over EP
        tp_attn = max(1, tp // dp) if tp > dp else 1
        tp = tp_attn
    return _Parallel(tp, dp, ep, disagg)


def _limits(p: CorpusPoint, family: str, version: str, gpu: GPUSpec, par: _Parallel, needed: int) -> _Limits:
    """Context length, chunked prefill, batch budget and sequence limit as launched (`needed`: the
    context the point's longest request takes)."""
    args = p.engine_args  # the launch settings the source states (else the engine's defaults)
    # a stated --max-model-len is the engine's (4,096 in the Qwen2.5 speed benchmark's settings), an
    # unstated one at least 8,192; never below what the point's requests need
    max_len = max(needed, int(args["max_model_len"]) if "max_model_len" in args else 8192)
    dflt = engine_defaults(
        family,
        max_model_len=max_len,
        version=version,
        gpu=gpu.name,
        gpu_memory_gib=gpu.memory_bytes / 2**30,
        offline=not p.served,
    )
    chunked = bool(args.get("chunked_prefill", dflt.chunked_prefill))
    batched = int(
        args.get("max_num_batched_tokens", batch_budget(dflt, family, version, chunked=chunked, max_model_len=max_len))
    )
    max_seqs = int(args.get("max_num_seqs", dflt.max_num_seqs))
    if p.mode == "closed" and p.concurrency:
        max_seqs = max(max_seqs, math.ceil(p.concurrency / par.workers))
    return _Limits(version, max_len, dflt, chunked, batched, max_seqs)


def _kv_dtype(p: CorpusPoint, family: str) -> str:
    kv_dtype = "fp8" if p.kv_quant.lower() == "fp8" else "bf16"
    if family == "trtllm" and not p.kv_quant and p.quant.lower() in ("fp8", "fp4", "nvfp4"):
        # unstated KV dtype of a TensorRT-LLM FP8/FP4 run: NVIDIA's ModelOpt checkpoints the perf pages
        # use carry FP8 KV-cache scales (hf_quant_config kv_cache_quant_algo), and trtllm-bench follows them
        kv_dtype = "fp8"
    return kv_dtype


def _memory_fit(
    p: CorpusPoint,
    model: ModelSpec,
    gpu: GPUSpec,
    par: _Parallel,
    quant: str,
    kv_dtype: str,
    lim: _Limits,
) -> tuple[Layout, FitResult]:
    """One replica's layout and its memory fit; ConfigError when it is not expressible or does not fit."""
    tp, dp, ep = par.tp, par.dp, par.ep
    try:
        layout = Layout(
            gpu=gpu,
            gpus_per_node=min(tp * dp, 8) if tp * dp <= 8 else 8,
            nodes=max(1, math.ceil(tp * dp / 8)),
            tp=tp,
            pp=1,
            dp=dp,
            ep=ep if (dp > 1 and ep > 1) else 1,
            quant=quant,
            kv_dtype=kv_dtype,
            load_mtp=bool(_draft_tokens(p.speculative)),
        )
        res = fit(
            model,
            layout,
            max_model_len=lim.max_len,
            gpu_memory_utilization=lim.dflt.gpu_memory_utilization,
            engine=lim.dflt.memory_engine,
            max_num_batched_tokens=max(lim.batched, lim.max_seqs),
            suggest=False,
        )
    except ConfigError as exc:
        raise ConfigError(f"layout not expressible: {exc}") from None
    if not res.fits:
        raise ConfigError(f"does not fit in memory as stated: {res.reason}")
    return layout, res


def _request_pool(
    p: CorpusPoint, family: str, model: ModelSpec, res: FitResult, par: _Parallel, lim: _Limits
) -> tuple[int, int]:
    """(max running sequences, max tokens a step) once the KV pool is known."""
    max_seqs = lim.max_seqs
    max_tokens = max(lim.batched, max_seqs)
    if family == "sglang" and "max_num_seqs" not in p.engine_args:  # SGLang sizes its request pool from the KV pool
        max_seqs = max(max_seqs, sglang_max_running(res.kv_tokens, model.context_len))
        if _draft_tokens(p.speculative):  # ...but under speculative decoding runs 48, a DP rank its share
            max_seqs = max(
                sglang_speculative_max_running(par.dp),
                math.ceil(p.concurrency / par.workers) if p.mode == "closed" and p.concurrency else 0,
            )
        max_tokens = max(lim.batched, max_seqs)
    return max_seqs, max_tokens


def _engine(
    p: CorpusPoint,
    model: ModelSpec,
    gpu: GPUSpec,
    layout: Layout,
    res: FitResult,
    family: str,
    par: _Parallel,
    lim: _Limits,
    max_seqs: int,
    max_tokens: int,
) -> EngineConfig:
    """The knob-free engine of one replica: step cost, KV blocks, limits, prefix caching, admission."""
    version = lim.version
    # prefix caching as launched, else the engine's default (vLLM V1, SGLang's radix cache, TensorRT-LLM's
    # KV block reuse: on). No two prompts of a corpus workload share a block, but a preempted request
    # finds its own again (sim.engine)
    prefix = bool(p.engine_args.get("prefix_caching", prefix_caching_by_default(family)))
    # the step cost plan and the emulator run (sim.profile.step_cost: weights, FLOPs, collectives); its knob
    # fields are placeholders that `_engine_for` replaces with each fitted table's
    step = step_cost(
        model,
        layout,
        resolve_knobs(DEFAULT_KNOBS, family, gpu_generation(gpu.name), "dense"),
        engine=lim.dflt.memory_engine,
    )
    # decode batches beyond the engine's captured CUDA graphs run eager: the limit the source states
    # (SGLang --cuda-graph-max-bs), else the engine's default
    graphs = p.engine_args.get("cuda_graph_max_bs")
    step = dataclasses.replace(
        step,
        graph_max_seqs=int(graphs)
        if graphs is not None
        else graph_max_seqs(
            family, version=version, gpu_memory_gib=gpu.memory_bytes / 2**30, tp=max(p.tp or 1, par.tp)
        ),
        absorbed_prefix=mla_absorbed_prefix(
            family, version=version, generation=gpu_generation(gpu.name), attention=model.attention
        ),
    )
    # SGLang DP attention: each rank's prompt chunk is its share of the stated (or default) chunked
    # prefill size (a PD point has dp 1 here)
    block = sim_block_tokens(lim.dflt.memory_engine)  # the engine's page (TensorRT-LLM: 32 tokens)
    return EngineConfig(
        cost=step,
        kv_blocks=res.kv_tokens // block,
        max_prefill_tokens=prefill_cap(family, lim.batched, par.dp, moe=model.is_moe, version=version),
        block_size=block,
        max_num_seqs=max_seqs,
        max_num_batched_tokens=max_tokens,
        max_model_len=lim.max_len,
        enable_prefix_caching=prefix,
        chunked_prefill=lim.chunked,
        mixed_steps=mixes_steps(family, lim.chunked),
        seq_overhead_blocks=-(-res.seq_overhead_tokens // block),
        reserve_output=admission_reserve(family),
    )


def _sim_requests_for(
    p: CorpusPoint,
    base: EngineConfig,
    par: _Parallel,
    busy: float,
    conc: int | None,
    inp: int,
    out: int,
    *,
    varied: bool,
) -> int:
    """How many requests to simulate per replica (`_sim_requests`) for this point's engine."""
    per_rep = math.ceil(_requests(p) / busy)  # the requests a busy replica serves
    # the batch an engine that reserves KV at admission can hold (`EngineConfig.reserve_output`) at the
    # mean lengths: what a wave of an offline burst is
    batch = base.max_num_seqs
    if base.reserve_output:
        batch = max(1, min(batch, base.kv_blocks // base.reserve_blocks(inp, out)))
    return _sim_requests(
        p.mode,
        per_rep,
        conc,
        batch * (par.disagg[1] if par.disagg else 1),
        varied=varied,
        all_for_ttft="ttft" in measured_for(p),
    )


def _label(p: CorpusPoint, par: _Parallel, inp: int, out: int) -> str:
    tp, dp, ep, disagg = par.tp, par.dp, par.ep, par.disagg
    return (
        f"{p.model} {p.gpus}x{p.gpu} {p.engine} tp{tp}"
        + (f" dp{dp}" if dp > 1 else "")
        + (f" ep{ep}" if ep > 1 else "")
        + (f" {disagg[0]}P{disagg[1]}D" if disagg else "")
        + f" {p.quant} {p.mode}"
        + (f" c={p.concurrency}" if p.concurrency else "")
        + (f" r={p.request_rate:g}" if p.request_rate else "")
        + f" {inp}/{out}"
    )


def _draft_tokens(spec: str) -> int:
    s = spec.lower()
    if s.startswith("mtp-"):
        try:
            return int(s[4:])
        except ValueError:
            return 0
    return 0


def _requests(p: CorpusPoint) -> int:
    if p.num_prompts:
        return p.num_prompts
    if p.mode == "offline":
        return p.concurrency or _DEFAULT_OFFLINE_PROMPTS
    if p.mode == "closed" and p.concurrency:
        return max(100, 4 * p.concurrency)
    return _DEFAULT_OFFLINE_PROMPTS


def _sim_requests(
    mode: str, per_replica: int, conc: int | None, max_seqs: int, *, varied: bool, all_for_ttft: bool
) -> int:
    """How many requests to simulate. Fixed-length requests queued together run in identical waves,
    so two waves of `max_num_seqs` give the steady-state throughput of thirty (four when lengths vary
    and the waves blur); closed loops keep the measured count up to 4x the concurrency (the ramp-down
    tail counts, as in the benchmark). Where TTFT was measured over a burst (request rate inf: every
    request sent at t=0, TTFT includes the queue, as benchmark_serving measures it), all of them."""
    if mode == "offline":
        if all_for_ttft:
            return min(per_replica, 4096)
        return min(per_replica, (4 if varied else 2) * max_seqs)
    if mode == "closed" and conc:
        return min(per_replica, max(4 * conc, 64))
    return min(per_replica, 1000)


def measured_for(p: CorpusPoint) -> dict[str, tuple[str, float]]:
    """The figures compared for a point: metric -> (the statistic measured, value)."""
    m = p.measured
    out: dict[str, tuple[str, float]] = {}
    olen = lengths.output_mean(p)
    if "output_tok_s" in m:
        out["tok_s"] = ("output_tok_s", m["output_tok_s"])
    elif "req_s" in m and olen:
        out["tok_s"] = ("req_s x output_len", m["req_s"] * olen)
    for k in ("itl_ms_median", "tpot_ms_median", "tpot_ms_mean", "itl_ms_mean"):
        if k in m:
            out["itl"] = (k, m[k])
            break
    for k in ("ttft_ms_median", "ttft_ms_mean"):
        if k in m:
            out["ttft"] = (k, m[k])
            break
    return out
