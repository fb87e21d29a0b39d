"""`servescope plan`: memory fit, KV capacity, deployment recipes, what-if on a virtual clock, calibration.

The cores are pure functions over `sim/`: `plan.memfit` (`to_deployment`, `fit_table`), `plan.whatif`
(`whatif`), `plan.calibrate` (`calibrate`), `plan.band` (the what-if's uncertainty). `plan_main` runs
them in steps and does the I/O (console, --out files, reading --calibrate measurements). Register
`plan_command` (a click command) in cli.py.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from servescope.deploy.deployment import Deployment, EngineLimits
from servescope.errors import ConfigError, handle_errors
from servescope.plan.band import Band, Reach, band_for, interval_lines, loo_line, loo_spread, point_intervals, reach_for
from servescope.plan.calibrate import MeasuredPoint, calibrate, leave_one_out, load_measurements
from servescope.plan.memfit import GIB, PlanArgs, fit_table, to_deployment
from servescope.plan.recipes import RecipeSpec, render_all
from servescope.plan.whatif import SEED, WhatIfPoint, knobs_yaml, point_dict, simulate_point, whatif, whatif_table
from servescope.sim.catalog.cpus import CPUS
from servescope.sim.catalog.gpus import GPUS, get_gpu
from servescope.sim.catalog.models import MODELS
from servescope.sim.knobs import StepKnobs, parse_engine
from servescope.sim.memory.fit import FitResult
from servescope.sim.memory.weights import weight_bytes_per_gpu
from servescope.sim.placement import QUANTS

__all__ = ["plan_main", "plan_command", "PLAN_SCHEMA"]

PLAN_SCHEMA = "servescope.plan/1"


@dataclasses.dataclass(frozen=True, slots=True)
class Calibrated:
    """The knobs the what-if runs with: `start` (the deployment's) or, after --calibrate, the fit to
    `measured`, with each measured point's prediction under the fit (`fitted`)."""

    knobs: StepKnobs
    start: StepKnobs
    measured: list[MeasuredPoint]
    fitted: list[tuple[MeasuredPoint, WhatIfPoint]] | None


@dataclasses.dataclass(frozen=True, slots=True)
class WhatIf:
    """The what-if points with their bands (`bands`, one per point: `band`'s, widened to the
    leave-one-out move where there is one), their leave-one-out spread (None without), and their 80%
    and 95% intervals (`intervals`, one per point) for the deployment's `reach`."""

    points: list[WhatIfPoint]
    band: Band
    bands: list[dict[str, float]]
    spread: list[dict[str, dict[str, Any]]] | None
    reach: Reach
    intervals: list[dict[str, dict[str, dict[str, float]]]]


def _fit_json(res: FitResult, seq_lens: list[int]) -> dict[str, Any]:
    return {
        "fits": res.fits,
        "reason": res.reason,
        "weights_per_gpu_gib": res.weights_per_gpu_bytes / GIB,
        "weights_breakdown_gib": {k: v / GIB for k, v in res.weights_breakdown.items()},
        "reserve_per_gpu_gib": res.reserve_per_gpu_bytes / GIB,
        "usable_per_gpu_gib": res.usable_per_gpu_bytes / GIB,
        "kv_cache_per_gpu_gib": res.kv_bytes_per_gpu / GIB,
        "kv_bytes_per_token_per_gpu": res.kv_bytes_per_token_per_gpu,
        "kv_tokens_per_replica": res.kv_tokens,
        "kv_seq_overhead_tokens": res.seq_overhead_tokens,
        "replicas": res.replicas,
        "max_model_len": res.max_model_len,
        "concurrent_seqs": {str(n): res.max_concurrent_seqs(n) for n in seq_lens},
        "suggestions": list(res.suggestions),
    }


def plan_main(args: PlanArgs, console: Console | None = None) -> int:
    """Run `servescope plan`. Returns the exit status: 0 fits, 1 does not fit. With `args.json_out`
    "-" the answer goes to stdout as JSON (no tables); with a path, plan.json is written there too."""
    quiet = args.json_out == "-"
    con = console or Console(stderr=quiet)
    dep = to_deployment(args)
    res = dep.fit()
    seq_lens = sorted({args.max_model_len, args.prefix_len + args.input_len + args.output_len})
    reach = reach_for(dep)
    doc: dict[str, Any] = {
        "schema": PLAN_SCHEMA,
        "deployment": {
            **dep.to_mapping(),
            "describe": dep.describe(),
            "engine_version": dep.version,
            "engine_release": reach.release,
        },
        "fit": _fit_json(res, seq_lens),
    }
    if not quiet:
        con.print(fit_table(dep.model, dep.layout, res, engine=args.engine, seq_lens=seq_lens))
    if not res.fits:
        if not quiet:
            _print_no_fit(con, res)
        _emit(args, doc)
        return 1
    notes = [f"engine release: {reach.release}", *_notes(args, dep, res)]
    spec = _recipe_spec(args, dep)
    files = render_all(spec)
    doc["notes"] = notes
    doc["recipe"] = _recipe_json(spec, dep.limits, files)
    if not quiet:
        for n in notes:
            con.print(f"note: {n}")
    _write_recipes(args, spec, files, con, quiet=quiet)
    cal = _calibrate(args, dep, doc, con, quiet=quiet)
    doc["knobs"] = {
        "source": "calibrated" if args.calibrate else "fitted table (deploy/calibration.yaml or defaults)",
        **dataclasses.asdict(cal.knobs),
    }
    concs = args.concurrency or (args.predict_concurrency if args.calibrate and not args.request_rate else ())
    if concs or args.request_rate:
        wi = _whatif(args, dep, cal, concs, reach)
        doc["whatif"] = _whatif_json(args, wi, closed_loop=bool(concs))
        if not quiet:
            _print_whatif(con, args, wi, len(cal.measured))
    _emit(args, doc)
    return 0


def _print_no_fit(con: Console, res: FitResult) -> None:
    con.print(f"[bold red]Does not fit:[/] {res.reason}")
    if res.suggestions:
        con.print("Smallest layouts that fit:")
        for s in res.suggestions:
            con.print(f"  - {s}")


def _notes(args: PlanArgs, dep: Deployment, res: FitResult) -> list[str]:
    """What the user should know about this deployment beyond the fit table: an older engine's MLA
    weights, DP attention's expert split and prompt share, prefix caching switched off."""
    model, layout, lim = dep.model, dep.layout, dep.limits
    notes: list[str] = []
    if model.attention == "mla" and dep.family == "vllm-v1" and not dep.engine_spec.stated:
        extra = weight_bytes_per_gpu(model, layout, engine="vllm-0.7") - res.weights_per_gpu_bytes
        notes.append(
            f"vLLM 0.7.x kept absorbed MLA weights, {extra / GIB:.1f} GiB more per GPU here; "
            "--engine vllm-0.7 models that version"
        )
    if layout.dp > 1 and args.ep is None and model.is_moe:
        flag = "SGLang --enable-dp-attention" if dep.family == "sglang" else "vLLM --enable-expert-parallel"
        notes.append(
            f"data-parallel attention on an MoE model: experts split over all {layout.tp * layout.dp} "
            f"ranks as EP{layout.ep} ({flag}); pass --ep to choose"
        )
    if lim.max_prefill_tokens:
        notes.append(
            f"each of SGLang's {layout.dp} DP-attention ranks prefills {lim.max_prefill_tokens:,} prompt "
            "tokens a step (it divides --chunked-prefill-size among them)"
        )
    if args.prefix_len and not dep.prefix_caching:
        why = (
            "it does not cache MLA prompts" if model.attention == "mla" else "its default, --enable-prefix-caching off"
        )
        notes.append(
            f"prefix caching is off for {dep.engine} here ({why}): the what-if recomputes the "
            f"{args.prefix_len:,}-token shared prefix of every prompt"
        )
    return notes


def _recipe_spec(args: PlanArgs, dep: Deployment) -> RecipeSpec:
    lim = dep.limits
    return RecipeSpec(
        model=dep.model,
        layout=dep.layout,
        engine=dep.engine_spec.base,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=lim.gpu_memory_utilization,
        max_num_seqs=lim.max_num_seqs,
    )


def _recipe_json(spec: RecipeSpec, lim: EngineLimits, files: Mapping[str, str]) -> dict[str, Any]:
    layout = spec.layout
    return {
        "engine": spec.engine,
        "parameters": {
            "model_id": spec.model_id,
            "tp": layout.tp,
            "pp": layout.pp,
            "dp": layout.dp,
            "ep": layout.ep,
            "nodes": layout.nodes,
            "gpus_per_node": layout.gpus_per_node,
            "quant": layout.quant,
            "kv_dtype": layout.kv_dtype,
            "max_model_len": spec.max_model_len,
            "gpu_memory_utilization": spec.gpu_memory_utilization,
            "max_num_seqs": spec.max_num_seqs,
            "max_num_batched_tokens": lim.max_num_batched_tokens,
            "chunked_prefill": lim.chunked_prefill,
            "image": spec.container_image,
        },
        "files": sorted(files),
    }


def _write_recipes(args: PlanArgs, spec: RecipeSpec, files: Mapping[str, str], con: Console, *, quiet: bool) -> None:
    """The recipe files into --out (launch scripts executable); without --out, the launch script on
    the console."""
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text, encoding="utf-8")
            if name.endswith(".sh"):
                (out / name).chmod(0o755)
        if not quiet:
            con.print(f"recipes written to {out}: {', '.join(files)}")
    elif not quiet:
        con.print(f"[bold]launch ({spec.engine})[/]  (--out DIR writes compose, Kubernetes and benchmark files)")
        con.print(files[f"launch-{spec.engine}.sh"], markup=False, highlight=False)


