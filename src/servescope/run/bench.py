"""One benchmark run, end to end: checks, workload, schedule, the shard, results on disk.

Order matters and is the contract: everything that can fail or cost CPU — validation, reaching
the target, the capability probe, prompts, bodies, the schedule — happens before the clock
starts; records stream to disk during the run; metrics are computed after it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
import math
import os
import signal
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import aiohttp
import numpy as np
from rich.console import Console

from servescope.client.openai import API_PATHS, build_body, encode_body, normalize_base_url
from servescope.client.shard import Shard
from servescope.client.spec import Prepared, ShardSpec
from servescope.report.console import LiveProgress, print_spread, print_summary
from servescope.results import precision
from servescope.results.colsummary import summarize_columns, tokens_read_together
from servescope.results.metrics import assess_client
from servescope.results.parquet import load_columns
from servescope.results.repeats import spread
from servescope.results.schema import ApiKind, ClientMeasures, LoadMode, RunInfo, Summary, Target
from servescope.results.schema import Workload as SummaryWorkload
from servescope.results.selfcheck import (
    Bounds,
    bounds_from_cost,
    concurrency_held_columns,
    validate_columns,
    window_columns,
)
from servescope.results.slo import evaluate as evaluate_slo
from servescope.results.slo import parse_slo_spec
from servescope.results.store import (
    MANIFEST,
    RECORDS,
    SUMMARY,
    RecordWriter,
    default_out_dir,
    prepare_out_dir,
    start_warm_up,
    warm_up,
    write_json,
)
from servescope.run.config import RunConfig
from servescope.run.describe import run_manifest, run_notes
from servescope.target import servermetrics
from servescope.target.preflight import DEFAULT_PROFILE, EmulatorProcess, TargetInfo, preflight
from servescope.target.telemetry import start as start_gpu_telemetry
from servescope.urls import server_root
from servescope.workload import WorkItem, prepare_workload
from servescope.workload.schedule import open_loop_offsets_ns, ramp_rates
from servescope.workload.seeds import derive_seed

if TYPE_CHECKING:
    from servescope.run.ray_run import RayShards
    from servescope.run.workers import ProcessShards
    from servescope.target.capabilities import Capabilities

__all__ = ["RunOutcome", "plan_requests", "run_against", "run_benchmark", "run_benchmark_sync"]

_POOL_FOR_DURATION = 10_000  # closed loop with --duration: prompts are reused cyclically past this
_MAX_SCHEDULED = 2_000_000
_CONNECT_TIMEOUT_S = 10.0  # one connect of the hot path (before the clock, or inside it)


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


async def run_against(cfg: RunConfig, url: str, console: Console, *, emulated: bool) -> RunOutcome:
    """One run against a server already up at `url` (`emulated`: it is our emulator, `cfg.profile`)."""
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
    open_loop = cfg.load_mode != "concurrency" or trace
    cache_reset = None
    if cfg.reset_cache:  # after the workload's own requests to the server (tokenize, probes), before the clock
        from servescope.target.cachereset import plan_reset, reset_prefix_cache

        plan = plan_reset(caps.engine if caps is not None else None, emulated=emulated)
        cache_reset = await reset_prefix_cache(info.base_url, headers, plan)

    out_dir = prepare_out_dir(cfg.out or default_out_dir(cfg.slug(info.model)))
    started = _dt.datetime.now(_dt.UTC)
    run_id = uuid.uuid4().hex[:12]
    manifest = run_manifest(cfg, info, caps, run_id, started, emulated)
    if cache_reset is not None:
        manifest["cache_reset"] = cache_reset  # the server's reply: status, head of the body
    manifest["workload"] = workload.info
    manifest["target"].update({"gpus": gpus, "gpus_source": gpus_source})
    write_json(out_dir / MANIFEST, manifest)
    metrics_path = getattr(caps, "metrics_path", None)  # where the probe found the page (TRT-LLM: elsewhere)
    metrics_before = await servermetrics.scrape(info.base_url, headers, path=metrics_path)

    spec = ShardSpec(
        url=base + API_PATHS[cfg.api],
        api=cfg.api,
        headers=headers,
        items=prepared,
        stream=cfg.stream,
        concurrency=cfg.concurrency if trace else cfg.effective_concurrency,
        open_loop=open_loop,
        duration_s=cfg.duration,
        # a trace is replayed once: never cycled past its end
        num_requests=(
            len(prepared)
            if trace
            else (cfg.effective_num_requests + cfg.warmup)
            if cfg.effective_num_requests
            else None
        ),
        timeout_s=cfg.timeout,
        connect_timeout_s=_CONNECT_TIMEOUT_S,
        preconnect=min(cfg.effective_concurrency or min(n_total, 64), 512),
        reuse_connections=caps is None or caps.keeps_alive_after_stream is not False or not cfg.stream,
        kernel_timestamps=cfg.rx_timestamps == "kernel",
        coalesce_reads=cfg.read_coalescing,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    interrupts = [0]

    def on_sigint() -> None:
        interrupts[0] += 1
        if interrupts[0] > 1:  # a second Ctrl-C: leave now, records already on disk
            os._exit(130)
        stop.set()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    writer = RecordWriter(out_dir / RECORDS)
    warm_up()  # Arrow's first conversion, before the clock (results.store)
    target_pct = cfg.target_precision
    enough = None if target_pct is None else precision.StopRule(target_pct)
    shard: Shard | ProcessShards | RayShards = Shard(spec, on_record=writer.write, stop=stop, enough=enough)

    def on_ready(doc: dict[str, Any]) -> None:  # shards elsewhere: their PIDs (and nodes) go in the manifest
        manifest["workers"] = doc
        write_json(out_dir / MANIFEST, manifest)

    if cfg.ray is not None:  # Ray actors, one per node (run/ray_run.py)
        from servescope.run.ray_run import RayShards

        shard = RayShards(
            spec,
            address=cfg.ray,
            resource=cfg.ray_resource,
            shards=cfg.workers if cfg.workers > 1 else None,
            on_record=writer.write,
            stop=stop,
            enough=enough,
            on_ready=on_ready,
        )
    elif cfg.workers > 1:  # worker processes on this host (run/workers.py)
        from servescope.run.workers import ProcessShards

        shard = ProcessShards(
            spec, workers=cfg.workers, on_record=writer.write, stop=stop, enough=enough, on_ready=on_ready
        )
    progress = None
    if not cfg.quiet and console.is_terminal:
        progress = LiveProgress(console, shard, spec.num_requests)
        progress.start()
    gpu = start_gpu_telemetry(cfg.gpu_metrics_url)  # samples in a thread of its own, off the hot path
    try:
        result = await shard.run()
    finally:
        gpu.stop()
        if progress is not None:
            progress.stop()
        writer.close()
        loop.remove_signal_handler(signal.SIGINT)
    interrupted = result.interrupted or interrupts[0] > 0
    metrics_after = await servermetrics.scrape(info.base_url, headers, path=metrics_path) if metrics_before else None

    # every figure from here on is computed from the records on disk, as columns (the run keeps no record)
    cols = load_columns(out_dir)
    out_tokens = int(np.nan_to_num(cols.output_tokens[cols.ok]).sum())
    client: ClientMeasures = {
        "cpu_s": result.cpu_s,
        "cpu_us_per_token": (result.cpu_s * 1e6 / out_tokens) if out_tokens else None,
        "cpu_busy_peak": result.cpu_busy_peak,
        "loop_lag_ms_p99": float(np.percentile(result.loop_lag_ms, 99)) if result.loop_lag_ms else 0.0,
        "read_pauses": result.read_pauses,
        "read_pause_ms": result.read_pause_ms,
        "elapsed_s": result.elapsed_s,
    }
    shortfall = spec.preconnect - result.preconnected
    target_doc: Target = {"url": base, "model": info.model, "api": cast(ApiKind, cfg.api), "emulated": emulated}
    if emulated:
        target_doc["profile"] = cfg.profile or DEFAULT_PROFILE
    workload_doc = cast(
        SummaryWorkload,
        {
            "dataset": cfg.dataset,
            "input_len": cfg.input_len,
            "output_len": cfg.output_len,
            "range_ratio": cfg.range_ratio,
            "ignore_eos": cfg.ignore_eos and not rejected,
            "stream": cfg.stream,
            "seed": cfg.seed,
            "output_len_enforced": _enforced(cfg, caps),
            **workload.info,  # each kind of workload adds its own keys (an open block)
        },
    )
    run_doc: RunInfo = {
        "run_id": run_id,
        "started_at": started.isoformat(timespec="seconds"),
        "target": target_doc,
        "load": {
            "mode": cast(LoadMode, cfg.load_mode),
            "concurrency": cfg.effective_concurrency,
            "rate_rps": None if cfg.rate is None else ("inf" if math.isinf(cfg.rate) else cfg.rate),
            "burstiness": None if math.isinf(cfg.burstiness) else cfg.burstiness,
            "ramp_up_strategy": cfg.ramp_up_strategy,
            "ramp_up_start_rps": cfg.ramp_up_start_rps,
            "ramp_up_end_rps": cfg.ramp_up_end_rps,
            "warmup": cfg.warmup,
        },
        "workload": workload_doc,
        "interrupted": interrupted,
    }
    # from the records on disk, as columns (results.colsummary): the same figures as metrics.summarize
    summary = summarize_columns(
        cols, run=run_doc, slo=cfg.slo or None, client=client, gpus=gpus, gpus_source=gpus_source
    )

    if not open_loop:  # the closed loop's share of --concurrency held while refilling (results.validation)
        summary["client"]["concurrency_held"] = concurrency_held_columns(cols, spec.concurrency)
    summary["client"]["tokens_read_together"] = tokens_read_together(cols)
    saturated, reasons, advice = assess_client(
        summary, open_loop=cfg.load_mode in ("rate", "ramp"), rx_timestamps=result.rx_timestamps
    )
    summary["client"].update({"saturated": saturated, "reasons": reasons, "advice": advice})
    if result.parts:  # --workers: each process judged on its own, the saturated one named (run/workers.py)
        from servescope.run.workers import assess_shards

        assess_shards(
            summary, result, spec, cols, open_loop=cfg.load_mode in ("rate", "ramp"), rx_timestamps=result.rx_timestamps
        )
    # connections asked for before the clock but not opened (so opened inside it), and why the
    # client stopped sending early, if it did (client.shard)
    summary["client"]["preconnect_shortfall"] = shortfall
    summary["client"]["failure"] = result.failure
    summary["server"] = servermetrics.server_summary(metrics_before, metrics_after)
    if cfg.slo_text:
        slo_spec = parse_slo_spec(cfg.slo_text)
        if slo_spec.has_run_limits:
            summary["slo_check"] = evaluate_slo(summary, slo_spec)
    summary["validation"] = validate_columns(cols, summary, bounds=_bounds(cfg, emulated))
    summary["precision"] = precision.precision_block_columns(cols)
    if target_pct is not None:
        otherwise = (
            "interrupted"
            if interrupted
            else "the client stopped on an error"
            if result.failure
            else "the limit came first (--num-requests or --duration)"
        )
        summary["precision"] = precision.with_target_columns(
            summary["precision"], cols, target_pct, shard.stopped_by, otherwise
        )
    summary["notes"] = run_notes(cfg, summary, caps, len(prepared))
    # GPU energy over the measured window (target/telemetry.py, results/energy.py); why not, without a source
    summary["energy"] = gpu.finish(out_dir, result.t0_ns, window_columns(cols), summary["tokens"]["output_total"])
    if cache_reset is not None and cache_reset.get("note"):
        summary["notes"].append(cache_reset["note"])
    if shortfall:
        summary["notes"].append(
            f"{result.preconnected} of {spec.preconnect} connections opened before the clock: the other "
            f"{shortfall} were opened inside the measured window (their connect time counts in the first "
            "requests' TTFT); the server may limit connections or its accept backlog"
        )
    if result.lost or any(not p.rx_timestamps for p in result.parts):  # a worker process died (run/workers.py)
        summary["notes"].append(f"a client worker process was lost: {result.failure}")
    elif result.failure:
        summary["notes"].append(
            f"the client stopped sending early on an error of its own: {result.failure}; "
            "records of kind client_error hold each one"
        )
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
    if cfg.report:  # last: the report renders from the files as they will stay
        from servescope.report.html import write_report  # after the clock: not on the way to the first request

        write_report(out_dir)
    if not cfg.quiet:
        print_summary(summary, console, str(out_dir))
        if interrupted:
            console.print("  [yellow]interrupted[/yellow]: the summary covers what completed before the stop")
    if result.failure:  # even with --quiet: the run did not do what was asked
        Console(stderr=True).print(
            f"[bold red]servescope: error:[/bold red] {result.failure}; the run stopped "
            f"early (results so far in {out_dir})",
            highlight=False,
        )
    return RunOutcome(out_dir=out_dir, summary=summary, interrupted=interrupted, failure=result.failure)


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


def _bounds(cfg: RunConfig, emulated: bool) -> Bounds | None:
    """Physical bounds of the deployment behind the target, where it is known: the built-in emulator's
    profile (one model replica). None for any other target."""
    if not emulated:
        return None
    from servescope.deploy.loader import load_profile

    name = cfg.profile or DEFAULT_PROFILE
    return bounds_from_cost(load_profile(name).engine.cost, replicas=1, source=f"emulator profile {name}")


def _enforced(cfg: RunConfig, caps: Capabilities | None) -> bool | None:
    if cfg.output_len is None or not cfg.ignore_eos:
        return False
    if caps is None:
        return None  # not probed: unknown
    return caps.output_len_enforced
