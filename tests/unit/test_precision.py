"""Confidence intervals of one run's percentiles (results/precision.py): coverage on autocorrelated
data with known quantiles, the open side below the sample floor, batching by request."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from servescope.results import parquet, precision, tokenpass
from servescope.results.colsummary import summarize_columns
from servescope.results.columns import RecordColumns
from servescope.results.parquet import RECORDS, RecordWriter, load_columns
from servescope.results.precision import half_width_pct, percentile_floor, quantile_interval
from servescope.results.records import RequestRecord
from tests.support import oracle

_Z = {0.5: 0.0, 0.99: 2.3263478740408408}  # standard normal quantiles
_SIGMA = 0.5  # log-scale spread: lognormal latencies, median 100 ms, P99 ~320 ms


def _ar1_lognormal(runs: int, n: int, phi: float, seed: int) -> np.ndarray:
    """`runs` series of n latencies: 100·exp(σ·z), z a stationary AR(1) with unit variance (so every
    value has the same known marginal distribution, and neighbours are correlated by phi)."""
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((runs, n))
    z = np.empty((runs, n))
    z[:, 0] = e[:, 0]
    s = math.sqrt(1 - phi * phi)
    for t in range(1, n):
        z[:, t] = phi * z[:, t - 1] + s * e[:, t]
    return 100.0 * np.exp(_SIGMA * z)


def _coverage(x: np.ndarray, q: float, *, iid: bool = False) -> tuple[float, int]:
    """Share of runs whose interval covers the true quantile, and runs with an open side."""
    truth = 100.0 * math.exp(_SIGMA * _Z[q])
    hit = opened = 0
    for row in x:
        if iid:  # the same interval without the batches: as if requests were independent
            se = math.sqrt(q * (1 - q) / row.size)
            lo, hi = np.percentile(row, [100 * (q - 1.96 * se), 100 * min(1.0, q + 1.96 * se)])
            iv = {"low": float(lo), "high": float(hi)}
        else:
            got = quantile_interval(row, q)
            assert got is not None
            iv = {"low": got["low"], "high": got["high"]}
        opened += iv["high"] is None or iv["low"] is None
        lo = -math.inf if iv["low"] is None else iv["low"]
        hi = math.inf if iv["high"] is None else iv["high"]
        hit += lo <= truth <= hi
    return hit / len(x), opened


@pytest.mark.parametrize("n", [2000, 5000])
def test_interval_covers_the_true_percentile_in_at_least_90_percent_of_200_autocorrelated_runs(n: int) -> None:
    x = _ar1_lognormal(200, n, phi=0.8, seed=n)
    for q in (0.5, 0.99):
        covered, opened = _coverage(x, q)
        assert covered >= 0.90, (q, covered)
        assert opened <= 20, (q, opened)  # and it says something: open in at most 10% of runs
    # the batches matter: an interval that treats neighbours as independent covers far less often
    naive, _ = _coverage(x, 0.5, iid=True)
    assert naive < 0.85, naive


def test_interval_is_as_tight_as_the_data_allow() -> None:
    x = _ar1_lognormal(1, 20_000, phi=0.5, seed=3)[0]
    iv = quantile_interval(x, 0.5)
    assert iv is not None and iv["low"] is not None and iv["high"] is not None
    assert iv["low"] < iv["estimate"] < iv["high"]
    assert iv["estimate"] == pytest.approx(float(np.median(x)))
    assert (half_width_pct(iv) or 100) < 3  # 20,000 values: the median to within a few %


def test_p99_has_no_upper_end_below_its_sample_floor() -> None:
    assert percentile_floor(0.99) == 368 and percentile_floor(0.999) == 3688
    rng = np.random.default_rng(0)
    few = quantile_interval(rng.lognormal(size=300), 0.99)
    assert few is not None and few["high"] is None and half_width_pct(few) is None
    many = quantile_interval(rng.lognormal(size=3000), 0.99)
    assert many is not None and many["high"] is not None


def test_too_few_values_give_no_interval() -> None:
    assert quantile_interval([1.0] * 10, 0.5) is None
    assert precision.batch_count(15) == 0 and precision.batch_count(16) == 2
    assert precision.batch_count(10_000) == precision.MAX_BATCHES


def test_itl_batches_keep_each_request_whole() -> None:
    """Two kinds of requests alternate in blocks: fast tokens (10 ms) then slow (30 ms). Batching by
    request sees the blocks; the interval for the median ITL is wide, not the per-token binomial."""
    rng = np.random.default_rng(1)
    gaps = [np.full(100, 10.0 if (i // 50) % 2 == 0 else 30.0) + rng.normal(0, 0.1, 100) for i in range(400)]
    out = oracle.run_intervals({"ttft": [float(g[0]) for g in gaps]}, itl=gaps)
    itl = out["itl"]["median"]
    assert itl is not None and itl["low"] is not None and itl["high"] is not None
    assert itl["low"] < 15 and itl["high"] > 25  # half the requests slow, half fast: the median is unknown
    assert set(out) == {"ttft", "itl"} and set(out["ttft"]) == {"median", "p99"}


def test_values_that_are_none_are_left_out() -> None:
    out = oracle.run_intervals({"tpot": [None, *[float(v) for v in range(1, 201)]]})
    iv = out["tpot"]["median"]
    assert iv is not None and iv["estimate"] == pytest.approx(100.5)


def test_stop_rule_needs_the_target_twice_in_a_row() -> None:
    from tests.support.synth import synth_records

    many = synth_records(4000, seed=2)
    rule = precision.StopRule(10.0)
    assert oracle.imprecise(many, 10.0) == []
    assert rule(many) is None  # the first look that meets the target only arms the rule
    reason = rule(many)
    assert reason is not None and reason.startswith("target precision reached") and "4,000" in reason
    few = synth_records(100, seed=2)
    fresh = precision.StopRule(10.0)
    assert fresh(few) is None and fresh(few) is None  # a P99 from 100 requests is not bounded: never
    assert "ttft p99" in oracle.imprecise(few, 10.0)
    block = oracle.with_target(oracle.precision_block(few), few, 10.0, None, "the limit came first")
    assert block["met"] is False and block["stop_reason"].startswith("the limit came first; still wider")


def _records_and_columns(split: bool) -> tuple[list[RequestRecord], RecordColumns]:
    from tests.unit.test_selfcheck import _varied

    recs = _varied(1500, seed=8)
    if not split:  # every chunk one token: the gaps stay integer ns in the columns
        recs = [r for r in recs if not r.chunk_tokens or max(r.chunk_tokens) <= 1 or r.chunks == 1]
    return recs, RecordColumns.from_records(recs)


@pytest.mark.parametrize(("split", "piece"), [(False, None), (True, None), (False, 100), (True, 37)])
def test_the_column_path_gives_the_record_paths_intervals(
    split: bool, piece: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.unit.test_selfcheck import _same

    if piece:  # the gaps read a few rows at a time, as a long run's are
        monkeypatch.setattr(precision, "_PIECE", piece)
    recs, cols = _records_and_columns(split)
    assert (cols.itl_unit_ns == 1e6) is split
    block = oracle.precision_block(recs)
    assert all(iv is not None for m in block["metrics"].values() for iv in m.values())
    _same(block, precision.precision_block_columns(cols), "precision")
    # the ITL interval from the compact integer gaps (a long run's path) is the same too
    _same(block, precision.precision_block_columns(cols, compact_above=0), "compact")
    for target in (1.0, 10.0, 50.0):
        assert oracle.imprecise(recs, target) == precision.imprecise_columns(cols, target)
        _same(
            oracle.with_target(block, recs, target, None, "the limit came first"),
            precision.with_target_columns(block, cols, target, None, "the limit came first"),
            "target",
        )
    assert oracle.imprecise(recs, 1.0) and not oracle.imprecise(recs, 50.0)


def test_the_stop_rule_keeps_three_numbers_a_request_and_says_what_the_records_say() -> None:
    from tests.support.synth import synth_records

    many = synth_records(4000, seed=2, warmup=3, fail_every=50)
    observed = precision.StopRule(10.0)
    rng = np.random.default_rng(0)
    for r in [many[i] for i in rng.permutation(len(many))]:  # in the order they finish, not sent
        observed.observe(r)
    assert observed.observed == sum(1 for r in many if r.ok and not r.warmup)
    given = precision.StopRule(10.0)
    assert observed() is None and given(many) is None  # armed at the first look
    assert observed() == given(many) is not None
    few = precision.StopRule(10.0)
    for r in many[:100]:
        few.observe(r)
    assert few() is None and few() is None


def kept_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[RequestRecord], RecordColumns, RecordColumns]:
    """Records (warm-up, failures, one-chunk answers; one token a chunk: a large run's integer gaps)
    whose ids are not in send order, written in the order they end into several row groups; their
    columns read back holding every gap, and read back as a run of more than HOLD_UP_TO gaps is
    (keeping none: a `tokenpass.GapReader` reads them again)."""
    recs, _ = _records_and_columns(split=False)
    for r, i in zip(recs, np.random.default_rng(1).permutation(len(recs)), strict=True):
        r.id = int(i)
    monkeypatch.setattr(parquet, "join_parts", functools.partial(parquet.join_parts, group_rows=150))
    with RecordWriter(tmp_path / RECORDS, flush_records=64) as w:
        for r in sorted(recs, key=lambda r: r.t_end_ns or 0):
            w.write(r)
    assert pq.ParquetFile(tmp_path / RECORDS).metadata.num_row_groups > 4
    held = load_columns(tmp_path)
    assert held.held_itl is not None and held.held_itl.size
    monkeypatch.setattr(tokenpass, "HOLD_UP_TO", 0)
    monkeypatch.setattr(tokenpass, "PILOT_EVERY", 3)
    streamed = load_columns(tmp_path)
    assert streamed.held_itl is None and isinstance(streamed.gap_parts, tokenpass.GapReader)
    return sorted(recs, key=lambda r: r.id), held, streamed


@pytest.mark.parametrize("summary_first", [False, True])
def test_a_run_that_keeps_no_gap_gets_the_same_intervals_without_reading_every_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, summary_first: bool
) -> None:
    """The ITL interval of a large run: each request's counts from the token lists read again a batch
    at a time, the estimates the summary's percentiles (or computed, before the summary), the ends
    from the gaps kept around the percentiles: the in-memory path's figures, to the bit."""
    from tests.unit.test_selfcheck import _same

    recs, held, streamed = kept_none(tmp_path, monkeypatch)
    want = precision.precision_block_columns(held)
    assert want == precision.precision_block_columns(held, compact_above=0)
    assert all(iv is not None for iv in want["metrics"]["itl"].values())
    if summary_first:
        summarize_columns(streamed, compact_above=0)
        assert streamed.itl_summary is not None
    assert precision.precision_block_columns(streamed, compact_above=0) == want
    assert streamed.held_itl is None  # no array of every gap was made
    _same(oracle.precision_block(recs), want, "records")


def test_gap_pieces_cover_every_request_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`row_gaps_ms` names each request with gaps once, with its own gaps, held or read again."""
    _, held, streamed = kept_none(tmp_path, monkeypatch)
    starts = np.cumsum(held.itl_counts) - held.itl_counts
    want = [
        float(np.sum(held.itl[a : a + n] / 1e6)) for a, n in zip(starts.tolist(), held.itl_counts.tolist(), strict=True)
    ]
    got = []
    for cols in (held, streamed):
        counts = precision.per_row(cols, lambda ms, b: np.diff(b)[None, :], 1, np.int64)[0]
        assert counts.tolist() == held.itl_counts.tolist()
        got.append(precision.per_row(cols, lambda ms, b: np.add.reduceat(ms, b[:-1])[None, :], 1, np.float64)[0])
        assert got[-1].tolist() == pytest.approx(want, rel=1e-13)
    assert got[0].tolist() == got[1].tolist()  # each request's gaps summed alike: the same, to the bit
    assert streamed.held_itl is None