def _calibrate(args: PlanArgs, dep: Deployment, doc: dict[str, Any], con: Console, *, quiet: bool) -> Calibrated:
    """The deployment's knobs, or with --calibrate the fit to the measured points: its report goes to
    the console and `doc["calibration"]`, its knobs to --out/calibration.yaml."""
    start = dep.knobs()
    if not args.calibrate:
        return Calibrated(start, start, [], None)
    measured = load_measurements(args.calibrate)
    knobs, report = calibrate(dep, measured, start=start)
    cfg = dep.engine_config(knobs)
    fitted = [
        (
            m,
            simulate_point(
                cfg,
                concurrency=m.concurrency,
                input_len=m.input_len,
                output_len=m.output_len,
                num_requests=4 * m.concurrency + 4,
            ),
        )
        for m in measured
    ]
    doc["calibration"] = {"points": len(measured), "report": report}
    if not quiet:
        con.print(report)
    if args.out:
        (Path(args.out) / "calibration.yaml").write_text(knobs_yaml(knobs), encoding="utf-8")
    return Calibrated(knobs, start, measured, fitted)


def _whatif(args: PlanArgs, dep: Deployment, cal: Calibrated, concs: Sequence[int], reach: Reach) -> WhatIf:
    """The what-if points under the calibrated knobs, their band, and (after --calibrate on three or
    more points) how far each moves when one calibration point is left out of the fit."""

    def run(k: StepKnobs) -> list[WhatIfPoint]:
        return whatif(
            dep,
            k,
            input_len=args.input_len,
            output_len=args.output_len,
            concurrencies=concs,
            request_rates=args.request_rate,
            num_requests=args.num_requests,
            prefix_len=args.prefix_len,
        )

    pts = run(cal.knobs)
    band = band_for(cal.fitted)
    bands = [band.for_point(p) for p in pts]
    runs = [(left, run(k)) for left, k in leave_one_out(dep, cal.measured, start=cal.start)]
    spread = loo_spread(pts, runs) if runs else None
    if spread:  # the band is the larger of the fit's error and the move leaving one point out
        bands = [{m: max(b[m], s[m]["max_rel"]) for m in b} for b, s in zip(bands, spread)]
    ivs = [point_intervals(p, reach, b, calibrated=bool(cal.fitted)) for p, b in zip(pts, bands)]
    return WhatIf(pts, band, bands, spread, reach, ivs)


