"""Load result directories (a run or a sweep) and derive what the report draws.

Reading goes through `servescope.results.store`; per-request figures come from a run's columns
(`results.columns.RecordColumns`: numpy arrays, no per-record objects), so a million-request run
renders in seconds. A run directory without `summary.json` (an interrupted run) gets its summary
recomputed from its records. Derivations below are pure (columns or records in, arrays out).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servescope.errors import ConfigError
from servescope.results.columns import RecordColumns
from servescope.results.metrics import dig
from servescope.results.parquet import has_records
from servescope.results.perrequest import request_latencies_ms
from servescope.results.records import RequestRecord
from servescope.results.schema import Summary
from servescope.results.store import RunResult, load_run, read_json
from servescope.workload.spec import session_workload

__all__ = [
    "REPEATS",
    "SWEEP",
    "RepeatsResult",
    "SweepPoint",
    "SweepResult",
    "inflight_series",
    "as_columns",
    "failed_rows",
    "load_results",
    "measured",
    "run_title",
    "samples_ms",
    "split_groups",
    "tokens_per_s_series",
]

SWEEP = "sweep.json"
REPEATS = "repeats.json"
_X_KEYS = ("concurrency", "rate_rps", "input_len", "output_len")


@dataclass(slots=True)
class SweepPoint:
    x: float
    label: str
    run: RunResult
    group: str = ""  # "in 1024 · out 256" when the sweep covers several length pairs
    entry: dict[str, Any] = field(default_factory=dict)  # the point's row in sweep.json


@dataclass(slots=True)
class SweepResult:
    path: Path
    meta: dict[str, Any]
    x_key: str
    points: list[SweepPoint] = field(default_factory=list)

    @property
    def sessions(self) -> bool:
        """A sweep of agent sessions over concurrency: its loads are counts of concurrent sessions."""
        return self.x_key == "concurrency" and session_workload((self.meta.get("settings") or {}).get("dataset"))

    @property
    def x_label(self) -> str:
        if self.sessions:
            return "concurrent sessions"
        return {
            "concurrency": "concurrency",
            "rate_rps": "request rate (req/s)",
            "input_len": "input length (tokens)",
            "output_len": "output length (tokens)",
        }.get(self.x_key, self.x_key)


@dataclass(slots=True)
class RepeatsResult:
    """`--repeat N`: N runs of one configuration under DIR/repeat-k, listed in repeats.json."""

    path: Path
    meta: dict[str, Any]
    runs: list[RunResult] = field(default_factory=list)


def load_repeats(path: Path) -> RepeatsResult:
    doc = read_json(path / REPEATS)
    names = [str(n) for n in (doc.get("repeats") or [])] if isinstance(doc, dict) else []
    if not names:
        names = sorted(p.name for p in path.iterdir() if p.name.startswith("repeat-") and _is_run_dir(p))
    runs = [_load_run(path / n) for n in names if _is_run_dir(path / n)]
    return RepeatsResult(path, doc if isinstance(doc, dict) else {}, runs)


def _load_run(path: Path) -> RunResult:
    return load_run(path)  # without summary.json, the store recomputes it from the records


def _sweep_entries(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, list):
        return [e for e in doc if isinstance(e, dict)]
    if isinstance(doc, dict):
        for key in ("points", "runs"):
            if isinstance(doc.get(key), list):
                return [e for e in doc[key] if isinstance(e, dict)]
    return []


def _x_of(entry: dict[str, Any], summary: Summary, key: str) -> float | None:
    v = entry.get(key)
    if v is None:
        v = dig(summary, "load", key)
    if v is None:
        v = dig(summary, "workload", key)
    try:
        return float(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _pick_x_key(doc: Any, entries: list[dict[str, Any]], summaries: list[Summary]) -> str:
    if isinstance(doc, dict):
        for key in ("x_key", "axis", "vary", "variable"):
            if doc.get(key) in _X_KEYS:
                return str(doc[key])
    for key in _X_KEYS:  # the first key whose value differs between points
        vals = {_x_of(e, s, key) for e, s in zip(entries, summaries)}
        if len(vals) > 1 and None not in vals:
            return key
    for key in _X_KEYS:
        if all(_x_of(e, s, key) is not None for e, s in zip(entries, summaries)):
            return key
    return "concurrency"


def load_sweep(path: Path) -> SweepResult:
    doc = read_json(path / SWEEP) if (path / SWEEP).is_file() else {}
    entries = _sweep_entries(doc)
    if not entries:  # no sweep.json (or no points in it): every sub-directory that is a run
        entries = [{"dir": p.name} for p in sorted(path.iterdir()) if _is_run_dir(p)]
    # Points still running or interrupted are left out; a listed point whose directory is gone too.
    entries = [
        e
        for e in entries
        if e.get("status") in (None, "complete") and _is_run_dir(path / str(e.get("dir") or e.get("path") or ""))
    ]
    runs = [_load_run(path / str(e.get("dir") or e.get("path") or "")) for e in entries]
    summaries = [r.summary for r in runs]
    x_key = _pick_x_key(doc, entries, summaries)
    lengths = {(_x_of(e, s, "input_len"), _x_of(e, s, "output_len")) for e, s in zip(entries, summaries)}
    grouped = x_key in ("concurrency", "rate_rps") and len(lengths) > 1
    points = []
    for i, (e, run) in enumerate(zip(entries, runs)):
        x = _x_of(e, run.summary, x_key)
        x = float(i + 1) if x is None else x
        group = ""
        if grouped:
            il, ol = _x_of(e, run.summary, "input_len"), _x_of(e, run.summary, "output_len")
            group = f"in {_fmt_x(il) if il is not None else '?'} · out {_fmt_x(ol) if ol is not None else '?'}"
        points.append(SweepPoint(x, _fmt_x(x), run, group, dict(e)))
    points.sort(key=lambda p: (p.group, p.x))
    return SweepResult(path, doc if isinstance(doc, dict) else {"points": doc}, x_key, points)


def _is_run_dir(p: Path) -> bool:
    return p.is_dir() and ((p / "summary.json").is_file() or has_records(p))


def split_groups(sw: SweepResult) -> list[tuple[str, SweepResult]]:
    """One curve per length pair; a sweep over one pair is one group named after its directory."""
    names = sorted({p.group for p in sw.points}, key=_group_key)
    if len(names) <= 1:
        return [(sw.path.name, sw)]
    return [(g, SweepResult(sw.path, sw.meta, sw.x_key, [p for p in sw.points if p.group == g])) for g in names]


def _group_key(g: str) -> tuple[float, ...]:
    nums = [float(t) for t in g.replace("·", " ").split() if t.replace(".", "", 1).isdigit()]
    return tuple(nums) or (0.0,)


def _fmt_x(x: float) -> str:
    if not math.isfinite(x):
        return "∞" if x > 0 else str(x)
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def load_results(path: str | Path) -> RunResult | SweepResult | RepeatsResult:
    """A run directory, a sweep directory (sweep.json, or sub-directories that are runs), or the
    directory of `--repeat N` (repeats.json)."""
    p = Path(path)
    if not p.is_dir():
        raise ConfigError(f"{p} is not a directory")
    if (p / SWEEP).is_file():
        return load_sweep(p)
    if (p / REPEATS).is_file():
        rep = load_repeats(p)
        if not rep.runs:
            raise ConfigError(f"{p}: repeats.json lists no run directory that exists")
        return rep
    if (p / "summary.json").is_file() or has_records(p):
        return _load_run(p)
    sweep = load_sweep(p)
    if not sweep.points:
        raise ConfigError(f"{p} holds no servescope results (no summary.json, requests.parquet or {SWEEP})")
    return sweep


Records = Sequence[RequestRecord] | RecordColumns


def as_columns(records: Records) -> RecordColumns:
    """Columns as they are; a list of records turned into columns."""
    return records if isinstance(records, RecordColumns) else RecordColumns.from_records(records)


def measured(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """Records of the measured window: warm-up excluded, never-sent excluded."""
    return [r for r in records if not r.warmup and r.t_send_ns is not None]


def samples_ms(records: Records) -> dict[str, np.ndarray]:
    """Per-request TTFT, TTFAT, E2E, TPOT and pooled per-token ITL (ms) of completed requests (ITL:
    at most `columns.CHART_SAMPLE` values, a systematic sample in send order beyond that)."""
    c = as_columns(records)
    raw = request_latencies_ms(c, c.completed)
    samples = {k: v[~np.isnan(v)] for k, v in raw.items()}
    samples["itl"] = c.itl_chart_ms
    return samples


def failed_rows(records: Records) -> list[dict[str, Any]]:
    """The failed measured requests (id, error_kind, error_detail, http_status), in id order."""
    c = as_columns(records)
    rows = np.flatnonzero(c.measured & ~c.ok)
    return [
        {
            "id": int(c.id[i]),
            "error_kind": c.error_kind[i],
            "error_detail": c.error_detail[i],
            "http_status": None if np.isnan(c.http_status[i]) else int(c.http_status[i]),
        }
        for i in rows.tolist()
    ]


def inflight_series(records: Records, points: int = 400) -> tuple[list[float], list[float]]:
    """Requests in flight (sent, not yet ended) over run time (s), sampled at event times.

    Exact when there are few events; otherwise the maximum in each of `points` time slices, so a
    short peak stays visible.
    """
    c = as_columns(records)
    sent = ~np.isnan(c.t_send)
    if not sent.any():
        return [], []
    end = c.t_end[sent]
    for alt in (c.t_last[sent], c.t_first[sent]):  # a record's end: t_end, else its last or first token
        end = np.where(np.isnan(end), alt, end)
    ends = end[~np.isnan(end)]
    t = np.concatenate([c.t_send[sent], ends]).astype(np.int64)
    d = np.concatenate([np.ones(int(sent.sum()), dtype=np.int64), -np.ones(ends.size, dtype=np.int64)])
    order = np.lexsort((d, t))  # by time, an end before a send at the same instant (as sorted tuples)
    ts = np.concatenate([[0.0], t[order] / 1e9])
    level = np.concatenate([[0.0], np.cumsum(d[order]).astype(float)])
    if ts.size <= 2 * points:
        return ts.tolist(), level.tolist()
    t_end = float(ts[-1])
    width = t_end / points if t_end > 0 else 1.0
    # the peak of each slice (i*width, (i+1)*width], starting from the level carried into it
    edges = np.searchsorted(ts, (np.arange(points) + 1) * width, side="right")
    xs, ys = [], []
    k, carry = 0, float(level[0])
    for i in range(points):
        hi = int(edges[i])
        peak = max(carry, float(level[k:hi].max())) if hi > k else carry
        if hi > k:
            carry = float(level[hi - 1])
            k = hi
        xs.append(i * width)
        ys.append(peak)
    xs.append(t_end)
    ys.append(float(level[-1]))
    return xs, ys


def tokens_per_s_series(records: Records) -> tuple[list[float], list[float]]:
    """Output tokens per second over run time (s), from every token-carrying chunk's arrival (in
    slices of at least 50 ms, at most 100; computed as the columns are read, `columns._Hist`)."""
    return as_columns(records).tokens_hist


def run_title(summary: Summary | None, *, with_load: bool = True, with_workload: bool = True) -> str:
    """'model on url (emulated) · chat · concurrency 16 · 1024→256 tokens'."""
    tgt = summary.get("target") if summary else None
    load = summary.get("load") if summary and with_load else None
    wl = summary.get("workload") if summary else None
    model, url = (tgt.get("model"), tgt.get("url")) if tgt else (None, None)
    parts = [
        f"{model or 'unknown model'} on {url or 'unknown target'}"
        + (" (emulated)" if tgt and tgt.get("emulated") else "")
    ]
    if tgt and tgt.get("api"):
        parts.append(str(tgt["api"]))
    if load:
        rate, conc, mode = load.get("rate_rps"), load.get("concurrency"), load.get("mode")
        if rate is not None:
            burst = load.get("burstiness")
            parts.append(
                f"rate {_g(rate)} req/s" + (f", burstiness {_g(burst)}" if burst not in (None, 1, 1.0) else "")
            )
        if conc is not None:
            parts.append(f"{'max ' if rate is not None else ''}concurrency {conc}")
        elif mode and rate is None:
            parts.append(str(mode))
    if with_workload and wl and (wl.get("input_len") is not None or wl.get("output_len") is not None):
        parts.append(f"{wl.get('dataset') or 'random'} {wl.get('input_len', '?')}→{wl.get('output_len', '?')} tokens")
    return " · ".join(parts)


def _g(v: Any) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)
