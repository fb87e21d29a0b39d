"""Records as columns: the Arrow schema of `requests.parquet` and the numpy view the summary and the
report compute from. No file I/O here (see `parquet.py`).

One row per request. Token arrival times are a list column of offsets in ns from the request's
send (`chunk_offsets_ns`); every other time is ns from the run origin, as in `RequestRecord`
(docs/results.md lists the columns and their units).

`RecordColumns` holds what the figures need and no per-token list: per-request numbers as numpy
arrays (rows sorted by id, the order `store.load_run` has always given) and what the token lists
give (`tokenpass`: the gaps of completed measured requests as one compact array when there are at
most 16 million, else their exact sums, bucket counts and the few kept around the percentiles;
the tokens/s histogram; a sample of gaps for the charts). It is built in two passes over Arrow
data: the per-request columns first, then the token lists one batch at a time, in parts on
threads, so a file of a million 128-token requests never has its 128 million offsets, nor its
127 million gaps, in memory at once.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from servescope.results.records import RequestRecord
from servescope.results.schema import Distribution

if TYPE_CHECKING:
    from servescope.results.streaming import GapParts, GapStats, Mapper

__all__ = [
    "CHART_SAMPLE",
    "LIST_COLUMNS",
    "NEEDED_COLUMNS",
    "SCALAR_COLUMNS",
    "SCHEMA",
    "RecordColumns",
    "build_columns",
    "compact",
    "records_to_table",
    "table_parts",
    "table_to_records",
]

_I64, _STR = pa.int64(), pa.string()
SCHEMA = pa.schema(
    [
        ("id", _I64),
        ("warmup", pa.bool_()),
        ("t_sched_ns", _I64),
        ("t_send_ns", _I64),
        ("t_first_ns", _I64),
        ("t_first_answer_ns", _I64),
        ("t_last_ns", _I64),
        ("t_end_ns", _I64),
        ("setup_ns", _I64),  # connection set-up inside the window before the send (null: an open connection)
        ("status", _STR),
        ("error_kind", _STR),
        ("error_detail", _STR),
        ("http_status", _I64),
        ("input_len", _I64),
        ("output_len", _I64),
        ("input_tokens", _I64),
        ("output_tokens", _I64),
        ("output_tokens_source", _STR),
        ("reasoning_tokens", _I64),
        ("chunks", _I64),
        ("chunk_offsets_ns", pa.list_(_I64)),  # each token-carrying chunk's arrival, ns after t_send_ns
        ("chunk_tokens", pa.list_(pa.int32())),  # tokens each chunk carried; null: one each
        ("response_id", _STR),
        ("session", _I64),
        ("turn", _I64),
    ]
)
LIST_COLUMNS = ("chunk_offsets_ns", "chunk_tokens")
SCALAR_COLUMNS = tuple(n for n in SCHEMA.names if n not in LIST_COLUMNS)
#: The per-request columns `RecordColumns` holds (build_columns' first pass reads no others).
NEEDED_COLUMNS = tuple(n for n in SCALAR_COLUMNS if n not in ("response_id", "turn"))
_TIMES = ("t_send_ns", "t_first_ns", "t_first_answer_ns", "t_last_ns", "t_end_ns")
#: Charts draw at most this many ITL values (a systematic sample in send order); figures use all.
CHART_SAMPLE = 2_000_000
#: Threads that read the token lists and summarise the gaps (one part of the file each).
THREADS = 2
#: The token lists in parts that can be read at once, each an iterable of batches of `id`,
#: `chunk_offsets_ns`, `chunk_tokens` (any row order); given k > 1, every k-th group of rows only
#: (a sample).
TokenParts: TypeAlias = Callable[[int], Sequence[Iterable[pa.RecordBatch]]]


def _flat_ns(records: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray]:
    """Every record's chunk times in one int64 array, and each record's count."""
    lens = np.fromiter((len(r.chunk_ns) for r in records), dtype=np.int64, count=len(records))
    if records and all(isinstance(r.chunk_ns, array) for r in records):  # packed (from a worker): no int objects
        flat = np.frombuffer(b"".join([r.chunk_ns for r in records]), dtype=np.int64)  # type: ignore[misc]
    else:
        flat = np.fromiter(chain.from_iterable(r.chunk_ns for r in records), dtype=np.int64, count=int(lens.sum()))
    return flat, lens


def records_to_table(records: Sequence[RequestRecord]) -> pa.Table:
    """Records -> one Arrow table of `SCHEMA` (rows in the given order)."""
    cols: dict[str, Any] = {name: [getattr(r, name) for r in records] for name in SCALAR_COLUMNS}
    flat, lens = _flat_ns(records)
    base = np.asarray([r.t_send_ns or 0 for r in records], dtype=np.int64)
    offsets = np.zeros(len(records) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    rel = flat - np.repeat(base, lens)
    cols["chunk_offsets_ns"] = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(rel)).cast(
        SCHEMA.field("chunk_offsets_ns").type
    )
    cols["chunk_tokens"] = pa.array([_tokens_or_none(r) for r in records], type=pa.list_(pa.int32()))
    return pa.Table.from_pydict({n: cols[n] for n in SCHEMA.names}, schema=SCHEMA)


def _tokens_or_none(r: RequestRecord) -> Sequence[int] | None:
    k = r.chunk_tokens
    return None if not len(k) or k.count(1) == len(k) else k


def compact(records: Iterable[RequestRecord]) -> None:
    """Shrink records kept in memory after they are on disk: chunk times as one packed int64 array
    (8 bytes a chunk instead of ~40), token counts of one per chunk as an empty list (metrics read
    an empty list as one token a chunk)."""
    for r in records:
        if isinstance(r.chunk_ns, list):
            r.chunk_ns = array("q", r.chunk_ns)
        k = r.chunk_tokens
        if len(k) and k.count(1) == len(k):
            r.chunk_tokens = []


def table_to_records(table: pa.Table) -> list[RequestRecord]:
    """Arrow rows (of `SCHEMA`, or a subset: missing fields keep their defaults) -> records, chunk
    times back to run-relative ns."""
    rows = table.to_pylist()
    out = []
    for row in rows:
        rel = row.pop("chunk_offsets_ns", None) or []
        toks = row.pop("chunk_tokens", None)
        base = row.get("t_send_ns") or 0
        rec = RequestRecord(**{k: v for k, v in row.items() if k in RequestRecord.__dataclass_fields__})
        rec.chunk_ns = [base + x for x in rel]
        rec.chunk_tokens = list(toks) if toks is not None else [1] * len(rel)
        out.append(rec)
    return out


def _num(table: pa.Table, name: str) -> np.ndarray:
    """A nullable integer column as float64 with NaN for null (exact: run-relative ns < 2**53)."""
    col = table.column(name)
    return (
        np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
        if col.null_count == 0
        else np.asarray(col.cast(pa.float64()).fill_null(np.nan).to_numpy(), dtype=np.float64)
    )


def _strs(table: pa.Table, name: str) -> np.ndarray:
    """A string column as an object array; all null (the common case): Nones without a pass."""
    col = table.column(name)
    if col.null_count == len(col):
        return np.full(len(col), None, dtype=object)
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=object)


@dataclass(slots=True)
class RecordColumns:
    """A run's records as columns, rows sorted by id (module docstring). Times: float64 ns from the
    run origin, NaN where the record has None; `itl` per token of completed measured requests, in
    row order, `itl_unit_ns` its unit (1.0: ns, 1e6: ms)."""

    id: np.ndarray
    warmup: np.ndarray
    t_sched: np.ndarray
    t_send: np.ndarray
    t_first: np.ndarray
    t_first_answer: np.ndarray
    t_last: np.ndarray
    t_end: np.ndarray
    ok: np.ndarray
    error_kind: np.ndarray  # object: str or None
    error_detail: np.ndarray  # object
    http_status: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    usage_output: np.ndarray  # bool: output_tokens_source == "usage"
    reasoning_tokens: np.ndarray
    chunks: np.ndarray
    session: np.ndarray
    setup: np.ndarray = field(default_factory=lambda: np.empty(0))  # ns, NaN: sent on an open connection
    held_itl: np.ndarray | None = None  # the gaps when read (see `itl`)
    itl_unit_ns: float = 1.0
    itl_chart_ms: np.ndarray = field(default_factory=lambda: np.empty(0))
    tokens_hist: tuple[list[float], list[float]] = ([], [])  # output tokens/s over run time (report)
    itl_counts: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # ITL values per row
    itl_summary: Distribution | None = None  # colsummary's ITL distribution, once computed
    itl_size: int = 0  # how many gaps (held or not)
    gap_stats: GapStats | None = None  # exact sums and bucket counts of uint32 gaps (tokenpass)
    gap_parts: GapParts | None = None  # the gaps again, in parts of int64 arrays (large runs: none held)
    itl_loader: Callable[[], np.ndarray] | None = None  # every gap in id order, read again
    mapper: Mapper = map  # how colsummary computes over parts (tokenpass.parallel_map once read)

    def __len__(self) -> int:
        return int(self.id.size)

    @property
    def measured(self) -> np.ndarray:
        """Rows of the measured window: not warm-up, sent."""
        return ~self.warmup & ~np.isnan(self.t_send)

    @property
    def completed(self) -> np.ndarray:
        return self.measured & self.ok

    @property
    def itl(self) -> np.ndarray:
        """Every per-token gap of completed measured requests, in row order (`itl_unit_ns`); a large
        run's are read again when first asked (`tokenpass`), and kept."""
        if self.held_itl is None:
            self.held_itl = self.itl_loader() if self.itl_loader is not None else np.empty(0, dtype=np.uint32)
        return self.held_itl

    @itl.setter
    def itl(self, values: np.ndarray) -> None:
        self.held_itl = values

    def itl_ms(self) -> np.ndarray:
        """Every per-token gap in ms (float64; a full copy when the gaps are held in ns)."""
        return self.itl if self.itl_unit_ns == 1e6 else self.itl / 1e6

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord]) -> RecordColumns:
        table = records_to_table(records)
        return build_columns(table.select([*NEEDED_COLUMNS, "chunk_tokens"]), table_parts(table))


