"""Columnar records: the column summary equals the record-by-record oracle's to the bit, the
compact ITL path equals numpy, the part-file writer survives a kill, export round-trips, old JSONL
results still load."""

from __future__ import annotations

import copy
import dataclasses
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from servescope.report.data import inflight_series, samples_ms, tokens_per_s_series
from servescope.report.html import write_report
from servescope.results import export as export_module
from servescope.results import metrics, tokenpass
from servescope.results.colsummary import streamed_gap_distribution, summarize_columns
from servescope.results.columns import LIST_COLUMNS, SCHEMA, RecordColumns, compact
from servescope.results.export import export_records
from servescope.results.parquet import PARTS, RECORDS, RecordWriter, join_parts, load_columns, read_records
from servescope.results.records import RequestRecord
from servescope.results.store import load_run, write_json
from servescope.results.streaming import (
    GapStats,
    bucket_counts,
    linear_percentiles,
    order_statistics,
    pairwise_sum,
    plan_windows,
)
from tests.support import oracle
from tests.support.synth import synth_records, synth_run_info

SLO = {"ttft_ms": 150.0, "tpot_ms": 21.0}


def realistic() -> list[RequestRecord]:
    """Warm-up, failures of three kinds, a cancelled request, multi-token chunks, a one-token answer,
    requests without usage, a record never sent."""
    recs = synth_records(400, seed=3, warmup=5, fail_every=37)
    for r in recs[40:60]:  # chunks carrying several tokens (usage says more than chunks)
        r.chunk_tokens = [1 + (i % 3) for i in range(len(r.chunk_ns))]
        r.output_tokens = sum(r.chunk_tokens)
    recs[70].output_tokens, recs[70].input_tokens = 1, None
    recs[71].output_tokens_source = "counted"
    recs[72].status, recs[72].error_kind = "error", "cancelled"
    recs[73].t_send_ns = None
    recs[73].t_first_ns = recs[73].t_last_ns = recs[73].t_end_ns = recs[73].t_first_answer_ns = None
    recs[73].chunk_ns, recs[73].chunk_tokens, recs[73].chunks, recs[73].status = [], [], 0, "error"
    for k, r in enumerate(recs[100:130]):  # sent on connections opened inside the window (a few failed)
        r.setup_ns = 200_000 + 37_000 * k
    return recs


def test_column_summary_equals_the_record_summary() -> None:
    recs = realistic()
    run = synth_run_info("c", recs)
    for slo in (None, SLO):
        want = oracle.summarize(recs, run=run, slo=slo, gpus=4, gpus_source="--gpus")
        got = summarize_columns(RecordColumns.from_records(recs), run=run, slo=slo, gpus=4, gpus_source="--gpus")
        assert orjson.dumps(got) == orjson.dumps(want)  # to the bit, key order included


def test_compact_itl_path_equals_numpy() -> None:
    recs = synth_records(300, seed=5)
    want = oracle.summarize(recs)
    cols = RecordColumns.from_records(recs)
    assert cols.itl.dtype == np.uint32 and cols.itl_unit_ns == 1.0
    got = summarize_columns(cols, compact_above=0)  # the path of runs with > 16 M gaps
    assert got["latency_ms"]["itl"] == want["latency_ms"]["itl"]
    assert cols.itl_ms().tolist() == samples_ms(recs)["itl"].tolist()  # left in send order


