"""Records as columns: the Arrow schema of `requests.parquet` and the numpy view the summary and the
report compute from. No file I/O here (see `columnar.py`).

One row per request. Token arrival times are a list column of offsets in ns from the request's
send (`chunk_offsets_ns`); every other time is ns from the run origin, as in `RequestRecord`
(docs/results.md lists the columns and their units).

`RecordColumns` holds what the figures need and no per-token list: per-request numbers as numpy
arrays (rows sorted by id, the order `store.load_run` has always given) and the inter-token gaps of
completed measured requests as one compact array (uint32 ns while every gap fits, else int64;
float64 ms when chunks carry several tokens). It is built in two passes over Arrow data: the
per-request columns first, then the token lists one batch at a time, so a file of a million
128-token requests never has its 128 million offsets in memory at once.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from servebench.results.records import RequestRecord
from servebench.results.schema import Distribution

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
    "table_to_records",
]

_I64, _STR = pa.int64(), pa.string()
SCHEMA = pa.schema([
    ("id", _I64), ("warmup", pa.bool_()), ("t_sched_ns", _I64), ("t_send_ns", _I64), ("t_first_ns", _I64),
    ("t_first_answer_ns", _I64), ("t_last_ns", _I64), ("t_end_ns", _I64), ("status", _STR),
    ("error_kind", _STR), ("error_detail", _STR), ("http_status", _I64), ("input_len", _I64),
    ("output_len", _I64), ("input_tokens", _I64), ("output_tokens", _I64), ("output_tokens_source", _STR),
    ("reasoning_tokens", _I64), ("chunks", _I64),
    ("chunk_offsets_ns", pa.list_(_I64)),  # each token-carrying chunk's arrival, ns after t_send_ns
    ("chunk_tokens", pa.list_(pa.int32())),  # tokens each chunk carried; null: one each
    ("response_id", _STR), ("session", _I64), ("turn", _I64),
])
LIST_COLUMNS = ("chunk_offsets_ns", "chunk_tokens")
SCALAR_COLUMNS = tuple(n for n in SCHEMA.names if n not in LIST_COLUMNS)
#: The per-request columns `RecordColumns` holds (build_columns' first pass reads no others).
NEEDED_COLUMNS = tuple(n for n in SCALAR_COLUMNS if n not in ("response_id", "turn"))
_TIMES = ("t_send_ns", "t_first_ns", "t_first_answer_ns", "t_last_ns", "t_end_ns")
#: Charts draw at most this many ITL values (a systematic sample in send order); figures use all.
CHART_SAMPLE = 2_000_000
_U32_MAX = int(np.iinfo(np.uint32).max)


def _flat_ns(records: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray]:
    """Every record's chunk times in one int64 array, and each record's count."""
    lens = np.fromiter((len(r.chunk_ns) for r in records), dtype=np.int64, count=len(records))
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
        SCHEMA.field("chunk_offsets_ns").type)
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
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64) if col.null_count == 0 else \
        np.asarray(col.cast(pa.float64()).fill_null(np.nan).to_numpy(), dtype=np.float64)


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
    itl: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint32))
    itl_unit_ns: float = 1.0
    itl_chart_ms: np.ndarray = field(default_factory=lambda: np.empty(0))
    tokens_hist: tuple[list[float], list[float]] = ([], [])  # output tokens/s over run time (report)
    itl_counts: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # ITL values per row
    itl_summary: Distribution | None = None  # colsummary's ITL distribution, once computed

    def __len__(self) -> int:
        return int(self.id.size)

    @property
    def measured(self) -> np.ndarray:
        """Rows of the measured window: not warm-up, sent."""
        return ~self.warmup & ~np.isnan(self.t_send)

    @property
    def completed(self) -> np.ndarray:
        return self.measured & self.ok

    def itl_ms(self) -> np.ndarray:
        """Every per-token gap in ms (float64; a full copy when the gaps are held in ns)."""
        return self.itl if self.itl_unit_ns == 1e6 else self.itl / 1e6

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord]) -> RecordColumns:
        table = records_to_table(records)
        return build_columns(table.select([*NEEDED_COLUMNS, "chunk_tokens"]),
                             lambda: iter(table.select(["id", *LIST_COLUMNS]).to_batches(max_chunksize=65536)))


def build_columns(scalars: pa.Table, token_batches: Callable[[], Iterator[pa.RecordBatch]]) -> RecordColumns:
    """Pass 1: `scalars` (the per-request columns and `chunk_tokens`) sorted by id; pass 2: the
    batches of `id`, `chunk_offsets_ns`, `chunk_tokens` from `token_batches()`, in any row order."""
    ids = scalars.column("id").to_numpy()
    if ids.size > 1 and not bool(np.all(ids[1:] > ids[:-1])):
        scalars = scalars.take(pa.array(np.argsort(ids, kind="stable")))
    t = {name.removesuffix("_ns"): _num(scalars, name) for name in _TIMES}
    cols = RecordColumns(
        id=scalars.column("id").to_numpy(), warmup=scalars.column("warmup").fill_null(False).to_numpy(),
        t_sched=_num(scalars, "t_sched_ns"), t_send=t["t_send"], t_first=t["t_first"],
        t_first_answer=t["t_first_answer"], t_last=t["t_last"], t_end=t["t_end"],
        ok=_equals(scalars, "status", "ok"),
        error_kind=_strs(scalars, "error_kind"), error_detail=_strs(scalars, "error_detail"),
        http_status=_num(scalars, "http_status"), input_len=_num(scalars, "input_len"),
        output_len=_num(scalars, "output_len"), input_tokens=_num(scalars, "input_tokens"),
        output_tokens=_num(scalars, "output_tokens"), usage_output=_equals(scalars, "output_tokens_source", "usage"),
        reasoning_tokens=_num(scalars, "reasoning_tokens"), chunks=_num(scalars, "chunks"),
        session=_num(scalars, "session"))
    tokens = scalars.column("chunk_tokens")
    del scalars  # (the caller passes its only reference: freed before the token pass)
    pa.default_memory_pool().release_unused()  # and given back to the system, not kept by the allocator
    _token_pass(cols, tokens, token_batches)
    return cols


def _equals(table: pa.Table, name: str, value: str) -> np.ndarray:
    return np.asarray(pc.fill_null(pc.equal(table.column(name), value), False).to_numpy(zero_copy_only=False),
                      dtype=bool)


def _per_token_counts(cols: RecordColumns, tokens: pa.ChunkedArray) -> tuple[np.ndarray, bool]:
    """ITL values each row contributes (its chunks − 1, or the tokens after its first chunk where
    chunks carry several), and whether any row splits gaps over several tokens."""
    chunks = np.nan_to_num(cols.chunks).astype(np.int64)
    counts = np.where(cols.completed, np.maximum(chunks - 1, 0), 0)
    split = False
    if tokens.null_count < len(tokens):
        for i, k in enumerate(tokens.to_pylist()):
            if k is None or not counts[i] or len(k) != chunks[i]:
                continue
            tail = np.asarray(k[1:], dtype=np.int64)
            if np.any(tail != 1):
                counts[i] = int(np.maximum(tail, 1).sum())
                split = True
    return counts, split


def _token_pass(cols: RecordColumns, tokens: pa.ChunkedArray, batches: Callable[[], Iterator[pa.RecordBatch]]) -> None:
    counts, split = _per_token_counts(cols, tokens)
    starts = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    out: np.ndarray = np.empty(int(starts[-1]), dtype=np.float64 if split else np.uint32)
    last = cols.t_last[~np.isnan(cols.t_last)]
    t_end = int(last.max()) if last.size else 0  # the last chunk's arrival (client records: t_last_ns)
    hist = _Hist(t_end)
    seen_max = 0
    for batch in batches():
        b = _Batch(cols, batch)
        seen_max = max(seen_max, hist.add(b, cols))
        out = _place_gaps(out, b, counts, starts)
    if seen_max != t_end:  # records whose t_last_ns is not their last chunk: histogram again, exactly
        hist = _Hist(seen_max)
        for batch in batches():
            hist.add(_Batch(cols, batch), cols)
    cols.itl, cols.itl_unit_ns, cols.itl_counts = out, (1e6 if split else 1.0), counts
    cols.tokens_hist = hist.series()
    step = max(1, -(-out.size // CHART_SAMPLE))
    cols.itl_chart_ms = (out[::step].copy() if split else out[::step] / 1e6) if out.size else np.empty(0)


class _Batch:
    """One batch of token lists: its rows (indices into the columns), flat chunk offsets, list
    offsets from 0, tokens per chunk (None: one each), and the common chunk count when every row has
    the same (then `vals` reshapes to a matrix, the fast path)."""

    def __init__(self, cols: RecordColumns, batch: pa.RecordBatch) -> None:
        ids = batch.column("id").to_numpy()
        rows = np.searchsorted(cols.id, ids)
        if rows.size and (np.any(rows >= cols.id.size) or np.any(cols.id[np.minimum(rows, cols.id.size - 1)] != ids)):
            raise ValueError("token batches name ids the per-request columns lack")
        lists = batch.column("chunk_offsets_ns")
        offs = lists.offsets.to_numpy().astype(np.int64)
        vals = lists.values.to_numpy()[offs[0]: offs[-1]] if len(lists) else np.empty(0, dtype=np.int64)
        offs = offs - offs[0]
        self.lens = np.diff(offs)
        if np.any(self.lens != np.nan_to_num(cols.chunks[rows]).astype(np.int64)):
            raise ValueError("records whose `chunks` differs from the length of their chunk list")
        tok_col = batch.column("chunk_tokens")
        self.toks: list[Any] = [None] * len(batch) if tok_col.null_count == len(batch) else tok_col.to_pylist()
        self.rows, self.vals, self.offs = rows, np.asarray(vals, dtype=np.int64), offs
        self.width = int(self.lens[0]) if self.lens.size and bool(np.all(self.lens == self.lens[0])) else 0

    def absolute(self, cols: RecordColumns, rows: np.ndarray | None = None) -> np.ndarray:
        """Every chunk's arrival, ns from the run origin (of the rows in the boolean mask `rows`, in
        the matrix case)."""
        base = np.nan_to_num(cols.t_send[self.rows]).astype(np.int64)
        if self.width:
            mat = self.vals.reshape(-1, self.width)
            if rows is not None:
                mat, base = mat[rows], base[rows]
            return (mat + base[:, None]).ravel()
        return self.vals + np.repeat(base, self.lens)


class _Hist:
    """Output tokens per second over run time, as `report.data.tokens_per_s_series` draws it: every
    chunk's arrival weighted by its tokens, in slices of at least 50 ms (at most 100)."""

    def __init__(self, t_end_ns: int) -> None:
        self.t_end_ns = t_end_ns
        self.t_end_s = t_end_ns / 1e9
        self.nb = max(1, min(100, int(np.ceil(self.t_end_s / 0.05)))) if self.t_end_s > 0 else 1
        self.counts = np.zeros(self.nb)

    def _bins(self, t: np.ndarray) -> np.ndarray:
        """Slice of each time: [i, i+1) · t_end / nb, the last one closed (as np.histogram)."""
        return np.minimum((t * (self.nb / self.t_end_ns)).astype(np.int64), self.nb - 1)

    def add(self, b: _Batch, cols: RecordColumns) -> int:
        """Count a batch's tokens; returns its last chunk's arrival (0 without chunks). A request whose
        first and last chunk fall in one slice is counted whole; only those across a boundary chunk by
        chunk."""
        if not b.vals.size:
            return 0
        base = np.nan_to_num(cols.t_send[b.rows]).astype(np.int64)
        nonempty = b.lens > 0
        firsts = b.vals[b.offs[:-1][nonempty]] + base[nonempty]
        lasts = b.vals[b.offs[1:][nonempty] - 1] + base[nonempty]
        seen = int(lasts.max())
        if self.t_end_ns <= 0 or seen > self.t_end_ns or int(firsts.min()) < 0:
            return seen  # (the caller counts again with the right end)
        if any(k is not None for k in b.toks) or not b.width:  # the general case: chunk by chunk
            weights = None
            if any(k is not None for k in b.toks):
                weights = np.ones(b.vals.size)
                for j, k in enumerate(b.toks):
                    if k is not None and len(k) == b.lens[j]:
                        weights[b.offs[j]: b.offs[j + 1]] = k
            self.counts += np.bincount(self._bins(b.absolute(cols)), weights=weights, minlength=self.nb)
            return seen
        first_bin, last_bin = self._bins(firsts), self._bins(lasts)
        whole = first_bin == last_bin
        self.counts += np.bincount(first_bin[whole], minlength=self.nb) * float(b.width)
        if not whole.all():
            self.counts += np.bincount(self._bins(b.absolute(cols, ~whole)), minlength=self.nb)
        return seen

    def series(self) -> tuple[list[float], list[float]]:
        if self.t_end_s <= 0:
            return [], []
        width = self.t_end_s / self.nb
        return [round((i + 0.5) * width, 9) for i in range(self.nb)], [float(c) / width for c in self.counts]