def table_parts(table: pa.Table, rows: int = 65536) -> TokenParts:
    """`TokenParts` of an in-memory table: one part, batches of `rows`."""
    return lambda every: [table.select(["id", *LIST_COLUMNS]).to_batches(max_chunksize=rows)[::every]]


def build_columns(scalars: pa.Table, token_parts: TokenParts) -> RecordColumns:
    """Pass 1: `scalars` (the per-request columns and `chunk_tokens`) sorted by id; pass 2: the
    batches of `id`, `chunk_offsets_ns`, `chunk_tokens` of each part from `token_parts()` (the
    parts read at once on threads), in any row order."""
    ids = scalars.column("id").to_numpy()
    if ids.size > 1 and not bool(np.all(ids[1:] > ids[:-1])):
        scalars = scalars.take(pa.array(np.argsort(ids, kind="stable")))
    t = {name.removesuffix("_ns"): _num(scalars, name) for name in _TIMES}
    cols = RecordColumns(
        id=scalars.column("id").to_numpy(),
        warmup=scalars.column("warmup").fill_null(False).to_numpy(),
        t_sched=_num(scalars, "t_sched_ns"),
        t_send=t["t_send"],
        t_first=t["t_first"],
        t_first_answer=t["t_first_answer"],
        t_last=t["t_last"],
        t_end=t["t_end"],
        ok=_equals(scalars, "status", "ok"),
        error_kind=_strs(scalars, "error_kind"),
        error_detail=_strs(scalars, "error_detail"),
        http_status=_num(scalars, "http_status"),
        input_len=_num(scalars, "input_len"),
        output_len=_num(scalars, "output_len"),
        input_tokens=_num(scalars, "input_tokens"),
        output_tokens=_num(scalars, "output_tokens"),
        usage_output=_equals(scalars, "output_tokens_source", "usage"),
        reasoning_tokens=_num(scalars, "reasoning_tokens"),
        chunks=_num(scalars, "chunks"),
        session=_num(scalars, "session"),
        setup=_num(scalars, "setup_ns"),
    )
    tokens = scalars.column("chunk_tokens")
    del scalars  # (the caller passes its only reference: freed before the token pass)
    pa.default_memory_pool().release_unused()  # and given back to the system, not kept by the allocator
    from servescope.results.tokenpass import token_pass

    token_pass(cols, tokens, token_parts)
    return cols


def _equals(table: pa.Table, name: str, value: str) -> np.ndarray:
    return np.asarray(
        pc.fill_null(pc.equal(table.column(name), value), False).to_numpy(zero_copy_only=False), dtype=bool
    )
