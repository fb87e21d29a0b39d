"""`servescope sweep`: a series of runs into one result directory, SLO checks, capacity search, cost.

    DIR/sweep.json           what was swept and every point's figures (schema servescope.sweep.command/1)
    DIR/sweep-summary.txt    the summary table, saturation diagnosis and capacity answers
    DIR/<point>/             one run directory per point (summary.json gains `slo_check`, `cost`)

Three ways to choose the points (each over every input/output length pair):

- a grid: `--concurrency 1,2,4,8` or `--rate 1,2,4` (with one `--concurrency` as a cap);
- `--rate auto`: a synchronous run (concurrency 1) and a saturation run (`--rate inf`) first, then
  `--auto-points` rates spread evenly between the two measured request rates (GuideLLM's sweep);
- `--find-max concurrency|rate`: double the load until an SLO fails, then bisect the bracket.

With no `--url` the built-in emulator is started once and every point runs against it. `--resume`
skips points whose summary.json exists and is not marked interrupted.

This module parses the options and picks the mode; `sweep.runner` runs points and keeps sweep.json,
`sweep.modes` drives each mode, `sweep.summary` writes the end (table, diagnosis, report).
"""

from __future__ import annotations

import asyncio
import itertools
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from servescope.errors import ConfigError, handle_errors
from servescope.results import cost as costmod
from servescope.results import slo as slomod
from servescope.results.store import default_out_dir, read_json
from servescope.run.config import RunConfig
from servescope.run.options import run_options, settings_from_options
from servescope.sweep.configs import ServeConfig, expand
from servescope.sweep.modes import run_auto, run_find_max, run_grid
from servescope.sweep.points import Point, build_grid, parse_int_list, parse_lengths, parse_rate_list
from servescope.sweep.runner import SWEEP_FILE, Sweep, SweepInterrupted, point_complete
from servescope.sweep.serve import ServePlan, run_served
from servescope.sweep.summary import finish
from servescope.sweep.table import SATURATION_GAIN
from servescope.target.launch import READY_TIMEOUT_S

__all__ = ["sweep_command", "sweep_main"]

DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64)


def _lengths(options: dict[str, Any], settings: dict[str, Any]) -> list[tuple[int, int | None]]:
    pairs_text = options.pop("lengths")
    ins = parse_int_list(options.pop("input_len"), "--input-len")
    outs = parse_int_list(options.pop("output_len"), "--output-len")
    if pairs_text:
        if ins or outs:
            raise ConfigError("--lengths gives INPUT:OUTPUT pairs; drop --input-len/--output-len")
        return list(parse_lengths(pairs_text))
    defaults = RunConfig()
    ins = ins or [int(settings.get("input_len") or defaults.input_len)]
    out_default = settings.get("output_len", defaults.output_len)
    outs_any: list[int | None] = list(outs) if outs else [out_default]
    return list(itertools.product(ins, outs_any))


@click.command("sweep")
@run_options(lists=True)
@click.option(
    "--lengths",
    help="Explicit INPUT:OUTPUT token pairs, e.g. 1024:256,4096:256 (instead of the "
    "--input-len × --output-len product).",
)
@click.option(
    "--auto-points",
    type=int,
    help="With --rate auto: rates spread between the synchronous and the saturation rate. [default: 8]",
)
@click.option(
    "--find-max",
    type=click.Choice(["concurrency", "rate"]),
    help="Capacity search: the highest load meeting every --slo limit (double until one fails, then bisect).",
)
@click.option("--start", "start_load", type=float, help="--find-max: first load tried. [default: 1]")
@click.option(
    "--max-load", type=float, help="--find-max: highest load tried. [default: 1024 (concurrency), 10000 (req/s)]"
)
@click.option("--tolerance", type=float, help="--find-max rate: relative width of the final bracket. [default: 0.05]")
@click.option("--resume", is_flag=True, help="Skip points already complete in --out (summary.json, not interrupted).")
@click.option("--gpu-hour-price", type=float, help="US dollars per GPU-hour, for $ per 1M tokens.")
@click.option("--gpu-price", help=f"A named GPU-hour list price: {', '.join(costmod.GPU_PRICES)}.")
@click.option(
    "--saturation-gain",
    type=float,
    help="Throughput has saturated when the next load step adds less than this fraction. [default: 0.10]",
)
@click.option("--emulator-args", help="Extra flags for the built-in emulator (no --url), e.g. '--max-num-seqs 8'.")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Sweep directory. [default: ./servescope-results/<time>-sweep-<slug>/]",
)
@handle_errors
def sweep_command(**options: Any) -> None:
    """A series of runs over concurrency, request rate and lengths into one directory, with SLO checks,
    a capacity search (--find-max), saturation diagnosis and $ per 1M tokens.

    \b
    servescope sweep --concurrency 1,2,4,8,16,32,64 --input-len 1024 --output-len 256
    servescope sweep --rate auto --slo ttft_p99_ms=2000,itl_p99_ms=50
    servescope sweep --find-max concurrency --slo itl_p99_ms=50 --gpu-hour-price 2.5 --gpus 8
    servescope sweep --lengths 1024:256,4096:256 --concurrency 8,32 --slo mlperf:llama3.1-8b
    """
    sys.exit(sweep_main(options))


