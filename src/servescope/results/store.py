"""The result directory: the source of truth every report and comparison is computed from.

    DIR/summary.json       servescope.summary/1 (colsummary.summarize_columns over the run's columns;
                           shape: results.schema.Summary)
    DIR/requests.parquet   one row per request (columns.SCHEMA; docs/results.md), streamed as the run
                           goes through DIR/requests.parts/ (columnar.RecordWriter)
    DIR/manifest.json      config as run, versions, host, target info (never a secret)

A run killed with SIGKILL leaves the part files written before the kill (each a whole Parquet file);
the records since the last flush are lost. Runs from before Parquet left `requests.jsonl` (one JSON
record per line; a torn last line is skipped): still read, by the same loaders.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import orjson

from servescope.errors import ConfigError
from servescope.results.colsummary import summarize_columns
from servescope.results.columns import RecordColumns, records_to_table
from servescope.results.parquet import PARTS, RECORDS, RECORDS_JSONL, RecordWriter, has_records, load_columns
from servescope.results.parquet import read_records as _read_records
from servescope.results.records import RequestRecord
from servescope.results.schema import SUMMARY_VERSIONS, RunInfo, Summary, current_schema_id

__all__ = [
    "MANIFEST",
    "RECORDS",
    "RECORDS_JSONL",
    "SESSION_METRICS",
    "SESSIONS_FILE",
    "SUMMARY",
    "RecordWriter",
    "RunResult",
    "start_warm_up",
    "warm_up",
    "RESULTS_ROOT",
    "default_out_dir",
    "load_run",
    "prepare_out_dir",
    "read_json",
    "read_records",
    "read_summary",
    "run_info_from_manifest",
    "read_session_plan",
    "write_json",
    "write_jsonl",
]

SUMMARY = "summary.json"
MANIFEST = "manifest.json"
SESSIONS_FILE = "sessions.jsonl"  # agent sessions: the plan, one row per request (docs/workloads.md)
SESSION_METRICS = "sessions.json"  # agent sessions: results.sessions.session_metrics of the run


#: Where results go when no --out is given: the run, compare and overlay directories all sit under it.
RESULTS_ROOT = "servescope-results"


def default_out_dir(slug: str, root: str | Path = RESULTS_ROOT) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", slug).strip("-")[:60] or "run"
    path = Path(root) / f"{stamp}-{clean}"
    n = 1
    while path.exists():
        n += 1
        path = Path(root) / f"{stamp}-{clean}-{n}"
    return path


def prepare_out_dir(path: str | Path, *, overwrite: bool = True) -> Path:
    """Create the result directory; refuse a path that is a file. Old results are replaced."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"--out {p} exists and is not a directory; pick another path")
    p.mkdir(parents=True, exist_ok=True)
    if overwrite:
        for name in (SUMMARY, RECORDS, RECORDS_JSONL, MANIFEST, SESSIONS_FILE, SESSION_METRICS):
            (p / name).unlink(missing_ok=True)
        shutil.rmtree(p / PARTS, ignore_errors=True)
    return p


def write_json(path: str | Path, doc: Any) -> None:
    """Write JSON atomically (temp file + rename): a reader never sees half a summary."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n")
    os.replace(tmp, path)


def read_json(path: str | Path) -> Any:
    return orjson.loads(Path(path).read_bytes())


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """One JSON object a line, written atomically."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    os.replace(tmp, path)


def read_session_plan(run_dir: str | Path) -> list[dict[str, Any]] | None:
    """A run's agent-session plan (`sessions.jsonl`), or None when the run had none."""
    p = Path(run_dir) / SESSIONS_FILE
    if not p.is_file():
        return None
    return [orjson.loads(line) for line in p.read_bytes().splitlines() if line.strip()]


def read_records(path: str | Path) -> list[RequestRecord]:
    """Every record of a run directory, or of one records file (requests.parquet, an old
    requests.jsonl), sorted by id; what a killed run left included."""
    return _read_records(path)


def read_summary(path: str | Path) -> Summary:
    """A summary.json, of any version this code reads (SUMMARY_VERSIONS; one without `schema`
    predates versioning and reads as the first). Not validated: a TypedDict is a plain dict."""
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: not a servescope summary (a JSON object was expected)")
    version = doc.get("schema", SUMMARY_VERSIONS[0])
    if version not in SUMMARY_VERSIONS:
        raise ConfigError(
            f"{path}: summary version {version!r} is not one this servescope reads "
            f"({', '.join(SUMMARY_VERSIONS)}); a newer servescope wrote it"
        )
    if "schema" in doc:
        doc["schema"] = current_schema_id(version)  # a pre-rename summary reads under today's id
    return cast(Summary, doc)  # JSON in: the one place a summary becomes typed


