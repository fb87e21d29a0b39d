"""Records on disk: `requests.parquet` written as the run goes, read back as columns or records.

During a run, finished records collect in memory and are written every `flush_records` records or
`flush_s` seconds (whichever comes first) as one small Parquet file, `requests.parts/part-NNNNN.parquet`,
written under a temporary name and renamed when complete. A run killed with SIGKILL leaves every
part written before the kill, each a complete Parquet file; what it loses is the records that
finished since the last flush (at most `flush_records`, at most ~`flush_s` seconds' worth). When the
run ends the parts are joined into `requests.parquet` (row groups of `JOIN_ROWS`) and removed.
Readers take `requests.parquet`, else the parts of a killed run, else an old run's `requests.jsonl`.

The writer's cost on the loop is that of turning each batch into Arrow columns (a few microseconds a
record of 128 tokens, less than the JSON line and write call per record of the JSONL writer it
replaces); encoding and writing run on one background thread (Arrow releases the GIL). Written
records are not kept: the writer drops them once they are columns, and what a run computes at its
end (the summary, the self-checks, precision) it computes from the columns read back
(`load_columns`), a large run's per-token gaps a batch at a time (`tokenpass`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from servescope.results.columns import (
    LIST_COLUMNS,
    NEEDED_COLUMNS,
    SCHEMA,
    THREADS,
    RecordColumns,
    build_columns,
    records_to_table,
    table_parts,
    table_to_records,
)
from servescope.results.records import RequestRecord, record_from_dict

__all__ = [
    "JOIN_ROWS",
    "PARQUET_OPTIONS",
    "PARTS",
    "RECORDS",
    "RECORDS_JSONL",
    "RecordWriter",
    "has_records",
    "iter_batches",
    "load_columns",
    "read_records",
    "read_table",
    "record_files",
    "token_parts",
]

RECORDS = "requests.parquet"
PARTS = "requests.parts"
RECORDS_JSONL = "requests.jsonl"  # runs before Parquet; still read
_BATCH_ROWS = 8192
#: Records per row group of requests.parquet (parts joined at the end of a run).
JOIN_ROWS = 16384
# Offsets within a request rise: delta encoding stores them in ~1-2 bytes each.
_ENCODING = {"chunk_offsets_ns.list.element": "DELTA_BINARY_PACKED"}
# Dictionaries for text only: on the integer columns (times, ids, lengths) they more than double the
# time to read a column back and save little once zstd has run.
_DICTIONARY = [n for n in SCHEMA.names if pa.types.is_string(SCHEMA.field(n).type) and n != "response_id"]


#: How records are encoded: zstd level 1 (as fast to write as snappy, smaller files), but the chunk
#: offsets delta-packed and uncompressed (zstd saves ~5% there and doubles the time to read them).
_ZSTD = [f"{n}.list.element" if n in LIST_COLUMNS else n for n in SCHEMA.names if n != "chunk_offsets_ns"]
PARQUET_OPTIONS: dict[str, Any] = {
    "compression": {**dict.fromkeys(_ZSTD, "zstd"), "chunk_offsets_ns.list.element": "none"},
    "compression_level": dict.fromkeys(_ZSTD, 1),
    "use_dictionary": _DICTIONARY,
    "column_encoding": _ENCODING,
}


def _write_part(table: pa.Table, final: Path) -> None:
    """One part: written under a temporary name, renamed when whole."""
    tmp = final.with_name(final.name + ".tmp")
    pq.write_table(table, tmp, **PARQUET_OPTIONS)
    os.replace(tmp, final)


class RecordWriter:
    """Streams records to `path` (requests.parquet) through part files (module docstring)."""

    def __init__(self, path: str | Path, *, flush_records: int = 2048, flush_s: float = 1.0) -> None:
        self.path = Path(path)
        self.parts = self.path.parent / PARTS if self.path.name == RECORDS else self.path.with_suffix(".parts")
        self.parts.mkdir(parents=True, exist_ok=True)
        self.flush_records, self.flush_s = flush_records, flush_s
        self.count = 0
        self._pending: list[RequestRecord] = []
        self._n_parts = 0
        self._last_flush = time.monotonic()
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._writes: list[Future[None]] = []
        try:  # inside a run: flush on a timer too, so a quiet spell does not hold records back
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._arm()

    def _arm(self) -> None:
        if self._loop is not None and not self._closed:
            self._timer = self._loop.call_later(self.flush_s, self._tick)

    def _tick(self) -> None:
        if self._pending and time.monotonic() - self._last_flush >= self.flush_s:
            self.flush()
        self._arm()

    def write(self, record: RequestRecord) -> None:
        self._pending.append(record)
        self.count += 1
        if len(self._pending) >= self.flush_records or time.monotonic() - self._last_flush >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        """Write the pending records as one part file (complete, or absent after a kill)."""
        self._last_flush = time.monotonic()
        if not self._pending:
            return
        final = self.parts / f"part-{self._n_parts:05d}.parquet"
        table = records_to_table(self._pending)  # on the loop: reads the records
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="servescope-records")
        # encoding and the write off the loop (Arrow releases the GIL); one thread keeps parts in order
        self._writes.append(self._pool.submit(_write_part, table, final))
        self._n_parts += 1
        self._pending = []  # (dropped, not compacted: nothing keeps written records; a shard compacts its own)
        while self._writes and self._writes[0].done():
            self._writes.pop(0).result()  # a write that failed fails the run here

    def close(self) -> None:
        """Flush, then join the parts into `path` and remove them."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        self.flush()
        try:
            for w in self._writes:
                w.result()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
        join_parts(self.parts, self.path)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def join_parts(parts: Path, path: Path, group_rows: int = JOIN_ROWS) -> None:
    """The part files, in order, as one Parquet file (consecutive parts joined into row groups of
    at least `group_rows` records: a reader pays per row group and column), then the parts removed."""
    files = sorted(parts.glob("part-*.parquet"))
    tmp = path.with_name(path.name + ".tmp")
    with pq.ParquetWriter(tmp, SCHEMA, **PARQUET_OPTIONS) as writer:
        pending: list[pa.Table] = []
        for i, f in enumerate(files):
            pending.append(_read_file(f, None))
            if sum(t.num_rows for t in pending) >= group_rows or i == len(files) - 1:
                writer.write_table(pa.concat_tables(pending), row_group_size=max(group_rows, 1) * 2)
                pending = []
    os.replace(tmp, path)
    shutil.rmtree(parts, ignore_errors=True)