@dataclass(frozen=True)
class _SweepFlags:
    """The sweep's own flags; the rest of the options are every point's run settings."""

    spec: slomod.SloSpec
    price: costmod.Price | None
    find: str | None
    start: float | None
    max_load: float | None
    tol: float | None
    n_auto: int | None
    resume: bool
    gain: float | None
    emu_args: list[str]
    out: str | None


@dataclass(frozen=True)
class _Mode:
    """How the points are chosen (`grid`, `auto`, `find-max`), the x axis of the sweep's curves, the
    grid's points (empty for the other modes: they choose as they go) and the concurrency cap."""

    name: str
    x_key: str
    points: list[Point]
    cap: int | None


def sweep_main(options: dict[str, Any], console: Console | None = None) -> int:
    """The sweep behind the command (options as click passes them); returns the exit code."""
    options = dict(options)
    flags = _pop_flags(options)
    conc_text, rate_text = options.pop("concurrency"), options.pop("rate")
    lengths_opts = {k: options.pop(k) for k in ("lengths", "input_len", "output_len")}
    settings = settings_from_options(options)
    serve = settings.pop("serve", None)
    serve_params = list(settings.pop("serve_param", None) or [])
    serve_timeout = float(settings.pop("serve_timeout", None) or READY_TIMEOUT_S)
    if serve and not settings.get("gpu_metrics_url"):
        settings["gpu_metrics_url"] = "nvml"  # the server runs here: so do its GPUs, if any
    pairs = _lengths(lengths_opts, settings)
    for k in ("input_len", "output_len"):
        settings.pop(k, None)
    conc = parse_int_list(conc_text if conc_text is not None else settings.pop("concurrency", None), "--concurrency")
    rates = parse_rate_list(rate_text if rate_text is not None else settings.pop("rate", None))
    settings.pop("concurrency", None)
    settings.pop("rate", None)
    settings["slo"] = dict(flags.spec.per_request)
    quiet = bool(settings.get("quiet"))
    console = console or Console(quiet=quiet, width=None if sys.stdout.isatty() else 170)
    _check_flags(flags, settings, serve=serve, serve_params=serve_params)
    plan = None
    if serve:
        plan = ServePlan(serve, serve_params, expand(serve_params), serve_timeout, url=settings.pop("url", None))
    mode = _choose_mode(flags, conc, rates, pairs)
    _check_points(mode, settings, pairs)
    out_dir = _out_dir(flags, mode, settings, served=plan is not None)
    if plan is not None:
        return _sweep_served(plan, flags, mode, pairs, settings, out_dir, console, quiet=quiet)
    return _sweep_target(flags, mode, pairs, settings, out_dir, console, quiet=quiet)


def _pop_flags(options: dict[str, Any]) -> _SweepFlags:
    """Take the sweep's own flags out of `options` (the SLO and the price checked here)."""
    spec = slomod.parse_slo_spec(options.pop("slo", None))
    price = costmod.resolve_price(options.pop("gpu_hour_price"), options.get("gpus"), options.pop("gpu_price"))
    return _SweepFlags(
        spec=spec,
        price=price,
        find=options.pop("find_max"),
        start=options.pop("start_load"),
        max_load=options.pop("max_load"),
        tol=options.pop("tolerance"),
        n_auto=options.pop("auto_points"),
        resume=bool(options.pop("resume")),
        gain=options.pop("saturation_gain"),
        emu_args=shlex.split(options.pop("emulator_args") or ""),
        out=options.pop("out"),
    )