@pytest.mark.parametrize("n", [1, 7, 129, 1000, 65_537, 300_001])
def test_pairwise_sum_and_percentiles_match_numpy(n: int) -> None:
    rng = np.random.default_rng(n)
    ints = rng.integers(1, 4_000_000_000, size=n, dtype=np.int64).astype(np.uint32)
    ms = ints / 1e6
    for piece in (8, 128, 1000, 1 << 22):
        assert pairwise_sum(n, lambda i, j: ints[i:j] / 1e6, max_piece=piece) == float(np.add.reduce(ms))
    qs = (0, 10, 50, 90, 95, 99, 99.9, 100)
    assert linear_percentiles(ints, qs, 1e6) == [float(x) for x in np.percentile(ms, qs)]
    ranks = rng.integers(0, n, 5)
    for piece in (7, 1 << 22):
        assert order_statistics(ints, ranks, max_piece=piece).tolist() == np.sort(ints)[ranks].tolist()
        assert (
            order_statistics(ints.astype(np.int64) - 2**40, ranks, max_piece=piece).tolist()
            == (np.sort(ints.astype(np.int64))[ranks] - 2**40).tolist()
        )


def test_report_series_from_columns_equal_the_records() -> None:
    recs = realistic()
    cols = RecordColumns.from_records(recs)
    s = samples_ms(cols)
    done = [r for r in recs if not r.warmup and r.t_send_ns is not None and r.status == "ok"]
    assert s["itl"].tolist() == np.concatenate([oracle.itl_gaps_ms(r) for r in done]).tolist()
    assert s["ttft"].tolist() == [x for r in done if (x := oracle.request_latencies_ms(r)["ttft"]) is not None]
    xs, ys = tokens_per_s_series(cols)
    assert len(xs) == 100 and sum(ys) * (xs[1] - xs[0]) == pytest.approx(
        sum(sum(r.chunk_tokens) if len(r.chunk_tokens) == len(r.chunk_ns) else len(r.chunk_ns) for r in recs)
    )
    _, ty = inflight_series(cols)
    assert max(ty) <= 8 and ty[-1] == 0


def test_writer_parts_survive_a_kill_and_join_at_close(tmp_path: Path) -> None:
    recs = realistic()
    want = [r.to_dict() for r in copy.deepcopy(recs)]
    w = RecordWriter(tmp_path / RECORDS, flush_records=64, flush_s=3600)
    for r in recs[:200]:
        w.write(r)
    w.flush()  # as the timer would; then the process "dies": no close
    for f in w._writes:
        f.result()
    (tmp_path / PARTS / "part-99999.parquet.tmp").write_bytes(b"PAR1 torn")  # a part cut short by the kill
    parts = sorted((tmp_path / PARTS).glob("part-*.parquet"))
    assert len(parts) == 4 and not (tmp_path / RECORDS).exists()
    assert [r.to_dict() for r in read_records(tmp_path)] == want[:200]
    assert len(pd.read_parquet(parts[0])) == 64
    for r in recs[200:]:
        w.write(r)
    w.close()
    assert not (tmp_path / PARTS).exists() and pq.ParquetFile(tmp_path / RECORDS).metadata.num_row_groups == 1
    join_parts_in_groups = RecordWriter(tmp_path / "b" / RECORDS, flush_records=64)
    for r in recs:
        join_parts_in_groups.write(r)
    join_parts_in_groups.flush()
    for f in join_parts_in_groups._writes:
        f.result()
    join_parts(join_parts_in_groups.parts, tmp_path / "b" / RECORDS, group_rows=150)  # 3 parts a group, then 1
    meta = pq.ParquetFile(tmp_path / "b" / RECORDS).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [192, 192, len(recs) - 384]
    assert [r.to_dict() for r in read_records(tmp_path)] == want
    # the writer keeps no record and leaves the caller's as they were; packed (as a run's shards pack
    # each as it finishes) they mean the same
    assert [r.to_dict() for r in recs] == want
    compact(recs)
    assert not isinstance(recs[0].chunk_ns, list) and oracle.summarize(recs) == oracle.summarize(
        [RequestRecord(**d) for d in want]
    )