def record_files(run_dir: str | Path) -> list[Path]:
    """The Parquet files holding a run's records: requests.parquet, else the parts a killed run left."""
    p = Path(run_dir)
    if (p / RECORDS).is_file():
        return [p / RECORDS]
    return sorted((p / PARTS).glob("part-*.parquet")) if (p / PARTS).is_dir() else []


def has_records(run_dir: str | Path) -> bool:
    p = Path(run_dir)
    return bool(record_files(p)) or (p / RECORDS_JSONL).is_file() or (p / PARTS).is_dir()


def _jsonl_records(path: Path) -> list[RequestRecord]:
    """Every complete line of an old records file; a torn final line is skipped."""
    out: list[RequestRecord] = []
    for line in path.read_bytes().split(b"\n"):
        if not line.strip():
            continue
        try:
            out.append(record_from_dict(orjson.loads(line)))
        except orjson.JSONDecodeError:
            continue
    return out


def _read_file(path: Path, columns: Sequence[str] | None) -> pa.Table:
    """One Parquet file's columns as `SCHEMA` types (read by `ParquetFile`, column by column on
    Arrow's threads); a column an older file lacks comes back all null."""
    want = list(columns) if columns else list(SCHEMA.names)
    pf = pq.ParquetFile(path)
    present = set(pf.schema_arrow.names)
    table = pf.read(columns=[c for c in want if c in present])
    cols = [table.column(c) if c in present else pa.nulls(table.num_rows, SCHEMA.field(c).type) for c in want]
    schema = pa.schema([SCHEMA.field(c) for c in want])
    out = pa.Table.from_arrays(cols, names=want)
    return out if out.schema == schema else out.cast(schema)


