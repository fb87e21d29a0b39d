"""One benchmark run, end to end: checks, workload, schedule, the shard, results on disk.

Order matters and is the contract: everything that can fail or cost CPU — validation, reaching
the target, the capability probe, prompts, bodies, the schedule — happens before the clock
starts; records stream to disk during the run; metrics are computed after it. `run_against` is
that order as steps:

1. `prepare_run`: the target reached and probed, the workload made, every body encoded (`RunPlan`);
2. `open_run`: the run's directory and manifest, the server's metrics before the clock (`RunStart`);
3. `shard_spec`: the shard's settings;
4. `run.measure.measure`: the measured window (signals, the shard, progress, GPU telemetry);
5. `run.assemble.assemble_summary`: the summary, from the records on disk;
6. `write_results`, `tell`: summary and manifest on disk, the report, the terminal.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
import math
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import numpy as np
from rich.console import Console

from servescope.client.openai import API_PATHS, build_body, encode_body, normalize_base_url
from servescope.client.spec import Prepared, ShardResult, ShardSpec
from servescope.report.console import print_spread, print_summary
from servescope.results.parquet import load_columns
from servescope.results.repeats import spread
from servescope.results.schema import Summary
from servescope.results.store import (
    MANIFEST,
    SESSION_METRICS,
    SESSIONS_FILE,
    SUMMARY,
    default_out_dir,
    prepare_out_dir,
    start_warm_up,
    write_json,
    write_jsonl,
)
from servescope.run.assemble import assemble_summary
from servescope.run.config import RunConfig
from servescope.run.describe import run_manifest
from servescope.run.measure import Window, measure
from servescope.target import servermetrics
from servescope.target.preflight import DEFAULT_PROFILE, EmulatorProcess, TargetInfo, preflight
from servescope.urls import server_root
from servescope.workload import WorkItem, Workload, prepare_workload
from servescope.workload.schedule import open_loop_offsets_ns, ramp_rates
from servescope.workload.seeds import derive_seed

if TYPE_CHECKING:
    from servescope.target.capabilities import Capabilities

__all__ = [
    "RunOutcome",
    "RunPlan",
    "RunStart",
    "open_run",
    "plan_requests",
    "prepare_run",
    "run_against",
    "run_benchmark",
    "run_benchmark_sync",
    "shard_spec",
    "tell",
    "write_results",
]

_POOL_FOR_DURATION = 10_000  # closed loop with --duration: prompts are reused cyclically past this
_MAX_SCHEDULED = 2_000_000
_CONNECT_TIMEOUT_S = 10.0  # one connect of the hot path (before the clock, or inside it)
_PRECONNECT_BUDGET_S: float | None = None  # opening every connection before the clock (None: 2 connect timeouts)


@dataclass
class RunOutcome:
    out_dir: Path
    summary: Summary
    interrupted: bool
    failure: str | None = None  # the client stopped sending early on an error of its own (client.shard)

    @property
    def exit_code(self) -> int:
        """130 interrupted; 1 when the client stopped on an error of its own, or when requests were
        sent and none completed (the numbers say nothing)."""
        if self.interrupted:
            return 130
        if self.failure:
            return 1
        req = self.summary.get("requests", {})
        return 1 if req.get("total") and not req.get("completed") else 0


def run_benchmark_sync(cfg: RunConfig, console: Console | None = None) -> RunOutcome:
    """Runs `run_benchmark` on a fresh event loop (uvloop where available)."""
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux and macOS
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(run_benchmark(cfg, console))


async def run_benchmark(cfg: RunConfig, console: Console | None = None) -> RunOutcome:
    """One run, or `cfg.repeat` runs of the same configuration, against `cfg.url` or the emulator."""
    cfg.validate()
    start_warm_up()  # Arrow's first conversion on a thread while the target is reached (joined before the clock)
    console = console or Console(stderr=False, quiet=cfg.quiet)
    if cfg.url is None:
        async with EmulatorProcess(cfg.profile or DEFAULT_PROFILE) as emu:
            return await _run_or_repeat(cfg, emu.url or "", console, emulated=True)
    return await _run_or_repeat(cfg, cfg.url, console, emulated=False)


async def _run_or_repeat(cfg: RunConfig, url: str, console: Console, *, emulated: bool) -> RunOutcome:
    if cfg.repeat <= 1:
        return await run_against(cfg, url, console, emulated=emulated)
    root = prepare_out_dir(cfg.out or default_out_dir(cfg.slug() + f"-x{cfg.repeat}"))
    outcomes: list[RunOutcome] = []
    for k in range(1, cfg.repeat + 1):
        # each repeat its own prompts (a prefix cache would serve the same ones warm), unless --same-prompts
        seed = cfg.seed if cfg.same_prompts or k == 1 else derive_seed(cfg.seed, f"repeat-{k}")
        sub = dataclasses.replace(cfg, out=str(root / f"repeat-{k}"), repeat=1, seed=seed)
        if not cfg.quiet:
            console.rule(f"repeat {k} of {cfg.repeat}")
        outcome = await run_against(sub, url, console, emulated=emulated)
        outcomes.append(outcome)
        if outcome.interrupted:
            break
    spread_doc = spread([o.summary for o in outcomes])
    doc = {
        "schema": "servescope.results.repeats/1",
        "repeats": [o.out_dir.name for o in outcomes],
        "spread": spread_doc,
    }
    write_json(root / "repeats.json", doc)
    if not cfg.quiet:
        print_spread(spread_doc, console, str(root))
    last = outcomes[-1]
    return RunOutcome(out_dir=root, summary=last.summary, interrupted=last.interrupted, failure=last.failure)


def plan_requests(cfg: RunConfig, items: list[WorkItem], model: str, ignore_rejected: set[str]) -> list[Prepared]:
    """Encoded bodies and (open loop) send offsets for every request, before the clock."""
    mode = cfg.load_mode
    offsets: list[int] | None = None
    n = len(items)
    if mode == "rate" or mode == "offline":
        offsets = open_loop_offsets_ns(n, cfg.rate or math.inf, burstiness=cfg.burstiness, seed=cfg.seed)
    elif mode == "ramp":
        rates = ramp_rates(
            n, cfg.ramp_up_start_rps or 0.0, cfg.ramp_up_end_rps or 0.0, cfg.ramp_up_strategy or "linear"
        )
        rates = np.maximum(rates, 1e-3)
        offsets = open_loop_offsets_ns(n, rates, burstiness=cfg.burstiness, seed=cfg.seed)
    prepared = []
    for i, item in enumerate(items):
        out_len = item.output_len
        body = build_body(
            api=cfg.api,
            model=model,
            prompt=item.prompt,
            max_tokens=out_len,
            stream=cfg.stream,
            ignore_eos=cfg.ignore_eos and "ignore_eos" not in ignore_rejected,
            min_tokens=cfg.ignore_eos and "min_tokens" not in ignore_rejected,
            extra_body=cfg.extra_body,
        )
        t_s = item.meta.get("t_s")  # trace replay: the workload's own send time
        offset = int(t_s * 1e9) if t_s is not None else (offsets[i] if offsets is not None else None)
        prepared.append(
            Prepared(
                id=i,
                body=encode_body(body),
                input_len=item.input_len,
                output_len=out_len or 0,
                warmup=i < cfg.warmup,
                offset_ns=offset,
                session=item.session,
                turn=item.turn,
                think_ns=int(item.meta.get("think_s", 0.0) * 1e9),
                branch=int(item.meta.get("branch", 0)),
            )
        )
    return prepared


def _n_total(cfg: RunConfig) -> int:
    n = cfg.effective_num_requests
    if n is not None:
        return n + cfg.warmup
    # --duration without --num-requests
    if cfg.load_mode == "rate":
        return min(_MAX_SCHEDULED, math.ceil((cfg.rate or 1) * (cfg.duration or 0) * 1.5) + 16 + cfg.warmup)
    return _POOL_FOR_DURATION + cfg.warmup


@dataclass
class RunPlan:
    """Everything found and made before the clock, in the order the run needs it (`prepare_run`)."""

    base: str  # the target's base URL, normalised (…/v1)
    headers: dict[str, str]
    emulated: bool  # the target is our emulator, `cfg.profile`
    info: TargetInfo
    gpus: int | None
    gpus_source: str | None
    caps: Capabilities | None
    workload: Workload  # its items emptied: the prompts live on in `prepared`'s encoded bodies
    prepared: list[Prepared]
    trace: bool  # a trace replay: each request at its own send time, once
    open_loop: bool
    n_total: int
    cache_reset: dict[str, Any] | None  # the server's reply to --reset-cache

    @property
    def rejected(self) -> set[str]:
        """Request fields the capability probe found the server rejects."""
        return set(self.caps.rejected_fields) if self.caps is not None else set()


@dataclass
class RunStart:
    """The run as opened before the clock: its directory, identity and manifest, the server's metrics."""

    out_dir: Path
    run_id: str
    started: _dt.datetime
    manifest: dict[str, Any]
    metrics_path: str | None  # where the probe found the metrics page (TRT-LLM: elsewhere)
    metrics_before: dict[str, float] | None


