"""Predict every corpus point with the what-if model, fit the calibration knobs, and report the error.

For each published point (`plan/corpus.py`) this builds the deployment it describes (model from the
catalogue, GPU, parallelism, quantization, the engine family's default limits from `sim/knobs.py`),
drives `sim.simulate` on a virtual clock with the point's workload (offline: every request queued at
once; closed: a closed loop of `concurrency`; rate: Poisson arrivals, fixed seed) and compares:

- throughput: output tokens/s of the deployment (or req/s x output length where only that is given);
- ITL: median ITL, else median TPOT, else mean TPOT, else mean ITL (the sim's matching statistic);
- TTFT: median, else mean.

A point is *expressible* when its model, GPU, lengths and layout can be stated to the model; the
rest are listed with the reason. Errors are (predicted - measured) / measured.

The knobs (`sim/knobs.py`) are fitted by Gauss-Newton on squared log error with a ridge pull towards
the defaults (`fit_table`); `loso` refits once per source with that source's points held out and
predicts them with the knobs fitted on the others (never on themselves). Pure apart from nothing:
corpus and calibration files are read by the caller (`benchmarks/plan_validate.py`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from servebench.errors import ConfigError
from servebench.plan.corpus import CorpusPoint
from servebench.plan.whatif import _median_itl_s
from servebench.sim import catalog, memory
from servebench.sim.config import EngineConfig
from servebench.sim.knobs import (
    DEFAULT_KNOBS,
    StepKnobs,
    arch_class,
    engine_defaults,
    engine_family,
    gpu_generation,
    knob_names_for,
    resolve_knobs,
)
from servebench.sim.request import SimRequest
from servebench.sim.simulate import SimRun, simulate
from servebench.sim.steptime import StepCost

__all__ = ["METRICS", "Setting", "Prediction", "PointResult", "setting_for", "measured_for", "predict",
           "evaluate", "fit_table", "loso", "summarize", "median_abs_error"]

METRICS = ("tok_s", "itl", "ttft")
_IB_BYTES_PER_S = 50e9  # one 400 Gb/s ConnectX-7 NIC per GPU (DGX H100 reference architecture)
# Peak dense FP4 tensor FLOPs (NVIDIA Blackwell datasheet: HGX B200 18 PFLOPS sparse FP4 per GPU); on
# Hopper and CDNA3, FP4 weights are dequantized into BF16/FP8 GEMMs (W4A16): the BF16 figure.
_FP4_FLOPS = {"b200": 9.0e15}
_DEFAULT_OFFLINE_PROMPTS = 1000  # vLLM benchmark_throughput.py --num-prompts default


@dataclass(frozen=True, slots=True)
class Setting:
    """A corpus point stated to the model: one replica's engine and the workload it sees."""

    key: str
    source: str
    family: str
    generation: str
    arch: str
    base: EngineConfig  # knob-free engine (KV capacity, limits, cost coefficients)
    replicas: int
    mode: str
    input_len: int
    output_len: int
    requests: int  # per replica, simulated
    concurrency: int | None  # per replica (closed loop)
    rate: float | None  # per replica, requests/s (Poisson)
    draft_tokens: int  # MTP / speculative draft length (0: none)
    comm_intra_bytes_per_s: float  # link bandwidth for the collectives (before efficiency)
    label: str

    @property
    def knob_names(self) -> tuple[str, ...]:
        return knob_names_for(self.family, self.generation, self.arch)


@dataclass(frozen=True, slots=True)
class Prediction:
    tok_s: float
    itl_ms: dict[str, float]  # stat name (itl_ms_median, tpot_ms_mean, ...) -> ms
    ttft_ms: dict[str, float]


@dataclass(frozen=True, slots=True)
class PointResult:
    point: CorpusPoint
    measured: dict[str, tuple[str, float]]  # metric -> (what was measured, value)
    predicted: dict[str, float]

    def error(self, metric: str) -> float | None:
        if metric not in self.measured or metric not in self.predicted:
            return None
        return self.predicted[metric] / self.measured[metric][1] - 1.0


def _int_len(x: float | None) -> int | None:
    return None if x is None else max(1, round(x))


