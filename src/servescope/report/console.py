"""The terminal: a live progress line during the run and the summary table after it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from servescope.results.interactivity import LevelReading
from servescope.results.metrics import dig
from servescope.results.precision import plus_minus
from servescope.results.schema import Summary
from servescope.results.selfcheck import summary_line

if TYPE_CHECKING:
    from servescope.client.face import ShardFace

__all__ = ["LiveProgress", "print_interactivity_table", "print_spread", "print_summary", "summary_table"]


class LiveProgress:
    """Requests done/failed and output tokens/s so far, redrawn twice a second from the loop.

    Redrawing is driven by a task on the run's own event loop (no refresh thread competing for
    the GIL) and costs well under a millisecond per redraw.
    """

    def __init__(self, console: Console, shard: ShardFace, total: int | None, interval_s: float = 0.5):
        self.console = console
        self.shard = shard
        self.total = total
        self.interval_s = interval_s
        self._live: Live | None = None
        self._task: asyncio.Task[None] | None = None
        self._t_start = 0.0

    def _render(self) -> Text:
        s = self.shard
        elapsed = max(time.perf_counter() - self._t_start, 1e-9)
        total = f"/{self.total}" if self.total else ""
        text = Text()
        text.append(f"  {s.done}{total} done", style="bold")
        text.append(f"  {s.failed} failed", style="red" if s.failed else "dim")
        text.append(f"  {len(s.in_flight)} in flight")
        text.append(f"  {s.output_tokens / elapsed:,.0f} output tok/s")
        text.append(f"  {elapsed:,.1f} s", style="dim")
        return text

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            if self._live is not None:
                self._live.update(self._render(), refresh=True)

    def start(self) -> None:
        self._t_start = time.perf_counter()
        self._live = Live(self._render(), console=self.console, auto_refresh=False, transient=True)
        self._live.start()
        self._task = asyncio.ensure_future(self._tick())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._live is not None:
            self._live.stop()


def _fmt(x: Any, digits: int = 1) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}"


def summary_table(summary: Summary) -> Table:
    lat = summary.get("latency_ms", {})
    table = Table(title=None, show_edge=False, pad_edge=False, box=None)
    table.add_column("latency (ms)", style="bold")
    for col in ("mean", "median", "p90", "p99", "max"):
        table.add_column(col, justify="right")
    for name, label in (
        ("ttft", "TTFT"),
        ("ttfat", "TTFAT (answer)"),
        ("tpot", "TPOT"),
        ("itl", "ITL"),
        ("e2e", "E2E"),
    ):
        d: Mapping[str, Any] = dig(lat, name) or {}
        if not d.get("count"):
            continue
        digits = 2 if name in ("tpot", "itl") else 1
        ivs = dig(summary, "precision", "metrics", name) or {}  # 95% intervals (results.precision)
        table.add_row(
            label,
            *(
                _fmt(d.get(c), digits) + (f" {plus_minus(ivs.get(c), digits)}" if ivs.get(c) else "")
                for c in ("mean", "median", "p90", "p99", "max")
            ),
        )
    return table


def print_summary(summary: Summary, console: Console, out_dir: str | None = None) -> None:
    req = summary.get("requests", {})
    thr = summary.get("throughput", {})
    tok = summary.get("tokens", {})
    tgt = summary.get("target", {})
    load = summary.get("load", {})
    head = Text()
    head.append("servescope run", style="bold")
    where = tgt.get("url", "?")
    if tgt.get("emulated"):
        where = f"built-in emulator, profile {tgt.get('profile')}"
    head.append(f"  {tgt.get('model', '?')} @ {where}  ({tgt.get('api', '?')}, {_load_words(load)})")
    console.print(head)
    errors = req.get("errors") or {}
    err_text = ", ".join(f"{k} {v}" for k, v in errors.items())
    console.print(
        f"  requests  {req.get('completed', 0):,} completed, {req.get('failed', 0):,} failed"
        + (f" ({err_text})" if err_text else "")
        + f" in {summary.get('duration_s', 0):,.2f} s"
    )
    console.print(
        f"  throughput  {_fmt(thr.get('requests_per_s'), 2)} req/s "
        f"(offered {_fmt(thr.get('offered_requests_per_s'), 2)}), "
        f"output {_fmt(thr.get('output_tokens_per_s'))} tok/s, "
        f"total {_fmt(thr.get('total_tokens_per_s'))} tok/s"
    )
    _print_interactivity(summary, console)
    reasoning = tok.get("reasoning_total") or 0
    console.print(
        f"  tokens  input {tok.get('input_total', 0):,} ({tok.get('input_source')}), "
        f"output {tok.get('output_total', 0):,} ({tok.get('output_source')})"
        + (f", of which reasoning {reasoning:,}" if reasoning else "")
    )
    console.print(summary_table(summary))
    if summary.get("precision"):
        console.print(
            "  [dim]± 95% interval from this run (batch means in send order); ±?: too few requests to bound it[/dim]"
        )
    _print_validation(summary, console)
    good = summary.get("goodput")
    if good:
        console.print(
            f"  goodput  {_fmt(good['requests_per_s'], 2)} req/s "
            f"({good['fraction'] * 100:.1f}% of requests meet {good['slo']})"
        )
    check = summary.get("slo_check")
    if check and check.get("checks"):
        limits = ", ".join(f"{c['name']} ≤ {c.get('limit_ms', c.get('limit')):g}" for c in check["checks"])
        if check.get("passed"):
            console.print(f"  SLO  [green]pass[/green]  {limits}")
        else:
            from servescope.results.slo import failing

            console.print(f"  SLO  [red]fail[/red]  {limits}: {failing(check)}")
    for note in summary.get("notes") or ():
        console.print(f"  [yellow]note[/yellow]  {note}")
    client = summary.get("client", {})
    if client.get("saturated"):
        console.print(f"  [bold red]client saturated, figures not vouched for[/bold red]  {client.get('advice', '')}")
    else:
        lag = (client.get("schedule_lag_ms") or {}).get("p99")
        console.print(
            f"  client  ok: schedule lag p99 {_fmt(lag, 2)} ms, "
            f"CPU {_fmt(client.get('cpu_us_per_token'), 1)} µs/token, "
            f"loop lag p99 {_fmt(client.get('loop_lag_ms_p99'), 1)} ms"
        )
        for what in client.get("unvouched") or ():
            console.print(f"  [yellow]not vouched for[/yellow]  {what}")
    setup = client.get("setup")
    if setup and setup["requests"]:
        share = setup["share_of_time_to_first_token"]
        console.print(
            f"  connections  {setup['requests']} requests waited for a connection opened inside the window "
            f"(set-up p50 {_fmt(setup['ms']['median'], 1)} ms, p99 {_fmt(setup['ms']['p99'], 1)} ms"
            + (f", {share:.1%} of their set-up + TTFT)" if share is not None else ")")
        )
    if out_dir:
        console.print(f"  results  {out_dir}")


def _print_validation(summary: Summary, console: Console) -> None:
    """One line: the run's self-checks (results.validation), failures spelled out."""
    checks = summary.get("validation")
    if not checks:
        return
    ok = all(c["status"] != "fail" for c in checks)
    console.print(
        f"  validation  {'[green]' if ok else '[yellow]'}{escape(summary_line(checks))}"
        f"{'[/green]' if ok else '[/yellow]'}",
        highlight=False,
    )
    target = summary.get("precision", {}).get("stop_reason")
    if target:
        console.print(f"  precision  {escape(target)}", highlight=False)


