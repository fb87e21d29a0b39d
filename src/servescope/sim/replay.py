"""A recorded run of a real engine replayed through `sim.engine`: the engine's step costs measured from
its own calibration runs, the same requests sent the same way, the two compared point by point. Pure.

A recording (`benchmarks/vllm_scheduler.py record`, a JSON document) holds the engine's scheduler
settings (`vllm_settings`: max_num_seqs, max_num_batched_tokens, block_size, kv_tokens) and runs by
name, each with its load (`kind` closed / open / calib, `concurrency`, `input`, `output`, `ratio`,
`rate`), its requests as ``[send_s, first_token_s, last_token_s, prompt_tokens, output_tokens]`` (from
the run's first send), the gaps between consecutive tokens (`itl_gaps_s`, or their median `itl_p50_s`)
and the means of the engine's own histograms over the run (`engine`).

Step costs (`measure_costs`), from the calibration runs only::

    step_s(shape) = step + seq * sequences + token * tokens + pair * prefill_ctx_pairs + ctx * decode_ctx_tokens
                  + (admit * prompt + per_prompt) * requests the step admits

(a) each c=1 prompt length's mean prefill time by the engine's own histogram
(`vllm:request_prefill_time_seconds`: one prompt step of P tokens, P^2/2 pairs, no decode, no admission:
the engine's clock starts after it) gives a prompt step's fixed part, token and pair costs; (b) each
decode wave's median gap between tokens (c sequences sent at once, short prompts: decode steps of c
sequences over their mean context) the decode terms; (c) the c=1 runs' first-token path F1 (median
client TTFT less the engine's own TTFT: HTTP, tokenizer, IPC, SSE; linear in the prompt length between
the measured lengths) gives `admit`, its least-squares slope over the prompt lengths: the time per prompt
token that the engine's loop loses to each request it takes in; (d) each calibration wave's steps that
admit its followers, timed by the lead's gaps (`_lead_steps`), less what (a)-(c) price, `per_prompt`.
The rest of F1, and the engine's TTFT less its queue and prefill time, is a first-token latency beside
the steps. `StepCost` carries them as overheads and
attention terms (no roofline: bytes and linear FLOPs are 0), and `EngineConfig` the engine's scheduler
settings as recorded.

Compared per run (`compare_run`): TTFT median and P90 (send to first token), the median ITL, output
tokens/s over the run (first send to last token), and the wave profile of a closed loop
(`wave_profile`): the median TTFT by position within each wave of c consecutive sends, the first wave
dropped; its `ramp` (largest over smallest position median) says whether the cohorts of a fixed-length
closed loop persist (a staircase, ramp well above 1) or dissolve (flat, near 1); and `cohort_size`, the
mean number of requests whose first tokens one step emits together (1: each alone; c: whole waves).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servescope.sim.config import EngineConfig
from servescope.sim.request import SimRequest
from servescope.sim.simulate import simulate, step_gaps, weighted_median
from servescope.sim.steptime import StepCost

__all__ = [
    "MeasuredCosts",
    "RunFigures",
    "measure_costs",
    "engine_config",
    "replay_run",
    "observed",
    "compare_run",
    "compare_all",
    "wave_profile",
    "ramp",
    "cohort_size",
    "median",
    "table",
    "wave_table",
    "COHORT_RAMP",
]

#: a wave profile whose ramp (largest / smallest position median) exceeds this holds cohorts
COHORT_RAMP = 1.5


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def _p90(xs: Sequence[float]) -> float:
    return float(np.percentile(np.asarray(xs, dtype=np.float64), 90)) if xs else 0.0


@dataclass(frozen=True, slots=True)
class MeasuredCosts:
    """One engine's step costs (s) and its first-token path, as `measure_costs` measured them."""

    step_s: float
    seq_s: float
    token_s: float
    pair_s: float
    ctx_s: float
    prompt_extra_s: float  # what a step with prompt tokens pays on top of a decode step's fixed part
    prompt_seq_s: float  # what each prompt in a step pays on top of a decode sequence's fixed part
    # the API server's work on a request outside the engine (HTTP, tokenizing its prompt, the first
    # token's way out), (prompt tokens, s), measured at c=1: linear between them, extended linearly
    front_points: tuple[tuple[float, float], ...]
    first_token_s: float  # from the engine's first-token step to its output (engine TTFT less queue + prefill)
    # what the engine's loop loses a prompt token of each request it admits (a step that schedules its
    # prompt): the c=1 front end's time per prompt token (tokenizing), its slope over the prompt lengths
    # measured; the rest of the front-end time is latency beside the steps
    admit_per_token_s: float = 0.0

    def frontend_s(self, prompt_tokens: float) -> float:
        pts = self.front_points
        i = min(max(int(np.searchsorted([p for p, _ in pts], prompt_tokens)), 1), len(pts) - 1)
        (p0, v0), (p1, v1) = pts[i - 1], pts[i]
        return max(0.0, v0 + (v1 - v0) * (prompt_tokens - p0) / (p1 - p0))

    def step_cost(self, prompt_tokens: float = 0.0) -> StepCost:
        """The step costs, each admission priced for prompts of `prompt_tokens`."""
        return StepCost(
            dense_weight_bytes=0.0,
            kv_bytes_per_token=0.0,
            flops_per_token=0.0,
            hbm_bytes_per_s=1.0,
            flops_per_s=1.0,
            attn_flops_per_s=1.0,
            attn_flops_per_token_ctx=self.ctx_s,
            prefill_attn_flops_per_pair=self.pair_s or 1e-30,  # 0 would fall back to ctx_s
            mem_efficiency=1.0,
            compute_efficiency=1.0,
            step_overhead_s=self.step_s,
            seq_overhead_s=self.seq_s,
            token_overhead_s=self.token_s,
            prefill_layer_overhead_s=self.prompt_extra_s,
            prefill_seq_overhead_s=self.prompt_seq_s,
            admit_overhead_s=self.admit_per_token_s * prompt_tokens,
        )


