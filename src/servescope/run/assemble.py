"""A run's summary, assembled in one place from what the run produced.

`assemble_summary` is the only code that builds a run's summary.json document. It starts from the
figures of the records on disk, as columns (`results.colsummary`), then adds, in this order (the
file's key order): the client's verdict on itself (for a run over several shards, each shard's
figures and the saturated one named), the server's metrics over the window, the engine's own view
of latency beside the client's (from its request-level histograms), the run-limit SLO check, the
self-checks, the precision block, the notes and the GPU energy over the measured window.
A sweep adds its own blocks (slo_check against the sweep's limits, cost) to the document this
returns (sweep.runner).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from servescope.client.split import split_spec
from servescope.client.transport import LATENESS_SHIFT
from servescope.results import precision, trust
from servescope.results.colsummary import setup_block, summarize_columns, tokens_read_together
from servescope.results.engineview import HistogramWindow, SpecWindow, engine_view
from servescope.results.metrics import assess_client, unvouched
from servescope.results.schema import (
    ApiKind,
    ClientMeasures,
    LoadMode,
    Precision,
    RunInfo,
    ServerMetrics,
    ShardFigures,
    Summary,
    Target,
)
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
from servescope.run.describe import run_notes
from servescope.target.preflight import DEFAULT_PROFILE

if TYPE_CHECKING:
    from servescope.client.spec import ShardResult, ShardSpec
    from servescope.results.columns import RecordColumns
    from servescope.run.bench import RunPlan, RunStart
    from servescope.run.config import RunConfig
    from servescope.run.measure import Window
    from servescope.target.capabilities import Capabilities

__all__ = ["assemble_summary", "assess_shards", "shard_figures"]


def assemble_summary(
    cfg: RunConfig,
    plan: RunPlan,
    start: RunStart,
    spec: ShardSpec,
    window: Window,
    cols: RecordColumns,
    server: ServerMetrics | None,
    histograms: Mapping[str, HistogramWindow] | None = None,
    speculation: SpecWindow | None = None,
) -> Summary:
    """The finished summary of one run: what was made before the clock (`plan`, `start`, `spec`),
    what the measured window left (`window`, the records as `cols`) and the server's metrics over it
    (`histograms`: its request-level latency histograms over the window, by role, for `engine_view`;
    `speculation`: its speculative-decoding counters over the window).
    Its one side effect: the telemetry's samples go to gpu-telemetry.json (`Telemetry.finish`)."""
    result = window.result
    summary = summarize_columns(
        cols,
        run=_run_doc(cfg, plan, start, window.interrupted),
        slo=cfg.slo or None,
        client=_client_measures(result, cols),
        gpus=plan.gpus,
        gpus_source=plan.gpus_source,
    )
    _client_verdict(summary, cfg, plan, spec, result, cols)
    summary["server"] = server
    summary["engine_view"] = engine_view(histograms or {}, summary, cols, speculation)
    if cfg.slo_text:
        slo_spec = parse_slo_spec(cfg.slo_text)
        if slo_spec.has_run_limits:
            summary["slo_check"] = evaluate_slo(summary, slo_spec)
    summary["validation"] = validate_columns(cols, summary, bounds=_bounds(cfg, plan.emulated))
    summary["precision"] = _precision(cfg, cols, window)
    summary["notes"] = run_notes(cfg, summary, plan.caps, len(plan.prepared)) + _window_notes(plan, spec, result)
    # GPU energy over the measured window (target/telemetry.py, results/energy.py); why not, without a source
    summary["energy"] = window.gpu.finish(
        start.out_dir, result.t0_ns, window_columns(cols), summary["tokens"]["output_total"]
    )
    return summary


def _client_measures(result: ShardResult, cols: RecordColumns) -> ClientMeasures:
    """What the client measured about itself, from the shard's result."""
    out_tokens = int(np.nan_to_num(cols.output_tokens[cols.ok]).sum())
    return {
        "cpu_s": result.cpu_s,
        "cpu_us_per_token": (result.cpu_s * 1e6 / out_tokens) if out_tokens else None,
        "cpu_busy_peak": result.cpu_busy_peak,
        "loop_lag_ms_p99": float(np.percentile(result.loop_lag_ms, 99)) if result.loop_lag_ms else 0.0,
        "read_pauses": result.read_pauses,
        "read_pause_ms": result.read_pause_ms,
        "elapsed_s": result.elapsed_s,
    }


