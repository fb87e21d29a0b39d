"""A run's figures in the result files of `vllm bench serve` and SGLang's `bench_serving`.

Scripts and dashboards that read vLLM's `--save-result` JSON or SGLang's `--output-file` JSONL keep
working on a servescope run: `vllm_result` and `sglang_result` build those documents (their key names,
key order, units: seconds for durations, milliseconds for `*_ms`, tokens/s for throughputs) from our
summary — every number the summary has is copied, never recomputed — and from the records only
what the summary does not keep (other percentiles, per-request latencies, the peaks). Pure functions;
`write_result` is the one writer. Facts about the shapes come from the tools' current sources
(vllm/benchmarks/serve.py, sglang/bench_serving.py); tests/fixtures/foreign holds one file of each.

Measured differently (docs/compatibility.md): our TTFT starts when the request's bytes are written on
a connection opened before the clock (theirs includes connection setup on a fresh aiohttp
connection); token arrival times are the kernel's receive stamps; TPOT divides by usage-reported
tokens; the duration is the measured window (first send to last end), theirs the wall time around
the whole batch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from servescope.results.columns import RecordColumns
from servescope.results.perrequest import request_latencies_ms
from servescope.results.records import RequestRecord
from servescope.results.schema import Distribution, Summary

__all__ = ["ForeignOutput", "peaks", "sglang_result", "vllm_filename", "vllm_result", "write_result"]

_METRIC_KEYS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}  # vLLM name -> summary name
_SUMMARY_PCTS = {50.0: "median", 90.0: "p90", 95.0: "p95", 99.0: "p99"}


@dataclass
class ForeignOutput:
    """Which tool's file to write, where, and the foreign settings it records (run/compat.py fills it)."""

    tool: Literal["vllm", "sglang"]
    backend: str
    path: str | None = None  # None: no file; vLLM "": its default name (needs the model id)
    append: bool = False
    label: str | None = None
    result_dir: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    percentile_metrics: tuple[str, ...] = ("ttft", "tpot", "itl")
    percentiles: tuple[float, ...] = (99.0,)
    goodput: dict[str, float] = field(default_factory=dict)
    num_prompts: int | None = None
    tag: str | None = None
    dataset_name: str = "random"
    sharegpt_output_len: int | None = None
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    served_model: str | None = None
    tokenizer: str | None = None
    request_rate: float = math.inf  # as their flags said (inf: every request at once)
    max_concurrency: int | None = None
    burstiness: float = 1.0
    ramp: tuple[str, float, float] | None = None  # strategy, start rps, end rps
    date: str = ""  # vLLM's %Y%m%d-%H%M%S of the run, in its file name and "date"


def _measured(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if not r.warmup and r.t_send_ns is not None]


def _values_ms(cols: RecordColumns, metric: str) -> np.ndarray:
    """One metric's values (ms) over completed measured requests, as the summary computes them."""
    if metric == "itl":
        return cols.itl_ms()
    x = request_latencies_ms(cols, cols.completed)[_METRIC_KEYS[metric]]
    return x[~np.isnan(x)]


def _e2e_ms(cols: RecordColumns) -> list[float]:
    """E2E (ms) of each measured request in row order (id order: the order `store.read_records` gives),
    0 for a failed one or one without a last token."""
    m = cols.measured
    e2e = np.where(cols.ok[m], request_latencies_ms(cols, m)["e2e"], 0.0)
    return [float(x) for x in np.nan_to_num(e2e, nan=0.0)]


def _num(x: float | None) -> float:
    """vLLM writes 0 for a statistic over no values (np.mean([] or 0))."""
    return 0.0 if x is None else float(x)


def _stat(dist: Distribution, p: float, values: np.ndarray) -> float:
    name = _SUMMARY_PCTS.get(float(p))
    if name is not None:
        return _num(dist[name])  # type: ignore[literal-required]
    return float(np.percentile(values, p)) if values.size else 0.0