def _calib(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in doc["runs"].values() if r["kind"] == "calib"]


def _itl_p50(run: dict[str, Any]) -> float:
    gaps = run.get("itl_gaps_s")
    return median(gaps) if gaps else float(run.get("itl_p50_s", 0.0))


def _lead_steps(run: dict[str, Any], budget: float) -> list[tuple[int, int, float]]:
    """The steps of one calibration wave (c sends at once) that admitted its followers, from the lead's
    view: (decoding sequences, prompts whose first token the step emitted, the step's wall time s).

    The lead (the first to get its first token) decodes from then on, so each gap between its tokens is
    the engine's time for one step, all that its loop spent beside the model included. A follower's
    first token reaches the client just after the lead's token of the same step (the server streams the
    step's tokens one by one), so it belongs to the last lead token at or before it. A step that a
    next prompt would not have fitted beside, with more prompts in the next step, may have carried a chunk
    of one over: left out, as is a step whose prompts do not fit the token budget whole."""
    reqs, o = run["requests"], int(run["output"]) - 1
    gaps = run.get("itl_gaps_s") or []
    if len(gaps) != o * len(reqs) or len(reqs) < 2 or o < 1:
        return []
    lead = min(range(len(reqs)), key=lambda k: reqs[k][1])
    times = np.cumsum([reqs[lead][1], *gaps[lead * o : (lead + 1) * o]])
    at = [int(np.searchsorted(times, r[1] + 1e-3, side="right")) - 1 for k, r in enumerate(reqs) if k != lead]
    counts = np.bincount(np.clip(at, 0, len(times) - 1), minlength=len(times))
    prompt = float(np.mean([r[3] for r in reqs]))
    out, decoding = [], 1
    for j in range(1, len(times)):
        k = int(counts[j])
        nxt = int(counts[j + 1]) if j + 1 < len(times) else 0
        if k and decoding + k * prompt <= budget and not (nxt and decoding + (k + 1) * prompt > budget):
            out.append((decoding, k, float(times[j] - times[j - 1])))
        decoding += k
    return out


