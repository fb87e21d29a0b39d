"""`servescope plan`: memory fit, KV capacity, deployment recipes, what-if on a virtual clock, calibration.

The cores are pure functions over `sim/`: `plan.fit` (`resolve_layout`, `fit_table`), `plan.whatif`
(`whatif`), `plan.calibrate` (`calibrate`). `plan_main` does the I/O (console, --out files, reading
--calibrate measurements). Register `plan_command` (a click command) in cli.py.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from servescope.errors import handle_errors
from servescope.plan.calibrate import MeasuredPoint, calibrate, leave_one_out, load_measurements
from servescope.plan.memfit import GIB, PlanArgs, engine_base, fit_table, to_deployment
from servescope.plan.recipes import RecipeSpec, render_all
from servescope.plan.whatif import SEED, WhatIfPoint, knobs_yaml, point_dict, simulate_point, whatif, whatif_table
from servescope.sim.catalog.gpus import GPUS
from servescope.sim.catalog.models import MODELS
from servescope.sim.knobs import StepKnobs
from servescope.sim.memory.accounting import ENGINES
from servescope.sim.memory.fit import FitResult
from servescope.sim.memory.weights import weight_bytes_per_gpu
from servescope.sim.placement import QUANTS

__all__ = ["plan_main", "plan_command", "PLAN_SCHEMA"]

PLAN_SCHEMA = "servescope.plan/1"

# Until plan/validate.py publishes held-out errors (deploy/calibration.yaml, `heldout_median_abs_error`),
# the band is the uncalibrated what-if's held-out median |error| measured in issue 13 (output tok/s
# 88%, ITL 51%, TTFT 94%): wide, and honest about it.
_FALLBACK_BAND = {"output_tokens_per_s": 0.88, "itl_ms": 0.51, "ttft_ms": 0.94}
_FALLBACK_BAND_SOURCE = (
    "held-out median |error| of the uncalibrated what-if against published measurements "
    "(issue 13: 88% output tok/s, 51% ITL, 94% TTFT); no validation figures are installed"
)


@dataclasses.dataclass(frozen=True, slots=True)
class Band:
    """The relative +- band per metric (output_tokens_per_s, itl_ms, ttft_ms) of what-if points, and
    where it comes from: over all validation points, and by workload mode where the validation had
    enough points of that mode (`plan.fitting.published_bands`)."""

    overall: dict[str, float]
    source: str
    by_mode: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)

    def for_point(self, p: WhatIfPoint) -> dict[str, float]:
        return {**self.overall, **self.by_mode.get(p.mode, {})}

    def lines(self, points: Sequence[WhatIfPoint]) -> list[str]:
        """The terminal's account of the band: where it comes from, then one line per kind of load
        among `points` (a kind the validation had too few points of carries the band over all)."""
        out = [f"uncertainty{' by kind of load' if self.by_mode else ''} ({self.source}):"]
        for mode in dict.fromkeys(p.mode for p in points):
            b = {**self.overall, **self.by_mode.get(mode, {})}
            parts = [
                f"±{b[k]:.0%} {name}"
                for k, name in (("output_tokens_per_s", "output tok/s"), ("itl_ms", "ITL"), ("ttft_ms", "TTFT"))
                if k in b
            ]
            kind = {"closed": "closed loop", "offline": "all at once", "rate": "Poisson rate"}[mode]
            own = mode in self.by_mode or not self.by_mode
            out.append(f"  {kind}: {', '.join(parts)}" + ("" if own else f" (too few {kind} points: over all)"))
        return out


def _band(calibrated: list[tuple[MeasuredPoint, WhatIfPoint]] | None) -> Band:
    """Relative +- band per metric for what-if points, and where it comes from."""
    if calibrated:
        errs: dict[str, list[float]] = {"output_tokens_per_s": [], "itl_ms": [], "ttft_ms": []}
        for m, sim in calibrated:
            if m.output_tokens_per_s:
                errs["output_tokens_per_s"].append(abs(sim.output_tokens_per_s / m.output_tokens_per_s - 1))
            if m.itl_ms:
                errs["itl_ms"].append(abs(sim.itl_ms_p50 / m.itl_ms - 1))
            if m.ttft_ms:
                errs["ttft_ms"].append(abs(sim.ttft_ms_p50 / m.ttft_ms - 1))
        band = {k: max(0.05, statistics.median(v)) for k, v in errs.items() if v}
        return Band(
            band,
            "median |error| of the calibrated model on the calibration points (at least 5%); "
            "extrapolation beyond them is wider",
        )
    from servescope.deploy.deployment import load_knob_table_meta

    meta = load_knob_table_meta()
    held = meta.get("heldout_median_abs_error")
    if isinstance(held, dict) and held:
        modes = meta.get("heldout_median_abs_error_by_mode")
        by_mode = (
            {str(m): {str(k): float(v) for k, v in b.items()} for m, b in modes.items() if isinstance(b, dict)}
            if isinstance(modes, dict)
            else {}
        )
        return Band(
            {str(k): float(v) for k, v in held.items()},
            str(meta.get("heldout_source", "held-out median |error| by source")),
            by_mode,
        )
    return Band(dict(_FALLBACK_BAND), _FALLBACK_BAND_SOURCE)


_METRIC_ATTRS = (
    ("output_tokens_per_s", "output_tokens_per_s", "output tok/s"),
    ("itl_ms", "itl_ms_p50", "ITL"),
    ("ttft_ms", "ttft_ms_p50", "TTFT"),
)


def _loo_spread(
    full: Sequence[WhatIfPoint], runs: Sequence[tuple[MeasuredPoint, Sequence[WhatIfPoint]]]
) -> list[dict[str, dict[str, Any]]]:
    """Per what-if point and metric: the lowest and highest prediction over the leave-one-out fits
    (`calibrate.leave_one_out`), which point each left out, and the largest relative move from the
    prediction on all points."""
    out = []
    for i, p in enumerate(full):
        per: dict[str, dict[str, Any]] = {}
        for name, attr, _ in _METRIC_ATTRS:
            base = float(getattr(p, attr))
            vals = [(float(getattr(pts[i], attr)), left) for left, pts in runs]
            lo, hi = min(vals, key=lambda v: v[0]), max(vals, key=lambda v: v[0])
            per[name] = {
                "low": min(lo[0], base),
                "high": max(hi[0], base),
                "lowest_without": f"c={lo[1].concurrency}",
                "highest_without": f"c={hi[1].concurrency}",
                "max_rel": max(abs(v / base - 1) for v, _ in vals) if base > 0 else 0.0,
            }
        out.append(per)
    return out


def _loo_line(p: WhatIfPoint, spread: dict[str, dict[str, Any]], band: dict[str, float]) -> str:
    parts = []
    for name, _, label in _METRIC_ATTRS:
        s = spread[name]
        unit = "" if name == "output_tokens_per_s" else " ms"
        fmt = "{:,.0f}" if name != "itl_ms" else "{:,.1f}"
        pm = f"±{band[name]:.0%} " if name in band else ""  # a metric none of the points measured has no band
        parts.append(
            f"{pm}{label} {fmt.format(s['low'])}-{fmt.format(s['high'])}{unit} (lowest without {s['lowest_without']})"
        )
    return f"  {p.load}: " + ", ".join(parts)


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
    model, layout = dep.model, dep.layout
    res = dep.fit()
    seq_lens = sorted({args.max_model_len, args.prefix_len + args.input_len + args.output_len})
    doc: dict[str, Any] = {
        "schema": PLAN_SCHEMA,
        "deployment": {**dep.to_mapping(), "describe": dep.describe()},
        "fit": _fit_json(res, seq_lens),
    }
    if not quiet:
        con.print(fit_table(model, layout, res, engine=args.engine, seq_lens=seq_lens))
    if not res.fits:
        if not quiet:
            con.print(f"[bold red]Does not fit:[/] {res.reason}")
            if res.suggestions:
                con.print("Smallest layouts that fit:")
                for s in res.suggestions:
                    con.print(f"  - {s}")
        _emit(args, doc)
        return 1
    notes: list[str] = []
    if model.attention == "mla" and args.engine == "vllm":
        extra = weight_bytes_per_gpu(model, layout, engine="vllm-0.7") - res.weights_per_gpu_bytes
        notes.append(
            f"vLLM 0.7.x kept absorbed MLA weights, {extra / GIB:.1f} GiB more per GPU here; "
            "--engine vllm-0.7 models that version"
        )
    lim = dep.limits
    if layout.dp > 1 and args.ep is None and model.is_moe:
        flag = "SGLang --enable-dp-attention" if args.engine == "sglang" else "vLLM --enable-expert-parallel"
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
            f"prefix caching is off for {args.engine} here ({why}): the what-if recomputes the "
            f"{args.prefix_len:,}-token shared prefix of every prompt"
        )
    spec = RecipeSpec(
        model=model,
        layout=layout,
        engine=engine_base(args.engine),
        max_model_len=args.max_model_len,
        gpu_memory_utilization=lim.gpu_memory_utilization,
        max_num_seqs=lim.max_num_seqs,
    )
    files = render_all(spec)
    doc["notes"] = notes
    doc["recipe"] = {
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
    if not quiet:
        for n in notes:
            con.print(f"note: {n}")
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
    knobs = start = dep.knobs()
    fitted: list[tuple[MeasuredPoint, WhatIfPoint]] | None = None
    measured: list[MeasuredPoint] = []
    if args.calibrate:
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
    doc["knobs"] = {
        "source": "calibrated" if args.calibrate else "fitted table (deploy/calibration.yaml or defaults)",
        **dataclasses.asdict(knobs),
    }
    concs = args.concurrency or (args.predict_concurrency if args.calibrate and not args.request_rate else ())
    if concs or args.request_rate:

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

        pts = run(knobs)
        band = _band(fitted)
        bands = [band.for_point(p) for p in pts]
        runs = [(left, run(k)) for left, k in leave_one_out(dep, measured, start=start)]
        spread = _loo_spread(pts, runs) if runs else None
        if spread:  # the band is the larger of the fit's error and the move leaving one point out
            bands = [{m: max(b[m], s[m]["max_rel"]) for m in b} for b, s in zip(bands, spread)]
        rows = [point_dict(p, b) for p, b in zip(pts, bands)]
        for row, moved in zip(rows, spread or ()):
            row["leave_one_out"] = moved
        doc["whatif"] = {
            "closed_loop": bool(concs),
            "open_loop": bool(args.request_rate),
            "arrivals": (f"Poisson, seed {SEED} (vllm bench serve's default)" if args.request_rate else None),
            "band_source": band.source
            + (
                "; or, where larger, how far the prediction moves when one calibration point is left "
                "out of the fit (leave_one_out)"
                if spread
                else ""
            ),
            "bands": {"all": band.overall, **band.by_mode},
            "points": rows,
        }
        if not quiet:
            from servescope.deploy.deployment import load_knob_table

            knobs_from = (
                "calibrated on your points"
                if args.calibrate
                else "knobs fitted to published measurements"
                if load_knob_table()
                else "default knobs"
            )
            con.print(whatif_table(pts, f"what-if on a virtual clock ({knobs_from}; a model, not a measurement)"))
            lines = band.lines(pts)
            if spread:
                lines = [
                    f"uncertainty: the larger of the fit's median error on your points and how far each "
                    f"prediction moves when one of the {len(measured)} points is left out of the fit:",
                    *(_loo_line(p, s, b) for p, s, b in zip(pts, spread, bands)),
                ]
            for line in lines:
                con.print(line, markup=False, highlight=False)
    _emit(args, doc)
    return 0


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


def _int_list(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...]:
    return _number_list(value, int, "integers, e.g. 1,5,15,100", lambda x: x >= 1, "values must be >= 1")


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
@click.option("--gpu-memory-utilization", type=click.FloatRange(0.05, 1.0), help="[default: the engine's, 0.9]")
@click.option("--max-num-seqs", type=click.IntRange(1), help="[default: the engine's, 256 for vLLM]")
@click.option(
    "--max-num-batched-tokens",
    type=click.IntRange(1),
    help="Batch token budget. [default: the engine's; vLLM 0.7 without chunked prefill: max-model-len]",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Write launch, compose, Kubernetes and benchmark files (and plan.json) here.",
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