async def run_against(cfg: RunConfig, url: str, console: Console, *, emulated: bool) -> RunOutcome:
    """One run against a server already up at `url` (`emulated`: it is our emulator, `cfg.profile`)."""
    plan = await prepare_run(cfg, url, emulated=emulated)
    start = await open_run(cfg, plan)
    spec = shard_spec(cfg, plan)
    window = await measure(cfg, spec, start, console)
    metrics_after = (
        await servermetrics.scrape(plan.info.base_url, plan.headers, path=start.metrics_path)
        if start.metrics_before
        else None
    )
    # every figure from here on is computed from the records on disk, as columns (the run keeps no record)
    cols = load_columns(start.out_dir)
    server = servermetrics.server_summary(start.metrics_before, metrics_after)
    histograms = servermetrics.histogram_window(start.metrics_before, metrics_after)
    speculation = servermetrics.spec_window(start.metrics_before, metrics_after)
    summary = assemble_summary(cfg, plan, start, spec, window, cols, server, histograms, speculation)
    write_results(cfg, start, spec, window.result, summary)
    tell(cfg, console, start.out_dir, summary, window)
    return RunOutcome(
        out_dir=start.out_dir, summary=summary, interrupted=window.interrupted, failure=window.result.failure
    )


async def prepare_run(cfg: RunConfig, url: str, *, emulated: bool) -> RunPlan:
    """Before the clock: reach the target, probe it, make the workload and every request's body."""
    base = normalize_base_url(url)
    headers = cfg.request_headers()
    if cfg.ray is not None:  # a Ray address nothing answers at fails before anything is written
        from servescope.run.ray_run import check_reachable

        check_reachable(cfg.ray)
    info = await preflight(base, cfg.model, headers)
    gpus, gpus_source = await _gpus(cfg, info.base_url, headers, emulated=emulated)
    caps = await _probe(cfg, info, headers)
    rejected = set(caps.rejected_fields) if caps is not None else set()

    n_total = _n_total(cfg)
    workload = await prepare_workload(
        cfg, n_total, base_url=info.base_url, model=info.model, headers=headers, caps=caps
    )
    items = workload.items
    prepared = plan_requests(cfg, items, info.model, rejected)
    trace = any("t_s" in item.meta for item in items)
    del items
    workload.items = []  # the prompts live on in the encoded bodies: not held through the run
    cache_reset = None
    if cfg.reset_cache:  # after the workload's own requests to the server (tokenize, probes), before the clock
        from servescope.target.cachereset import plan_reset, reset_prefix_cache

        reset = plan_reset(caps.engine if caps is not None else None, emulated=emulated)
        cache_reset = await reset_prefix_cache(info.base_url, headers, reset)
    return RunPlan(
        base=base,
        headers=headers,
        emulated=emulated,
        info=info,
        gpus=gpus,
        gpus_source=gpus_source,
        caps=caps,
        workload=workload,
        prepared=prepared,
        trace=trace,
        open_loop=cfg.load_mode != "concurrency" or trace,
        n_total=n_total,
        cache_reset=cache_reset,
    )


