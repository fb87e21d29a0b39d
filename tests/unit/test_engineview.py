"""The engine's own view of latency: histogram deltas between two real expositions (written by
prometheus_client, the library vLLM, SGLang and TensorRT-LLM export with), the window's mean against a
hand computation, the bucket estimate of the median and P90 against a hand computation, the
`engine_view` block beside the client's figures, and `engine_agreement` on agreeing and provoked
disagreeing views."""

from __future__ import annotations

import math

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from servescope.results.columns import RecordColumns
from servescope.results.engineview import (
    HistogramWindow,
    engine_view,
    histogram_mean_ms,
    histogram_quantile_ms,
)
from servescope.results.records import RequestRecord
from servescope.results.schema import EngineView, Summary
from servescope.results.selfcheck import ENGINE_SLACK_MS, ENGINE_TOLERANCE_MS, engine_agreement
from servescope.target.servermetrics import histogram_window, read_page, server_summary
from tests.support import oracle
from tests.support.synth import synth_records, synth_run_info

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0)
# binary fractions: every sum and difference below is exact, so the means compare with ==
BEFORE_TTFT = (0.0625, 0.125, 0.03125, 0.5)
WINDOW_TTFT = (0.015625, 0.0078125, 0.09375, 0.25, 0.125, 0.046875, 3.0, 0.0625)
WINDOW_E2E = (1.5, 0.75, 2.25, 0.625, 1.0, 4.5, 0.5, 1.25)
WINDOW_QUEUE = (0.0, 0.0078125, 0.015625, 0.0, 0.25, 0.0, 0.0, 0.03125)


def _pages() -> tuple[str, str]:
    """A vLLM-named page before and after the window: two engine cores (label `engine`) share the
    observations, as a data-parallel vLLM's page splits them."""
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT", labels, buckets=TTFT_BUCKETS, registry=reg)
    e2e = Histogram("vllm:e2e_request_latency_seconds", "E2E", labels, buckets=(0.3, 0.5, 1.0, 2.5, 5.0), registry=reg)
    queue = Histogram("vllm:request_queue_time_seconds", "queue", labels, buckets=(0.01, 0.1, 1.0), registry=reg)
    for i, v in enumerate(BEFORE_TTFT):
        ttft.labels("m", str(i % 2)).observe(v)
        e2e.labels("m", str(i % 2)).observe(8 * v)
        queue.labels("m", str(i % 2)).observe(0.0)
    before = generate_latest(reg).decode()
    for i, (t, e, q) in enumerate(zip(WINDOW_TTFT, WINDOW_E2E, WINDOW_QUEUE, strict=True)):
        ttft.labels("m", str(i % 2)).observe(t)
        e2e.labels("m", str(i % 2)).observe(e)
        queue.labels("m", str(i % 2)).observe(q)
    return before, generate_latest(reg).decode()


def _cumulative(values: tuple[float, ...], bounds: tuple[float, ...]) -> list[tuple[float, float]]:
    """By hand: for each bound (and +Inf), how many of `values` are ≤ it."""
    return [(b, float(sum(v <= b for v in values))) for b in (*bounds, math.inf)]


def test_histogram_deltas_and_means_from_two_expositions() -> None:
    before, after = _pages()
    hists = histogram_window(read_page(before), read_page(after))
    assert set(hists) == {"ttft", "e2e", "queue"}
    ttft = hists["ttft"]
    assert ttft.metric == "vllm:time_to_first_token_seconds"
    assert ttft.count == len(WINDOW_TTFT) and ttft.sum_s == sum(WINDOW_TTFT)
    assert list(ttft.buckets) == _cumulative(WINDOW_TTFT, TTFT_BUCKETS)  # per bucket, after minus before
    assert list(hists["e2e"].buckets) == _cumulative(WINDOW_E2E, (0.3, 0.5, 1.0, 2.5, 5.0))
    # the window's means, Δsum / Δcount, equal the hand means of the observations in it exactly
    hand = {"ttft": WINDOW_TTFT, "e2e": WINDOW_E2E, "queue": WINDOW_QUEUE}
    for role, values in hand.items():
        h = hists[role]
        assert histogram_mean_ms(h.sum_s, h.count) == sum(values) / len(values) * 1e3
    # the server block's means are the same figures, from the same formula
    server = server_summary(read_page(before), read_page(after))
    assert server is not None
    assert server["latency_ms"]["ttft_mean_ms"] == sum(WINDOW_TTFT) / len(WINDOW_TTFT) * 1e3
    # the pages without their buckets: means, no buckets (so no estimate)
    bare = histogram_window(
        None, {"vllm:time_to_first_token_seconds_count": 4.0, "vllm:time_to_first_token_seconds_sum": 1.0}
    )
    assert bare["ttft"].buckets == () and histogram_quantile_ms(bare["ttft"], 0.5) is None