def peaks(records: Sequence[RequestRecord]) -> tuple[float, int]:
    """vLLM's and SGLang's peaks: the most output tokens in one second (1 s buckets from the first send)
    and the most completed requests in flight at once (half-open [send, end of stream))."""
    done = [r for r in _measured(records) if r.status == "ok" and r.t_last_ns is not None]
    if not done:
        return 0.0, 0
    t0 = min(r.t_send_ns or 0 for r in done)
    buckets: dict[int, int] = {}
    for r in done:
        ks = r.chunk_tokens if len(r.chunk_tokens) == len(r.chunk_ns) else [1] * len(r.chunk_ns)
        for t, k in zip(r.chunk_ns, ks, strict=True):
            b = (t - t0) // 1_000_000_000
            buckets[b] = buckets.get(b, 0) + max(k, 1)
    events = sorted([(r.t_send_ns or 0, 1) for r in done] + [(r.t_last_ns or 0, -1) for r in done])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    return float(max(buckets.values(), default=0)), peak


def vllm_filename(out: ForeignOutput, model_id: str, date: str) -> str:
    """vLLM's default result file name (compute_result_filename), or --result-filename; in --result-dir."""
    name = out.path or ""
    if not name:
        label = out.label or out.backend
        conc = f"-concurrency{out.max_concurrency}" if out.max_concurrency is not None else ""
        model = model_id.split("/")[-1]
        if out.ramp is not None:
            s, a, b = out.ramp
            name = f"{label}-ramp-up-{s}-{a:g}qps-{b:g}qps{conc}-{model}-{date}.json"
        else:
            name = f"{label}-{out.request_rate!r}qps{conc}-{model}-{date}.json"
    return f"{out.result_dir.rstrip('/')}/{name}" if out.result_dir else name


def vllm_result(
    summary: Summary, records: Sequence[RequestRecord], out: ForeignOutput, *, model_id: str, date: str
) -> dict[str, Any]:
    """The document `vllm bench serve --save-result` writes, from our summary (and records for the rest)."""
    doc: dict[str, Any] = {
        "date": date,
        "endpoint_type": out.backend,
        "backend": out.backend,
        "label": out.label,
        "model_id": model_id,
        "tokenizer_id": out.tokenizer or model_id,
        "num_prompts": out.num_prompts,
        **out.metadata,
        "request_rate": "inf" if math.isinf(out.request_rate) else out.request_rate,
        "burstiness": out.burstiness,
        "max_concurrency": out.max_concurrency,
    }
    if out.ramp is not None:
        doc.update({"ramp_up_strategy": out.ramp[0], "ramp_up_start_rps": out.ramp[1], "ramp_up_end_rps": out.ramp[2]})
    req, tp, tok = summary["requests"], summary["throughput"], summary["tokens"]
    goodput = summary.get("goodput")
    measured = _measured(records)
    cols = RecordColumns.from_records(records)
    peak_tokens, peak_conc = peaks(records)
    doc.update(
        {
            "duration": summary["duration_s"],
            "completed": req["completed"],
            "failed": req["failed"],
            "total_input_tokens": tok["input_total"],
            "total_output_tokens": tok["output_total"],
            "request_throughput": tp["requests_per_s"],
            "request_goodput": goodput["requests_per_s"] if goodput and out.goodput else None,
            "output_throughput": tp["output_tokens_per_s"],
            "total_token_throughput": tp["total_tokens_per_s"],
            "latencies": [e2e / 1e3 for e2e in _e2e_ms(cols)],
            "queue_times": [((r.t_send_ns or 0) - r.t_sched_ns) / 1e9 for r in measured],
            "max_output_tokens_per_s": peak_tokens,
            "max_concurrent_requests": peak_conc,
            "rtfx": 0.0,
        }
    )
    lat = summary["latency_ms"]
    for metric in ("ttft", "tpot", "itl", "e2el"):
        if metric not in out.percentile_metrics:
            continue
        dist: Distribution = lat[_METRIC_KEYS[metric]]  # type: ignore[literal-required]
        values = (
            _values_ms(cols, metric) if any(float(p) not in _SUMMARY_PCTS for p in out.percentiles) else np.empty(0)
        )
        doc[f"mean_{metric}_ms"] = _num(dist["mean"])
        doc[f"median_{metric}_ms"] = _num(dist["median"])
        doc[f"std_{metric}_ms"] = _num(dist["std"])
        for p in out.percentiles:
            word = str(int(p)) if int(p) == p else str(p)
            doc[f"p{word}_{metric}_ms"] = _stat(dist, p, values)
    return doc


