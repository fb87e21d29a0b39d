"""`sweep --serve`: for every server configuration, start the server, run the load series, stop it.

    DIR/serve.json             the template, the parameters, every configuration and how it went
                               (schema servescope.sweep.serve/1)
    DIR/report.html            one curve per configuration on shared axes, and the configurations' table
    DIR/<config>/              a sweep directory (sweep.json, one run per point, report.html) ...
    DIR/<config>/server.json   ... with the server's record: command line, port, pid/pgid, version,
                               readiness time, how it stopped, the log's tail when it failed
    DIR/<config>/server.log    ... and its output

A configuration whose server does not start (it exits, or is not ready within --serve-timeout) is
recorded as `failed` with its log's tail and the sweep goes on; Ctrl-C (or SIGTERM) stops the server
of the configuration running and ends the sweep (exit 130). `--resume` skips configurations already
complete and finishes the rest, each from its own sweep's points. No server is left behind: every start
is paired with a stop of its whole process group (target/launch.py). Exit status: 0, 1 when a
configuration failed to start (the others ran), 130 interrupted.
"""

from __future__ import annotations

import datetime as _dt
import signal
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from rich.console import Console

from servescope.errors import ConfigError
from servescope.results.store import read_json, write_json
from servescope.sweep.configs import ServeConfig
from servescope.sweep.runner import SWEEP_FILE, Sweep, SweepInterrupted
from servescope.target.launch import LOOPBACK, ServerProcess, ServerStartError, free_port, placeholders, render

if TYPE_CHECKING:
    from servescope.run.bench import RunOutcome
    from servescope.run.config import RunConfig

__all__ = [
    "SERVER_JSON",
    "SERVER_LOG",
    "SERVE_FILE",
    "SERVE_SCHEMA",
    "ServePlan",
    "run_one_served",
    "run_served",
    "serve_one",
]

SERVE_FILE = "serve.json"
SERVE_SCHEMA = "servescope.sweep.serve/1"
SERVER_JSON = "server.json"
SERVER_LOG = "server.log"


@dataclass(frozen=True)
class ServePlan:
    """What --serve asks: the command template, its configurations, where the server listens."""

    template: str
    params: Sequence[str]
    configs: Sequence[ServeConfig]
    ready_timeout_s: float
    url: str | None = None  # --url: where a command without {port} serves

    def __post_init__(self) -> None:
        names = placeholders(self.template)
        if "port" in names and self.url:
            raise ConfigError("--serve with {port} picks the port and targets it itself; drop --url")
        if "port" not in names and not self.url:
            raise ConfigError(
                "--serve: put {port} in the command (servescope picks a free loopback port and "
                "targets it), or give --url where the command serves"
            )
        known = {"port", "host"} | {k for c in self.configs[:1] for k, _ in c.values}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(f"--serve: no --serve-param for {', '.join('{' + n + '}' for n in unknown)}")
        unused = sorted(known - {"port", "host"} - set(names))
        if unused:
            raise ConfigError(f"--serve-param {', '.join(unused)}: the command has no such placeholder")

    def server(self, config: ServeConfig, log_path: Path) -> ServerProcess:
        """The server of one configuration: its command rendered on a free port."""
        port = free_port() if "port" in placeholders(self.template) else None
        values: dict[str, object] = {**config.as_dict(), "host": LOOPBACK}
        if port is not None:
            values["port"] = port
        return ServerProcess(
            render(self.template, values),
            log_path=log_path,
            port=port,
            url=self.url,
            ready_timeout_s=self.ready_timeout_s,
        )


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM to servescope acts as Ctrl-C while a server of ours runs, so its stop still happens."""

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve_one(
    srv: ServerProcess,
    record: dict[str, Any],
    record_path: Path,
    console: Console,
    body: Callable[[str], None],
    *,
    quiet: bool,
) -> str:
    """Start `srv`, run `body(url)` against it, stop it; `record` (server.json, rewritten as it goes)
    gains the server's facts. Returns `complete` or `failed` (it did not start: the log's tail is in
    the record); raises on Ctrl-C after the server is stopped."""
    record.update({"status": "starting", "started_at": _now()})
    with _sigterm_interrupts():
        try:
            srv.spawn()
            record.update(srv.describe())
            write_json(record_path, record)  # pid/pgid on disk before the wait
            srv.wait_ready()
        except ServerStartError as e:
            record.update(
                {**srv.describe(), "status": "failed", "error": e.reason, "log_tail": e.log_tail, "stopped": srv.stop()}
            )
            write_json(record_path, record)
            if not quiet:
                console.print(f"  [red]server failed[/red]: {e.reason}; log: {srv.log_path}", highlight=False)
                for line in e.log_tail.splitlines()[-10:]:
                    console.print(f"    | {line}", highlight=False, markup=False)
            return "failed"
        except BaseException:
            record.update({**srv.describe(), "status": "interrupted", "stopped": srv.stop()})
            write_json(record_path, record)
            raise
        record.update({**srv.describe(), "status": "running", "version": srv.version()})
        write_json(record_path, record)
        if not quiet:
            console.print(f"  server ready in {srv.ready_s:.1f} s at {srv.url} (pid {srv.pgid})", highlight=False)
        status = "interrupted"
        try:
            body(srv.url)
            status = "complete"
        finally:
            record.update({"status": status, "stopped": srv.stop(), "ended_at": _now()})
            write_json(record_path, record)
    return status


class _ServeLog:
    """DIR/serve.json as it goes: the template, the parameters, every configuration's entry (by name;
    on --resume, the entries of the sweep before)."""

    def __init__(self, plan: ServePlan, out_dir: Path, *, resume: bool) -> None:
        self.plan = plan
        self.path = out_dir / SERVE_FILE
        self.entries: dict[str, dict[str, Any]] = {}
        self.doc: dict[str, Any] = {
            "schema": SERVE_SCHEMA,
            "created_at": _now(),
            "status": "running",
            "command": plan.template,
            "params": list(plan.params),
            "configurations": [],
        }
        if self.path.is_file():
            if not resume:
                raise ConfigError(
                    f"{out_dir} already holds a server sweep; add --resume to finish it, or pick another --out"
                )
            prev = read_json(self.path)
            self.doc["created_at"] = prev.get("created_at", self.doc["created_at"])
            self.entries = {
                e["name"]: e for e in prev.get("configurations") or [] if isinstance(e, dict) and e.get("name")
            }

    def save(self) -> None:
        """Rewrite serve.json: the plan's configurations in order, then any others a resumed one had."""
        self.doc["updated_at"] = _now()
        self.doc["configurations"] = [self.entries[c.name] for c in self.plan.configs if c.name in self.entries] + [
            e for n, e in self.entries.items() if n not in {c.name for c in self.plan.configs}
        ]
        write_json(self.path, self.doc)