def run_info_from_manifest(manifest: dict[str, Any]) -> RunInfo:
    """What a summary recomputed from records knows of its run: the manifest's config as given
    (the load as configured, not as derived: no `mode`), marked interrupted. A manifest without
    the target's URL and model (none written yet) gives no `target`."""
    cfg: dict[str, Any] = manifest.get("config") or {}
    tgt: dict[str, Any] = manifest.get("target") or {}
    info: RunInfo = {}
    if manifest.get("run_id") is not None:
        info["run_id"] = str(manifest["run_id"])
    if manifest.get("started_at") is not None:
        info["started_at"] = str(manifest["started_at"])
    url, model = tgt.get("base_url") or cfg.get("url"), tgt.get("model") or cfg.get("model")
    if url and model:
        info["target"] = {
            "url": str(url),
            "model": str(model),
            "api": cfg.get("api") or "chat",
            "emulated": bool(tgt.get("emulated")),
        }
    info["load"] = {
        "concurrency": cfg.get("concurrency"),
        "rate_rps": cfg.get("rate"),
        "burstiness": cfg.get("burstiness"),
    }
    info["workload"] = {
        "dataset": cfg.get("dataset"),
        "input_len": cfg.get("input_len"),
        "output_len": cfg.get("output_len"),
    }
    info["interrupted"] = True
    return info


class RunResult:
    """A loaded result directory. `columns` (what the summary and the report compute from) and
    `records` (one object per request, for code that wants them) are read from disk when first asked."""

    __slots__ = ("_columns", "_records", "manifest", "path", "summary")

    def __init__(
        self,
        path: Path,
        summary: Summary,
        manifest: dict[str, Any],
        records: Sequence[RequestRecord] | None = None,
        columns: RecordColumns | None = None,
    ) -> None:
        self.path, self.summary, self.manifest = path, summary, manifest
        self._records = list(records) if records is not None else None
        self._columns = columns

    @property
    def columns(self) -> RecordColumns:
        if self._columns is None:
            self._columns = (
                RecordColumns.from_records(self._records) if self._records is not None else load_columns(self.path)
            )
        return self._columns

    @property
    def records(self) -> list[RequestRecord]:
        if self._records is None:
            self._records = _read_records(self.path) if has_records(self.path) else []
        return self._records


def load_run(path: str | Path, *, with_records: bool = True) -> RunResult:
    """A result directory. Without summary.json (the run was killed) the summary is recomputed from
    the records on disk (their columns) and the manifest (`interrupted: true`). Records and columns
    are read when first used (`with_records` is kept for callers that pass it)."""
    p = Path(path)
    if not (p / SUMMARY).is_file() and not has_records(p):
        raise ConfigError(f"{p} is not a servescope result directory (no {SUMMARY} or {RECORDS})")
    manifest = read_json(p / MANIFEST) if (p / MANIFEST).is_file() else {}
    run = RunResult(path=p, summary=cast(Summary, {}), manifest=manifest)
    if (p / SUMMARY).is_file():
        run.summary = read_summary(p / SUMMARY)
    else:
        gpus = (manifest.get("target") or {}).get("gpus")
        run.summary = summarize_columns(
            run.columns,
            run=run_info_from_manifest(manifest),
            gpus=gpus if isinstance(gpus, int) else None,
            gpus_source=(manifest.get("target") or {}).get("gpus_source"),
        )
    return run


_warming: threading.Thread | None = None


def start_warm_up() -> None:
    """Begin `warm_up` on a thread of its own (once per process), so its ~0.2 s overlap the waits
    before the clock (the emulator starting, the preflight and the probe) instead of adding to them."""
    global _warming
    if _warming is None:
        _warming = threading.Thread(target=records_to_table, args=([],), name="arrow-warm-up", daemon=True)
        _warming.start()


def warm_up() -> None:
    """Turn records into columns once, before the clock: Arrow's first conversion imports pandas where it
    is installed (about 0.2 s of CPU), which would otherwise stall the event loop at a run's first
    flush, inside the measured window. Waits for `start_warm_up`'s thread where one was started (it
    must not hold the interpreter inside the window either)."""
    if _warming is not None:
        _warming.join()
    records_to_table([])
