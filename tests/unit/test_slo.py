"""SLO parsing and pass/fail: aggregate limits, per-request goodput limits, MLPerf presets."""

from __future__ import annotations

import pytest

from servescope.errors import ConfigError
from servescope.results.records import RequestRecord
from servescope.results.slo import MLPERF_PRESETS, evaluate, failing, parse_slo_spec
from tests.support.oracle import summarize

MS = 1_000_000


def rec(i: int, ttft_ms: float, tpot_ms: float, n_out: int = 11, status: str = "ok") -> RequestRecord:
    """A request sent at i×10 ms: first token after `ttft_ms`, then a token every `tpot_ms`."""
    send = i * 10 * MS
    chunks = [send + int((ttft_ms + k * tpot_ms) * MS) for k in range(n_out)]
    if status != "ok":
        return RequestRecord(
            id=i,
            t_sched_ns=send,
            t_send_ns=send,
            t_end_ns=send + 5 * MS,
            status="error",
            error_kind="http_5xx",
            input_len=10,
            output_len=n_out,
        )
    return RequestRecord(
        id=i,
        t_sched_ns=send,
        t_send_ns=send,
        t_first_ns=chunks[0],
        t_first_answer_ns=chunks[0],
        t_last_ns=chunks[-1],
        t_end_ns=chunks[-1] + MS,
        status="ok",
        output_tokens=n_out,
        chunk_ns=chunks,
        chunk_tokens=[1] * n_out,
        input_tokens=10,
        input_len=10,
        output_len=n_out,
    )


def run(ttfts: list[float], tpot_ms: float, slo: dict[str, float] | None = None, failed: int = 0) -> dict:
    records = [rec(i, t, tpot_ms) for i, t in enumerate(ttfts)]
    records += [rec(len(ttfts) + k, 0, 0, status="error") for k in range(failed)]
    return summarize(records, slo=slo)


def test_parse_aggregate_per_request_and_preset() -> None:
    spec = parse_slo_spec("ttft_p99_ms=2000, itl_p99_ms=50,tpot_median_ms=30,ttft_ms=1500,mlperf:llama2-70b")
    assert spec.per_request == {"ttft_ms": 1500.0}
    got = [(a.metric, a.stat, a.limit_ms) for a in spec.aggregate]
    assert got == [
        ("ttft", "p99", 2000.0),
        ("itl", "p99", 50.0),
        ("tpot", "median", 30.0),
        ("ttft", "p99", 2000.0),
        ("tpot", "p99", 200.0),
    ]
    assert spec.presets == ["llama2-70b"]
    assert parse_slo_spec("e2e_p50_ms=9").aggregate[0].stat == "median"


@pytest.mark.parametrize(
    "text",
    [
        "ttft=5",
        "ttft_p42_ms=1",
        "foo_p99_ms=1",
        "ttft_ms=abc",
        "mlperf:gpt5",
        "goodput_fraction=0.9",
        "ttft_ms=1,goodput_fraction=1.5",
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_slo_spec(text)


def test_mlperf_preset_names_and_published_limits() -> None:
    # loadgen/mlperf.conf: <model>.Server.ttft_latency / tpot_latency (ms)
    assert MLPERF_PRESETS["llama2-70b"] == (2000, 200)
    assert MLPERF_PRESETS["llama3.1-405b"] == (6000, 175)
    assert MLPERF_PRESETS["llama3.1-8b"] == (2000, 100)
    assert MLPERF_PRESETS["deepseek-r1"] == (2000, 80)
    assert MLPERF_PRESETS["llama3.1-8b-interactive"] == (500, 30)
    # MLPerf's own spelling of the model name is accepted
    assert parse_slo_spec("mlperf:llama3_1-405b").presets == ["llama3.1-405b"]


def test_mlperf_llama31_8b_pass_and_fail_on_crafted_records() -> None:
    spec = parse_slo_spec("mlperf:llama3.1-8b")  # P99 TTFT <= 2000 ms, P99 TPOT <= 100 ms
    # 100 requests at TTFT 1500 ms, TPOT 90 ms: pass
    assert evaluate(run([1500.0] * 100, 90.0), spec)["passed"] is True
    # one slow request of 100 (TTFT 2500): the interpolated P99 is 1510 ms: still a pass
    res = evaluate(run([1500.0] * 99 + [2500.0], 90.0), spec)
    assert res["passed"] is True
    assert res["checks"][0]["value_ms"] == pytest.approx(1510.0)
    # two slow requests of 100: P99 = 2500 ms > 2000: fail on TTFT only
    res = evaluate(run([1500.0] * 98 + [2500.0] * 2, 90.0), spec)
    assert res["passed"] is False
    assert [c["passed"] for c in res["checks"]] == [False, True]
    assert failing(res) == "TTFT P99 2500.0 ms"
    # TPOT 110 ms > 100: fail on TPOT
    res = evaluate(run([100.0] * 100, 110.0), spec)
    assert [c["passed"] for c in res["checks"]] == [True, False]


def test_mlperf_interactive_and_deepseek_presets() -> None:
    s = run([400.0] * 50, 25.0)
    assert evaluate(s, parse_slo_spec("mlperf:llama3.1-8b-interactive"))["passed"] is True
    assert evaluate(s, parse_slo_spec("mlperf:llama2-70b-interactive"))["passed"] is True
    assert evaluate(s, parse_slo_spec("mlperf:deepseek-r1-interactive"))["passed"] is False  # TPOT 25 > 15
    s = run([1000.0] * 50, 85.0)
    assert evaluate(s, parse_slo_spec("mlperf:deepseek-r1"))["passed"] is False  # TPOT 85 > 80
    assert evaluate(s, parse_slo_spec("mlperf:llama3.1-405b"))["passed"] is True


def test_failed_requests_count_as_infinite_ttft() -> None:
    # 97 fast requests and 3 failures: the error-adjusted P99 TTFT is infinite
    s = run([100.0] * 97, 10.0, failed=3)
    res = evaluate(s, parse_slo_spec("ttft_p99_ms=2000"))
    assert res["passed"] is False and res["checks"][0]["infinite"] is True
    # TPOT has no error-adjusted figure: the completed requests decide
    assert evaluate(s, parse_slo_spec("tpot_p99_ms=20"))["passed"] is True


def test_no_completed_request_fails_every_limit() -> None:
    s = run([], 10.0, failed=2)
    assert evaluate(s, parse_slo_spec("itl_p99_ms=1000"))["passed"] is False


def test_per_request_limits_keep_goodput_and_fraction_limit() -> None:
    spec = parse_slo_spec("ttft_ms=1000,goodput_fraction=0.9")
    s = run([500.0] * 9 + [1500.0], 10.0, slo=spec.per_request)  # 9 of 10 meet TTFT <= 1000
    assert s["goodput"]["requests_meeting_slo"] == 9
    res = evaluate(s, spec)
    assert res["passed"] is True and res["goodput_fraction"] == pytest.approx(0.9)
    s = run([500.0] * 8 + [1500.0] * 2, 10.0, slo=spec.per_request)
    assert evaluate(s, spec)["passed"] is False


def test_aggregate_itl_and_tpot_median() -> None:
    s = run([50.0] * 20, 40.0)  # every gap 40 ms
    assert evaluate(s, parse_slo_spec("itl_p99_ms=41,tpot_median_ms=40"))["passed"] is True
    assert evaluate(s, parse_slo_spec("itl_p99_ms=39"))["passed"] is False
    assert parse_slo_spec("itl_p99_ms=50").describe() == "ITL P99 ≤ 50 ms"