def measure_costs(doc: dict[str, Any]) -> MeasuredCosts:
    """Step costs from the recording's calibration runs (see the module docstring). Raises ValueError
    when the recording lacks the runs that determine them."""
    dec_rows: list[list[float]] = []  # 1, c, context
    dec_y: list[float] = []
    budget = float(doc["vllm_settings"]["max_num_batched_tokens"])
    single: list[tuple[float, float]] = []  # (prompt tokens, prefill time s) at c=1
    front: list[tuple[float, float]] = []  # (prompt tokens, s outside the engine)
    tail: list[float] = []
    waves: list[dict[str, Any]] = []
    for run in _calib(doc):
        reqs, eng = run["requests"], run["engine"]
        prompt = float(np.mean([r[3] for r in reqs]))
        prefill, engine_ttft = eng.get("prefill_time_mean_s"), eng.get("ttft_mean_s")
        if prefill is None or engine_ttft is None:
            raise ValueError(f"run {run['name']}: no prefill-time or TTFT histogram from the engine")
        c = float(run["concurrency"])
        if c == 1:
            single.append((prompt, prefill))
            front.append((prompt, float(np.mean([r[1] - r[0] for r in reqs])) - engine_ttft))
            tail.append(engine_ttft - prefill - eng.get("queue_time_mean_s", 0.0))
        if c == run["n"] and run["output"] >= 32:  # one wave: decode steps of c sequences
            dec_rows.append([1.0, c, c * (prompt + run["output"] / 2.0)])
            dec_y.append(_itl_p50(run))
            if c > 1:
                waves.append(run)
    if len(single) < 3 or len(dec_y) < 3:
        raise ValueError("the recording needs c=1 prefill runs at three prompt lengths or more, and three decode waves")
    dy = np.asarray(dec_y)
    # relative least squares: each measurement counts by its relative error
    a_d, per_seq, ctx = _nonneg_lstsq(np.asarray(dec_rows) / dy[:, None], np.ones_like(dy))
    front.sort()
    # the front end's time per prompt token: the least-squares slope over the c=1 prompt lengths
    fp = np.asarray(front)
    admit = max(float(np.polyfit(fp[:, 0], fp[:, 1], 1)[0]), 0.0)
    # prompt steps: t = fixed + per_token x tokens + pair x pairs (+ per_prompt x prompts + admit x F1 on
    # admissions, F1 the c=1 front-end time of each prompt admitted). A c=1 run's prefill time (the
    # engine's histogram: scheduled to first token) is one prompt step that pays for no admission (the
    # engine's clock starts after it): those give fixed, per_token and pair. The steps of a calibration
    # wave that admit its followers, timed by the lead's gaps (`_lead_steps`), hold all of it: less their
    # decodes and what the c=1 model prices, what is left gives per_prompt and admit
    rows = [[1.0, p, p * p / 2.0] for p, _ in single]
    py = np.asarray([t for _, t in single])
    a_p, per_token, pair = _nonneg_lstsq(np.asarray(rows) / py[:, None], np.ones_like(py))
    adm_rows: list[list[float]] = []
    adm_y: list[float] = []
    for run in waves:
        p = float(np.mean([r[3] for r in run["requests"]]))
        for n_dec, k, wall in _lead_steps(run, budget):
            y = wall - n_dec * per_seq - ctx * n_dec * p - (a_p + per_token * k * p + pair * k * p * p / 2.0)
            adm_rows.append([k])
            adm_y.append(y - admit * k * p)
    per_prompt = 0.0
    if adm_rows:  # absolute least squares: each step counts by its seconds (the long steps matter most)
        (per_prompt,) = _nonneg_lstsq(np.asarray(adm_rows), np.asarray(adm_y))
    # a step = step + seq x sequences + token x tokens (+ prompt_extra on a step with prompt tokens, +
    # prompt_seq a prompt): a prompt token costs `token`; a decode sequence seq + token (its one token); a
    # decode step's fixed part is step
    token = min(per_token, per_seq)
    seq = per_seq - token
    return MeasuredCosts(
        step_s=float(a_d),
        seq_s=float(seq),
        token_s=float(token),
        prompt_extra_s=float(max(a_p - a_d, 0.0)),
        prompt_seq_s=float(max(per_prompt - seq, 0.0)),
        pair_s=float(pair),
        ctx_s=float(ctx),
        front_points=tuple(front),
        first_token_s=median(tail),
        admit_per_token_s=admit,
    )