def run_served(
    plan: ServePlan,
    out_dir: Path,
    console: Console,
    *,
    resume: bool,
    quiet: bool,
    report: bool,
    new_sweep: Callable[[Path, ServeConfig, str], Sweep],
    drive: Callable[[Sweep], None],
    finish: Callable[[Sweep], object],
    complete: Callable[[Path], bool],
) -> int:
    """Every configuration in turn (see the module's doc); returns the exit code (130 interrupted)."""
    log = _ServeLog(plan, out_dir, resume=resume)
    code = 0
    for config in plan.configs:
        sub = out_dir / config.name
        entry = log.entries.setdefault(config.name, {"name": config.name, "dir": config.name})
        entry["params"] = config.as_dict()
        if not quiet:
            console.rule(f"server {config.name}")
        if resume and entry.get("status") == "complete" and complete(sub):
            entry["skipped"] = True
            if not quiet:
                console.print(f"  {config.name}: complete, skipped", highlight=False)
            continue
        entry.pop("skipped", None)
        sub.mkdir(parents=True, exist_ok=True)
        srv = plan.server(config, sub / SERVER_LOG)
        entry.update({"command": srv.command, "status": "starting"})
        log.save()
        status, record = _serve_config(
            plan, config, srv, sub, console, quiet=quiet, sweep_of=new_sweep, drive=drive, finish=finish
        )
        code = 130 if status == "interrupted" else 0
        entry.update(
            {
                "status": status,
                "command": srv.command,
                "port": srv.port,
                "version": record.get("version"),
                "ready_s": srv.ready_s,
                "error": record.get("error"),
                "log_tail": record.get("log_tail"),
                "stopped": record.get("stopped"),
            }
        )
        log.save()
        if code:
            break
    log.doc["status"] = "interrupted" if code else "complete"
    log.save()
    if not code and any(e.get("status") == "failed" for e in log.doc["configurations"]):
        code = 1  # the sweep went on, but a configuration measured nothing
    page = write_serve_report(out_dir, log.doc) if report else None
    if not quiet:
        _print_served(console, log.doc, out_dir, page)
    return code


