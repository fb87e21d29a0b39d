"""`servescope export DIR --format csv|parquet|jsonl`: a run's records in a file other tools read.

Batch by batch (bounded memory) from requests.parquet, the parts a killed run left, or an old
requests.jsonl. Columns and units are those of requests.parquet (docs/results.md):

- parquet: the same columns, one file;
- csv: the same columns; the two list columns as space-separated integers (`chunk_offsets_ns`, ns
  after `t_send_ns`; `chunk_tokens`, empty where each chunk carried one token);
- jsonl: one JSON object per request in the old `requests.jsonl` form (RequestRecord fields,
  `chunk_ns` run-relative), which any servescope still reads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import click
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from servescope.errors import ConfigError, handle_errors
from servescope.results.columns import LIST_COLUMNS, SCHEMA
from servescope.results.parquet import RECORDS, has_records, iter_batches, record_files
from servescope.results.records import RequestRecord

__all__ = ["FORMATS", "export_command", "export_records"]
_GROUP_ROWS = 8192
_CSV_SCHEMA = pa.schema([pa.field(n, pa.string()) if n in LIST_COLUMNS else SCHEMA.field(n) for n in SCHEMA.names])

FORMATS = ("csv", "parquet", "jsonl")
_FIELDS = tuple(RequestRecord.__dataclass_fields__)


def export_records(run_dir: str | Path, fmt: str, out: str | Path | None = None) -> tuple[Path, int]:
    """Write the records of `run_dir` as `fmt` to `out` (default DIR/requests.<fmt>); (path, rows)."""
    src = Path(run_dir)
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    if not has_records(src):
        raise ConfigError(f"{src} holds no records (no {RECORDS}, requests.parts/ or requests.jsonl)")
    dest = Path(out) if out is not None else src / f"requests.{fmt}"
    if fmt == "parquet" and record_files(src) == [dest]:
        return dest, pq.ParquetFile(dest).metadata.num_rows  # it is the run's own file
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    rows = _csv(src, tmp) if fmt == "csv" else {"parquet": _parquet, "jsonl": _jsonl}[fmt](iter_batches(src), tmp)
    tmp.replace(dest)
    return dest, rows


def _parquet(batches: Iterator[pa.RecordBatch], path: Path) -> int:
    rows = 0
    with pq.ParquetWriter(path, SCHEMA, compression="zstd") as writer:
        for b in batches:
            writer.write_batch(b)
            rows += len(b)
    return rows


def _joined(lists: pa.Array) -> pa.Array:
    """A list column as space-separated integers (null list: empty text), in Arrow compute."""
    text = pa.ListArray.from_arrays(lists.offsets, pc.cast(lists.values, pa.string()))
    return pc.fill_null(pc.binary_join(text, " "), "")


def _csv_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of `SCHEMA` rows with the list columns as text (`_CSV_SCHEMA`)."""
    return pa.RecordBatch.from_arrays(
        [_joined(batch.column(n)) if n in LIST_COLUMNS else batch.column(n) for n in SCHEMA.names], schema=_CSV_SCHEMA
    )


def _csv(src: Path, path: Path) -> int:
    """CSV (module docstring) written by `pyarrow.csv`: the groups of rows read and their list
    columns turned into text on two threads (the int -> text cast is most of the work), written in
    order."""
    from servescope.results.tokenpass import ordered_map

    rows = 0
    with pacsv.CSVWriter(path, _CSV_SCHEMA) as writer:
        for batches in ordered_map(_csv_batches, _row_groups(src)):
            for b in batches:
                writer.write_batch(b)
                rows += len(b)
    return rows


_open = threading.local()  # each thread's open Parquet file (its metadata is parsed once)


def _row_groups(src: Path) -> Iterator[tuple[Path, list[int]] | pa.RecordBatch]:
    """What to format, in order: runs of row groups of the Parquet files (about 8,192 rows each),
    or batches of an old JSONL run."""
    files = record_files(src)
    if not files:
        yield from iter_batches(src)
        return
    for f in files:
        meta = pq.ParquetFile(f).metadata
        group: list[int] = []
        rows = 0
        for g in range(meta.num_row_groups):
            group.append(g)
            rows += meta.row_group(g).num_rows
            if rows >= _GROUP_ROWS:
                yield f, group
                group, rows = [], 0
        if group:
            yield f, group


def _csv_batches(item: tuple[Path, list[int]] | pa.RecordBatch) -> list[pa.RecordBatch]:
    if isinstance(item, pa.RecordBatch):
        return [_csv_batch(item)]
    f, groups = item
    if getattr(_open, "path", None) != f:
        _open.path, _open.file = f, pq.ParquetFile(f, pre_buffer=False)
    return [_csv_batch(b) for b in _open.file.read_row_groups(groups, use_threads=False).to_batches()]


def _jsonl(batches: Iterator[pa.RecordBatch], path: Path) -> int:
    rows = 0
    with path.open("wb") as f:
        for b in batches:
            data = {n: b.column(n).to_pylist() for n in _FIELDS if n in SCHEMA.names}
            lists = b.column("chunk_offsets_ns")
            offs = lists.offsets.to_numpy().astype(np.int64)
            vals = lists.values.to_numpy()[offs[0] : offs[-1]].astype(np.int64) if len(b) else np.empty(0, np.int64)
            offs -= offs[0]
            sends = np.asarray([s or 0 for s in data["t_send_ns"]], dtype=np.int64)
            absolute = vals + np.repeat(sends, np.diff(offs))
            toks = b.column("chunk_tokens").to_pylist()
            lines = []
            for i in range(len(b)):
                chunk_ns = absolute[offs[i] : offs[i + 1]]
                rec = {
                    n: (
                        chunk_ns
                        if n == "chunk_ns"
                        else (toks[i] if toks[i] is not None else np.ones(chunk_ns.size, dtype=np.int64))
                        if n == "chunk_tokens"
                        else data[n][i]
                    )
                    for n in _FIELDS
                }
                lines.append(orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY))
            f.write(b"\n".join(lines) + b"\n" if lines else b"")
            rows += len(b)
    return rows


@click.command("export")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True, help="File format to write.")
@click.option("--out", type=click.Path(dir_okay=False), help="Output file. [default: DIR/requests.<format>]")
@handle_errors
def export_command(run_dir: str, fmt: str, out: str | None) -> None:
    """Write a run's per-request records as CSV, Parquet or JSON lines for other tools.

    Columns and units are those of requests.parquet (docs/results.md). Works on a finished run, on
    the parts a killed run left, and on an old run's requests.jsonl.
    """
    path, rows = export_records(run_dir, fmt, out)
    click.echo(f"{rows} records: {path}")