def _nonneg_lstsq(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: drop the most negative one and solve again."""
    free = list(range(a.shape[1]))
    while True:
        sol, *_ = np.linalg.lstsq(a[:, free], y, rcond=None)
        if (sol >= 0).all():
            out = np.zeros(a.shape[1])
            out[free] = sol
            return out
        free.pop(int(np.argmin(sol)))


def engine_config(
    doc: dict[str, Any], costs: MeasuredCosts, prompt_tokens: float, max_model_len: int = 2048
) -> EngineConfig:
    """The recorded engine's scheduler settings (chunked prefill and prefix caching on, as vLLM V1's
    defaults) with the measured step costs, its front end priced for prompts of `prompt_tokens`."""
    s = doc["vllm_settings"]
    bs = int(s["block_size"])
    return EngineConfig(
        cost=costs.step_cost(prompt_tokens),
        kv_blocks=int(s["kv_tokens"]) // bs,
        block_size=bs,
        max_num_seqs=int(s["max_num_seqs"]),
        max_num_batched_tokens=int(s["max_num_batched_tokens"]),
        max_model_len=max_model_len,
        enable_prefix_caching=True,
        chunked_prefill=True,
        first_token_s=costs.first_token_s
        + max(costs.frontend_s(prompt_tokens) - costs.admit_per_token_s * prompt_tokens, 0.0),
    )


@dataclass(frozen=True, slots=True)
class RunFigures:
    """One run's figures, real or simulated; TTFTs in send order."""

    ttft_s: list[float]
    itl_p50_s: float
    out_tok_s: float
    first_token_s: list[float]

    @property
    def ttft_p50_s(self) -> float:
        return median(self.ttft_s)

    @property
    def ttft_p90_s(self) -> float:
        return _p90(self.ttft_s)


def observed(run: dict[str, Any]) -> RunFigures:
    """The real engine's figures of one recorded run."""
    reqs = sorted(run["requests"], key=lambda r: r[0])
    span = max(r[2] for r in reqs) - min(r[0] for r in reqs)
    return RunFigures([r[1] - r[0] for r in reqs], _itl_p50(run), sum(r[4] for r in reqs) / span, [r[1] for r in reqs])


def replay_run(cfg: EngineConfig, run: dict[str, Any]) -> RunFigures:
    """The same requests (lengths as the server counted them) through the simulated engine: a closed
    loop of the run's concurrency in the run's order, or, open, each sent when the real one was."""
    rec = run["requests"]
    reqs = [SimRequest(id=i, prompt_len=int(r[3]), max_tokens=int(r[4]), arrival_s=r[0]) for i, r in enumerate(rec)]
    if run["kind"] == "open":
        sim = simulate(cfg, reqs)
    else:
        sim = simulate(cfg, reqs, concurrency=int(run["concurrency"]))
    order = sorted(reqs, key=lambda r: (r.arrival_s, r.id))
    ttft = [sim.first_token_s(r) - r.arrival_s + cfg.first_token_s for r in order]
    ends = np.asarray(sim.step_end_s, dtype=np.float64)
    itl = weighted_median(*step_gaps(ends, reqs)) if len(ends) > 1 else 0.0
    span = max(sim.end_s(r) for r in reqs) - min(r.arrival_s for r in reqs)
    return RunFigures(ttft, itl, sum(r.max_tokens for r in reqs) / span, [sim.first_token_s(r) for r in order])


def wave_profile(ttft_s: Sequence[float], concurrency: int) -> list[float]:
    """Median TTFT by position within each wave of `concurrency` consecutive sends (send order), the
    first wave dropped; [] when fewer than two waves were sent."""
    c = concurrency
    waves = len(ttft_s) // c
    if c < 2 or waves < 2:
        return []
    return [median([ttft_s[w * c + k] for w in range(1, waves)]) for k in range(c)]


