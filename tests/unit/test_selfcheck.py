"""Self-validation (results/selfcheck.py): each check passes on a consistent synthetic run and fails
on a crafted one that breaks exactly what it checks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from servescope.results.columns import RecordColumns
from servescope.results.records import RequestRecord
from servescope.results.schema import ServerMetrics, Summary
from servescope.results.selfcheck import (
    Bounds,
    bounds_from_cost,
    concurrency_held_columns,
    percentile_floors,
    physical_bounds,
    validate_columns,
)
from servescope.sim.steptime import StepCost
from tests.support import oracle
from tests.support.oracle import concurrency_held, e2e_consistency, littles_law, token_counts, validate
from tests.support.synth import synth_records, synth_run_info
from tests.unit.test_engineview import agreeing_engine_view


def _summary(records: list[RequestRecord], server: ServerMetrics | None = None) -> Summary:
    s = oracle.summarize(records, run=synth_run_info("v", records))
    s["server"] = server
    return s


def _server(generated: float) -> ServerMetrics:
    return {"metrics_used": {}, "prefix_cache_hit_rate": 0.0, "generation_tokens": generated, "prompt_tokens": 1000.0}


@pytest.fixture
def records() -> list[RequestRecord]:
    return synth_records(400, concurrency=16, seed=3, warmup=4)


def test_a_consistent_run_passes_every_check(records: list[RequestRecord]) -> None:
    gen = sum(r.output_tokens or 0 for r in records)
    s = _summary(records, _server(gen))
    s["engine_view"] = agreeing_engine_view(records, s)
    bounds: Bounds = {"itl_floor_ms": 5.0, "tokens_per_s_ceiling": 1e6, "source": "test"}
    checks = validate(records, s, bounds=bounds)
    assert [c["name"] for c in checks] == [
        "token_counts",
        "littles_law",
        "e2e_consistency",
        "physical_bounds",
        "percentile_floors",
        "engine_agreement",
    ]
    assert all(c["status"] == "pass" for c in checks), checks


def test_token_counts_fail_when_the_server_counted_other_traffic(records: list[RequestRecord]) -> None:
    gen = sum(r.output_tokens or 0 for r in records)
    assert token_counts(records, _server(gen * 1.005))["status"] == "pass"  # within 1%
    c = token_counts(records, _server(gen * 1.5))
    assert c["status"] == "fail" and "counter" in c["why"], c
    assert c["figures"]["server_generation_tokens"] == gen * 1.5


def test_token_counts_fail_when_chunks_outnumber_usage(records: list[RequestRecord]) -> None:
    bad = [dataclasses.replace(r, chunks=(r.output_tokens or 0) + 3) if r.id % 10 == 0 else r for r in records]
    c = token_counts(bad, None)
    assert c["status"] == "fail" and c["figures"]["requests_more_chunks_than_usage"] == 41, c
    assert token_counts(records, None)["status"] == "pass"


def test_token_counts_skip_without_usage_or_counter(records: list[RequestRecord]) -> None:
    counted = [dataclasses.replace(r, output_tokens_source="counted") for r in records]
    assert token_counts(counted, None)["status"] == "skipped"


def test_littles_law_fails_when_failed_requests_hold_their_slots(records: list[RequestRecord]) -> None:
    assert littles_law(records, _summary(records))["status"] == "pass"
    # every tenth request times out after 10 s: in flight all that time, yet in no latency or throughput
    # figure of completed requests
    stuck = [
        dataclasses.replace(r, status="error", error_kind="timeout", t_end_ns=(r.t_send_ns or 0) + 10**10)
        if r.id % 10 == 0
        else r
        for r in records
    ]
    c = littles_law(stuck, _summary(stuck))
    assert c["status"] == "fail" and "failed requests" in c["why"], c
    assert c["figures"]["mean_in_flight"] > c["figures"]["throughput_x_latency"]  # type: ignore[operator]


def test_e2e_consistency_fails_when_usage_disagrees_with_the_chunks(records: list[RequestRecord]) -> None:
    assert e2e_consistency(records)["status"] == "pass"
    # a fifth of the requests report twice the tokens their chunks carried
    bad = [
        dataclasses.replace(r, output_tokens=2 * (r.output_tokens or 0)) if r.id % 5 == 0 and r.ok else r
        for r in records
    ]
    c = e2e_consistency(bad)
    assert c["status"] == "fail" and c["figures"]["share_off"] > 0.15, c  # type: ignore[operator]


def test_physical_bounds(records: list[RequestRecord]) -> None:
    s = _summary(records)
    itl = s["latency_ms"]["itl"]["mean"]
    assert itl is not None
    ok: Bounds = {"itl_floor_ms": itl * 0.5, "tokens_per_s_ceiling": 1e6, "source": "t"}
    assert physical_bounds(s, ok)["status"] == "pass"
    too_fast = physical_bounds(s, {**ok, "itl_floor_ms": itl * 1.5})
    assert too_fast["status"] == "fail" and "stream the weights" in too_fast["why"]
    over = physical_bounds(s, {**ok, "tokens_per_s_ceiling": s["throughput"]["output_tokens_per_s"] / 2})
    assert over["status"] == "fail" and "roofline" in over["why"]
    assert physical_bounds(s, None)["status"] == "skipped"


def test_bounds_from_a_step_cost_by_hand() -> None:
    # 16 GB of weights at 3.35 TB/s: 4.776 ms a step; 2 tokens a step (speculative): 2.388 ms a token.
    # 989.5 TFLOP/s over 16 GFLOP a token: 61,844 tokens/s a replica, 2 replicas.
    cost = StepCost(
        dense_weight_bytes=16e9,
        kv_bytes_per_token=1e5,
        flops_per_token=16e9,
        hbm_bytes_per_s=3.35e12,
        flops_per_s=989.5e12,
        decode_tokens_per_seq=2.0,
    )
    b = bounds_from_cost(cost, replicas=2, source="x")
    assert b["itl_floor_ms"] == pytest.approx(16e9 / 3.35e12 * 1e3 / 2)
    assert b["tokens_per_s_ceiling"] == pytest.approx(2 * 989.5e12 / 16e9)


def test_percentile_floors_mark_an_under_sampled_p99() -> None:
    few = synth_records(200, seed=1)
    c = percentile_floors(_summary(few))
    assert c["status"] == "marked" and "TTFT P99 from 200" in c["why"] and "ITL" not in c["why"], c
    assert percentile_floors(_summary(synth_records(400, seed=1)))["status"] == "pass"


def test_concurrency_held_sees_slots_left_empty(records: list[RequestRecord]) -> None:
    held = concurrency_held(records, 16)
    assert held is not None and held > 0.97
    # every refill waits 200 ms after its slot freed (a request lives ~1.4 s: 1.4 / 1.6 of the time held)
    late = synth_records(400, concurrency=16, seed=3)
    for r in late[16:]:
        r.t_send_ns = (r.t_send_ns or 0) + 200_000_000 * (1 + (r.id - 16) // 16)
        shift = 200_000_000 * (1 + (r.id - 16) // 16)
        r.t_end_ns = (r.t_end_ns or 0) + shift
        r.t_first_ns, r.t_last_ns = (r.t_first_ns or 0) + shift, (r.t_last_ns or 0) + shift
    lagged = concurrency_held(late, 16)
    assert lagged is not None and lagged == pytest.approx(1.38 / 1.58, abs=0.04), lagged
    assert concurrency_held(records[:10], 16) is None  # no refill: nothing to judge


# ------------------------------------------------------------------ the column path: the same figures
def _varied(n: int = 900, seed: int = 5) -> list[RequestRecord]:
    """Synthetic records with every kind of row the checks treat apart: warm-up, failures, chunks that
    carry several tokens, one-chunk answers, counted (not usage) tokens, input usage missing."""
    recs = synth_records(n, concurrency=24, seed=seed, warmup=6, fail_every=37)
    for r in recs:
        if not r.ok:
            continue
        if r.id % 7 == 0 and len(r.chunk_ns) >= 4:  # chunks of 2 tokens (the last alone if odd)
            ns = list(r.chunk_ns)
            r.chunk_ns = ns[::2] if len(ns) % 2 else [*ns[::2][:-1], ns[-1]]
            r.chunk_tokens = [2] * (len(r.chunk_ns) - 1) + [r.output_tokens - 2 * (len(r.chunk_ns) - 1)]  # type: ignore[operator]
            r.chunks = len(r.chunk_ns)
            r.t_last_ns = r.chunk_ns[-1]
        elif r.id % 11 == 0:  # the whole answer in one chunk
            r.chunk_ns, r.chunk_tokens, r.chunks = [r.chunk_ns[-1]], [r.output_tokens or 0], 1
            r.t_first_ns = r.t_first_answer_ns = r.t_last_ns = r.chunk_ns[0]
        if r.id % 13 == 0:
            r.output_tokens_source = "counted"
        if r.id % 17 == 0:
            r.input_tokens = None
    return recs


def _same(a: object, b: object, where: str = "", rel: float = 1e-12) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}", rel)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]", rel)
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=rel, abs=1e-12), where
    else:
        assert a == b and type(a) is type(b), (where, a, b)


@pytest.mark.parametrize(("seed", "piece"), [(5, None), (6, 50)])
def test_the_column_path_gives_the_record_paths_figures(
    seed: int, piece: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if piece:  # the gaps read a few rows at a time, as a long run's are
        from servescope.results import precision

        monkeypatch.setattr(precision, "_PIECE", piece)
    recs = _varied(seed=seed)
    cols = RecordColumns.from_records(recs)
    gen = sum(r.output_tokens or 0 for r in recs)
    for server in (None, _server(gen), _server(gen * 1.5)):
        s = _summary(recs, server)
        bounds: Bounds = {"itl_floor_ms": 5.0, "tokens_per_s_ceiling": 1e6, "source": "test"}
        by_record = validate(recs, s, bounds=bounds)
        by_column = validate_columns(cols, s, bounds=bounds)
        # exact, but E2E's per-request mean gap, summed in another order (within rounding)
        _same(by_record, by_column, "validation", rel=1e-9)
        assert [c["status"] for c in by_record] == [c["status"] for c in by_column]
    assert validate(recs, _summary(recs, _server(gen * 1.5)))[0]["status"] == "fail"  # token_counts
    assert concurrency_held(recs, 24) == concurrency_held_columns(cols, 24)
    few = recs[:10]
    assert concurrency_held(few, 24) is concurrency_held_columns(RecordColumns.from_records(few), 24) is None
    # a failing E2E check is failed the same way
    bad = [
        dataclasses.replace(r, output_tokens=2 * (r.output_tokens or 0)) if r.id % 5 == 0 and r.ok else r for r in recs
    ]
    _same(e2e_consistency(bad), validate_columns(RecordColumns.from_records(bad), _summary(bad))[2], "e2e", rel=1e-9)
    assert e2e_consistency(bad)["status"] == "fail"


def test_the_column_path_reads_an_empty_run() -> None:
    failed = synth_records(40, fail_every=1)
    s = _summary(failed)
    _same(validate(failed, s), validate_columns(RecordColumns.from_records(failed), s), "validation")


def test_a_run_that_keeps_no_gap_gets_the_same_checks_without_reading_every_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """E2E consistency's per-request gap sums of a large run, read again from the token lists a batch
    at a time: the figures of the columns that hold every gap, to the bit."""
    from tests.unit.test_precision import kept_none

    recs, held, streamed = kept_none(tmp_path, monkeypatch)
    s = _summary(recs)
    want = validate_columns(held, s)
    assert want[2]["name"] == "e2e_consistency" and want[2]["status"] == "pass"
    assert validate_columns(streamed, s) == want
    assert streamed.held_itl is None  # no array of every gap was made