async def open_run(cfg: RunConfig, plan: RunPlan) -> RunStart:
    """The run's directory and manifest, then the server's metrics before the clock."""
    info, caps = plan.info, plan.caps
    out_dir = prepare_out_dir(cfg.out or default_out_dir(cfg.slug(info.model)))
    started = _dt.datetime.now(_dt.UTC)
    run_id = uuid.uuid4().hex[:12]
    manifest = run_manifest(cfg, info, caps, run_id, started, plan.emulated)
    if plan.cache_reset is not None:
        manifest["cache_reset"] = plan.cache_reset  # the server's reply: status, head of the body
    manifest["workload"] = plan.workload.info
    manifest["target"].update({"gpus": plan.gpus, "gpus_source": plan.gpus_source})
    write_json(out_dir / MANIFEST, manifest)
    if plan.workload.session_plan:  # agent sessions: the plan, replayable with --dataset sessions:PATH
        write_jsonl(out_dir / SESSIONS_FILE, plan.workload.session_plan)
    metrics_path = getattr(caps, "metrics_path", None)  # where the probe found the page (TRT-LLM: elsewhere)
    metrics_before = await servermetrics.scrape(info.base_url, plan.headers, path=metrics_path)
    return RunStart(
        out_dir=out_dir,
        run_id=run_id,
        started=started,
        manifest=manifest,
        metrics_path=metrics_path,
        metrics_before=metrics_before,
    )