def sglang_result(summary: Summary, records: Sequence[RequestRecord], out: ForeignOutput) -> dict[str, Any]:
    """The line SGLang's `bench_serving` appends to --output-file, from our summary."""
    req, tp, tok, lat = summary["requests"], summary["throughput"], summary["tokens"], summary["latency_ms"]
    duration = summary["duration_s"]
    e2e_sum = sum(_e2e_ms(RecordColumns.from_records(records)))
    peak_tokens, peak_conc = peaks(records)
    doc: dict[str, Any] = {
        "tag": out.tag,
        "backend": out.backend,
        "dataset_name": out.dataset_name,
        "request_rate": out.request_rate,
        "max_concurrency": out.max_concurrency,
        "sharegpt_output_len": out.sharegpt_output_len,
        "random_input_len": out.random_input_len,
        "random_output_len": out.random_output_len,
        "random_range_ratio": out.random_range_ratio,
        "server_info": None,
        "duration": duration,
        "completed": req["completed"],
        "total_input_tokens": tok["input_total"],
        "total_input_text_tokens": tok["input_total"],
        "total_input_vision_tokens": 0,
        "total_output_tokens": tok["output_total"],
        "total_output_tokens_retokenized": tok["output_total"],
        "request_throughput": tp["requests_per_s"],
        "input_throughput": tp["input_tokens_per_s"],
        "output_throughput": tp["output_tokens_per_s"],
        "total_throughput": tp["total_tokens_per_s"],
    }
    for ours, theirs, pcts in (
        ("e2e", "e2e_latency", ("p99",)),
        ("ttft", "ttft", ("p99",)),
        ("tpot", "tpot", ("p99",)),
        ("itl", "itl", ("p95", "p99")),
    ):
        dist: Distribution = lat[ours]  # type: ignore[literal-required]
        doc[f"mean_{theirs}_ms"] = _num(dist["mean"])
        doc[f"median_{theirs}_ms"] = _num(dist["median"])
        doc[f"std_{theirs}_ms"] = _num(dist["std"])
        for p in pcts:
            doc[f"{p}_{theirs}_ms"] = _num(dist[p])  # type: ignore[literal-required]
    doc.update(
        {
            "concurrency": e2e_sum / 1e3 / duration if duration > 0 else 0.0,  # mean requests in flight
            "accept_length": None,
            "max_output_tokens_per_s": peak_tokens,
            "max_concurrent_requests": peak_conc,
        }
    )
    return doc


def encode(doc: dict[str, Any]) -> str:
    """JSON as their tools write it (Python's json: `Infinity` for an infinite rate, as SGLang's file has)."""
    return json.dumps(doc)


def write_result(path: str, doc: dict[str, Any], *, mode: Literal["write", "append", "jsonl"]) -> None:
    """Write one result document as their tools do: "write" replaces the file (vLLM --save-result),
    "append" adds it after a newline (vLLM --append-result), "jsonl" appends a line (SGLang)."""
    from pathlib import Path

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if mode == "write":
        p.write_text(encode(doc), encoding="utf-8")
        return
    with p.open("a", encoding="utf-8") as f:
        if mode == "append" and f.tell():
            f.write("\n")
        f.write(encode(doc) + ("\n" if mode == "jsonl" else ""))