def _print_interactivity(summary: Summary, console: Console) -> None:
    ia = summary.get("interactivity")
    if not ia or ia.get("tokens_per_s_per_user") is None:
        return
    gpus = ia.get("gpus")
    per_gpu = (
        f", output {_fmt(ia.get('output_tokens_per_s_per_gpu'))} tok/s per GPU "
        f"({gpus} GPU{'s' if gpus != 1 else ''}, {ia.get('gpus_source')})"
        if gpus
        else " (per GPU: give --gpus)"
    )
    p10 = ia["per_request_tokens_per_s_per_user"].get("p10")
    console.print(
        f"  interactivity  {_fmt(ia['tokens_per_s_per_user'])} tok/s per user "
        f"(1000 / median TPOT; P10 of requests {_fmt(p10)}){per_gpu}",
        highlight=False,
    )


def print_interactivity_table(rows: Sequence[tuple[Any, LevelReading]], per_gpu: bool, console: Console) -> None:
    """The Pareto table: (side with a `.name`, reading) rows; values outside the front are marked."""
    if not rows:
        return
    table = Table(
        title="Best throughput at each interactivity level (read off the Pareto front)",
        title_justify="left",
        show_edge=False,
        pad_edge=False,
        box=None,
    )
    multi = len({side.name for side, _ in rows}) > 1
    has_cost = any(r.usd_per_1m_tokens is not None for _, r in rows)
    if multi:
        table.add_column("side")
    table.add_column("tok/s per user", justify="right")
    table.add_column("out tok/s per GPU" if per_gpu else "out tok/s (deployment)", justify="right")
    if has_cost:
        table.add_column("$ per 1M out", justify="right")
    table.add_column("")
    for side, r in rows:
        bound = "≥ " if r.status == "below_range" else ""
        cells = [f"{r.level:g}", "—" if r.y is None else bound + _fmt(r.y)]
        if has_cost:
            usd = r.usd_per_1m_tokens
            cells.append("—" if usd is None else ("≤ " if bound else "") + f"${usd:,.3f}")
        cells.append(
            {
                "below_range": "below the measured range (lower bound)",
                "not_reached": "not reached",
                "no_data": "no data",
            }.get(r.status, "")
        )
        table.add_row(*([side.name] if multi else []), *cells)
    console.print(table)


def _load_words(load: Mapping[str, Any]) -> str:
    mode = load.get("mode")
    if mode == "concurrency":
        return f"concurrency {load.get('concurrency')}"
    if mode == "rate":
        cap = f", cap {load['concurrency']}" if load.get("concurrency") else ""
        return f"rate {load.get('rate_rps')} req/s, burstiness {load.get('burstiness')}{cap}"
    if mode == "ramp":
        start, end = load.get("ramp_up_start_rps"), load.get("ramp_up_end_rps")
        return f"ramp {load.get('ramp_up_strategy')} {start}→{end} req/s"
    return "offline (every request at once)"


def print_spread(spread: dict[str, Any], console: Console, out_dir: str | None = None) -> None:
    """The run-to-run spread of `--repeat N`: mean ± std, range and CV per metric."""
    table = Table(title=None, show_edge=False, pad_edge=False, box=None)
    table.add_column("over repeats", style="bold")
    for col in ("mean", "± std", "min", "max", "CV"):
        table.add_column(col, justify="right")
    for label, d in spread.items():
        cv = d.get("cv")
        table.add_row(
            label,
            _fmt(d["mean"], 2),
            _fmt(d["std"], 2),
            _fmt(d["min"], 2),
            _fmt(d["max"], 2),
            "—" if cv is None else f"{cv * 100:.1f}%",
        )
    console.print(table)
    if out_dir:
        console.print(f"  repeats  {out_dir} (repeat-1 … ; compare them with servescope compare)")