def _whatif_json(args: PlanArgs, wi: WhatIf, *, closed_loop: bool) -> dict[str, Any]:
    rows = [point_dict(p, b) for p, b in zip(wi.points, wi.bands)]
    for row, per in zip(rows, wi.intervals):
        for m, levels in per.items():
            row.setdefault("uncertainty", {}).setdefault(m, {}).update(levels)
    for row, moved in zip(rows, wi.spread or ()):
        row["leave_one_out"] = moved
    return {
        "closed_loop": closed_loop,
        "open_loop": bool(args.request_rate),
        "arrivals": (f"Poisson, seed {SEED} (vllm bench serve's default)" if args.request_rate else None),
        "band_source": wi.band.source
        + (
            "; or, where larger, how far the prediction moves when one calibration point is left "
            "out of the fit (leave_one_out)"
            if wi.spread
            else ""
        ),
        "bands": {"all": wi.band.overall, **wi.band.by_mode},
        "intervals_source": (
            "log-normal errors with each point's band as their median (not a measured coverage)"
            if wi.spread is not None or not wi.reach.published or args.calibrate
            else "split-conformal quantiles of held-out log residuals by reach, kind of load and architecture "
            "(plan/intervals.py, benchmarks/plan_validate.py)"
        ),
        "reach": wi.reach.as_dict(),
        "points": rows,
    }