def cohort_size(first_token_s: Sequence[float], concurrency: int, tol_s: float = 0.005) -> float:
    """Request-weighted mean size of the cohorts of a closed loop, the first wave dropped: a cohort is the
    requests whose first tokens came within `tol_s` of the one before (one engine step emits them together).
    1: every request starts alone; c: whole waves move together."""
    f = sorted(first_token_s)[concurrency:]
    if not f:
        return 0.0
    sizes, cur = [], 1
    for a, b in itertools.pairwise(f):
        if b - a <= tol_s:
            cur += 1
        else:
            sizes.append(cur)
            cur = 1
    sizes.append(cur)
    return sum(x * x for x in sizes) / sum(sizes)


def ramp(profile: Sequence[float]) -> float:
    """Largest over smallest position median of a wave profile (1: flat; 0 with no profile)."""
    if not profile or min(profile) <= 0:
        return 0.0
    return max(profile) / min(profile)


def compare_run(doc: dict[str, Any], costs: MeasuredCosts, run: dict[str, Any]) -> dict[str, Any]:
    """One run's real and simulated figures side by side, errors as (sim - real) / real."""
    cfg = engine_config(doc, costs, float(np.mean([r[3] for r in run["requests"]])))
    real, sim = observed(run), replay_run(cfg, run)
    row: dict[str, Any] = {"name": run["name"], "kind": run["kind"], "concurrency": run["concurrency"]}
    for key in ("ttft_p50_s", "ttft_p90_s", "itl_p50_s", "out_tok_s"):
        r, s = getattr(real, key), getattr(sim, key)
        row[key] = (r, s, (s - r) / r if r else 0.0)
    if run["kind"] == "closed":
        row["wave_real"] = wave_profile(real.ttft_s, run["concurrency"])
        row["wave_sim"] = wave_profile(sim.ttft_s, run["concurrency"])
        row["cohort_real"] = cohort_size(real.first_token_s, run["concurrency"])
        row["cohort_sim"] = cohort_size(sim.first_token_s, run["concurrency"])
    return row


def compare_all(doc: dict[str, Any], costs: MeasuredCosts) -> list[dict[str, Any]]:
    return [compare_run(doc, costs, run) for run in doc["runs"].values() if run["kind"] != "calib"]


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The point-by-point table: real, sim and error for each figure."""
    head = f"{'run':20s} {'c':>3s}"
    for label in ("TTFT p50 ms", "TTFT p90 ms", "ITL p50 ms", "out tok/s"):
        head += f" | {label:^24s}"
    lines = [head, f"{'':24s}" + " | {:>7s} {:>7s} {:>7s}".format("vLLM", "sim", "err") * 4]
    for row in rows:
        line = f"{row['name']:20s} {row['concurrency']:>3d}"
        for key, scale in (("ttft_p50_s", 1e3), ("ttft_p90_s", 1e3), ("itl_p50_s", 1e3), ("out_tok_s", 1.0)):
            r, s, e = row[key]
            line += f" | {r * scale:7.1f} {s * scale:7.1f} {100 * e:+6.1f}%"
        lines.append(line)
    return "\n".join(lines)


def wave_table(rows: Sequence[dict[str, Any]]) -> str:
    """Each closed loop's wave profile (ms by position), real over simulated, and the ramps."""
    lines = []
    for row in rows:
        if not row.get("wave_real"):
            continue
        real, sim = row["wave_real"], row["wave_sim"]
        rr, rs = ramp(real), ramp(sim)
        agree = (rr > COHORT_RAMP) == (rs > COHORT_RAMP)
        lines.append(
            f"{row['name']}: mean cohort size vLLM {row['cohort_real']:.1f}, sim {row['cohort_sim']:.1f} of c="
            f"{row['concurrency']}; ramp vLLM {rr:.2f}x, sim {rs:.2f}x ({'same' if agree else 'OPPOSITE'} side of "
            f"{COHORT_RAMP}x)"
        )
        lines.append("  vLLM ms: " + " ".join(f"{1e3 * x:.0f}" for x in real))
        lines.append("  sim  ms: " + " ".join(f"{1e3 * x:.0f}" for x in sim))
    return "\n".join(lines)