def _check_flags(flags: _SweepFlags, settings: dict[str, Any], *, serve: str | None, serve_params: list[str]) -> None:
    """Refuse flag values and combinations the sweep cannot run, before anything starts."""
    if flags.gain is not None and not 0 < flags.gain < 10:
        raise ConfigError("--saturation-gain must be a fraction, e.g. 0.1")
    if flags.tol is not None and not 0 < flags.tol < 1:
        raise ConfigError("--tolerance must be in (0, 1), e.g. 0.05")
    if flags.n_auto is not None and flags.n_auto < 1:
        raise ConfigError("--auto-points must be at least 1")
    if int(settings.get("repeat") or 1) > 1:
        raise ConfigError("--repeat is not supported by sweep yet; run the sweep again into another --out")
    if flags.emu_args and (settings.get("url") or serve):
        raise ConfigError("--emulator-args applies to the built-in emulator; drop it with --url or --serve")
    if serve_params and not serve:
        raise ConfigError("--serve-param gives values for --serve's placeholders; add --serve 'CMD ...'")


def _choose_mode(
    flags: _SweepFlags, conc: list[int] | None, rates: list[float] | str | None, pairs: list[tuple[int, int | None]]
) -> _Mode:
    """The mode the flags ask for, checked against the loads given, with the grid's points."""
    cap = conc[0] if conc and len(conc) == 1 else None
    find = flags.find
    if find:
        if not flags.spec.has_run_limits:
            raise ConfigError(
                "--find-max needs a run-level SLO: e.g. --slo itl_p99_ms=50, ttft_p99_ms=2000, "
                "mlperf:llama3.1-8b, or per-request limits with goodput_fraction=0.99"
            )
        if find == "concurrency" and rates:
            raise ConfigError("--find-max concurrency searches closed-loop runs; drop --rate")
        if find == "rate" and conc and len(conc) > 1:
            raise ConfigError("--find-max rate: give at most one --concurrency (a cap)")
        return _Mode("find-max", "concurrency" if find == "concurrency" else "rate_rps", [], cap)
    if rates == "auto":
        if conc and len(conc) > 1:
            raise ConfigError("--rate auto: give at most one --concurrency (a cap)")
        return _Mode("auto", "rate_rps", [], cap)
    if not conc and not rates:
        conc = list(DEFAULT_CONCURRENCIES)
    points = build_grid(conc, rates if isinstance(rates, list) else None, pairs)
    loads = {p.load for p in points}
    if rates:
        x_key = "rate_rps"
    elif len(loads) == 1 and len({i for i, _ in pairs}) > 1:
        x_key = "input_len"
    elif len(loads) == 1 and len({o for _, o in pairs}) > 1:
        x_key = "output_len"
    else:
        x_key = "concurrency"
    return _Mode("grid", x_key, points, cap)


def _check_points(mode: _Mode, settings: dict[str, Any], pairs: list[tuple[int, int | None]]) -> None:
    """Every point's settings are checked before anything starts."""
    if mode.name == "auto" and settings.get("duration") is not None and settings.get("num_requests") is None:
        raise ConfigError(
            "--rate auto starts with a saturation run that sends every request at once: "
            "give --num-requests rather than --duration"
        )
    for p in mode.points or [Point(mode.cap or 1, None, i, o) for i, o in pairs]:
        RunConfig(**{**settings, **p.run_settings()}).validate()


def _out_dir(flags: _SweepFlags, mode: _Mode, settings: dict[str, Any], *, served: bool) -> Path:
    slug = f"sweep-{settings.get('model') or settings.get('profile') or 'target'}-{mode.name}"
    if served:
        slug = f"sweep-{settings.get('model') or 'served'}-serve-{mode.name}"
    out_dir = Path(flags.out) if flags.out else default_out_dir(slug)
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def _new_sweep(
    path: Path, flags: _SweepFlags, mode: _Mode, settings: dict[str, Any], console: Console, *, quiet: bool
) -> Sweep:
    sw = Sweep(
        path,
        settings,
        flags.spec,
        flags.price,
        console,
        resume=flags.resume,
        quiet=quiet,
        mode=mode.name,
        x_key=mode.x_key,
    )
    if mode.name == "find-max":
        sw.doc["find_max_settings"] = {
            "axis": flags.find,
            "start": flags.start or 1.0,
            "max_load": flags.max_load,
            "tolerance": flags.tol or 0.05,
        }
    return sw