def _place_gaps(out: np.ndarray, b: _Batch, counts: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Write each row's per-token gaps at its place in `out` (rows in id order); `out` comes back
    widened to int64 when a gap does not fit uint32 ns (over 4.29 s, or negative)."""
    want = counts[b.rows]
    sel = want > 0
    if not sel.any():
        return out
    if out.dtype != np.float64 and b.width >= 2:  # every row the same chunk count: a matrix
        gaps = np.diff(b.vals.reshape(-1, b.width), axis=1)
        values: np.ndarray = (gaps if sel.all() else gaps[sel]).ravel()
    else:
        values = _row_gaps(out, b, want)
    if out.dtype == np.uint32 and values.size and not 0 <= int(values.min()) <= int(values.max()) <= _U32_MAX:
        out = out.astype(np.int64)
    rows, w = b.rows[sel], want[sel]
    first = int(starts[rows[0]])
    if np.all(np.diff(rows) > 0) and int(starts[rows[-1]]) + int(w[-1]) - first == values.size and \
            np.all(starts[rows[1:]] == starts[rows[:-1]] + w[:-1]):
        out[first: first + values.size] = values  # rows in id order, none skipped: one slice
    else:
        out[np.repeat(starts[rows] - (np.cumsum(w) - w), w) + np.arange(values.size)] = values
    return out


def _row_gaps(out: np.ndarray, b: _Batch, want: np.ndarray) -> np.ndarray:
    """The general path: rows of different lengths, or chunks carrying several tokens (then float ms,
    per record as metrics.itl_gaps_ms)."""
    lens = b.lens
    gaps = np.diff(b.vals)
    keep = np.ones(gaps.size, dtype=bool)  # the difference across two rows is no gap
    inner = b.offs[1:-1]
    keep[inner[(inner > 0) & (inner <= gaps.size)] - 1] = False
    gaps = gaps[keep][np.repeat(want > 0, np.maximum(lens - 1, 0))]
    if out.dtype != np.float64:
        return gaps
    pieces, pos = [], 0
    for j in np.flatnonzero(want > 0).tolist():
        g = gaps[pos: pos + lens[j] - 1] / 1e6
        pos += int(lens[j]) - 1
        k = b.toks[j]
        if k is not None and len(k) == lens[j] and any(x != 1 for x in k[1:]):
            kk = np.maximum(np.asarray(k[1:], dtype=np.int64), 1)
            g = np.repeat(g / kk, kk)
        pieces.append(g)
    return np.concatenate(pieces)
