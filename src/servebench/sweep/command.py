"""`servebench sweep`: a series of runs into one result directory, SLO checks, capacity search, cost.

    DIR/sweep.json           what was swept and every point's figures (schema servebench.sweep.command/1)
    DIR/sweep-summary.txt    the summary table, saturation diagnosis and capacity answers
    DIR/<point>/             one run directory per point (summary.json gains `slo_check`, `cost`)

Three ways to choose the points (each over every input/output length pair):

- a grid: `--concurrency 1,2,4,8` or `--rate 1,2,4` (with one `--concurrency` as a cap);
- `--rate auto`: a synchronous run (concurrency 1) and a saturation run (`--rate inf`) first, then
  `--auto-points` rates spread evenly between the two measured request rates (GuideLLM's sweep);
- `--find-max concurrency|rate`: double the load until an SLO fails, then bisect the bracket.

With no `--url` the built-in emulator is started once and every point runs against it. `--resume`
skips points whose summary.json exists and is not marked interrupted.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import itertools
import math
import shlex
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from servebench.results import cost as costmod
from servebench.results import slo as slomod
from servebench.run.config import RunConfig
from servebench.errors import ConfigError
from servebench.run.options import handle_errors, run_options, settings_from_options
from servebench.results.store import SUMMARY, default_out_dir, read_json, write_json
from servebench.sweep.points import (
    Point,
    SearchResult,
    auto_rates,
    build_grid,
    find_max,
    parse_int_list,
    parse_lengths,
    parse_rate_list,
)
from servebench.sweep.table import (
    SATURATION_GAIN,
    diagnose,
    fmt_load,
    point_row,
    render_table,
    slo_capacity,
    sort_load,
    table_text,
    x_of,
)

__all__ = ["SWEEP_FILE", "Sweep", "SweepInterrupted", "point_complete", "sweep_command"]

SWEEP_FILE = "sweep.json"
SUMMARY_TEXT = "sweep-summary.txt"
SCHEMA = "servebench.sweep.command/1"
DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64)
_SETTINGS_IGNORED = ("out", "quiet", "concurrency", "rate", "input_len", "output_len", "report")


class SweepInterrupted(Exception):
    """A point was interrupted (Ctrl-C): the sweep stops, sweep.json keeps what completed."""


def point_complete(path: Path) -> bool:
    """A point is complete when its summary.json exists and is not marked interrupted."""
    f = path / SUMMARY
    if not f.is_file():
        return False
    try:
        doc = read_json(f)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and not doc.get("interrupted")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Sweep:
    """Runs points one after another against one target and keeps sweep.json up to date."""

    def __init__(self, out_dir: Path, base: dict[str, Any], spec: slomod.SloSpec,
                 price: costmod.Price | None, console: Console, *, resume: bool, quiet: bool,
                 mode: str, x_key: str) -> None:
        self.out_dir = out_dir
        self.base = base
        self.spec = spec
        self.price = price
        self.console = console
        self.resume = resume
        self.quiet = quiet
        self.url: str | None = None
        self.emulated = False
        self.entries: dict[str, dict[str, Any]] = {}
        self.summaries: dict[str, dict[str, Any]] = {}
        self.ran: list[str] = []
        self.skipped: list[str] = []
        self.doc: dict[str, Any] = {
            "schema": SCHEMA, "created_at": _now(), "status": "running", "mode": mode, "x_key": x_key,
            "settings": _settings_doc(base), "slo": spec.to_dict() if spec else None,
            "price": price.to_dict() if price else None, "points": [],
        }
        old = out_dir / SWEEP_FILE
        if old.is_file():
            prev = read_json(old)
            if not resume:
                raise ConfigError(f"{out_dir} already holds a sweep; add --resume to finish it, or pick another --out")
            _check_same_settings(prev.get("settings") or {}, self.doc["settings"], out_dir)
            self.doc["created_at"] = prev.get("created_at", self.doc["created_at"])
            for e in prev.get("points") or []:
                if isinstance(e, dict) and e.get("dir"):
                    self.entries[e["dir"]] = e

    # ---------------------------------------------------------------- one point
    def run_point(self, point: Point, loop: asyncio.Runner) -> dict[str, Any]:
        from servebench.run.bench import run_against  # noqa: PLC0415 - keep --help fast

        path = self.out_dir / point.dir_name
        if point.dir_name in self.summaries:
            return self.summaries[point.dir_name]
        if self.resume and point_complete(path):
            summary = read_json(path / SUMMARY)
            self.skipped.append(point.dir_name)
            status = "skipped (complete)"
        else:
            # report=False: the sweep's report (rendered once at the end) renders every point.
            cfg = RunConfig(**{**self.base, **point.run_settings(), "out": str(path), "quiet": True,
                               "report": False}).validate()
            assert self.url is not None
            outcome = loop.run(run_against(cfg, self.url, self.console, emulated=self.emulated))
            summary = outcome.summary
            self.ran.append(point.dir_name)
            status = "ran"
            if outcome.interrupted:
                self._record(point, summary, "interrupted")
                self.doc["status"] = "interrupted"
                self.save()
                raise SweepInterrupted(point.dir_name)
        if self.spec.has_run_limits:
            summary["slo_check"] = slomod.evaluate(summary, self.spec)
        if self.price is not None:
            summary["cost"] = costmod.cost_block(summary.get("throughput") or {}, self.price)
        write_json(path / SUMMARY, summary)
        self._record(point, summary, "complete")
        self.save()
        if not self.quiet:
            self.console.print(_point_line(point, summary, status), highlight=False)
        return summary

    def _record(self, point: Point, summary: dict[str, Any], status: str) -> None:
        entry = {**point.entry(), "load_label": point.load_label, "status": status}
        if point.kind in ("synchronous", "throughput"):  # plotted at the request rate they reached
            entry["rate_rps"] = (summary.get("throughput") or {}).get("requests_per_s")
        entry["figures"] = point_row(entry, summary)
        self.entries[point.dir_name] = entry
        self.summaries[point.dir_name] = summary

    def save(self) -> None:
        self.doc["updated_at"] = _now()
        self.doc["points"] = list(self.entries.values())
        write_json(self.out_dir / SWEEP_FILE, self.doc)

    # ---------------------------------------------------------------- modes
    def run_grid(self, points: list[Point], loop: asyncio.Runner) -> None:
        for p in points:
            self.run_point(p, loop)

    def run_auto(self, pairs: list[tuple[int, int | None]], cap: int | None, n: int, loop: asyncio.Runner) -> None:
        auto = []
        for i, o in pairs:
            sync = self.run_point(Point(1, None, i, o, "synchronous"), loop)
            peak = self.run_point(Point(None, math.inf, i, o, "throughput"), loop)
            lo = (sync.get("throughput") or {}).get("requests_per_s") or 0.0
            hi = (peak.get("throughput") or {}).get("requests_per_s") or 0.0
            rates = auto_rates(lo, hi, n)
            auto.append({"input_len": i, "output_len": o, "synchronous_rps": lo, "saturation_rps": hi, "rates": rates})
            self.doc["auto"] = auto
            for r in rates:
                self.run_point(Point(cap, r, i, o, "auto"), loop)

    def run_find_max(self, axis: str, pairs: list[tuple[int, int | None]], cap: int | None, *,
                     start: float, max_load: float, rel_tol: float, loop: asyncio.Runner) -> None:
        results = self.doc.setdefault("find_max", [])
        for i, o in pairs:
            def point_at(x: float, i: int = i, o: int | None = o) -> Point:
                return Point(int(x), None, i, o, "search") if axis == "concurrency" else Point(cap, x, i, o, "search")

            def measure(x: float) -> bool:
                return bool((self.run_point(point_at(x), loop).get("slo_check") or {}).get("passed"))

            res = find_max(measure, integer=axis == "concurrency", start=start, max_load=max_load, rel_tol=rel_tol)
            doc = self._find_max_doc(axis, res, point_at, i, o, max_load)
            results[:] = [r for r in results if (r["input_len"], r["output_len"]) != (i, o)] + [doc]
            self.save()
            if not self.quiet:
                self.console.print(f"[bold]{doc['line']}[/bold]", highlight=False)

    def _find_max_doc(self, axis: str, res: SearchResult, point_at: Any, i: int, o: int | None,
                      max_load: float) -> dict[str, Any]:
        what = "concurrency" if axis == "concurrency" else "request rate"
        unit = "" if axis == "concurrency" else " req/s"
        slo_text = self.spec.describe()
        best_summary = self.summaries.get(point_at(res.best).dir_name) if res.best is not None else None
        fail_summary = self.summaries.get(point_at(res.fail).dir_name) if res.fail is not None else None
        why = slomod.failing((fail_summary or {}).get("slo_check") or {}) if fail_summary else ""
        lens = f" (in {i}, out {o})"
        if res.best is None:
            line = f"no {what} meets {slo_text}{lens}: {fmt_load(res.fail)}{unit} fails ({why})"
        elif res.fail is None:
            line = (f"max {what} meeting {slo_text}{lens}: ≥ {fmt_load(res.best)}{unit} "
                    f"(nothing failed up to --max-load {fmt_load(max_load)})")
        else:
            line = f"max {what} meeting {slo_text}{lens}: {fmt_load(res.best)}{unit} ({fmt_load(res.fail)} fails: {why})"
        cost_at = (best_summary or {}).get("cost")
        if cost_at and cost_at.get("usd_per_1m_output_tokens") is not None:
            line += f"; ${cost_at['usd_per_1m_output_tokens']:.3f} per 1M output tokens there"
        return {
            "axis": axis, "input_len": i, "output_len": o, "slo": slo_text,
            "best": res.best, "fail": res.fail, "bounded": res.bounded, "tolerance": res.tolerance,
            "best_dir": point_at(res.best).dir_name if res.best is not None else None,
            "probes": [{"load": x, "passed": ok, "dir": point_at(x).dir_name} for x, ok in res.probes],
            "cost_at_best": cost_at, "line": line,
        }

    # ---------------------------------------------------------------- the end
    def finish(self, gain: float) -> str:
        """Saturation diagnosis and SLO capacity per length pair, the table; returns the text."""
        done = [e for e in self.entries.values() if e.get("status") == "complete"]
        groups: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
        for e in done:
            groups.setdefault((e.get("input_len"), e.get("output_len")), []).append(e)
        saturation, capacity = [], []
        x_key = self.doc["x_key"]
        label = "concurrency" if x_key == "concurrency" else "request rate"
        for (i, o), entries in sorted(groups.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or 0)):
            pts = [e for e in entries if x_of(e, x_key) is not None]
            summaries = [self._summary(e) for e in pts]
            diag = diagnose([x_of(e, x_key) for e in pts], summaries, label=label, gain=gain)
            saturation.append({"input_len": i, "output_len": o, **diag})
            if self.spec.has_run_limits:
                capacity.append({"input_len": i, "output_len": o, **slo_capacity(pts, summaries, x_key)})
        self.doc["saturation"] = saturation
        if capacity:
            self.doc["slo_capacity"] = capacity
        if self.doc["status"] == "running":
            self.doc["status"] = "complete"
        self.save()
        rows = sorted((e["figures"] for e in done), key=lambda r: (r["input_len"] or 0, r["output_len"] or 0,
                                                                   sort_load(self.entries[r["dir"]], x_key)))
        lines = [table_text(rows, title=f"servebench sweep: {self.out_dir}")]
        for s in saturation:
            lines.append(f"saturation (in {s['input_len']}, out {s['output_len']}): {s['text']}")
        for c in capacity:
            if c["load"] is None:
                lines.append(f"SLO capacity (in {c['input_len']}, out {c['output_len']}): no point meets {self.spec.describe()}")
            else:
                usd = (c.get("cost") or {}).get("usd_per_1m_output_tokens")
                lines.append(f"SLO capacity (in {c['input_len']}, out {c['output_len']}): highest {label} meeting "
                             f"{self.spec.describe()}: {fmt_load(c['load'])}"
                             + (f", ${usd:.3f} per 1M output tokens" if usd is not None else "")
                             + (f" ({c['note']})" if c.get("note") else ""))
        for f in self.doc.get("find_max") or []:
            lines.append(f["line"])
        text = "\n".join(lines).rstrip() + "\n"
        (self.out_dir / SUMMARY_TEXT).write_text(text)
        report = None
        if self.base.get("report", True) and done:
            from servebench.report.html import write_report  # noqa: PLC0415

            report = write_report(self.out_dir)
        if not self.quiet:
            self.console.print()
            self.console.print(render_table(rows, title=f"servebench sweep: {self.out_dir}"))
            for line in lines[1:]:
                self.console.print(line, highlight=False)
            self.console.print(f"  results: {self.out_dir}  (ran {len(self.ran)}, skipped {len(self.skipped)} complete)"
                               + (f"  report: {report}" if report else ""), highlight=False)
        return text

    def _summary(self, entry: dict[str, Any]) -> dict[str, Any]:
        if entry["dir"] in self.summaries:
            return self.summaries[entry["dir"]]
        path = self.out_dir / entry["dir"] / SUMMARY
        return read_json(path) if path.is_file() else {}


def _point_line(point: Point, s: dict[str, Any], status: str) -> str:
    tp = s.get("throughput") or {}
    lat = s.get("latency_ms") or {}
    itl = (lat.get("itl") or {}).get("p99")
    ttft = (lat.get("ttft") or {}).get("p99")
    slo = (s.get("slo_check") or {}).get("passed")
    tag = {True: "  SLO pass", False: "  SLO fail"}.get(slo, "")
    return (f"  {point.load_label:>14}  in {point.input_len} out {point.output_len}:  "
            f"{tp.get('requests_per_s', 0):.2f} req/s, {tp.get('output_tokens_per_s', 0):,.0f} out tok/s, "
            f"TTFT p99 {ttft if ttft is not None else float('nan'):.1f} ms, "
            f"ITL p99 {itl if itl is not None else float('nan'):.1f} ms{tag}  [{status}]")


def _settings_doc(base: dict[str, Any]) -> dict[str, Any]:
    doc = RunConfig(**base).as_manifest()
    for k in _SETTINGS_IGNORED:
        doc.pop(k, None)
    return doc


def _check_same_settings(old: dict[str, Any], new: dict[str, Any], out_dir: Path) -> None:
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if diff:
        raise ConfigError(f"--resume: the sweep in {out_dir} ran with other settings ({', '.join(diff)}); "
                          "give the same flags, or pick another --out")


# ------------------------------------------------------------------------------ the command
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
@click.option("--lengths", help="Explicit INPUT:OUTPUT token pairs, e.g. 1024:256,4096:256 (instead of the "
              "--input-len × --output-len product).")
@click.option("--auto-points", type=int, help="With --rate auto: rates spread between the synchronous and the "
              "saturation rate. [default: 8]")
@click.option("--find-max", type=click.Choice(["concurrency", "rate"]), help="Capacity search: the highest load "
              "meeting every --slo limit (double until one fails, then bisect).")
@click.option("--start", "start_load", type=float, help="--find-max: first load tried. [default: 1]")
@click.option("--max-load", type=float, help="--find-max: highest load tried. [default: 1024 (concurrency), "
              "10000 (req/s)]")
@click.option("--tolerance", type=float, help="--find-max rate: relative width of the final bracket. [default: 0.05]")
@click.option("--resume", is_flag=True, help="Skip points already complete in --out (summary.json, not interrupted).")
@click.option("--gpu-hour-price", type=float, help="US dollars per GPU-hour, for $ per 1M tokens.")
@click.option("--gpu-price", help=f"A named GPU-hour list price: {', '.join(costmod.GPU_PRICES)}.")
@click.option("--gpus", type=int, help="GPUs of the deployment (multiplies the GPU-hour price). [default: 1]")
@click.option("--saturation-gain", type=float, help="Throughput has saturated when the next load step adds less "
              "than this fraction. [default: 0.10]")
@click.option("--emulator-args", help="Extra flags for the built-in emulator (no --url), e.g. '--max-num-seqs 8'.")
@click.option("--out", type=click.Path(file_okay=False), help="Sweep directory. [default: "
              "./servebench-results/<time>-sweep-<slug>/]")
@handle_errors
def sweep_command(**options: Any) -> None:
    """A series of runs over concurrency, request rate and lengths into one directory, with SLO checks,
    a capacity search (--find-max), saturation diagnosis and $ per 1M tokens.

    \b
    servebench sweep --concurrency 1,2,4,8,16,32,64 --input-len 1024 --output-len 256
    servebench sweep --rate auto --slo ttft_p99_ms=2000,itl_p99_ms=50
    servebench sweep --find-max concurrency --slo itl_p99_ms=50 --gpu-hour-price 2.5 --gpus 8
    servebench sweep --lengths 1024:256,4096:256 --concurrency 8,32 --slo mlperf:llama3.1-8b
    """
    sys.exit(sweep_main(options))


def sweep_main(options: dict[str, Any], console: Console | None = None) -> int:
    """The sweep behind the command (options as click passes them); returns the exit code."""
    options = dict(options)
    spec = slomod.parse_slo_spec(options.pop("slo", None))
    price = costmod.resolve_price(options.pop("gpu_hour_price"), options.pop("gpus"), options.pop("gpu_price"))
    find = options.pop("find_max")
    start = options.pop("start_load")
    max_load = options.pop("max_load")
    tol = options.pop("tolerance")
    n_auto = options.pop("auto_points")
    resume = bool(options.pop("resume"))
    gain = options.pop("saturation_gain")
    emu_args = shlex.split(options.pop("emulator_args") or "")
    out = options.pop("out")
    conc_text, rate_text = options.pop("concurrency"), options.pop("rate")
    lengths_opts = {k: options.pop(k) for k in ("lengths", "input_len", "output_len")}
    settings = settings_from_options(options)
    pairs = _lengths(lengths_opts, settings)
    for k in ("input_len", "output_len"):
        settings.pop(k, None)
    conc = parse_int_list(conc_text if conc_text is not None else settings.pop("concurrency", None), "--concurrency")
    rates = parse_rate_list(rate_text if rate_text is not None else settings.pop("rate", None))
    settings.pop("concurrency", None)
    settings.pop("rate", None)
    settings["slo"] = dict(spec.per_request)
    quiet = bool(settings.get("quiet"))
    console = console or Console(quiet=quiet, width=None if sys.stdout.isatty() else 170)
    if gain is not None and not 0 < gain < 10:
        raise ConfigError("--saturation-gain must be a fraction, e.g. 0.1")
    if tol is not None and not 0 < tol < 1:
        raise ConfigError("--tolerance must be in (0, 1), e.g. 0.05")
    if n_auto is not None and n_auto < 1:
        raise ConfigError("--auto-points must be at least 1")
    if int(settings.get("repeat") or 1) > 1:
        raise ConfigError("--repeat is not supported by sweep yet; run the sweep again into another --out")
    if emu_args and settings.get("url"):
        raise ConfigError("--emulator-args applies to the built-in emulator; drop it with --url")

    cap = conc[0] if conc and len(conc) == 1 else None
    if find:
        if not spec.has_run_limits:
            raise ConfigError("--find-max needs a run-level SLO: e.g. --slo itl_p99_ms=50, ttft_p99_ms=2000, "
                              "mlperf:llama3.1-8b, or per-request limits with goodput_fraction=0.99")
        if find == "concurrency" and rates:
            raise ConfigError("--find-max concurrency searches closed-loop runs; drop --rate")
        if find == "rate" and conc and len(conc) > 1:
            raise ConfigError("--find-max rate: give at most one --concurrency (a cap)")
        mode, x_key = "find-max", ("concurrency" if find == "concurrency" else "rate_rps")
        points: list[Point] = []
    elif rates == "auto":
        if conc and len(conc) > 1:
            raise ConfigError("--rate auto: give at most one --concurrency (a cap)")
        mode, x_key, points = "auto", "rate_rps", []
    else:
        if not conc and not rates:
            conc = list(DEFAULT_CONCURRENCIES)
        points = build_grid(conc, rates if isinstance(rates, list) else None, pairs)
        mode = "grid"
        loads = {p.load for p in points}
        if rates:
            x_key = "rate_rps"
        elif len(loads) == 1 and len({i for i, _ in pairs}) > 1:
            x_key = "input_len"
        elif len(loads) == 1 and len({o for _, o in pairs}) > 1:
            x_key = "output_len"
        else:
            x_key = "concurrency"
    if mode == "auto" and settings.get("duration") is not None and settings.get("num_requests") is None:
        raise ConfigError("--rate auto starts with a saturation run that sends every request at once: "
                          "give --num-requests rather than --duration")
    # Every point's settings are checked before anything starts.
    for p in points or [Point(cap or 1, None, i, o) for i, o in pairs]:
        RunConfig(**{**settings, **p.run_settings()}).validate()

    slug = f"sweep-{settings.get('model') or settings.get('profile') or 'target'}-{mode}"
    out_dir = Path(out) if out else default_out_dir(slug)
    out_dir.mkdir(parents=True, exist_ok=True)
    sweep = Sweep(out_dir, settings, spec, price, console, resume=resume, quiet=quiet, mode=mode, x_key=x_key)
    if mode == "find-max":
        sweep.doc["find_max_settings"] = {"axis": find, "start": start or 1.0, "max_load": max_load,
                                          "tolerance": tol or 0.05}
    sweep.save()
    try:
        _drive(sweep, settings, emu_args, mode, points, pairs, cap, find, start, max_load, tol, n_auto)
    except (SweepInterrupted, KeyboardInterrupt):
        sweep.doc["status"] = "interrupted"
        sweep.save()
        sweep.finish(gain or SATURATION_GAIN)
        console.print(f"  [yellow]interrupted[/yellow]: finish it with the same flags and --resume --out {out_dir}")
        return 130
    sweep.finish(gain or SATURATION_GAIN)
    return 0


def _drive(sweep: Sweep, settings: dict[str, Any], emu_args: list[str], mode: str, points: list[Point],
           pairs: list[tuple[int, int | None]], cap: int | None, find: str | None, start: float | None,
           max_load: float | None, tol: float | None, n_auto: int | None) -> None:
    from servebench.target.preflight import DEFAULT_PROFILE, EmulatorProcess  # noqa: PLC0415

    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        loop_factory = None
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
        with asyncio.Runner(loop_factory=loop_factory) as loop:
            if mode == "grid":
                sweep.run_grid(points, loop)
            elif mode == "auto":
                sweep.run_auto(pairs, cap, n_auto or 8, loop)
            else:
                assert find is not None
                default_max = 1024.0 if find == "concurrency" else 10000.0
                sweep.run_find_max(find, pairs, cap, start=start or 1.0, max_load=max_load or default_max,
                                   rel_tol=tol or 0.05, loop=loop)
    finally:
        if emulator is not None:
            emulator.stop()