def _print_whatif(con: Console, args: PlanArgs, wi: WhatIf, n_measured: int) -> None:
    from servescope.deploy.deployment import load_knob_table

    knobs_from = (
        "calibrated on your points"
        if args.calibrate
        else "knobs fitted to published measurements"
        if load_knob_table()
        else "default knobs"
    )
    con.print(whatif_table(wi.points, f"what-if on a virtual clock ({knobs_from}; a model, not a measurement)"))
    lines = wi.band.lines(wi.points)
    if wi.spread:
        lines = [
            f"uncertainty: the larger of the fit's median error on your points and how far each "
            f"prediction moves when one of the {n_measured} points is left out of the fit:",
            *(loo_line(p, s, b) for p, s, b in zip(wi.points, wi.spread, wi.bands)),
        ]
    lines += interval_lines(wi.points, wi.intervals, wi.reach, calibrated=bool(args.calibrate))
    for line in lines:
        con.print(line, markup=False, highlight=False)


def _emit(args: PlanArgs, doc: dict[str, Any]) -> None:
    """Write the machine-readable answer: stdout for --json -, a file for --json PATH, and plan.json
    in --out."""
    text = json.dumps(doc, indent=2, sort_keys=False) + "\n"
    if args.json_out == "-":
        sys.stdout.write(text)
    elif args.json_out:
        Path(args.json_out).write_text(text, encoding="utf-8")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "plan.json").write_text(text, encoding="utf-8")


