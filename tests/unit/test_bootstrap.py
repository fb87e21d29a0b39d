"""Bootstrap ratio intervals: estimators, determinism, repeats."""

from __future__ import annotations

import numpy as np
import pytest

from servescope.report.compare import side_data
from servescope.results.bootstrap import (
    METRICS,
    SideData,
    bootstrap_side,
    ratio_ci,
    weighted_quantile_rows,
)
from servescope.results.store import RunResult
from tests.support.synth import summarize_records, synth_records


def _run(records, name="r") -> RunResult:
    from pathlib import Path

    return RunResult(path=Path(name), summary={}, manifest={}, records=records)


def test_weighted_quantile_with_unit_weights_is_inverted_cdf() -> None:
    rng = np.random.default_rng(0)
    v = np.sort(rng.lognormal(size=501))
    for q in (0.01, 0.5, 0.9, 0.99):
        got = weighted_quantile_rows(v, np.ones((1, v.size)), q)[0]
        assert got == np.quantile(v, q, method="inverted_cdf")


def test_weighted_quantile_counts_repeated_weights() -> None:
    v = np.array([1.0, 2.0, 3.0])
    # weights 0,0,5: the sample is five copies of 3.0
    assert weighted_quantile_rows(v, np.array([[0.0, 0.0, 5.0]]), 0.5)[0] == 3.0
    assert weighted_quantile_rows(v, np.array([[3.0, 1.0, 0.0]]), 0.5)[0] == 1.0
    assert np.isnan(weighted_quantile_rows(v, np.zeros((1, 3)), 0.5)[0])


def test_point_estimates_match_the_summary_definitions() -> None:
    recs = synth_records(150, seed=5, concurrency=4, fail_every=30)
    side = side_data([_run(recs)])
    points, reps = bootstrap_side(side, METRICS, resamples=200, seed=0, side_index=0)
    summary = summarize_records(recs)
    by_key = dict(zip((m.key for m in METRICS), points))
    # Little's-law throughput with unit weights is exactly tokens / window.
    assert by_key["output_tokens_per_s"] == pytest.approx(summary["throughput"]["output_tokens_per_s"], rel=1e-9)
    assert by_key["requests_per_s"] == pytest.approx(summary["throughput"]["requests_per_s"], rel=1e-9)
    # Quantiles are inverted-CDF: within one order statistic of the summary's interpolated ones.
    ttft = np.sort(side.ttft_ms[np.isfinite(side.ttft_ms)])
    assert by_key["ttft_median"] == np.quantile(ttft, 0.5, method="inverted_cdf")
    assert by_key["itl_p99"] == pytest.approx(summary["latency_ms"]["itl"]["p99"], rel=0.02)
    assert reps.shape == (len(METRICS), 200)
    assert np.all(np.isfinite(reps))
    # Replicates vary (the interval is not degenerate), including request throughput.
    assert np.all(reps.std(axis=1) > 0)


def test_fixed_seed_gives_identical_intervals() -> None:
    a = side_data([_run(synth_records(80, seed=1))])
    b = side_data([_run(synth_records(80, seed=2))])
    first = ratio_ci(a, b, resamples=300, seed=7)
    again = ratio_ci(a, b, resamples=300, seed=7)
    other = ratio_ci(a, b, resamples=300, seed=8)
    assert [(e.lo, e.hi) for e in first] == [(e.lo, e.hi) for e in again]
    assert [(e.lo, e.hi) for e in first] != [(e.lo, e.hi) for e in other]


def test_repeats_widen_the_interval_when_runs_disagree() -> None:
    """Across-repeat resampling: three runs at different speeds give a wider throughput CI than one."""
    base = side_data([_run(synth_records(100, seed=1))])
    one = side_data([_run(synth_records(100, seed=2))])
    three = side_data([_run(synth_records(100, seed=s, time_scale=k)) for s, k in ((3, 0.8), (4, 1.0), (5, 1.25))])
    assert three.runs == 3 and three.req_run.max() == 2
    ci_one = {e.spec.key: e for e in ratio_ci(base, one, resamples=400)}
    ci_three = {e.spec.key: e for e in ratio_ci(base, three, resamples=400)}
    for key in ("output_tokens_per_s", "itl_median"):
        width_one = ci_one[key].hi - ci_one[key].lo
        width_three = ci_three[key].hi - ci_three[key].lo
        assert width_three > 3 * width_one, key


def test_empty_side_gives_nan_not_a_crash() -> None:
    empty = SideData(
        req_run=np.zeros(0, dtype=np.int64),
        window_s=np.zeros(1),
        busy_s=np.zeros(0),
        ttft_ms=np.zeros(0),
        e2e_ms=np.zeros(0),
        tpot_ms=np.zeros(0),
        output_tokens=np.zeros(0),
        total_tokens=np.zeros(0),
        ok=np.zeros(0),
        itl_ms=np.zeros(0),
        itl_owner=np.zeros(0, dtype=np.int64),
    )
    full = side_data([_run(synth_records(30, seed=1))])
    est = ratio_ci(empty, full, resamples=100)
    assert all(e.verdict == "n/a" for e in est)


def test_binned_quantiles_are_exact() -> None:
    """The fast path (rank bins + one bin walked) equals a cumulative sum over every value."""
    from servescope.results.bootstrap import _Quantiles

    rng = np.random.default_rng(0)
    for n, g in ((5, 7), (50, 3000), (300, 300), (1000, 64000), (400, 250)):
        owner = rng.integers(0, n, size=g)
        v = rng.lognormal(size=g)
        o = np.argsort(v, kind="stable")
        v, owner = v[o], owner[o]
        quant = _Quantiles(v, owner, n)
        w = rng.integers(0, 3, size=(20, n)).astype(float)
        for q in (0.01, 0.5, 0.9, 0.99, 1.0):
            fast = quant.evaluate(w, [q])[0]
            slow = weighted_quantile_rows(v, w[:, owner], q)
            assert np.array_equal(fast, slow, equal_nan=True), (n, g, q)
