"""Predict every corpus point with the what-if model and compare with what was measured (the fit: plan/knobfit.py).

For each published point (`plan/corpus.py`) `plan/setting.py` builds the deployment it describes (model
from the catalogue, GPU, parallelism, quantization, the engine family's default limits from
`sim/defaults.py`); this module drives `sim.simulate` on a virtual clock with the point's workload
(offline: every request queued at once, as benchmark_throughput and a request-rate-inf benchmark_serving
send them, TTFT including the queue; closed: a closed loop of `concurrency`; rate: Poisson arrivals,
fixed seed) and compares the statistics the benchmark tools report. Request lengths have the stated
means, drawn per request where the source's lengths varied (ShareGPT: long-tailed; random datasets that
generated fewer tokens than asked: uniform; `plan/lengths.py`), seeded. Prefill/decode-disaggregated
points (`disaggregated:` in the corpus) run on `sim.disagg` (prefill and decode worker pools). It
compares:

- throughput: output tokens/s of the deployment (or req/s x output length where only that is given);
- ITL: median ITL, else median TPOT, else mean TPOT, else mean ITL (the sim's matching statistic);
- TTFT: median, else mean.

A point is *expressible* when its model, GPU, lengths and layout can be stated to the model; the
rest are listed with the reason. Errors are (predicted - measured) / measured.

The knobs (`sim/knobs.py`) are fitted by Gauss-Newton on a robust (Cauchy) log error with a ridge
pull towards the defaults, strong for the engine-specific efficiency factors (`fit_table`); `loso`
refits once per source with that source's points held out and predicts them with the knobs fitted
on the others (never on themselves). Pure: corpus and calibration files are read by the caller
(`benchmarks/plan_validate.py`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from servescope.errors import ConfigError
from servescope.plan import lengths
from servescope.plan.corpus import CorpusPoint
from servescope.plan.setting import Setting, measured_for, setting_for
from servescope.plan.whatif import _median_itl_s
from servescope.sim.config import EngineConfig
from servescope.sim.disagg import simulate_disagg
from servescope.sim.knobs import StepKnobs, resolve_knobs
from servescope.sim.lockstep import LockstepRun, simulate_lockstep
from servescope.sim.request import SimRequest
from servescope.sim.simulate import SimRun, simulate

__all__ = [
    "METRICS",
    "Setting",
    "Prediction",
    "PointResult",
    "setting_for",
    "measured_for",
    "predict",
    "sim_requests",
    "evaluate",
    "Predictor",
]

METRICS = ("tok_s", "itl", "ttft")


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


def _engine_for(s: Setting, k: StepKnobs) -> EngineConfig:
    cost = dataclasses.replace(
        s.base.cost,
        mem_efficiency=k.mem_efficiency,
        compute_efficiency=k.compute_efficiency,
        step_overhead_s=k.step_overhead_s,
        layer_overhead_s=k.layer_overhead_s,
        seq_overhead_s=k.seq_overhead_s,
        prefill_layer_overhead_s=k.prefill_layer_overhead_s,
        comm_bytes_per_s=s.comm_intra_bytes_per_s * k.comm_efficiency,
        collective_s=k.collective_s,
        internode_collective_s=k.internode_collective_s,
        comm_prefill_bytes_per_s=s.comm_intra_bytes_per_s * k.comm_prefill_efficiency,
    )
    # one API server in front of the DP ranks: each replica's share of the requests passes a front end
    # that serves them all (Deployment.engine_config does the same)
    return dataclasses.replace(
        s.base, cost=cost, first_token_s=k.first_token_s, frontend_s=k.frontend_s * s.replicas if s.served else 0.0
    )


def _lengths(s: Setting, n: int | None = None) -> list[tuple[int, int]]:
    """(prompt, output) tokens of each simulated request (`n`, else the setting's), seeded."""
    return lengths.draw_pairs(s.in_dist, s.out_dist, s.input_len, s.output_len, s.requests if n is None else n)


def _accept_len(draft: int, p: float) -> float:
    """Expected tokens per verify step with `draft` chained drafts each accepted with chance p:
    1 + p + p^2 + ... + p^draft (acceptance stops at the first rejection; Leviathan et al. 2023, eq. 1)."""
    return sum(p**i for i in range(draft + 1))


def decode_worker(cfg: EngineConfig) -> EngineConfig:
    """A PD decode worker's engine: it computes none of the prompt (`prefill_work` 0), the request
    passed the API server's front end once, on its way to the prefill worker, and every arriving
    prompt's KV fits its batch budget (it has no prompt tokens to chunk)."""
    return dataclasses.replace(
        cfg,
        cost=dataclasses.replace(cfg.cost, prefill_work=0.0),
        frontend_s=0.0,
        max_num_batched_tokens=max(cfg.max_num_batched_tokens, cfg.max_num_seqs * cfg.max_model_len),
    )


def sim_requests(s: Setting, knobs: StepKnobs) -> tuple[list[SimRequest], list[int]]:
    """The requests `predict` runs for `s`, seeded, and their output tokens: each request's prompt,
    its engine steps (an MTP verify step emits `_accept_len` tokens on average) and, for a rate point,
    its Poisson send time. Attention-DP ranks of a MoE in lock-step (sim.lockstep) each carry the whole
    point's load (the setting's share x its replicas) behind one API server; otherwise one replica's."""
    accept = _accept_len(s.draft_tokens, knobs.mtp_accept) if s.draft_tokens else 1.0
    whole = s.replicas if s.lockstep > 1 else 1.0
    n = max(1, round(s.requests * whole))
    pairs = _lengths(s, n)
    reqs = [SimRequest(id=i, prompt_len=a, max_tokens=max(1, math.ceil(o / accept))) for i, (a, o) in enumerate(pairs)]
    if s.mode == "rate" and s.rate:
        rng = np.random.default_rng(lengths.SEED)
        for r, t in zip(reqs, np.cumsum(rng.exponential(1.0 / (s.rate * whole), size=n))):
            r.arrival_s = float(t)
    return reqs, [o for _, o in pairs]


def predict(s: Setting, knobs: StepKnobs) -> Prediction:
    """Simulate the setting on a virtual clock with these knobs."""
    cfg = _engine_for(s, knobs)
    accept = _accept_len(s.draft_tokens, knobs.mtp_accept) if s.draft_tokens else 1.0
    whole = s.replicas if s.lockstep > 1 else 1.0
    reqs, outs = sim_requests(s, knobs)
    conc = round(s.concurrency * whole) if (s.mode == "closed" and s.concurrency) else None
    if s.disagg:
        dec = decode_worker(cfg)
        # the prompt's KV crosses the scale-up link, each TP rank its own shard, at the collectives' bandwidth
        per_tok = cfg.cost.kv_bytes_per_token / (s.comm_intra_bytes_per_s * knobs.comm_efficiency)
        drun = simulate_disagg(
            cfg,
            dec,
            s.disagg[0],
            s.disagg[1],
            [(r.prompt_len, r.max_tokens) for r in reqs],
            concurrency=conc,
            arrivals_s=None if conc else [r.arrival_s for r in reqs],
            transfer_s_per_token=per_tok,
        )
        out = _summary(
            drun.arrival_s,
            drun.first_token_s,
            drun.end_s,
            outs,
            drun.duration_s,
            drun.median_itl_s(),
            s.replicas,
            accept,
            s.stream_interval,
            s.itl_per_token,
        )
        return _with_first_token(out, knobs.first_token_s)
    run: SimRun | LockstepRun
    if s.lockstep > 1:
        run = simulate_lockstep(
            dataclasses.replace(cfg, frontend_s=knobs.frontend_s if s.served else 0.0),
            reqs,
            s.lockstep,
            concurrency=conc,
        )
        step_gap = run.median_itl_s()
    else:
        run = simulate(cfg, reqs, concurrency=conc)
        step_gap = _median_itl_s(run, reqs)
    out = _summary(
        [r.arrival_s for r in reqs],
        [run.first_token_s(r) for r in reqs],
        [run.end_s(r) for r in reqs],
        outs,
        run.duration_s,
        step_gap,
        s.replicas / whole,
        accept,
        s.stream_interval,
        s.itl_per_token,
    )
    return _with_first_token(out, knobs.first_token_s)


def _summary(
    arrival: Sequence[float],
    first: Sequence[float],
    end: Sequence[float],
    outs: Sequence[int],
    duration_s: float,
    median_step_gap_s: float,
    replicas: float,
    accept: float,
    stream_interval: int = 1,
    itl_per_token: bool = False,
) -> Prediction:
    """The statistics benchmark_serving reports, from per-request times: output tokens/s over the run,
    TTFT from each request's send time (queueing included), TPOT = (last - first token) / (tokens - 1)
    over requests with more than one token, and ITL as the source's client counted it.

    MTP emits `accept` tokens a step in one chunk. A client that counts one gap a chunk (vLLM's
    benchmark_serving, `itl_per_token` False) sees the step's gap; SGLang's bench_serving on its native
    backend splits a chunk's gap over its tokens (`itl_per_token`): the step's gap / accept.

    ITL is per streamed chunk, as benchmark_serving takes it: SGLang with --stream-interval k sends a
    request's first token alone, then its tokens at every k-th decode step of the scheduler (its global
    decode counter), so a request's gaps are ceil((tokens - 1) / k), or one more where its first chunk
    after the first token came early (~1% at InferenceX's ~900-token outputs), and the mean ITL is the
    time after the first token over them (InferenceX's SGLang runs at k = 10: mean ITL 9.9-10.0 x mean
    TPOT in every one of its DeepSeek-R1 H200 rows); the median gap is taken as k median step gaps.
    TPOT is per token whatever k."""
    dur = duration_s or 1e-9
    tok_s = sum(outs) / dur * replicas
    ttft = [f - a for a, f in zip(arrival, first)]
    multi = [(f, e, o) for f, e, o in zip(first, end, outs) if o > 1]
    tpot = [(e - f) / (o - 1) for f, e, o in multi] or [0.0]
    gaps = sum(e - f for f, e, _ in multi)
    k = max(1, stream_interval)
    if itl_per_token:  # each chunk's gap split over its tokens
        median_gap, n_gaps = median_step_gap_s / accept, sum(o - 1 for _, _, o in multi)
    else:  # a gap a chunk: k steps of `accept` tokens each
        median_gap = k * median_step_gap_s
        n_gaps = sum(math.ceil((o - 1) / (k * accept)) for _, _, o in multi)
    itl = {
        "itl_ms_median": 1e3 * median_gap if multi else 0.0,
        "itl_ms_mean": 1e3 * gaps / max(1, n_gaps),
        "tpot_ms_median": 1e3 * statistics.median(tpot),
        "tpot_ms_mean": 1e3 * statistics.fmean(tpot),
    }
    return Prediction(
        tok_s=tok_s,
        itl_ms=itl,
        ttft_ms={"ttft_ms_median": 1e3 * statistics.median(ttft), "ttft_ms_mean": 1e3 * statistics.fmean(ttft)},
    )


def _sim_knobs(s: Setting, k: StepKnobs) -> StepKnobs:
    """The knobs the simulation of `s` depends on (the memo key): a fit's Jacobian moves every knob in
    turn, and a knob the setting cannot feel must not cost a simulation. The first-token latency is
    added after the simulation (`_with_first_token`); MTP acceptance matters only with drafts; the
    collectives' bandwidth share only where tokens cross the link (TP, DP+EP, or a disaggregated
    KV transfer; prompt tokens' share not for the KV transfer) and their per-call latency only where
    there are collectives; the admission cost only where requests came through the API server."""
    rep: dict[str, float] = {"first_token_s": 0.0}
    if not s.draft_tokens:
        rep["mtp_accept"] = 0.0
    if not s.disagg and not s.base.cost.comm_bytes_per_token:
        rep["comm_efficiency"] = 1.0
    if not s.base.cost.comm_bytes_per_token:
        rep["comm_prefill_efficiency"] = 0.0
    if not s.served:
        rep["frontend_s"] = 0.0
    if not s.base.cost.collectives:
        rep["collective_s"] = 0.0
    if not s.base.cost.internode_collectives:
        rep["internode_collective_s"] = 0.0
    return dataclasses.replace(k, **rep)


def _with_first_token(pred: Prediction, first_token_s: float) -> Prediction:
    """`pred` with the first-token latency added to every TTFT: a constant the simulation does not
    see (it is not a delay before the scheduler), so it shifts each request's TTFT, and with it the
    median and the mean, by the same amount."""
    if not first_token_s:
        return pred
    return dataclasses.replace(pred, ttft_ms={n: v + 1e3 * first_token_s for n, v in pred.ttft_ms.items()})


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
        self._memo: dict[tuple[str, StepKnobs], Prediction] = {}

    def knobs(self, key: str, table: Mapping[str, float]) -> StepKnobs:
        s = self.settings[key]
        return resolve_knobs(table, s.family, s.generation, s.arch, s.quant)

    def predicted(self, key: str, table: Mapping[str, float]) -> dict[str, float]:
        s = self.settings[key]
        k = self.knobs(key, table)
        sk = _sim_knobs(s, k)
        memo_key = (key, sk)
        hit = self._memo.get(memo_key)
        if hit is None:
            hit = predict(s, sk)
            self._memo[memo_key] = hit
        return _compare(_with_first_token(hit, k.first_token_s), self.measured[key])

    def result(self, p: CorpusPoint, table: Mapping[str, float]) -> PointResult:
        if p.key not in self.settings:
            return PointResult(p, measured_for(p), {})
        return PointResult(p, self.measured[p.key], self.predicted(p.key, table))


def evaluate(pred: Predictor, table: Mapping[str, float], keys: Iterable[str] | None = None) -> list[PointResult]:
    by_key = {p.key: p for p in pred.points}
    return [pred.result(by_key[k], table) for k in (keys if keys is not None else by_key)]