def _number_list(
    value: str | None, kind: type, example: str, valid: Callable[[float], bool], rule: str
) -> tuple[Any, ...]:
    """A comma-separated flag value as numbers of `kind`, each `valid` (else `rule` says what is)."""
    if not value:
        return ()
    try:
        out = tuple(kind(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"a comma-separated list of {example}") from None
    if not all(valid(x) for x in out):
        raise click.BadParameter(rule)
    return out


def _rate_list(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[float, ...]:
    return _number_list(
        value,
        float,
        "requests per second, e.g. 1,2.5,8,inf",
        lambda x: x > 0,
        "rates must be > 0 (inf: every request at once)",
    )


def _engine_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        parse_engine(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None
    return value.strip().lower()


def _int_list(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...]:
    return _number_list(value, int, "integers, e.g. 1,5,15,100", lambda x: x >= 1, "values must be >= 1")


def _gpu_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        get_gpu(value)
    except ConfigError as e:
        raise click.BadParameter(str(e)) from None
    return value


@click.command("plan")
@click.option("--model", required=True, help=f"Catalogue name ({', '.join(MODELS)}) or a path to a HF config.json.")
@click.option(
    "--gpu",
    default="h100",
    show_default=True,
    callback=_gpu_name,
    help=f"GPU ({', '.join(sorted(GPUS))}) or CPU socket for vLLM's CPU backend ({', '.join(CPUS)}; NAME:N: N cores).",
)
@click.option("--gpus", default=8, show_default=True, type=click.IntRange(1), help="GPUs per node.")
@click.option("--nodes", default=1, show_default=True, type=click.IntRange(1))
@click.option("--quant", type=click.Choice(QUANTS), help="Weight precision. [default: the checkpoint's]")
@click.option("--kv-dtype", default="bf16", show_default=True, type=click.Choice(["bf16", "fp8"]))
@click.option("--tp", type=click.IntRange(1), help="Tensor parallel size. [default: GPUs per node]")
@click.option("--pp", type=click.IntRange(1), help="Pipeline parallel size. [default: nodes]")
@click.option("--dp", type=click.IntRange(1), help="Data parallel replicas (attention). [default: 1]")
@click.option("--ep", type=click.IntRange(1), help="Expert parallel size (usually tp*dp). [default: off]")
@click.option(
    "--engine",
    default="vllm",
    show_default=True,
    callback=_engine_name,
    help="Engine family, optionally with its release: vllm, vllm-0.7, vllm-0.8, sglang-0.4.3, sglang-0.5, "
    "trtllm-0.17, trtllm-1.0 (defaults, kernels and fitted terms of that release; a bare family: its current one).",
)
@click.option("--max-model-len", default=8192, show_default=True, type=click.IntRange(1))
@click.option("--gpu-memory-utilization", type=click.FloatRange(0.05, 1.0), help="[default: the engine's, 0.9]")
@click.option("--max-num-seqs", type=click.IntRange(1), help="[default: the engine's, 256 for vLLM]")
@click.option(
    "--max-num-batched-tokens",
    type=click.IntRange(1),
    help="Batch token budget. [default: the engine's; vLLM 0.7 without chunked prefill: max-model-len]",
)
@click.option(
    "--out", type=click.Path(file_okay=False), help="Write launch, compose, k8s, bench files, plan.json here."
)
@click.option("--input-len", default=1024, show_default=True, type=click.IntRange(1), help="What-if prompt tokens.")
@click.option("--output-len", default=256, show_default=True, type=click.IntRange(1), help="What-if output tokens.")
@click.option("--concurrency", callback=_int_list, help="What-if: closed-loop concurrencies, e.g. 1,8,32,128.")
@click.option(
    "--request-rate",
    "--rate",
    "request_rate",
    callback=_rate_list,
    help="What-if: open-loop Poisson rates in requests/s, e.g. 1,4,16; inf sends every request at once "
    "(offline max throughput).",
)
@click.option(
    "--prefix-len",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="What-if: tokens every prompt shares before its own --input-len (the engine's prefix cache serves them).",
)
@click.option(
    "--num-requests",
    type=click.IntRange(1),
    help="What-if requests per point. [default: max(200, 4x conc); a minute of arrivals at a rate, at "
    "least 200; 1000 at inf]",
)
@click.option(
    "--json",
    "json_out",
    metavar="PATH|-",
    help="Machine-readable answer: '-' prints JSON instead of tables; a path writes it there "
    "(--out DIR always gets plan.json).",
)
@click.option(
    "--calibrate",
    type=click.Path(exists=True),
    help="Fit efficiency/overheads to measured points: result dirs (summary.json) or a YAML of points.",
)
@handle_errors
def plan_command(**options: Any) -> None:
    """Memory fit, KV capacity, launch recipes and what-if performance of a model on GPUs."""
    names = {f.name for f in dataclasses.fields(PlanArgs)}
    args = PlanArgs(**{k: v for k, v in options.items() if k in names and v is not None})
    if args.calibrate and not args.concurrency:
        args.predict_concurrency = (1, 8, 32, 64, 100, 128)
    raise SystemExit(plan_main(args))