def test_a_count_that_went_down_or_a_window_without_requests_gives_no_histogram() -> None:
    before, after = _pages()
    assert histogram_window(read_page(after), read_page(before)) == {}  # a restart between the scrapes
    assert histogram_window(read_page(after), read_page(after)) == {}  # nothing observed in the window
    assert histogram_window(read_page(before), None) == {}


def test_sglang_and_trtllm_names_are_read_too() -> None:
    reg = CollectorRegistry()
    sg = Histogram("sglang:time_to_first_token_seconds", "t", ["model_name"], buckets=(0.1, 1.0), registry=reg)
    trt = Histogram("trtllm_e2e_request_latency_seconds", "e", ["model_name"], buckets=(0.1, 1.0), registry=reg)
    before = generate_latest(reg).decode()
    sg.labels("m").observe(0.25)
    trt.labels("m").observe(0.5)
    hists = histogram_window(read_page(before), read_page(generate_latest(reg).decode()))
    assert hists["ttft"].metric == "sglang:time_to_first_token_seconds" and hists["ttft"].sum_s == 0.25
    assert hists["e2e"].metric == "trtllm_e2e_request_latency_seconds" and hists["e2e"].count == 1


def test_the_bucket_estimate_against_a_hand_computation() -> None:
    # 10 observations: 2 in (0, 0.1], 4 in (0.1, 0.2], 3 in (0.2, 0.4], 1 above 0.4 s
    h = HistogramWindow("x", 10.0, 2.0, ((0.1, 2.0), (0.2, 6.0), (0.4, 9.0), (math.inf, 10.0)))
    # median: rank 5 falls in (0.1, 0.2], 3 of its 4 observations in: 0.1 + 0.1 * 3/4 s
    assert histogram_quantile_ms(h, 0.5) == (pytest.approx(175.0), 100.0, 200.0)
    # P90: rank 9, the whole of (0.2, 0.4]: its upper bound
    assert histogram_quantile_ms(h, 0.9) == (pytest.approx(400.0), 200.0, 400.0)
    # P10: rank 1, half of the first bucket, whose lower bound is 0
    assert histogram_quantile_ms(h, 0.1) == (pytest.approx(50.0), 0.0, 100.0)
    # P99: rank 9.9, in the +Inf bucket: its lower bound, no upper one
    assert histogram_quantile_ms(h, 0.99) == (400.0, 400.0, None)
    assert histogram_quantile_ms(HistogramWindow("x", 1.0, 9.0, ((1.0, 0.0), (math.inf, 1.0))), 0.5) == (
        1000.0,
        1000.0,
        None,
    )


def test_the_estimate_holds_the_true_median_of_real_observations() -> None:
    before, after = _pages()
    ttft = histogram_window(read_page(before), read_page(after))["ttft"]
    est = histogram_quantile_ms(ttft, 0.5)
    assert est is not None
    value, low, high = est
    true = float(np.median(WINDOW_TTFT)) * 1e3  # 78.125 ms; rank 4 of 8 is the last value in (60, 80]
    assert low <= true <= (high or math.inf) and low <= value <= (high or math.inf)
    assert (low, high) == (60.0, 80.0)


# ------------------------------------------------------------------ the block and the check
def agreeing_engine_view(records: list[RequestRecord], summary: Summary, *, offset_ms: float = 2.0) -> EngineView:
    """An engine view of `records` as an engine would give it: each completed request (warm-up
    included: it runs between the scrapes) seen `offset_ms` sooner than the client saw its first token
    and its last, and one ITL gap each per client gap."""
    done = [r for r in records if r.status == "ok"]
    ttft = [(r.t_first_ns - r.t_send_ns) / 1e6 for r in done if r.t_first_ns is not None and r.t_send_ns is not None]
    e2e = [(r.t_last_ns - r.t_send_ns) / 1e6 for r in done if r.t_last_ns is not None and r.t_send_ns is not None]
    itl = summary["latency_ms"]["itl"]
    hists = {
        "ttft": HistogramWindow(
            "vllm:time_to_first_token_seconds", len(ttft), (sum(ttft) - offset_ms * len(ttft)) / 1e3
        ),
        "e2e": HistogramWindow("vllm:e2e_request_latency_seconds", len(e2e), (sum(e2e) - offset_ms * len(e2e)) / 1e3),
        "itl": HistogramWindow(
            "vllm:inter_token_latency_seconds", itl["count"], (itl["mean"] or 0.0) * itl["count"] / 1e3
        ),
        "queue": HistogramWindow("vllm:request_queue_time_seconds", len(done), 0.001 * len(done)),
    }
    view = engine_view(hists, summary, RecordColumns.from_records(records))
    assert view is not None
    return view


