"""`servebench plan`: memory fit, KV capacity, deployment recipes, what-if on a virtual clock, calibration.

The cores are pure functions over `sim/` (`resolve_layout`, `fit_table`, `whatif`, `calibrate`);
`plan_main` does the I/O (console, --out files, reading --calibrate measurements). Register
`plan_command` (a click command) in cli.py.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import click
import numpy as np
import yaml
from rich.console import Console
from rich.table import Table

from servebench.errors import ConfigError, ServebenchError
from servebench.plan.recipes import RecipeSpec, render_all
from servebench.deploy.loader import resolve_model
from servebench.sim.catalog import GPUS, MODELS, GPUSpec, ModelSpec, get_gpu, params_b
from servebench.sim.engine import EngineConfig, SimRequest, simulate
from servebench.sim.memory import ENGINES, QUANTS, FitResult, Layout, fit, kv_bytes_per_token, weight_bytes_per_gpu
from servebench.sim.profile import profile_from_dict

__all__ = ["PlanArgs", "plan_main", "plan_command", "resolve_layout", "fit_table", "whatif_table", "whatif",
           "calibrate", "Calibration", "MeasuredPoint", "WhatIfPoint", "load_measurements", "DEFAULT_CALIBRATION",
           "default_calibration", "deployment_dict"]

_GIB = 1 << 30


@dataclass(slots=True)
class PlanArgs:
    model: str
    gpu: str = "h100"
    gpus: int = 8  # per node
    nodes: int = 1
    quant: str | None = None  # default: the checkpoint's precision
    kv_dtype: str = "bf16"
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: int | None = None
    engine: str = "vllm"
    max_model_len: int = 8192
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int = 256
    out: str | None = None
    input_len: int = 1024
    output_len: int = 256
    concurrency: tuple[int, ...] = ()  # what-if points; empty: no what-if
    num_requests: int | None = None
    calibrate: str | None = None
    predict_concurrency: tuple[int, ...] = field(default_factory=tuple)


def resolve_layout(args: PlanArgs, model: ModelSpec, gpu: GPUSpec) -> Layout:
    """Fill in the parallelism the user left out: TP within a node, PP across nodes, EP off."""
    total = args.gpus * args.nodes
    tp, pp, dp = args.tp, args.pp, args.dp
    if tp is None and pp is None and dp is None:
        tp, pp, dp = args.gpus, args.nodes, 1
    if tp is None:
        tp = max(1, total // ((pp or 1) * (dp or 1)))
    if pp is None:
        pp = max(1, total // (tp * (dp or 1)))
    if dp is None:
        dp = max(1, total // (tp * pp))
    if engine_base(args.engine) not in ("vllm", "sglang", "trtllm"):
        raise ConfigError(f"unknown engine {args.engine!r}")
    return Layout(gpu=gpu, gpus_per_node=args.gpus, nodes=args.nodes, tp=tp, pp=pp, dp=dp, ep=args.ep or 1,
                  quant=args.quant or model.default_quant, kv_dtype=args.kv_dtype)


def engine_base(engine: str) -> str:
    return engine.split("-")[0]


def _gib(n: float) -> str:
    return f"{n / _GIB:.1f} GiB"


def fit_table(model: ModelSpec, layout: Layout, res: FitResult, *, engine: str, seq_lens: Sequence[int]) -> Table:
    t = Table(title=f"{model.name} on {layout.describe()} ({engine})", show_header=True)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("how", overflow="fold")
    t.add_row("parameters", f"{params_b(model.params_total)} ({params_b(model.params_active)} active)",
              f"{model.attention.upper()}{', MoE ' + str(model.n_routed_experts) + ' experts' if model.is_moe else ''}")
    bd = ", ".join(f"{k} {v / _GIB:.2f}" for k, v in res.weights_breakdown.items() if v >= 0.01 * _GIB)
    t.add_row("weights per GPU", _gib(res.weights_per_gpu_bytes), f"{layout.quant}: {bd} GiB")
    t.add_row("engine reserve per GPU", _gib(res.reserve_per_gpu_bytes), "activation peak + non-torch + graphs")
    t.add_row("usable per GPU", _gib(res.usable_per_gpu_bytes),
              f"{layout.gpu.memory_gib:.1f} GiB {layout.gpu.name.upper()}")
    whole = kv_bytes_per_token(model, layout.kv_dtype_bytes)
    how = ("MLA latent: replicated on every TP rank" if model.attention == "mla"
           else f"GQA: {model.kv_heads} KV heads split over min(tp, kv_heads) = {min(layout.tp, model.kv_heads)}")
    if layout.pp > 1:
        how += f"; layers split over PP{layout.pp}"
    t.add_row("KV bytes per token", f"{res.kv_bytes_per_token_per_gpu:,} per GPU",
              f"{whole:,} whole model ({layout.kv_dtype}); {how}")
    t.add_row("KV cache per GPU", _gib(res.kv_bytes_per_gpu), "usable - weights - reserve")
    reps = f" x {res.replicas} DP replicas" if res.replicas > 1 else ""
    t.add_row("KV capacity", f"{res.kv_tokens:,} tokens{reps}", "per model replica, whole blocks")
    for n in seq_lens:
        t.add_row(f"concurrent seqs of {n:,}", f"{res.max_concurrent_seqs(n):,}", "all replicas")
    t.add_row("fits", "yes" if res.fits else "NO", res.reason)
    return t


def whatif_table(points: Sequence[WhatIfPoint], title: str) -> Table:
    t = Table(title=title)
    for col in ("concurrency", "in/out", "output tok/s", "total tok/s", "TTFT p50 ms", "ITL p50 ms",
                "E2E p50 ms", "req/s"):
        t.add_column(col, justify="right")
    for p in points:
        t.add_row(str(p.concurrency), f"{p.input_len}/{p.output_len}", f"{p.output_tokens_per_s:,.0f}",
                  f"{p.total_tokens_per_s:,.0f}", f"{p.ttft_ms_p50:,.0f}", f"{p.itl_ms_p50:,.1f}",
                  f"{p.e2e_ms_p50:,.0f}", f"{p.requests_per_s:,.2f}")
    return t


def deployment_dict(args: PlanArgs, model: ModelSpec, layout: Layout) -> dict[str, Any]:
    """The profile-shaped mapping `sim.profile` turns into an engine (what-if and calibration)."""
    return {
        "name": f"plan-{model.name}", "model": model, "gpu": layout.gpu.name,
        "gpus": layout.gpus, "tp": layout.tp, "pp": layout.pp, "dp": layout.dp, "ep": layout.ep,
        "quant": layout.quant, "kv_dtype": layout.kv_dtype, "engine": args.engine,
        "gpu_memory_utilization": args.gpu_memory_utilization, "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": max(8192, args.max_num_seqs),
        "chunked_prefill": args.engine != "vllm-0.7",
    }


# --- what-if and calibration (engine: sim.engine on a virtual clock) -----------------------------


@dataclass(frozen=True, slots=True)
class Calibration:
    """The step-time knobs calibration fits (see sim/steptime.py for where each enters)."""

    mem_efficiency: float = 0.7
    compute_efficiency: float = 0.5
    step_overhead_s: float = 0.003
    layer_overhead_s: float = 0.00005

    def profile_keys(self) -> dict[str, Any]:
        return {"efficiency": {"memory": self.mem_efficiency, "compute": self.compute_efficiency},
                "overhead": {"step_s": self.step_overhead_s, "layer_s": self.layer_overhead_s}}

    def to_yaml(self) -> str:
        return "# fitted by servebench plan --calibrate; paste into a sim profile\n" + yaml.safe_dump(
            {k: {kk: float(f"{vv:.4g}") for kk, vv in v.items()} for k, v in self.profile_keys().items()},
            sort_keys=False)


# Uncalibrated defaults: HBM reaches ~70% of its datasheet bandwidth in decode GEMVs; tensor cores
# ~50% of dense BF16 peak in prefill GEMMs (40% of FP8 peak; W4A16 AWQ/GPTQ MoE kernels dequantize in
# the inner loop: ~10% of the BF16 peak); ~3 ms per step of scheduling and sampling; 20 us per layer of
# launches and all-reduce for dense models, 150 us for MoE layers (routing, grouped GEMMs, more
# collectives). Calibrate (--calibrate) before trusting absolute numbers.
DEFAULT_CALIBRATION = Calibration()
_COMPUTE_PRIOR = {"bf16": 0.5, "fp8": 0.4, "fp8-ffn": 0.4, "awq": 0.1, "int4": 0.1}


def default_calibration(model: ModelSpec, quant: str) -> Calibration:
    return Calibration(mem_efficiency=0.7, compute_efficiency=_COMPUTE_PRIOR.get(quant, 0.5),
                       step_overhead_s=0.003, layer_overhead_s=150e-6 if model.is_moe else 20e-6)


@dataclass(frozen=True, slots=True)
class MeasuredPoint:
    concurrency: int
    input_len: int
    output_len: int
    output_tokens_per_s: float
    itl_ms: float | None = None  # median inter-token latency
    ttft_ms: float | None = None  # median time to first token


@dataclass(frozen=True, slots=True)
class WhatIfPoint:
    concurrency: int
    input_len: int
    output_len: int
    output_tokens_per_s: float
    total_tokens_per_s: float
    requests_per_s: float
    ttft_ms_p50: float
    itl_ms_p50: float  # median gap between consecutive tokens, all requests
    e2e_ms_p50: float


def engine_config(dep: dict[str, Any], cal: Calibration) -> EngineConfig:
    return profile_from_dict({**dep, **cal.profile_keys()}).engine


def simulate_point(cfg: EngineConfig, *, concurrency: int, input_len: int, output_len: int,
                   num_requests: int) -> WhatIfPoint:
    """Closed loop of `concurrency` on a virtual clock; throughput over the whole run (as a benchmark sees
    it); ITL is the median gap between consecutive tokens over all requests (as vLLM's bench reports)."""
    reqs = [SimRequest(id=i, prompt_len=input_len, max_tokens=output_len) for i in range(num_requests)]
    run = simulate(cfg, reqs, concurrency=concurrency)
    dur = run.duration_s or 1e-9
    ttft = [run.first_token_s(r) - r.arrival_s for r in reqs]
    e2e = [run.end_s(r) - r.arrival_s for r in reqs]
    itl_s = _median_itl_s(run, reqs)
    out_tok = output_len * num_requests
    return WhatIfPoint(concurrency=concurrency, input_len=input_len, output_len=output_len,
                       output_tokens_per_s=out_tok / dur, total_tokens_per_s=(out_tok + input_len * num_requests) / dur,
                       requests_per_s=num_requests / dur, ttft_ms_p50=1e3 * statistics.median(ttft),
                       itl_ms_p50=1e3 * itl_s,
                       e2e_ms_p50=1e3 * statistics.median(e2e))


def _median_itl_s(run: Any, reqs: Sequence[SimRequest]) -> float:
    """Median gap between consecutive tokens over all requests, in O(requests + steps): within a
    request's run of steps [a, b] its gaps are the step-to-step gaps a..b-1, so count how many requests
    cover each step gap (a difference array) and take the weighted median; gaps across a preemption
    are added one by one."""
    ends = np.asarray(run.step_end_s, dtype=np.float64)
    if len(ends) < 2:
        return 0.0
    diff = np.zeros(len(ends) + 1, dtype=np.int64)
    extra: list[float] = []
    for r in reqs:
        prev_b = -1
        for a, b in r.segments:
            if b > a:
                diff[a] += 1
                diff[b] -= 1
            if prev_b >= 0:
                extra.append(ends[a] - ends[prev_b])
            prev_b = b
    weights = np.cumsum(diff)[: len(ends) - 1]
    gaps = np.diff(ends)
    if extra:
        gaps = np.concatenate([gaps, np.asarray(extra)])
        weights = np.concatenate([weights, np.ones(len(extra), dtype=np.int64)])
    total = int(weights.sum())
    if total == 0:
        return 0.0
    order = np.argsort(gaps, kind="stable")
    cum = np.cumsum(weights[order])
    lo = gaps[order][np.searchsorted(cum, (total + 1) // 2)]  # statistics.median's two middle values
    hi = gaps[order][np.searchsorted(cum, total // 2 + 1)]
    return float((lo + hi) / 2)


def _n_requests(concurrency: int, num_requests: int | None) -> int:
    return num_requests or max(200, 4 * concurrency)


def whatif(dep: dict[str, Any], cal: Calibration, *, input_len: int, output_len: int,
           concurrencies: Sequence[int], num_requests: int | None = None) -> list[WhatIfPoint]:
    cfg = engine_config(dep, cal)
    if input_len + output_len > cfg.max_model_len:
        raise ConfigError(f"input_len + output_len = {input_len + output_len} exceeds max_model_len {cfg.max_model_len}")
    replicas = int(dep.get("dp", 1))
    out: list[WhatIfPoint] = []
    for c in concurrencies:
        # DP replicas are independent engines sharing the load evenly (their MoE sync is not modelled)
        per = math.ceil(c / replicas)
        p = simulate_point(cfg, concurrency=per, input_len=input_len, output_len=output_len,
                           num_requests=math.ceil(_n_requests(c, num_requests) / replicas))
        if replicas > 1:
            p = dataclasses.replace(p, concurrency=c, output_tokens_per_s=p.output_tokens_per_s * replicas,
                                    total_tokens_per_s=p.total_tokens_per_s * replicas,
                                    requests_per_s=p.requests_per_s * replicas)
        out.append(p)
    return out


_BOUNDS = {"mem_efficiency": (0.02, 1.0), "compute_efficiency": (0.005, 1.0),
           "step_overhead_s": (1e-4, 0.2), "layer_overhead_s": (1e-7, 2e-3)}


def _calib_requests(concurrency: int) -> int:
    return 4 * concurrency + 4  # enough for a steady state; calibration runs hundreds of these


def _loss(dep: dict[str, Any], cal: Calibration, pts: Sequence[MeasuredPoint], prior: Calibration) -> float:
    cfg = engine_config(dep, cal)
    # Low-concurrency decode points hardly constrain compute efficiency (prefill is a sliver of their
    # time), yet high-concurrency predictions hinge on it: a weak prior keeps it near the kernel-class
    # default unless TTFT or high-concurrency measurements say otherwise.
    total = _PRIOR_WEIGHT * math.log(cal.compute_efficiency / prior.compute_efficiency) ** 2
    for p in pts:
        sim = simulate_point(cfg, concurrency=p.concurrency, input_len=p.input_len, output_len=p.output_len,
                             num_requests=_calib_requests(p.concurrency))
        total += math.log(sim.output_tokens_per_s / p.output_tokens_per_s) ** 2
        if p.itl_ms:
            total += math.log(sim.itl_ms_p50 / p.itl_ms) ** 2
        if p.ttft_ms:
            total += math.log(sim.ttft_ms_p50 / p.ttft_ms) ** 2
    return total


_PRIOR_WEIGHT = 0.05


def calibrate(dep: dict[str, Any], points: Sequence[MeasuredPoint], *, start: Calibration = DEFAULT_CALIBRATION,
              max_evals: int = 250) -> tuple[Calibration, str]:
    """`start` is also the prior for compute efficiency (use `default_calibration(model, quant)`)."""
    """Fit the step-time knobs to measured points by coordinate descent in log space (squared log error
    of output throughput and median ITL). Returns the calibration and a one-paragraph report."""
    if not points:
        raise ConfigError("calibration needs at least one measured point")
    best, best_loss, evals = start, _loss(dep, start, points, start), 1
    for factor in (4.0, 2.0, 1.4, 1.15, 1.05):
        improved = True
        while improved and evals < max_evals:
            improved = False
            for name, (lo, hi) in _BOUNDS.items():
                for f in (factor, 1.0 / factor):
                    val = min(hi, max(lo, getattr(best, name) * f))
                    cand = dataclasses.replace(best, **{name: val})
                    loss = _loss(dep, cand, points, start)
                    evals += 1
                    if loss < best_loss - 1e-9:
                        best, best_loss, improved = cand, loss, True
                        break
    cfg = engine_config(dep, best)
    lines = [f"calibrated on {len(points)} points ({evals} simulations, rms log error "
             f"{math.sqrt(best_loss / max(1, len(points))):.3f}): memory eff {best.mem_efficiency:.3g}, compute eff "
             f"{best.compute_efficiency:.3g}, step {1e3 * best.step_overhead_s:.3g} ms, "
             f"layer {1e6 * best.layer_overhead_s:.3g} us"]
    for p in points:
        sim = simulate_point(cfg, concurrency=p.concurrency, input_len=p.input_len, output_len=p.output_len,
                             num_requests=_calib_requests(p.concurrency))
        itl = f", ITL {sim.itl_ms_p50:.1f} ms vs {p.itl_ms:.1f}" if p.itl_ms else ""
        lines.append(f"  c={p.concurrency}: {sim.output_tokens_per_s:.0f} vs measured {p.output_tokens_per_s:.0f} "
                     f"output tok/s{itl}")
    return best, "\n".join(lines)


def _median(summary: dict[str, Any], metric: str) -> float | None:
    v = ((summary.get("latency_ms") or {}).get(metric) or {}).get("median")
    return float(v) if v else None


def load_measurements(path: str | Path) -> list[MeasuredPoint]:
    """I/O edge: measured points from servebench result dirs (every summary.json below `path`) or from a
    YAML/JSON file: a list (or {points: [...]}) of {concurrency, input_len, output_len,
    output_tokens_per_s, itl_ms}."""
    p = Path(path)
    pts: list[MeasuredPoint] = []
    try:
        if p.is_dir():
            for f in sorted(p.rglob("summary.json")):
                d = json.loads(f.read_text(encoding="utf-8"))
                pts.append(MeasuredPoint(
                    concurrency=int(d["load"]["concurrency"]), input_len=int(d["workload"]["input_len"]),
                    output_len=int(d["workload"]["output_len"]),
                    output_tokens_per_s=float(d["throughput"]["output_tokens_per_s"]),
                    itl_ms=_median(d, "itl"), ttft_ms=_median(d, "ttft")))
        else:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
            rows = data.get("points", []) if isinstance(data, dict) else data
            for r in rows or []:
                pts.append(MeasuredPoint(concurrency=int(r["concurrency"]), input_len=int(r["input_len"]),
                                         output_len=int(r["output_len"]),
                                         output_tokens_per_s=float(r["output_tokens_per_s"]),
                                         itl_ms=float(r["itl_ms"]) if r.get("itl_ms") else None,
                                         ttft_ms=float(r["ttft_ms"]) if r.get("ttft_ms") else None))
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read measurements from {p}: {exc}") from exc
    if not pts:
        raise ConfigError(f"no measured points in {p} (expected summary.json files or a YAML list of points)")
    return pts


def plan_main(args: PlanArgs, console: Console | None = None) -> int:
    """Run `servebench plan`. Returns the exit status: 0 fits, 1 does not fit."""
    con = console or Console()
    model = resolve_model(args.model)
    gpu = get_gpu(args.gpu)
    layout = resolve_layout(args, model, gpu)
    res = fit(model, layout, max_model_len=args.max_model_len, gpu_memory_utilization=args.gpu_memory_utilization,
              engine=args.engine)
    seq_lens = sorted({args.max_model_len, args.input_len + args.output_len})
    con.print(fit_table(model, layout, res, engine=args.engine, seq_lens=seq_lens))
    if not res.fits:
        con.print(f"[bold red]Does not fit:[/] {res.reason}")
        if res.suggestions:
            con.print("Smallest layouts that fit:")
            for s in res.suggestions:
                con.print(f"  - {s}")
        return 1
    if model.attention == "mla" and args.engine == "vllm":
        extra = weight_bytes_per_gpu(model, layout, engine="vllm-0.7") - res.weights_per_gpu_bytes
        con.print(f"note: vLLM 0.7.x kept absorbed MLA weights, {extra / _GIB:.1f} GiB more per GPU here; "
                  "--engine vllm-0.7 models that version")
    if args.dp and args.dp > 1 and args.ep is None and model.is_moe:
        con.print("hint: with DP on an MoE model, add --ep to split experts (vLLM --enable-expert-parallel)")
    spec = RecipeSpec(model=model, layout=layout, engine=engine_base(args.engine), max_model_len=args.max_model_len,
                      gpu_memory_utilization=args.gpu_memory_utilization, max_num_seqs=args.max_num_seqs)
    files = render_all(spec)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text, encoding="utf-8")
            if name.endswith(".sh"):
                (out / name).chmod(0o755)
        con.print(f"recipes written to {out}: {', '.join(files)}")
    else:
        con.print(f"[bold]launch ({spec.engine})[/]  (--out DIR writes compose, Kubernetes and benchmark files)")
        con.print(files[f"launch-{spec.engine}.sh"], markup=False, highlight=False)
    dep = deployment_dict(args, model, layout)
    cal = default_calibration(model, layout.quant)
    if args.calibrate:
        measured = load_measurements(args.calibrate)
        cal, report = calibrate(dep, measured, start=cal)
        con.print(report)
        if args.out:
            (Path(args.out) / "calibration.yaml").write_text(cal.to_yaml(), encoding="utf-8")
    concs = args.concurrency or (args.predict_concurrency if args.calibrate else ())
    if concs:
        pts = whatif(dep, cal, input_len=args.input_len, output_len=args.output_len, concurrencies=concs,
                     num_requests=args.num_requests)
        con.print(whatif_table(pts, f"what-if on a virtual clock ({'calibrated' if args.calibrate else 'default'} "
                                    "efficiency; a model, not a measurement)"))
    return 0


def _int_list(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...]:
    if not value:
        return ()
    try:
        out = tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter("a comma-separated list of integers, e.g. 1,5,15,100") from None
    if any(x < 1 for x in out):
        raise click.BadParameter("values must be >= 1")
    return out


@click.command("plan")
@click.option("--model", required=True, help=f"Catalogue name ({', '.join(MODELS)}) or a path to a HF config.json.")
@click.option("--gpu", default="h100", show_default=True, type=click.Choice(sorted(GPUS), case_sensitive=False))
@click.option("--gpus", default=8, show_default=True, type=click.IntRange(1), help="GPUs per node.")
@click.option("--nodes", default=1, show_default=True, type=click.IntRange(1))
@click.option("--quant", type=click.Choice(QUANTS), help="Weight precision. [default: the checkpoint's]")
@click.option("--kv-dtype", default="bf16", show_default=True, type=click.Choice(["bf16", "fp8"]))
@click.option("--tp", type=click.IntRange(1), help="Tensor parallel size. [default: GPUs per node]")
@click.option("--pp", type=click.IntRange(1), help="Pipeline parallel size. [default: nodes]")
@click.option("--dp", type=click.IntRange(1), help="Data parallel replicas (attention). [default: 1]")
@click.option("--ep", type=click.IntRange(1), help="Expert parallel size (usually tp*dp). [default: off]")
@click.option("--engine", default="vllm", show_default=True, type=click.Choice(list(ENGINES)))
@click.option("--max-model-len", default=8192, show_default=True, type=click.IntRange(1))
@click.option("--gpu-memory-utilization", default=0.9, show_default=True, type=click.FloatRange(0.05, 1.0))
@click.option("--max-num-seqs", default=256, show_default=True, type=click.IntRange(1))
@click.option("--out", type=click.Path(file_okay=False), help="Write launch, compose, Kubernetes and benchmark files here.")
@click.option("--input-len", default=1024, show_default=True, type=click.IntRange(1), help="What-if prompt tokens.")
@click.option("--output-len", default=256, show_default=True, type=click.IntRange(1), help="What-if output tokens.")
@click.option("--concurrency", callback=_int_list, help="What-if: closed-loop concurrencies, e.g. 1,8,32,128.")
@click.option("--num-requests", type=click.IntRange(1), help="What-if requests per point. [default: max(200, 4x conc)]")
@click.option("--calibrate", type=click.Path(exists=True),
              help="Fit efficiency/overheads to measured points: result dirs (summary.json) or a YAML of points.")
def plan_command(**options: Any) -> None:
    """Memory fit, KV capacity, launch recipes and what-if performance of a model on GPUs."""
    names = {f.name for f in dataclasses.fields(PlanArgs)}
    args = PlanArgs(**{k: v for k, v in options.items() if k in names and v is not None})
    if args.calibrate and not args.concurrency:
        args.predict_concurrency = (1, 8, 32, 64, 100, 128)
    try:
        code = plan_main(args)
    except ServebenchError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(exc.exit_code) from None
    raise SystemExit(code)