def _serve_config(
    plan: ServePlan,
    config: ServeConfig,
    srv: ServerProcess,
    sub: Path,
    console: Console,
    *,
    quiet: bool,
    sweep_of: Callable[[Path, ServeConfig, str], Sweep],
    drive: Callable[[Sweep], None],
    finish: Callable[[Sweep], object],
) -> tuple[str, dict[str, Any]]:
    """One configuration: its server started, its sweep run and finished, its server stopped. Returns
    its status (`complete`, `failed`, `interrupted` on Ctrl-C) and its server record (server.json)."""
    record: dict[str, Any] = {"name": config.name, "params": config.as_dict(), "template": plan.template}
    holder: list[Sweep] = []

    def body(url: str) -> None:
        sweep = sweep_of(sub, config, url)
        holder.append(sweep)
        drive(sweep)

    try:
        status = serve_one(srv, record, sub / SERVER_JSON, console, body, quiet=quiet)
    except (SweepInterrupted, KeyboardInterrupt):
        status = "interrupted"
    if holder:
        sweep = holder[0]
        if status == "interrupted":
            sweep.doc["status"] = "interrupted"
        finish(sweep)
    return status, record


def _print_served(console: Console, doc: dict[str, Any], out_dir: Path, page: Path | None) -> None:
    console.print()
    for e in doc["configurations"]:
        what = e.get("error") or ("skipped (complete)" if e.get("skipped") else e.get("status"))
        console.print(f"  {e['name']:>16}  {what}", highlight=False)
    console.print(f"  results: {out_dir}" + (f"  report: {page}" if page else ""), highlight=False)


def write_serve_report(out_dir: Path, doc: dict[str, Any]) -> Path | None:
    """DIR/report.html: every configuration that measured something as one curve, and a table of
    every configuration (failed ones with their log's tail)."""
    from servescope.report.data import SweepResult, load_results
    from servescope.report.html import write_page
    from servescope.report.layout import esc, table
    from servescope.report.multi import render_overlay

    sides: list[tuple[str, SweepResult]] = []
    rows = []
    for e in doc.get("configurations") or []:
        sub = out_dir / e["dir"]
        if (sub / SWEEP_FILE).is_file():
            try:
                res = load_results(sub)
            except ConfigError:
                res = None
            if isinstance(res, SweepResult) and res.points:
                sides.append((e["name"], res))
        tail = e.get("log_tail") or ""
        status = esc(e.get("status") or "")
        if e.get("error"):
            status += f"<br>{esc(e['error'])}" + (f"<pre>{esc(tail)}</pre>" if tail else "")
        link = (
            f'<a href="{esc(e["dir"])}/report.html">{esc(e["name"])}</a>'
            if (sub / "report.html").is_file()
            else esc(e["name"])
        )
        rows.append(
            [
                link,
                f"<code>{esc(e.get('command') or '')}</code>",
                esc(str(e.get("version") or "–")),
                esc(f"{e['ready_s']:.1f} s" if isinstance(e.get("ready_s"), (int, float)) else "–"),
                status,
            ]
        )
    prelude = (
        "<h2>Server configurations</h2>"
        f'<p class="muted">Template: <code>{esc(doc.get("command") or "")}</code></p>'
        + table(["configuration", "command", "version", "ready in", "status"], rows, txt_cols=5)
    )
    if not sides:
        from servescope.report.layout import page

        html, figs = page("servescope server sweep", "no configuration measured anything", prelude), dict[str, str]()
    else:
        html, figs = render_overlay(sides, title="servescope server sweep", prelude=prelude)
    return write_page(out_dir / "report.html", html, figs)


def run_one_served(cfg: RunConfig, run: Callable[[RunConfig], RunOutcome]) -> int:
    """`servescope run --serve CMD`: one server configuration, one run (or --repeat runs) into one
    directory beside server.json and server.log; returns the exit code. A server that does not start
    is an error (exit 2) with its log's tail."""
    import dataclasses

    from servescope.errors import TargetUnavailable
    from servescope.results.store import default_out_dir, prepare_out_dir
    from servescope.sweep.configs import expand

    assert cfg.serve
    configs = expand(cfg.serve_param)
    if len(configs) != 1:
        raise ConfigError("run --serve takes one value per --serve-param; for several, use servescope sweep --serve")
    plan = ServePlan(cfg.serve, cfg.serve_param, configs, cfg.serve_timeout, url=cfg.url)
    out = prepare_out_dir(cfg.out or default_out_dir(cfg.slug("served")))
    srv = plan.server(configs[0], out / SERVER_LOG)
    record: dict[str, Any] = {"name": configs[0].name, "params": configs[0].as_dict(), "template": cfg.serve}
    outcomes: list[RunOutcome] = []

    def body(url: str) -> None:
        outcomes.append(
            run(dataclasses.replace(cfg, url=url, out=str(out), gpu_metrics_url=cfg.gpu_metrics_url or "nvml"))
        )

    status = serve_one(srv, record, out / SERVER_JSON, Console(quiet=cfg.quiet), body, quiet=cfg.quiet)
    if status == "failed":
        raise TargetUnavailable(f"--serve: {record.get('error')} (log: {srv.log_path}):\n{record.get('log_tail')}")
    return outcomes[0].exit_code if outcomes else 1