def read_table(run_dir: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """A run's records as one Arrow table of `SCHEMA` (rows in the order requests finished; an old
    JSONL run's in file order). Empty when there are none."""
    p = Path(run_dir)
    files = record_files(p)
    if files:
        return pa.concat_tables([_read_file(f, columns) for f in files])
    jsonl = p / RECORDS_JSONL
    table = records_to_table(_jsonl_records(jsonl)) if jsonl.is_file() else SCHEMA.empty_table()
    return table.select(list(columns)) if columns else table


def token_parts(
    run_dir: str | Path, parts: int = THREADS, group_rows: int = _BATCH_ROWS, every: int = 1
) -> list[Iterator[pa.RecordBatch]]:
    """The token lists (`id`, `chunk_offsets_ns`, `chunk_tokens`) of a run's Parquet files in
    `parts` runs of consecutive row groups of about equal rows, each an iterator of batches that
    can be read on a thread of its own (Arrow decodes without the GIL); about `group_rows` rows
    are read at a time (bounded memory). `every` k: every k-th row group only (a sample)."""
    groups = []
    for f in record_files(run_dir):
        meta = pq.ParquetFile(f).metadata
        groups += [(f, g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)]
    groups = groups[::every]
    total = sum(n for *_, n in groups) or 1
    shares: list[list[tuple[Path, int]]] = [[] for _ in range(max(1, parts))]
    seen = 0
    for f, g, n in groups:
        shares[min(len(shares) - 1, seen * len(shares) // total)].append((f, g))
        seen += n
    return [_read_groups(share, group_rows) for share in shares if share]


def _read_groups(share: list[tuple[Path, int]], group_rows: int) -> Iterator[pa.RecordBatch]:
    files: dict[Path, pq.ParquetFile] = {}
    pending: list[int] = []
    rows = 0
    for i, (f, g) in enumerate(share):
        if f not in files:
            files[f] = pq.ParquetFile(f, pre_buffer=False)
        pf = files[f]
        pending.append(g)
        rows += pf.metadata.row_group(g).num_rows
        if rows >= group_rows or i == len(share) - 1 or share[i + 1][0] != f:
            yield from pf.read_row_groups(pending, columns=["id", *LIST_COLUMNS], use_threads=False).to_batches()
            pending, rows = [], 0
            if i == len(share) - 1 or share[i + 1][0] != f:
                del files[f]


def iter_batches(
    run_dir: str | Path, columns: Sequence[str] | None = None, batch_rows: int = _BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """A run's records batch by batch (bounded memory), in file order."""
    files = record_files(run_dir)
    if not files:
        yield from read_table(run_dir, columns).to_batches(max_chunksize=batch_rows)
        return
    for f in files:
        pf = pq.ParquetFile(f, pre_buffer=False)  # (pre-buffering reads every row group ahead: the whole file)
        yield from pf.iter_batches(batch_size=batch_rows, columns=list(columns) if columns else None)


def read_records(path: str | Path) -> list[RequestRecord]:
    """Every record of a run directory (or of one records file: requests.parquet, requests.jsonl),
    sorted by id, chunk times back to run-relative ns."""
    p = Path(path)
    if p.is_file() and p.suffix == ".jsonl":
        records = _jsonl_records(p)
    elif p.is_file():
        records = table_to_records(_read_file(p, None))
    else:
        records = table_to_records(read_table(p))
    records.sort(key=lambda r: r.id)
    return records


def load_columns(run_dir: str | Path) -> RecordColumns:
    """A run's records as `RecordColumns`, read in two passes (columns.build_columns): memory is the
    per-request columns plus the compact ITL array, never every chunk offset at once."""
    p = Path(run_dir)
    if record_files(p):
        return build_columns(
            read_table(p, [*NEEDED_COLUMNS, "chunk_tokens"]), lambda every: token_parts(p, every=every)
        )
    table = read_table(p)
    return build_columns(table.select([*NEEDED_COLUMNS, "chunk_tokens"]), table_parts(table, _BATCH_ROWS))
