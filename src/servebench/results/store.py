"""The result directory: the source of truth every report and comparison is computed from.

    DIR/summary.json     servebench.summary/1 (metrics.summarize)
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
from typing import Any

import orjson

from servebench.errors import ConfigError
from servebench.results.records import RequestRecord, record_from_dict

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


@dataclass(slots=True)
class RunResult:
    path: Path
    summary: dict[str, Any]
    manifest: dict[str, Any]
    records: list[RequestRecord] = field(default_factory=list)


def load_run(path: str | Path, *, with_records: bool = True) -> RunResult:
    p = Path(path)
    if not (p / SUMMARY).is_file() and not (p / RECORDS).is_file():
        raise ConfigError(f"{p} is not a servebench result directory (no {SUMMARY} or {RECORDS})")
    summary = read_json(p / SUMMARY) if (p / SUMMARY).is_file() else {}
    manifest = read_json(p / MANIFEST) if (p / MANIFEST).is_file() else {}
    records = read_records(p / RECORDS) if with_records and (p / RECORDS).is_file() else []
    return RunResult(path=p, summary=summary, manifest=manifest, records=records)