def _run_doc(cfg: RunConfig, plan: RunPlan, start: RunStart, interrupted: bool) -> RunInfo:
    """The run's identity, target, load and workload, as the summary states them."""
    target_doc: Target = {
        "url": plan.base,
        "model": plan.info.model,
        "api": cast(ApiKind, cfg.api),
        "emulated": plan.emulated,
    }
    if plan.emulated:
        target_doc["profile"] = cfg.profile or DEFAULT_PROFILE
    workload_doc = cast(
        SummaryWorkload,
        {
            "dataset": cfg.dataset,
            "input_len": cfg.input_len,
            "output_len": cfg.output_len,
            "range_ratio": cfg.range_ratio,
            "ignore_eos": cfg.ignore_eos and not plan.rejected,
            "stream": cfg.stream,
            "seed": cfg.seed,
            "output_len_enforced": _enforced(cfg, plan.caps),
            **plan.workload.info,  # each kind of workload adds its own keys (an open block)
        },
    )
    return {
        "run_id": start.run_id,
        "started_at": start.started.isoformat(timespec="seconds"),
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


def _client_verdict(
    summary: Summary, cfg: RunConfig, plan: RunPlan, spec: ShardSpec, result: ShardResult, cols: RecordColumns
) -> None:
    """The client block's verdict on the client itself, in place: concurrency held, reads, saturation
    (per shard too, over several), connections opened inside the window, why it stopped early."""
    client = summary["client"]
    if not plan.open_loop:  # the closed loop's share of --concurrency held while refilling (results.selfcheck)
        client["concurrency_held"] = concurrency_held_columns(cols, spec.concurrency)
    client["tokens_read_together"] = tokens_read_together(cols)
    client["setup"] = setup_block(cols)
    open_loop = cfg.load_mode in ("rate", "ramp")
    _biases(summary, spec, result, cols, open_loop=open_loop)
    saturated, reasons, advice = assess_client(summary, open_loop=open_loop, rx_timestamps=result.rx_timestamps)
    client.update({"saturated": saturated, "reasons": reasons, "advice": advice})
    client["unvouched"] = [] if saturated else unvouched(client, result.rx_timestamps)
    if result.parts:  # --workers, --ray: each shard judged on its own, the saturated one named
        assess_shards(summary, result, spec, cols, open_loop=open_loop, rx_timestamps=result.rx_timestamps)
    # connections asked for before the clock but not opened (so opened inside it), and why the
    # client stopped sending early, if it did (client.shard)
    client["preconnect_shortfall"] = spec.preconnect - result.preconnected
    client["failure"] = result.failure


def _biases(summary: Summary, spec: ShardSpec, result: ShardResult, cols: RecordColumns, *, open_loop: bool) -> None:
    """What could move a reported percentile, in place (results.trust): each cause's worst bound, the share
    of arrivals a loop stall may have merged (each shard's weighted by its requests), a closed loop's empty
    slot time."""
    client = summary["client"]
    n = len(result.parts)
    if n:
        shard = cols.id % n
        rows = max(len(cols), 1)
        lags = [(float((shard == p.index).sum()) / rows, p.loop_lag_ms) for p in result.parts]
    else:
        lags = [(1.0, result.loop_lag_ms)]
    found, stalls = trust.biases(
        cols,
        shard_lags_ms=lags,
        gap_ms=summary["latency_ms"]["tpot"]["median"],
        tokens_read_together=client.get("tokens_read_together"),
        rx_timestamps=result.rx_timestamps,
        read_pauses=result.read_pauses,
        read_pause_ms=result.read_pause_ms,
        elapsed_s=client.get("elapsed_s") or 0.0,
        read_lateness=result.read_lateness,
        lateness_bucket_ms=(1 << LATENESS_SHIFT) / 1e6,
    )
    client["loop_stall_share"] = stalls
    client["biases"] = found
    if not open_loop:
        client["load_deficit"] = trust.load_deficit(cols, spec.concurrency, summary["duration_s"])


def _precision(cfg: RunConfig, cols: RecordColumns, window: Window) -> Precision:
    """The precision block; with --target-precision, whether the target was met and what stopped the run."""
    block = precision.precision_block_columns(cols)
    if cfg.target_precision is None:
        return block
    otherwise = (
        "interrupted"
        if window.interrupted
        else "the client stopped on an error"
        if window.result.failure
        else "the limit came first (--num-requests or --duration)"
    )
    return precision.with_target_columns(block, cols, cfg.target_precision, window.stopped_by, otherwise)


def _window_notes(plan: RunPlan, spec: ShardSpec, result: ShardResult) -> list[str]:
    """The notes about the run itself: the cache reset's, connections opened late, a client failure."""
    notes: list[str] = []
    if plan.cache_reset is not None and plan.cache_reset.get("note"):
        notes.append(plan.cache_reset["note"])
    shortfall = spec.preconnect - result.preconnected
    if shortfall:
        notes.append(
            f"{result.preconnected} of {spec.preconnect} connections opened before the clock: the other "
            f"{shortfall} were opened inside the measured window (their set-up time is in client.setup, "
            "outside TTFT); the server may limit connections or its accept backlog"
        )
    if result.lost or any(not p.rx_timestamps for p in result.parts):  # a worker process died (run/workers.py)
        notes.append(f"a client worker process was lost: {result.failure}")
    elif result.failure:
        notes.append(
            f"the client stopped sending early on an error of its own: {result.failure}; "
            "records of kind client_error hold each one"
        )
    return notes


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


# ------------------------------------------------- a run over several shards
def shard_figures(
    result: ShardResult,
    spec: ShardSpec,
    cols: RecordColumns,
    *,
    open_loop: bool,
    rx_timestamps: str,
    latency_ms: Mapping[str, Any] | None = None,
) -> list[ShardFigures]:
    """Each shard's own figures from the merged result and the run's records as columns: its rows (by
    run-wide id), CPU, lags, and `assess_client`'s verdict on it alone: its CPU share, its send lag, and
    its loop's stalls against the streams' gap (`latency_ms`: the run's, whose median TPOT is the gap)
    with the share of its own requests' token gaps read together — the rules one process's run is
    judged by, whether the shard is a process here (--workers) or an actor on a node (--ray)."""
    n = len(result.parts)
    slices = split_spec(spec, n) if n else []
    shard = cols.id % max(n, 1)  # (split.shard_of, over every row)
    lost = cols.error_kind == "worker_lost"
    out: list[ShardFigures] = []
    for part, sub in zip(result.parts, slices, strict=True):
        mine = shard == part.index
        measured = mine & ~cols.warmup & ~lost
        sent = measured & ~np.isnan(cols.t_send)
        lag = (cols.t_send[sent] - cols.t_sched[sent]) / 1e6
        died = not part.rx_timestamps
        fig: ShardFigures = {
            "index": part.index,
            "pid": part.pid,
            "concurrency": sub.concurrency,
            "requests": int(mine.sum()),
            "completed": int((mine & cols.ok).sum()),
            "lost": int((mine & lost).sum()),
            "died": died,
            "cpu_s": None if died else part.cpu_s,
            "cpu_share": None if died or not part.elapsed_s else part.cpu_s / part.elapsed_s,
            "cpu_busy_peak": None if died else part.cpu_busy_peak,
            "loop_lag_ms_p99": float(np.percentile(part.loop_lag_ms, 99)) if part.loop_lag_ms else None,
            "schedule_lag_ms_p50": float(np.percentile(lag, 50)) if lag.size else None,
            "schedule_lag_ms_p99": float(np.percentile(lag, 99)) if lag.size else None,
            "start_late_ms": part.start_late_ms,
            "preconnected": part.preconnected,
            "saturated": False,
            "reasons": [],
        }
        if died:
            fig["not_sent"] = part.not_sent
        if part.host is not None:  # on another host (run.ray_run): where, and its clock against the run's
            fig["host"] = part.host
            fig["clock_offset_ms"] = None if part.clock_offset_ns is None else part.clock_offset_ns / 1e6
            fig["clock_error_ms"] = None if part.clock_error_ns is None else part.clock_error_ns / 1e6
        if not died:
            client: dict[str, Any] = {
                "cpu_s": part.cpu_s,
                "elapsed_s": part.elapsed_s,
                "cpu_busy_peak": part.cpu_busy_peak,
                "loop_lag_ms_p99": fig["loop_lag_ms_p99"] or 0.0,
                "schedule_lag_ms": {"p99": fig["schedule_lag_ms_p99"]},
                "tokens_read_together": tokens_read_together(cols, mine),
            }
            if not open_loop:
                client["concurrency_held"] = concurrency_held_columns(cols, sub.concurrency, rows=measured)
                client["load_deficit"] = trust.load_deficit(cols, sub.concurrency, part.elapsed_s, rows=mine)
            alone = {"client": client, "latency_ms": latency_ms} if latency_ms is not None else {"client": client}
            saturated, reasons, _ = assess_client(
                cast(Summary, alone), open_loop=open_loop, rx_timestamps=rx_timestamps
            )
            fig["saturated"], fig["reasons"] = saturated, reasons
        out.append(fig)
    return out


def assess_shards(
    summary: Summary, result: ShardResult, spec: ShardSpec, cols: RecordColumns, *, open_loop: bool, rx_timestamps: str
) -> None:
    """The client verdict of a run over worker processes, in place: each shard judged on its own (CPU is
    a process's, so summed CPU over the run says nothing of saturation), the merged send lag or
    concurrency held judged over the run, and the run process's own CPU (it reads and writes every
    record); names the saturated shard (`client.workers.saturated_shard`, the highest CPU share among them)."""
    client = summary["client"]
    figs = shard_figures(
        result, spec, cols, open_loop=open_loop, rx_timestamps=rx_timestamps, latency_ms=summary["latency_ms"]
    )
    parent_cpu = result.parent_cpu_s
    merged: dict[str, Any] = {
        k: client[k]
        for k in (
            "schedule_lag_ms",
            "concurrency_held",
            "load_deficit",
            "setup",
            "biases",
            "loop_stall_share",
            "loop_lag_ms_p99",
            "tokens_read_together",
        )
        if k in client
    }
    # the merged view is judged as one process's run is (its stalls against the streams' TPOT too)
    whole = cast(Summary, {"client": merged, "latency_ms": summary["latency_ms"]})
    _, reasons, _ = assess_client(whole, open_loop=open_loop, rx_timestamps=rx_timestamps)
    reasons = list(reasons)
    for f in figs:
        where = f"pid {f['pid']}" + (f" on {f['host']}" if f.get("host") else "")  # (--ray: its node)
        reasons += [f"shard {f['index']} ({where}): {r}" for r in f["reasons"]]
    elapsed = client.get("elapsed_s") or 0.0
    if elapsed and parent_cpu / elapsed >= 0.9:
        reasons.append(
            f"the run's own process (reading and writing the shards' records) at {parent_cpu / elapsed:.0%} of a core"
        )
    saturated = [f for f in figs if f["saturated"]]
    worst = max(saturated, key=lambda f: f["cpu_share"] or 0.0) if saturated else None
    client["workers"] = {
        "count": len(figs),
        "parent_cpu_s": parent_cpu,
        "shards": figs,
        "saturated_shard": worst["index"] if worst is not None else None,
        "lost_in_flight": result.lost,
    }
    if any(f["died"] for f in figs):
        client["workers"]["not_sent"] = result.not_sent
    client["saturated"] = bool(reasons)
    client["reasons"] = reasons
    if reasons:
        client["unvouched"] = []
    on_nodes = any(p.host is not None for p in result.parts)  # --ray: the shards are actors on the cluster's nodes
    client["advice"] = (
        "the client, not the server, may be limiting this run ("
        + "; ".join(reasons)
        + "). Lower "
        + (
            "--concurrency/--rate, close other work on the shards' nodes, or spread the load over more "
            "nodes (--ray, one shard per node; --workers N for more shards than nodes)."
            if on_nodes
            else "--concurrency/--rate, close other work on this machine, or spread the load over more "
            "--workers (each a process of its own)."
        )
        if reasons
        else ""
    )
