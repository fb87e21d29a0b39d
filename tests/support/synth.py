"""Synthetic result directories for tests and demos of the report (no server involved).

`synth_records` simulates a closed-loop run with seeded log-normal TTFT and inter-token gaps;
`time_scale` stretches every duration, so two runs whose speed differs by a known factor can be
built (their latency ratios are that factor, their throughput ratio its inverse).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from servescope.results import metrics
from servescope.results.colsummary import summarize_columns
from servescope.results.columns import RecordColumns
from servescope.results.cost import Price, cost_block
from servescope.results.records import RequestRecord
from servescope.results.schema import ClientMeasures, Cost, RunInfo, ServerMetrics, SloCheck, Summary
from servescope.results.slo import evaluate as evaluate_slo
from servescope.results.slo import parse_slo_spec
from servescope.results.store import (
    MANIFEST,
    RECORDS,
    SUMMARY,
    RecordWriter,
    prepare_out_dir,
    write_json,
)

__all__ = [
    "summarize_records",
    "synth_records",
    "synth_run_info",
    "synth_summary",
    "write_synth_run",
    "write_synth_sweep",
]


def summarize_records(records: Sequence[RequestRecord], **kwargs: Any) -> Summary:
    """The summary of records held in memory as src computes it: through the one adapter,
    `RecordColumns.from_records`, and `colsummary.summarize_columns` (its keyword arguments)."""
    return summarize_columns(RecordColumns.from_records(records), **kwargs)


def synth_records(
    n: int = 200,
    *,
    seed: int = 0,
    concurrency: int = 8,
    ttft_ms: float = 120.0,
    itl_ms: float = 20.0,
    output_len: int = 64,
    input_len: int = 256,
    time_scale: float = 1.0,
    fail_every: int = 0,
    error_detail: str = "",
    warmup: int = 0,
) -> list[RequestRecord]:
    """`n` measured requests (plus `warmup`) on `concurrency` closed-loop slots."""
    rng = np.random.default_rng(seed)
    slot_free = [0] * concurrency
    out: list[RequestRecord] = []
    for i in range(n + warmup):
        slot = min(range(concurrency), key=lambda s: (slot_free[s], s))
        t_sched = slot_free[slot]
        t_send = t_sched + int(rng.integers(20_000, 200_000))
        rec = RequestRecord(
            id=i,
            warmup=i < warmup,
            t_sched_ns=t_sched,
            t_send_ns=t_send,
            input_len=input_len,
            output_len=output_len,
            input_tokens=input_len,
        )
        if fail_every and i >= warmup and (i - warmup) % fail_every == fail_every - 1:
            t_end = t_send + int(time_scale * rng.lognormal(np.log(30e6), 0.3))
            rec.t_end_ns = t_end
            rec.status = "error"
            rec.error_kind = ("http_5xx", "timeout", "malformed_sse")[(i // fail_every) % 3]
            rec.http_status = 500 if rec.error_kind == "http_5xx" else None
            rec.error_detail = error_detail or f"synthetic failure {i}"
            rec.output_tokens = 0
        else:
            ttft_ns = int(time_scale * rng.lognormal(np.log(ttft_ms * 1e6), 0.35))
            n_out = int(max(2, output_len - rng.integers(0, max(1, output_len // 8))))
            gaps = (time_scale * rng.lognormal(np.log(itl_ms * 1e6), 0.25, size=n_out - 1)).astype(np.int64)
            t_first = t_send + ttft_ns
            chunks = np.concatenate([[t_first], t_first + np.cumsum(gaps)]).astype(np.int64)
            rec.t_first_ns = rec.t_first_answer_ns = int(chunks[0])
            rec.t_last_ns = int(chunks[-1])
            rec.t_end_ns = rec.t_last_ns + 100_000
            rec.status = "ok"
            rec.output_tokens = n_out
            rec.output_tokens_source = "usage"
            rec.chunks = n_out
            rec.chunk_ns = [int(t) for t in chunks]
            rec.chunk_tokens = [1] * n_out
            t_end = rec.t_end_ns
        slot_free[slot] = t_end
        out.append(rec)
    return out


def synth_run_info(
    name: str,
    records: list[RequestRecord],
    *,
    model: str = "synthetic-8b",
    concurrency: int = 8,
    rate_rps: float | None = None,
) -> RunInfo:
    """What `servescope run` gives summarize_columns about the run (run.bench's run_doc), for a synthetic one."""
    first = next((r for r in records if not r.warmup), records[0])
    return {
        "run_id": name,
        "started_at": "2026-01-01T00:00:00+00:00",
        "target": {"url": "http://127.0.0.1:8000/v1", "model": model, "api": "chat", "emulated": True},
        "load": {
            "mode": "rate" if rate_rps else "concurrency",
            "concurrency": concurrency,
            "rate_rps": rate_rps,
            "burstiness": 1.0,
            "ramp_up_strategy": None,
            "ramp_up_start_rps": None,
            "ramp_up_end_rps": None,
            "warmup": sum(1 for r in records if r.warmup),
        },
        "workload": {
            "dataset": "random",
            "input_len": first.input_len,
            "output_len": first.output_len,
            "range_ratio": 0.0,
            "ignore_eos": True,
            "stream": True,
            "seed": 0,
            "output_len_enforced": True,
            "kind": "random",
            "lengths": "exact (synthetic)",
        },
        "interrupted": False,
    }


def synth_summary(
    records: list[RequestRecord],
    run: RunInfo,
    *,
    slo: dict[str, float] | None = None,
    server: ServerMetrics | None = None,
    gpus: int | None = None,
) -> Summary:
    """The summary `servescope run` writes, through the same code: summarize_columns, the client
    verdict, server metrics (None: a target without /metrics) and notes."""
    out_tokens = sum(r.output_tokens or 0 for r in records if r.status == "ok" and not r.warmup)
    cpu_s = 0.0005 * len(records)
    client: ClientMeasures = {
        "cpu_s": cpu_s,
        "cpu_us_per_token": cpu_s * 1e6 / out_tokens if out_tokens else None,
        "cpu_busy_peak": 0.25,
        "loop_lag_ms_p99": 0.5,
        "read_pauses": 0,
        "read_pause_ms": 0.0,
        "elapsed_s": 0.0,
    }
    summary = summarize_records(
        records, run=run, slo=slo, client=client, gpus=gpus, gpus_source="--gpus" if gpus else None
    )
    summary["client"]["elapsed_s"] = summary["duration_s"]
    load = run.get("load")
    saturated, reasons, advice = metrics.assess_client(summary, open_loop=bool(load and load.get("mode") == "rate"))
    summary["client"].update({"saturated": saturated, "reasons": reasons, "advice": advice})
    summary["client"].update({"preconnect_shortfall": 0, "failure": None})
    summary["server"] = server
    summary["notes"] = []
    return summary


def write_synth_run(
    path: str | Path,
    records: list[RequestRecord],
    *,
    model: str = "synthetic-8b",
    concurrency: int = 8,
    rate_rps: float | None = None,
    slo: dict[str, float] | None = None,
    server: ServerMetrics | None = None,
    slo_check: SloCheck | None = None,
    cost: Cost | None = None,
    extra_summary: Mapping[str, object] | None = None,
    gpus: int | None = None,
) -> Path:
    """Write a result directory (summary.json, requests.jsonl, manifest.json) through the store.

    The summary has the shape a real run writes (synth_summary); `slo_check` and `cost` are what a
    sweep adds to a point. `extra_summary` is merged as given: for a test that wants a summary no run
    writes (tests/unit/test_schema.py checks the helper's own output without it)."""
    p = prepare_out_dir(path)
    summary = synth_summary(
        records,
        synth_run_info(p.name, records, model=model, concurrency=concurrency, rate_rps=rate_rps),
        slo=slo,
        server=server,
        gpus=gpus,
    )
    if slo_check is not None:
        summary["slo_check"] = slo_check
    if cost is not None:
        summary["cost"] = cost
    doc: dict[str, object] = {**summary, **(extra_summary or {})}
    with RecordWriter(p / RECORDS) as w:
        for r in records:
            w.write(r)
    write_json(p / SUMMARY, doc)
    write_json(
        p / MANIFEST,
        {
            "config": {"concurrency": concurrency, "rate_rps": rate_rps, "model": model},
            "versions": {"servescope": "0.1.0"},
            "host": {"hostname": "synthetic"},
        },
    )
    return p


def write_synth_sweep(
    path: str | Path,
    concurrencies: list[int],
    *,
    seed: int = 0,
    n: int = 120,
    time_scale: float = 1.0,
    model: str = "synthetic-8b",
    lengths: list[tuple[int, int]] | None = None,
    itl_p99_limit_ms: float | None = None,
    usd_per_hour: float | None = None,
    gpus: int | None = None,
) -> Path:
    """A sweep directory shaped like `servescope sweep`'s: one run per (concurrency, lengths) point
    and sweep.json (schema servescope.sweep.command/1) with x_key, points, and optionally an aggregate SLO
    (`slo_check` in each summary, `slo_capacity` in sweep.json) and a price (`cost` per summary), both
    computed by the code the sweep uses (results.slo.evaluate, results.cost.cost_block)."""
    p = prepare_out_dir(path)
    spec = parse_slo_spec(f"itl_p99_ms={itl_p99_limit_ms:g}") if itl_p99_limit_ms is not None else None
    price = Price(usd_per_hour / (gpus or 1), gpus or 1) if usd_per_hour is not None else None
    points = []
    capacity = []
    for li, (input_len, output_len) in enumerate(lengths or [(256, 64)]):
        best = None
        for i, c in enumerate(concurrencies):
            # Latency grows with concurrency (and input length) as a batching server's does.
            recs = synth_records(
                n,
                seed=seed * 1000 + li * 100 + i,
                concurrency=c,
                ttft_ms=(80 + 15 * c) * (input_len / 256) ** 0.5,
                itl_ms=12 + 0.9 * c,
                time_scale=time_scale,
                input_len=input_len,
                output_len=output_len,
            )
            sub = f"c{c:04d}" if not lengths else f"c{c:04d}-in{input_len}-out{output_len}"
            summary = summarize_records(recs)
            check = evaluate_slo(summary, spec) if spec is not None else None
            if check is not None:
                best = c if check["passed"] else best
            cost = cost_block(summary["throughput"], price) if price is not None else None
            write_synth_run(p / sub, recs, model=model, concurrency=c, slo_check=check, cost=cost, gpus=gpus)
            points.append(
                {
                    "dir": sub,
                    "concurrency": c,
                    "rate_rps": None,
                    "input_len": input_len,
                    "output_len": output_len,
                    "kind": "grid",
                    "load_label": f"c={c}",
                    "status": "complete",
                }
            )
        if spec is not None:
            capacity.append({"input_len": input_len, "output_len": output_len, "load": best})
    doc: dict[str, Any] = {
        "schema": "servescope.sweep.command/1",
        "status": "complete",
        "mode": "grid",
        "x_key": "concurrency",
        "points": points,
    }
    if spec is not None:
        doc["slo"] = spec.to_dict()
        doc["slo_capacity"] = capacity
    write_json(p / "sweep.json", doc)
    return p