def _run(warmup: int = 0) -> tuple[list[RequestRecord], Summary]:
    recs = synth_records(120, concurrency=8, seed=5, warmup=warmup)
    return recs, oracle.summarize(recs, run=synth_run_info("v", recs))


def test_the_block_beside_the_clients_figures() -> None:
    recs, s = _run()
    view = agreeing_engine_view(recs, s)
    ttft = view["metrics"]["ttft"]
    # without warm-up the client's means are the summary's, to the bit
    assert ttft["client_mean_ms"] == s["latency_ms"]["ttft"]["mean"]
    assert view["metrics"]["e2e"]["client_mean_ms"] == s["latency_ms"]["e2e"]["mean"]
    assert ttft["client_count"] == ttft["count"] == s["requests"]["completed"]
    assert ttft["client_minus_engine_ms"] == pytest.approx(2.0)
    assert ttft["median_ms"] is None and ttft["median_bucket_ms"] is None  # no buckets, no estimate
    assert view["metrics"]["itl"]["client_minus_engine_ms"] == pytest.approx(0.0, abs=1e-9)
    assert view["engine_requests"] == view["requests_completed"] == view["requests_sent"] == 120
    assert view["engine_requests_metric"] == "vllm:e2e_request_latency_seconds"
    assert list(view["phases"]) == ["queue"] and view["phases"]["queue"]["mean_ms"] == pytest.approx(1.0)
    assert engine_view({}, s, RecordColumns.from_records(recs)) is None


def test_warm_up_requests_are_in_the_engines_window() -> None:
    recs, s = _run(warmup=6)
    view = agreeing_engine_view(recs, s)
    assert view["requests_completed"] == s["requests"]["completed"] + 6 == view["engine_requests"]
    assert view["metrics"]["ttft"]["client_count"] == s["requests"]["completed"] + 6
    assert view["metrics"]["ttft"]["client_minus_engine_ms"] == pytest.approx(2.0)  # over the same requests
    assert engine_agreement({**s, "engine_view": view})["status"] == "pass"


def test_the_check_passes_an_agreeing_engine_and_flags_disagreements() -> None:
    recs, s = _run()
    ok = engine_agreement({**s, "engine_view": agreeing_engine_view(recs, s)})
    assert ok["status"] == "pass", ok
    assert ok["figures"]["client_minus_engine_ms"] == pytest.approx(2.0) and ok["figures"]["engine_requests"] == 120
    # the engine's TTFT above the client's, beyond the slack: impossible for the same requests
    above = engine_agreement({**s, "engine_view": agreeing_engine_view(recs, s, offset_ms=-3 * ENGINE_SLACK_MS)})
    assert above["status"] == "fail" and "below the engine's" in above["why"], above
    assert engine_agreement({**s, "engine_view": agreeing_engine_view(recs, s, offset_ms=-0.5)})["status"] == "pass"
    # far more time outside the engine than the tolerance (the engine's TTFT is ~120 ms here: 24 ms)
    far = engine_agreement({**s, "engine_view": agreeing_engine_view(recs, s, offset_ms=60.0)})
    assert far["status"] == "marked" and "outside the engine" in far["why"], far
    assert far["figures"]["tolerance_ms"] > ENGINE_TOLERANCE_MS
    # the engine counted requests the client did not send: other traffic
    view = agreeing_engine_view(recs, s)
    other = engine_agreement({**s, "engine_view": {**view, "engine_requests": 130}})
    assert other["status"] == "fail" and "other traffic" in other["why"], other
    fewer = engine_agreement({**s, "engine_view": {**view, "engine_requests": 100}})
    assert fewer["status"] == "fail"
    # no histograms: skipped; a non-streamed run's TTFT is not judged, its count still is
    assert engine_agreement(s)["status"] == "skipped"
    whole = engine_agreement({**s, "workload": {**s["workload"], "stream": False}, "engine_view": view})
    assert whole["status"] == "pass" and "engine_ttft_mean_ms" not in whole["figures"]
