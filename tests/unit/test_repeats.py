"""--repeat N: the spread over repeats, per metric."""

from __future__ import annotations

import pytest

from servescope.results.repeats import spread


def test_spread_mean_std_range_and_cv() -> None:
    summaries = [
        {"throughput": {"output_tokens_per_s": v}, "latency_ms": {"ttft": {"p99": t}}}
        for v, t in ((100.0, 10.0), (110.0, 30.0), (90.0, None))
    ]
    doc = spread(summaries)
    out = doc["output tok/s"]
    assert out["values"] == [100.0, 110.0, 90.0]
    assert (out["mean"], out["min"], out["max"]) == (100.0, 90.0, 110.0)
    assert out["std"] == pytest.approx(10.0)  # sample std (ddof=1)
    assert out["cv"] == pytest.approx(0.1)
    assert doc["TTFT p99 ms"]["values"] == [10.0, 30.0, None]  # a missing value stays visible
    assert doc["TTFT p99 ms"]["mean"] == 20.0
    assert "ITL median ms" not in doc