def test_export_round_trips(tmp_path: Path) -> None:
    recs = realistic()
    want = [r.to_dict() for r in copy.deepcopy(recs)]
    with RecordWriter(tmp_path / "run" / RECORDS, flush_records=100) as w:
        for r in recs:
            w.write(r)
    run = tmp_path / "run"
    path, rows = export_records(run, "jsonl", tmp_path / "out.jsonl")
    assert rows == len(recs) and [r.to_dict() for r in read_records(path)] == [
        {**d, "chunk_tokens": d["chunk_tokens"] or [1] * len(d["chunk_ns"])} for d in want
    ]
    path, _ = export_records(run, "parquet", tmp_path / "out.parquet")
    assert pq.read_table(path).equals(pq.read_table(run / RECORDS))
    path, _ = export_records(run, "csv", tmp_path / "out.csv")
    frame = pd.read_csv(path, keep_default_na=False, dtype={"chunk_offsets_ns": str, "chunk_tokens": str})
    assert frame["id"].tolist() == [d["id"] for d in want]
    for d, (offs, toks) in zip(want, zip(frame["chunk_offsets_ns"], frame["chunk_tokens"])):
        assert [int(x) + (d["t_send_ns"] or 0) for x in offs.split()] == d["chunk_ns"]
        assert [int(x) for x in toks.split()] == ([] if set(d["chunk_tokens"]) <= {1} else d["chunk_tokens"])
    assert export_records(run, "parquet") == (run / RECORDS, len(recs))  # its own file: nothing to write


def test_old_jsonl_result_still_loads_and_renders(tmp_path: Path) -> None:
    recs = realistic()
    run = tmp_path / "old"
    run.mkdir()
    lines = [orjson.dumps(r) for r in recs]
    (run / "requests.jsonl").write_bytes(b"\n".join(lines) + b"\n" + lines[0][:30])  # a torn last line
    write_json(run / "manifest.json", {"run_id": "old", "config": {"model": "m", "url": "http://x"}})
    loaded = load_run(run)  # no summary.json: recomputed from the records
    assert loaded.summary["requests"] == oracle.summarize(recs)["requests"]
    assert loaded.summary["latency_ms"] == oracle.summarize(recs)["latency_ms"]
    assert [dataclasses.asdict(r) for r in loaded.records] == [dataclasses.asdict(r) for r in recs]
    assert "Requests in flight" in write_report(run).read_text()
    assert load_columns(run).id.tolist() == [r.id for r in recs]


def _streamed(monkeypatch: pytest.MonkeyPatch, *, pilot_every: int = 2, chart: int = 1000) -> None:
    """Columns built from now on keep no gap (as a run of more than HOLD_UP_TO gaps does)."""
    monkeypatch.setattr(tokenpass, "HOLD_UP_TO", 0)
    monkeypatch.setattr(tokenpass, "PILOT_EVERY", pilot_every)
    monkeypatch.setattr(tokenpass, "CHART_SAMPLE", chart)


def _exact_mean_std(ns: np.ndarray) -> tuple[float, float]:
    """The mean and population standard deviation of ns integers, in ms, from exact rationals."""
    n, s1, s2 = len(ns), sum(int(x) for x in ns), sum(int(x) ** 2 for x in ns)
    return float(Fraction(s1, n * 10**6)), math.sqrt(Fraction(n * s2 - s1 * s1, n * n * 10**12))