def _quant(q: str) -> tuple[str, bool]:
    """Corpus quant -> (sim.memory quant, is FP4). FP4 (NVFP4, MXFP4) weights are priced as 4-bit with
    a small scale overhead: memory's 'int4' (0.5 + 2/128 bytes per parameter; NVFP4 is 0.5 + 1/16,
    MXFP4 0.5 + 1/32)."""
    q = q.lower()
    if q in ("fp4", "nvfp4", "mxfp4"):
        return "int4", True
    if q in ("fp8", "bf16", "awq", "int4"):
        return q, False
    if q in ("fp16", ""):
        return "bf16", False
    raise ConfigError(f"unknown quantization {q!r}")


def _output_len(p: CorpusPoint) -> float | None:
    if p.output_len:
        return p.output_len
    m = p.measured
    if "output_tok_s" in m and "req_s" in m:  # mean output length, derived from the two measured rates
        return m["output_tok_s"] / m["req_s"]
    return None


def setting_for(p: CorpusPoint) -> Setting:
    """The model's statement of a corpus point; ConfigError (with the reason) when not expressible."""
    try:
        model = catalog.get_model(p.model)
        gpu = catalog.get_gpu(p.gpu)
    except ConfigError as exc:
        raise ConfigError(f"not in the catalogue: {exc}") from None
    inp, out = _int_len(p.input_len), _int_len(_output_len(p))
    if inp is None or out is None:
        raise ConfigError("input or output length not stated by the source")
    if out <= 1:
        raise ConfigError("prefill-only measurement (disaggregated prefill node)")
    if p.mode == "offline" and p.dp and p.dp > 8 and p.ep and p.ep > 8:
        raise ConfigError("multi-node disaggregated decode with wide EP (DeepEP/IB) is not modelled")
    version = p.engine_version
    if p.engine == "vllm" and not version and p.source.date < "2025-03":
        version = "0.6"  # unstated: the release current at the source's date (V1 became default in 0.8, 2025-03)
    family = engine_family(p.engine, version)
    quant, fp4 = _quant(p.quant)
    dp = p.dp or 1
    ep = p.ep or 1
    disagg = _disaggregation(p)
    tp = p.tp or max(1, p.gpus // dp)
    if disagg:
        dp = disagg  # decode workers carry the decode batch; prefill runs beside them (see docs/plan.md)
    if dp > 1 and ep > 1:  # DP attention + EP MoE: attention TP1 per rank, experts split over EP
        tp_attn = max(1, tp // dp) if tp > dp else 1
        tp = tp_attn
    max_len = max(8192, inp + out + 64)
    dflt = engine_defaults(family, max_model_len=max_len)
    max_seqs = dflt.max_num_seqs
    if p.mode == "closed" and p.concurrency:
        max_seqs = max(max_seqs, math.ceil(p.concurrency / dp))
    kv_dtype = "fp8" if p.kv_quant.lower() == "fp8" else "bf16"
    if family == "trtllm" and not p.kv_quant and p.quant.lower() in ("fp8", "fp4", "nvfp4"):
        # unstated KV dtype of a TensorRT-LLM FP8/FP4 run: NVIDIA's ModelOpt checkpoints the perf pages
        # use carry FP8 KV-cache scales (hf_quant_config kv_cache_quant_algo), and trtllm-bench follows them
        kv_dtype = "fp8"
    gpus_node = min(8, p.gpus)
    max_tokens = max(dflt.max_num_batched_tokens, max_seqs)
    try:
        layout = memory.Layout(gpu=gpu, gpus_per_node=min(tp * dp, 8) if tp * dp <= 8 else 8,
                               nodes=max(1, math.ceil(tp * dp / 8)), tp=tp, pp=1, dp=dp,
                               ep=ep if (dp > 1 and ep > 1) else 1, quant=quant, kv_dtype=kv_dtype,
                               load_mtp=bool(_draft_tokens(p.speculative)))
        res = memory.fit(model, layout, max_model_len=max_len, gpu_memory_utilization=dflt.gpu_memory_utilization,
                         engine=dflt.memory_engine, max_num_batched_tokens=max_tokens, suggest=False)
    except ConfigError as exc:
        raise ConfigError(f"layout not expressible: {exc}") from None
    if not res.fits:
        raise ConfigError(f"does not fit in memory as stated: {res.reason}")
    engine_cfg = EngineConfig(cost=_base_cost(model, layout, dflt.memory_engine), kv_blocks=res.kv_tokens // 16,
                              block_size=16, max_num_seqs=max_seqs, max_num_batched_tokens=max_tokens,
                              max_model_len=max_len, enable_prefix_caching=False,
                              chunked_prefill=dflt.chunked_prefill)
    reserve = _reserved_tokens(family, inp, out)
    if reserve:  # admission reserves KV for the request's future tokens: no preemption, fewer sequences
        cap = max(1, engine_cfg.kv_tokens // reserve)
        if cap < engine_cfg.max_num_seqs:
            engine_cfg = dataclasses.replace(engine_cfg, max_num_seqs=cap)
    cost = engine_cfg.cost
    extra: dict[str, float] = {}
    if fp4 and gpu.name in _FP4_FLOPS:
        extra["flops_per_s"] = _FP4_FLOPS[gpu.name]
    # collectives: TP all-reduce (2 per layer, ring 2(n-1)/n of hidden BF16) or EP all-to-all
    comm_bytes, collectives = 0.0, 0
    if tp > 1:
        comm_bytes += 2 * model.layers * model.hidden * 2.0 * 2 * (tp - 1) / tp
        collectives += 2 * model.layers
    if dp > 1 and ep > 1 and model.is_moe and not disagg:
        comm_bytes += model.moe_layers * model.experts_per_token * model.hidden * 3.0 * (ep - 1) / ep
        collectives += 2 * model.moe_layers
        extra["moe_token_multiplier"] = float(dp)
    link = gpu.interconnect_bytes_per_s if tp <= gpus_node else _IB_BYTES_PER_S
    draft = _draft_tokens(p.speculative)
    if draft:
        extra["decode_tokens_per_seq"] = float(1 + draft)
    base_cost = dataclasses.replace(cost, comm_bytes_per_token=comm_bytes, collectives=collectives)
    if extra:  # float fields of StepCost only (flops_per_s, moe_token_multiplier, decode_tokens_per_seq)
        base_cost = dataclasses.replace(base_cost, **cast("dict[str, Any]", extra))
    base = dataclasses.replace(engine_cfg, cost=base_cost)
    n_total = _requests(p)
    conc = math.ceil(p.concurrency / dp) if (p.mode == "closed" and p.concurrency) else None
    per_rep = math.ceil(n_total / dp)
    sim_n = _sim_requests(p.mode, per_rep, conc, base.max_num_seqs)
    rate = (p.request_rate / dp) if (p.mode == "rate" and p.request_rate) else None
    if p.mode == "rate" and rate is None:
        raise ConfigError("rate point without a rate")
    label = (f"{p.model} {p.gpus}x{p.gpu} {p.engine} tp{tp}"
             + (f" dp{dp}" if dp > 1 else "") + (f" ep{ep}" if ep > 1 else "")
             + f" {p.quant} {p.mode}" + (f" c={p.concurrency}" if p.concurrency else "")
             + (f" r={p.request_rate:g}" if p.request_rate else "") + f" {inp}/{out}")
    return Setting(key=p.key, source=p.source.id, family=family, generation=gpu_generation(gpu.name),
                   arch=arch_class(model.is_moe, model.attention), base=base, replicas=dp, mode=p.mode,
                   input_len=inp, output_len=out, requests=sim_n, concurrency=conc, rate=rate,
                   draft_tokens=draft, comm_intra_bytes_per_s=link, label=label)


def _base_cost(model: catalog.ModelSpec, layout: memory.Layout, engine: str) -> StepCost:
    """Knob-free step-cost coefficients per GPU: weights and KV from the memory model, FLOPs from the
    catalogue (attention FLOPs per query x context token: GQA QK^T + PV = 4 x head_dim per head; MLA
    absorbed decode: 2 x (2 x kv_lora_rank + rope dims) per head)."""
    breakdown = memory.weight_bytes_breakdown_per_gpu(model, layout, engine=engine)
    routed = float(breakdown.get("routed_experts", 0))
    per_head = (2 * (2 * model.kv_lora_rank + model.qk_rope_head_dim) if model.attention == "mla"
                else 4 * model.head_dim)
    gpu, quant = layout.gpu, layout.quant
    peak = {"bf16": gpu.bf16_flops, "fp8": gpu.fp8_flops, "fp8-ffn": gpu.fp8_flops}.get(quant, gpu.int4_flops)
    return StepCost(
        dense_weight_bytes=float(sum(breakdown.values())) - routed,
        kv_bytes_per_token=float(memory.kv_bytes_per_token_per_gpu(model, layout)),
        flops_per_token=2.0 * model.params_active / layout.tp, hbm_bytes_per_s=gpu.hbm_bytes_per_s,
        flops_per_s=peak, attn_flops_per_token_ctx=float(per_head * model.heads * model.layers / layout.tp),
        routed_expert_bytes=routed / model.n_routed_experts if model.is_moe else 0.0,
        n_experts=model.n_routed_experts, experts_per_token=model.experts_per_token, layers=model.layers)


def _reserved_tokens(family: str, inp: int, out: int) -> int:
    """KV tokens an engine sets aside when it admits a request (0: it admits on the prompt alone and
    preempts under pressure, as vLLM does). TensorRT-LLM's default capacity scheduler policy
    GUARANTEED_NO_EVICT admits a request only when its prompt + max_tokens fit (TensorRT-LLM docs,
    "Capacity scheduler policy"); SGLang reserves new_token_ratio x max_new_tokens, starting at 0.7
    (sglang scheduler, SGLANG_INIT_NEW_TOKEN_RATIO). For fixed-length requests both cap the batch at
    KV tokens / reserved tokens."""
    if family == "trtllm":
        return inp + out
    if family == "sglang":
        return inp + int(0.7 * out)
    return 0


def _disaggregation(p: CorpusPoint) -> int:
    """Decode workers of a prefill/decode-disaggregated point (0: colocated). Read from the point id
    `pd<P>p<D>d-...` (the corpus notes state the layout)."""
    pid = p.id
    if pid.startswith("pd") and "p" in pid[2:6] and "d" in pid[3:8]:
        try:
            head = pid.split("-")[0][2:]  # "1p3d"
            return int(head.split("p")[1].rstrip("d"))
        except (IndexError, ValueError):
            return 0
    return 0


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


def _sim_requests(mode: str, per_replica: int, conc: int | None, max_seqs: int) -> int:
    """How many requests to simulate. Fixed-length requests queued together run in identical waves,
    so two waves of `max_num_seqs` give the steady-state throughput of thirty; closed loops keep
    the measured count up to 4x the concurrency (the ramp-down tail counts, as in the benchmark)."""
    if mode == "offline":
        return min(per_replica, 2 * max_seqs)
    if mode == "closed" and conc:
        return min(per_replica, max(4 * conc, 64))
    return min(per_replica, 1000)


def measured_for(p: CorpusPoint) -> dict[str, tuple[str, float]]:
    """The figures compared for a point: metric -> (the statistic measured, value)."""
    m = p.measured
    out: dict[str, tuple[str, float]] = {}
    olen = _output_len(p)
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


def _engine_for(s: Setting, k: StepKnobs) -> EngineConfig:
    cost = dataclasses.replace(
        s.base.cost, mem_efficiency=k.mem_efficiency, compute_efficiency=k.compute_efficiency,
        step_overhead_s=k.step_overhead_s, layer_overhead_s=k.layer_overhead_s, seq_overhead_s=k.seq_overhead_s,
        comm_bytes_per_s=s.comm_intra_bytes_per_s * k.comm_efficiency, collective_s=k.collective_s)
    return dataclasses.replace(s.base, cost=cost)


def _accept_len(draft: int, p: float) -> float:
    """Expected tokens per verify step with `draft` chained drafts each accepted with chance p:
    1 + p + p^2 + ... + p^draft (acceptance stops at the first rejection; Leviathan et al. 2023, eq. 1)."""
    return sum(p ** i for i in range(draft + 1))


def predict(s: Setting, knobs: StepKnobs) -> Prediction:
    """Simulate the setting on a virtual clock with these knobs."""
    cfg = _engine_for(s, knobs)
    accept = _accept_len(s.draft_tokens, knobs.mtp_accept) if s.draft_tokens else 1.0
    steps_out = max(1, math.ceil(s.output_len / accept))
    n = s.requests
    reqs = [SimRequest(id=i, prompt_len=s.input_len, max_tokens=steps_out) for i in range(n)]
    if s.mode == "rate" and s.rate:
        rng = np.random.default_rng(12345)
        t = np.cumsum(rng.exponential(1.0 / s.rate, size=n))
        for r, a in zip(reqs, t):
            r.arrival_s = float(a)
        run = simulate(cfg, reqs)
    elif s.mode == "closed" and s.concurrency:
        run = simulate(cfg, reqs, concurrency=s.concurrency)
    else:
        run = simulate(cfg, reqs)
    return _metrics(run, reqs, s, accept)


def _metrics(run: SimRun, reqs: Sequence[SimRequest], s: Setting, accept: float) -> Prediction:
    ends = run.step_end_s
    dur = run.duration_s or 1e-9
    tok_s = s.output_len * len(reqs) / dur * s.replicas
    ttft = [ends[r.first_token_step] - r.arrival_s for r in reqs]
    steps = s.output_len / accept
    tpot = [(ends[r.finish_step] - ends[r.first_token_step]) / max(1.0, s.output_len - 1) for r in reqs]
    gaps = sum(ends[r.finish_step] - ends[r.first_token_step] for r in reqs)
    itl_med = _median_itl_s(run, reqs) / accept if steps > 1 else 0.0
    itl = {"itl_ms_median": 1e3 * itl_med, "itl_ms_mean": 1e3 * gaps / max(1.0, len(reqs) * (s.output_len - 1)),
           "tpot_ms_median": 1e3 * statistics.median(tpot), "tpot_ms_mean": 1e3 * statistics.fmean(tpot)}
    return Prediction(tok_s=tok_s, itl_ms=itl,
                      ttft_ms={"ttft_ms_median": 1e3 * statistics.median(ttft),
                               "ttft_ms_mean": 1e3 * statistics.fmean(ttft)})


def _compare(pred: Prediction, measured: Mapping[str, tuple[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    if "tok_s" in measured:
        out["tok_s"] = pred.tok_s
    if "itl" in measured:
        out["itl"] = pred.itl_ms[measured["itl"][0]]
    if "ttft" in measured:
        out["ttft"] = pred.ttft_ms[measured["ttft"][0]]
    return out


class Predictor:
    """Settings of the expressible points plus a memo of predictions by (point, knobs)."""

    def __init__(self, points: Iterable[CorpusPoint]) -> None:
        self.points = list(points)
        self.settings: dict[str, Setting] = {}
        self.measured: dict[str, dict[str, tuple[str, float]]] = {}
        self.unexpressible: dict[str, str] = {}
        for p in self.points:
            meas = measured_for(p)
            if not meas:
                self.unexpressible[p.key] = "no comparable figure (needs output tok/s, ITL/TPOT or TTFT)"
                continue
            try:
                self.settings[p.key] = setting_for(p)
            except ConfigError as exc:
                self.unexpressible[p.key] = str(exc)
                continue
            self.measured[p.key] = meas
        self._memo: dict[tuple[str, StepKnobs], dict[str, float]] = {}

    def knobs(self, key: str, table: Mapping[str, float]) -> StepKnobs:
        s = self.settings[key]
        return resolve_knobs(table, s.family, s.generation, s.arch)

    def predicted(self, key: str, table: Mapping[str, float]) -> dict[str, float]:
        k = self.knobs(key, table)
        memo_key = (key, k)
        hit = self._memo.get(memo_key)
        if hit is None:
            hit = _compare(predict(self.settings[key], k), self.measured[key])
            self._memo[memo_key] = hit
        return hit

    def result(self, p: CorpusPoint, table: Mapping[str, float]) -> PointResult:
        if p.key not in self.settings:
            return PointResult(p, measured_for(p), {})
        return PointResult(p, self.measured[p.key], self.predicted(p.key, table))


def evaluate(pred: Predictor, table: Mapping[str, float], keys: Iterable[str] | None = None) -> list[PointResult]:
    by_key = {p.key: p for p in pred.points}
    return [pred.result(by_key[k], table) for k in (keys if keys is not None else by_key)]


# --- fitting ----------------------------------------------------------------------------------------
_WEIGHTS = {"tok_s": 1.0, "itl": 1.0, "ttft": 0.5}
_RIDGE = 0.05  # pull of each knob's log towards its default (per knob, in squared log units)
_STEP_H = 0.1  # finite-difference step in log space for the Jacobian
_LOG_BOUNDS = 3.0  # a knob moves at most e^3 ~ 20x from its default
_TOL = 0.01  # stop when an iteration improves the loss by less than 1%


def _fit_names(pred: Predictor, keys: Sequence[str]) -> list[str]:
    names: set[str] = set()
    for k in keys:
        s = pred.settings[k]
        names.update(s.knob_names)
        if not s.draft_tokens:
            names.discard("spec.accept")
    if not any(pred.settings[k].base.cost.comm_bytes_per_token for k in keys):
        names.discard("comm.eff")
    return sorted(names)


def _default(name: str) -> float:
    return float(DEFAULT_KNOBS.get(name, 1.0))


def _residuals(pred: Predictor, keys: Sequence[str], table: Mapping[str, float]) -> np.ndarray:
    r: list[float] = []
    for k in keys:
        got = pred.predicted(k, table)
        for m in METRICS:
            if m in got:
                r.append(math.sqrt(_WEIGHTS[m]) * math.log(max(got[m], 1e-9) / pred.measured[k][m][1]))
    return np.asarray(r)


def fit_table(pred: Predictor, keys: Sequence[str], *, iterations: int = 6,
              start: Mapping[str, float] | None = None,
              progress: Callable[[str], None] | None = None) -> dict[str, float]:
    """Fit the knob table to the points `keys` (Gauss-Newton on log error + ridge, damped)."""
    names = _fit_names(pred, keys)
    x0 = np.array([math.log(_default(n)) for n in names])
    x = np.array([math.log((start or {}).get(n, _default(n))) for n in names])

    def table_of(v: np.ndarray) -> dict[str, float]:
        return {n: float(math.exp(val)) for n, val in zip(names, v)}

    def loss(v: np.ndarray) -> float:
        res = _residuals(pred, keys, table_of(v))
        return float(res @ res + _RIDGE * ((v - x0) @ (v - x0)))

    best = loss(x)
    lam = 1.0
    for it in range(iterations):
        prev = best
        r0 = _residuals(pred, keys, table_of(x))
        jac = np.zeros((len(r0), len(names)))
        for j in range(len(names)):
            xj = x.copy()
            xj[j] += _STEP_H
            jac[:, j] = (_residuals(pred, keys, table_of(xj)) - r0) / _STEP_H
        a = jac.T @ jac + _RIDGE * np.eye(len(names))
        g = jac.T @ r0 + _RIDGE * (x - x0)
        improved = False
        for _ in range(6):  # Levenberg-Marquardt damping
            step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-6), -g)
            cand = np.clip(x + step, x0 - _LOG_BOUNDS, x0 + _LOG_BOUNDS)
            lc = loss(cand)
            if lc < best - 1e-9:
                x, best, lam, improved = cand, lc, max(lam / 3, 1e-3), True
                break
            lam *= 4
        if progress:
            progress(f"  iteration {it + 1}: loss {best:.3f} ({len(keys)} points, {len(names)} knobs)")
        if not improved or prev - best < _TOL * prev:
            break
    return table_of(x)


def loso(pred: Predictor, *, iterations: int = 6, progress: Callable[[str], None] | None = None
         ) -> dict[str, dict[str, float]]:
    """Leave-one-source-out: for each source, the table fitted on every other source's points."""
    keys = sorted(pred.settings)
    sources = sorted({pred.settings[k].source for k in keys})
    out: dict[str, dict[str, float]] = {}
    for src in sources:
        train = [k for k in keys if pred.settings[k].source != src]
        if progress:
            progress(f"fold {src}: fitting on {len(train)} points")
        out[src] = fit_table(pred, train, iterations=iterations, progress=progress)
    return out


# --- summaries --------------------------------------------------------------------------------------
def median_abs_error(results: Iterable[PointResult], metric: str) -> tuple[float | None, int]:
    errs = [abs(e) for r in results if (e := r.error(metric)) is not None]
    return (statistics.median(errs) if errs else None), len(errs)


def summarize(train: Sequence[PointResult], held_out: Sequence[PointResult], total: int, expressible: int
              ) -> dict[str, object]:
    """Median |error| by metric for train and held-out, and coverage (machine-readable)."""
    out: dict[str, object] = {"points": total, "expressible": expressible,
                              "coverage": expressible / total if total else 0.0}
    for name, rs in (("train", train), ("held_out", held_out)):
        out[name] = {m: {"median_abs_error": median_abs_error(rs, m)[0], "n": median_abs_error(rs, m)[1]}
                     for m in METRICS}
    return out
