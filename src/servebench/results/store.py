"""The result directory: the source of truth every report and comparison is computed from.

    DIR/summary.json     servebench.summary/1 (metrics.summarize; shape: results.schema.Summary)
    DIR/requests.jsonl   one RequestRecord per line, appended as each request ends
    DIR/manifest.json    config as run, versions, host, target info (never a secret)

Records are written with one `write()` per request into the OS page cache, so a run killed with
SIGKILL leaves every completed request's line on disk; a torn last line (killed mid-write) is
skipped on reading.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson

from servebench.errors import ConfigError
from servebench.results.metrics import summarize
from servebench.results.records import RequestRecord, record_from_dict
from servebench.results.schema import SUMMARY_VERSIONS, RunInfo, Summary

__all__ = [
    "MANIFEST",
    "RECORDS",
    "SUMMARY",
    "RecordWriter",
    "RunResult",
    "default_out_dir",
    "load_run",
    "prepare_out_dir",
    "read_json",
    "read_records",
    "read_summary",
    "run_info_from_manifest",
    "write_json",
]

SUMMARY = "summary.json"
RECORDS = "requests.jsonl"
MANIFEST = "manifest.json"


def default_out_dir(slug: str, root: str | Path = "servebench-results") -> Path:
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
        for name in (SUMMARY, RECORDS, MANIFEST):
            (p / name).unlink(missing_ok=True)
    return p


def write_json(path: str | Path, doc: Any) -> None:
    """Write JSON atomically (temp file + rename): a reader never sees half a summary."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n")
    os.replace(tmp, path)


def read_json(path: str | Path) -> Any:
    return orjson.loads(Path(path).read_bytes())


class RecordWriter:
    """Appends one JSON line per finished request, unbuffered (one write syscall per record)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.count = 0

    def write(self, record: RequestRecord) -> None:
        os.write(self._fd, orjson.dumps(record) + b"\n")
        self.count += 1

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: str | Path) -> list[RequestRecord]:
    """Every complete line of a records file; a torn final line is skipped."""
    out: list[RequestRecord] = []
    data = Path(path).read_bytes()
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            out.append(record_from_dict(orjson.loads(line)))
        except orjson.JSONDecodeError:
            continue
    out.sort(key=lambda r: r.id)
    return out


def read_summary(path: str | Path) -> Summary:
    """A summary.json, of any version this code reads (SUMMARY_VERSIONS; one without `schema`
    predates versioning and reads as the first). Not validated: a TypedDict is a plain dict."""
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: not a servebench summary (a JSON object was expected)")
    version = doc.get("schema", SUMMARY_VERSIONS[0])
    if version not in SUMMARY_VERSIONS:
        raise ConfigError(f"{path}: summary version {version!r} is not one this servebench reads "
                          f"({', '.join(SUMMARY_VERSIONS)}); a newer servebench wrote it")
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
        info["target"] = {"url": str(url), "model": str(model), "api": cfg.get("api") or "chat",
                          "emulated": bool(tgt.get("emulated"))}
    info["load"] = {"concurrency": cfg.get("concurrency"), "rate_rps": cfg.get("rate"),
                    "burstiness": cfg.get("burstiness")}
    info["workload"] = {"dataset": cfg.get("dataset"), "input_len": cfg.get("input_len"),
                        "output_len": cfg.get("output_len")}
    info["interrupted"] = True
    return info


@dataclass(slots=True)
class RunResult:
    path: Path
    summary: Summary
    manifest: dict[str, Any]
    records: list[RequestRecord] = field(default_factory=list)


def load_run(path: str | Path, *, with_records: bool = True) -> RunResult:
    """A result directory. Without summary.json (the run was killed) the summary is recomputed from
    the records on disk and the manifest (`interrupted: true`)."""
    p = Path(path)
    if not (p / SUMMARY).is_file() and not (p / RECORDS).is_file():
        raise ConfigError(f"{p} is not a servebench result directory (no {SUMMARY} or {RECORDS})")
    manifest = read_json(p / MANIFEST) if (p / MANIFEST).is_file() else {}
    need_records = with_records or not (p / SUMMARY).is_file()
    records = read_records(p / RECORDS) if need_records and (p / RECORDS).is_file() else []
    if (p / SUMMARY).is_file():
        summary = read_summary(p / SUMMARY)
    else:
        gpus = (manifest.get("target") or {}).get("gpus")
        summary = summarize(records, run=run_info_from_manifest(manifest),
                            gpus=gpus if isinstance(gpus, int) else None,
                            gpus_source=(manifest.get("target") or {}).get("gpus_source"))
    return RunResult(path=p, summary=summary, manifest=manifest, records=records)