@pytest.mark.parametrize("pilot_every", [1, 3, 1000])
def test_a_large_run_keeps_no_gap_and_gives_the_same_itl_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pilot_every: int
) -> None:
    """A run of more gaps than HOLD_UP_TO is summarised from sums, bucket counts and the gaps kept
    in the percentile windows (or a second pass where a window misses: pilot_every=1000 samples
    one group of rows only): every ITL figure as numpy's, mean and std exact."""
    recs = synth_records(700, seed=11, concurrency=16)
    held = RecordColumns.from_records(recs)
    want = oracle.summarize(recs)["latency_ms"]["itl"]
    with RecordWriter(tmp_path / RECORDS, flush_records=64) as w:  # 11 row groups, read in 2 parts
        for r in recs:
            w.write(r)
    _streamed(monkeypatch, pilot_every=pilot_every)
    for cols in (RecordColumns.from_records(recs), load_columns(tmp_path)):
        assert cols.held_itl is None and cols.gap_stats is not None and cols.gap_stats.n == held.itl.size
        got = summarize_columns(cols)["latency_ms"]["itl"]
        assert {k: v for k, v in got.items() if k not in ("mean", "std")} == {
            k: v for k, v in want.items() if k not in ("mean", "std")
        }
        assert (got["mean"], got["std"]) == _exact_mean_std(held.itl)
        assert got["mean"] == pytest.approx(want["mean"], rel=1e-15)
        assert got["std"] == pytest.approx(want["std"], rel=1e-14)
        step = -(-held.itl.size // 1000)
        assert cols.itl_chart_ms.tolist() == (held.itl[::step] / 1e6).tolist()  # every step-th in send order
        assert cols.itl.tolist() == held.itl.tolist()  # read again when asked (compare), in send order


def test_windows_that_miss_fall_back_to_a_second_pass() -> None:
    rng = np.random.default_rng(4)
    gaps = rng.lognormal(np.log(20e6), 0.5, 50_000).astype(np.int64)
    ms = gaps / 1e6
    want = [float(x) for x in np.percentile(ms, metrics.PERCENTILES)]
    ranks_q = np.asarray(metrics.PERCENTILES) / 100
    right = plan_windows(bucket_counts(gaps), ranks_q)
    wrong = plan_windows(bucket_counts(np.sort(gaps)[:5000]), ranks_q)  # from the smallest gaps only: they miss
    for windows, second_passes in ((right, 0), (wrong, 1), (None, 1)):
        stats = GapStats(windows=windows)
        for piece in np.array_split(gaps, 7):
            stats.add(piece, int(piece.min()), int(piece.max()))
        passes: list[int] = []

        def parts(passes: list[int] = passes) -> list[list[np.ndarray]]:
            passes.append(1)
            return [np.array_split(gaps, 3)]

        got = streamed_gap_distribution(stats, parts)
        assert [got["median"], got["p90"], got["p95"], got["p99"]] == want
        assert (got["min"], got["max"], got["count"]) == (ms.min(), ms.max(), gaps.size)
        assert len(passes) == second_passes


def test_csv_export_equals_pyarrow_csv_of_the_whole_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups of rows formatted on threads and written in order: the file pyarrow.csv writes for the
    whole table (strings quoted, quotes doubled, nulls empty; list columns as quoted space-separated
    integers), whatever the row groups."""
    recs = realistic()
    recs[3].status, recs[3].error_kind, recs[3].error_detail = "error", "http_5xx", 'he said "no", then\nleft'
    recs[4].response_id = 'a"b,c'
    with RecordWriter(tmp_path / "run" / RECORDS, flush_records=50) as w:
        for r in recs:
            w.write(r)
    table = pq.read_table(tmp_path / "run" / RECORDS)
    cols = [
        pc.fill_null(
            pc.binary_join(
                pa.ListArray.from_arrays(
                    table.column(n).combine_chunks().offsets,
                    pc.cast(table.column(n).combine_chunks().values, pa.string()),
                ),
                " ",
            ),
            "",
        )
        if n in LIST_COLUMNS
        else table.column(n)
        for n in SCHEMA.names
    ]
    sink = pa.BufferOutputStream()
    pacsv.write_csv(pa.table(cols, names=list(SCHEMA.names)), sink)
    for rows in (100, 8192):  # several groups of rows (threads), one
        monkeypatch.setattr(export_module, "_GROUP_ROWS", rows)
        path, n = export_records(tmp_path / "run", "csv", tmp_path / f"out-{rows}.csv")
        assert n == len(recs) and path.read_bytes() == sink.getvalue().to_pybytes()
