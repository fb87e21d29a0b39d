"""`servebench plan`: memory fit, KV capacity, deployment recipes, what-if on a virtual clock, calibration.

The cores are pure functions over `sim/`: `plan.fit` (`resolve_layout`, `fit_table`), `plan.whatif`
(`whatif`), `plan.calibrate` (`calibrate`). `plan_main` does the I/O (console, --out files, reading
--calibrate measurements). Register `plan_command` (a click command) in cli.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from servebench.deploy.loader import resolve_model
from servebench.errors import ServebenchError
from servebench.plan.calibrate import calibrate, load_measurements
from servebench.plan.fit import GIB, PlanArgs, deployment_dict, engine_base, fit_table, resolve_layout
from servebench.plan.recipes import RecipeSpec, render_all
from servebench.plan.whatif import default_calibration, whatif, whatif_table
from servebench.sim.catalog import GPUS, MODELS, get_gpu
from servebench.sim.memory import ENGINES, QUANTS, fit, weight_bytes_per_gpu

__all__ = ["plan_main", "plan_command"]


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
        con.print(f"note: vLLM 0.7.x kept absorbed MLA weights, {extra / GIB:.1f} GiB more per GPU here; "
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