def _sweep_served(
    plan: ServePlan,
    flags: _SweepFlags,
    mode: _Mode,
    pairs: list[tuple[int, int | None]],
    settings: dict[str, Any],
    out_dir: Path,
    console: Console,
    *,
    quiet: bool,
) -> int:
    """`--serve`: one sweep per server configuration, each against its own server (`run_served`)."""

    def served_sweep(path: Path, config: ServeConfig, url: str) -> Sweep:
        sw = _new_sweep(path, flags, mode, settings, console, quiet=quiet)
        sw.url = url
        sw.doc["target"] = {
            "emulated": False,
            "url": url,
            "serve": {"configuration": config.name, "params": config.as_dict()},
        }
        sw.save()
        return sw

    def complete(path: Path) -> bool:
        if mode.name == "grid":
            return all(point_complete(path / p.dir_name) for p in mode.points)
        return (path / SWEEP_FILE).is_file() and read_json(path / SWEEP_FILE).get("status") == "complete"

    return run_served(
        plan,
        out_dir,
        console,
        resume=flags.resume,
        quiet=quiet,
        report=bool(settings.get("report", True)),
        new_sweep=served_sweep,
        drive=lambda sw: _run_modes(sw, mode, pairs, flags),
        finish=lambda sw: finish(sw, flags.gain or SATURATION_GAIN),
        complete=complete,
    )


def _sweep_target(
    flags: _SweepFlags,
    mode: _Mode,
    pairs: list[tuple[int, int | None]],
    settings: dict[str, Any],
    out_dir: Path,
    console: Console,
    *,
    quiet: bool,
) -> int:
    """One sweep against --url or the built-in emulator; 130 when interrupted (resumable)."""
    sweep = _new_sweep(out_dir, flags, mode, settings, console, quiet=quiet)
    sweep.save()
    try:
        _start_target(sweep, settings, flags.emu_args, lambda sw: _run_modes(sw, mode, pairs, flags))
    except (SweepInterrupted, KeyboardInterrupt):
        sweep.doc["status"] = "interrupted"
        sweep.save()
        finish(sweep, flags.gain or SATURATION_GAIN)
        console.print(f"  [yellow]interrupted[/yellow]: finish it with the same flags and --resume --out {out_dir}")
        return 130
    finish(sweep, flags.gain or SATURATION_GAIN)
    return 0


def _start_target(sweep: Sweep, settings: dict[str, Any], emu_args: list[str], drive: Callable[[Sweep], None]) -> None:
    """The target of a sweep without --serve: --url, or the built-in emulator started once."""
    from servescope.deploy import DEFAULT_PROFILE
    from servescope.target.preflight import EmulatorProcess

    emulator = None
    if settings.get("url") is None:
        emulator = EmulatorProcess(settings.get("profile") or DEFAULT_PROFILE, extra_args=emu_args)
        sweep.url = emulator.start()
        sweep.emulated = True
        sweep.doc["target"] = {"emulated": True, "profile": emulator.profile, "emulator_args": emu_args}
    else:
        sweep.url = settings["url"]
        sweep.doc["target"] = {"emulated": False, "url": settings["url"]}
    try:
        drive(sweep)
    finally:
        if emulator is not None:
            emulator.stop()


def _run_modes(sweep: Sweep, mode: _Mode, pairs: list[tuple[int, int | None]], flags: _SweepFlags) -> None:
    """The sweep's points against `sweep.url`, as its mode chooses them, on one event loop."""
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as loop:
        if mode.name == "grid":
            run_grid(sweep, mode.points, loop)
        elif mode.name == "auto":
            run_auto(sweep, pairs, mode.cap, flags.n_auto or 8, loop)
        else:
            find = flags.find
            assert find is not None
            default_max = 1024.0 if find == "concurrency" else 10000.0
            run_find_max(
                sweep,
                find,
                pairs,
                mode.cap,
                start=flags.start or 1.0,
                max_load=flags.max_load or default_max,
                rel_tol=flags.tol or 0.05,
                loop=loop,
            )