def shard_spec(cfg: RunConfig, plan: RunPlan) -> ShardSpec:
    """The shard's settings: where to send, how many at once, when to stop, how to read."""
    caps, prepared, trace = plan.caps, plan.prepared, plan.trace
    return ShardSpec(
        url=plan.base + API_PATHS[cfg.api],
        api=cfg.api,
        headers=plan.headers,
        items=prepared,
        stream=cfg.stream,
        concurrency=cfg.concurrency if trace else cfg.effective_concurrency,
        open_loop=plan.open_loop,
        duration_s=cfg.duration,
        # a trace is replayed once: never cycled past its end
        num_requests=(
            len(prepared)
            if trace or plan.workload.session_plan  # agent sessions: every turn of every planned session
            else (cfg.effective_num_requests + cfg.warmup)
            if cfg.effective_num_requests
            else None
        ),
        timeout_s=cfg.timeout,
        connect_timeout_s=_CONNECT_TIMEOUT_S,
        preconnect=connections_needed(cfg, plan.n_total),
        preconnect_budget_s=_PRECONNECT_BUDGET_S,
        reuse_connections=caps is None or caps.keeps_alive_after_stream is not False or not cfg.stream,
        kernel_timestamps=cfg.rx_timestamps == "kernel",
        coalesce_reads=cfg.read_coalescing,
    )


#: An open loop with no cap can have any number in flight: this many connections open before its clock.
UNCAPPED_PRECONNECT = 64


def connections_needed(cfg: RunConfig, n_total: int) -> int:
    """The connections a run opens before its clock: one per slot a closed loop (or an open loop's cap)
    can fill, never more than the requests it sends (unless --duration cycles them); an uncapped open
    loop opens `UNCAPPED_PRECONNECT`, and each one it opens inside the window is counted (records'
    `setup_ns`)."""
    slots = cfg.effective_concurrency
    if slots is None:
        return min(n_total, UNCAPPED_PRECONNECT)
    return slots if cfg.duration is not None or not n_total else min(slots, n_total)


def write_results(cfg: RunConfig, start: RunStart, spec: ShardSpec, result: ShardResult, summary: Summary) -> None:
    """The summary, the manifest's after-the-clock fields, then the report (from the files as they stay)."""
    out_dir, manifest = start.out_dir, start.manifest
    write_json(out_dir / SUMMARY, summary)
    manifest["ended_at"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    # records hold ns from this origin; with it, they line up with a server's own
    # perf_counter_ns/CLOCK_MONOTONIC timestamps on the same host (ground-truth tests)
    manifest["connections"] = {"requested": spec.preconnect, "preconnected": result.preconnected}
    manifest["clock"] = {
        "kind": "perf_counter_ns",
        "origin_ns": result.t0_ns,
        "rx_timestamps": result.rx_timestamps,
        "read_coalescing": result.rx_timestamps == "kernel" and cfg.read_coalescing,
    }
    write_json(out_dir / MANIFEST, manifest)
    if (out_dir / SESSIONS_FILE).is_file():  # agent sessions: their metrics (docs/metrics.md, "Agent sessions")
        from servescope.report.sessions import load_session_metrics

        loaded = load_session_metrics(out_dir)
        if loaded is not None:
            write_json(out_dir / SESSION_METRICS, loaded[0])
    if cfg.report:  # last: the report renders from the files as they will stay
        from servescope.report.html import write_report  # after the clock: not on the way to the first request

        write_report(out_dir)


def tell(cfg: RunConfig, console: Console, out_dir: Path, summary: Summary, window: Window) -> None:
    """The summary table (unless --quiet), and a client failure even with --quiet."""
    failure = window.result.failure
    if not cfg.quiet:
        print_summary(summary, console, str(out_dir))
        if window.interrupted:
            console.print("  [yellow]interrupted[/yellow]: the summary covers what completed before the stop")
    if failure:  # even with --quiet: the run did not do what was asked
        Console(stderr=True).print(
            f"[bold red]servescope: error:[/bold red] {failure}; the run stopped early (results so far in {out_dir})",
            highlight=False,
        )


async def _gpus(
    cfg: RunConfig, base_url: str, headers: dict[str, str], *, emulated: bool
) -> tuple[int | None, str | None]:
    """The GPUs serving the target, for throughput per GPU: `--gpus`, else the built-in emulator's
    deployment (`GET /_servescope/info`, before the clock), else unknown (None)."""
    if cfg.gpus is not None:
        return cfg.gpus, "--gpus"
    if not emulated:
        return None, None
    try:
        async with (
            aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=5)) as session,
            session.get(server_root(base_url) + "/_servescope/info") as resp,
        ):
            doc = await resp.json(content_type=None) if resp.status == 200 else None
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return None, None
    n = doc.get("gpus") if isinstance(doc, dict) else None
    return (n, "emulator") if isinstance(n, int) and not isinstance(n, bool) and n > 0 else (None, None)


async def _probe(cfg: RunConfig, info: TargetInfo, headers: dict[str, str]) -> Capabilities | None:
    """The capability probe (target/capabilities.py), before the clock; None when --no-probe."""
    if not cfg.probe:
        return None
    from servescope.target import capabilities

    async with aiohttp.ClientSession(headers=headers) as session:
        return await capabilities.probe(session, info.base_url, info.model, cfg.api, extra_body=cfg.extra_body)
