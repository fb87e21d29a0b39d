"""Every metric definition in docs/metrics.md against a hand-computed fixture."""

from __future__ import annotations

import pytest

from servescope.results.metrics import assess_client, distribution, error_adjusted
from servescope.results.records import RequestRecord
from tests.support.oracle import itl_gaps_ms, summarize

MS = 1_000_000


def rec(
    i: int,
    *,
    send: int,
    chunks: list[int],
    tokens: list[int] | None = None,
    answer: int | None = None,
    out: int | None = None,
    sched: int | None = None,
    status: str = "ok",
    kind: str | None = None,
    warmup: bool = False,
    reasoning: int = 0,
    inp: int | None = 10,
) -> RequestRecord:
    tokens = tokens or [1] * len(chunks)
    return RequestRecord(
        id=i,
        warmup=warmup,
        t_sched_ns=send if sched is None else sched,
        t_send_ns=send,
        t_first_ns=chunks[0] if chunks else None,
        t_first_answer_ns=answer if answer is not None else (chunks[0] if chunks else None),
        t_last_ns=chunks[-1] if chunks else None,
        t_end_ns=(chunks[-1] if chunks else send) + 1 * MS,
        status=status,
        error_kind=kind,
        output_tokens=sum(tokens) if out is None else out,
        chunk_ns=chunks,
        chunk_tokens=tokens,
        reasoning_tokens=reasoning,
        input_tokens=inp,
        input_len=10,
        output_len=sum(tokens),
    )


def test_ttft_ttfat_e2e_tpot_from_timestamps() -> None:
    # send at 0; reasoning chunks at 100, 120 ms; answer from 140 ms; last at 200 ms; 5 tokens.
    r = rec(0, send=0, chunks=[100 * MS, 120 * MS, 140 * MS, 170 * MS, 200 * MS], answer=140 * MS, reasoning=2)
    s = summarize([r])
    lat = s["latency_ms"]
    assert lat["ttft"]["median"] == pytest.approx(100.0)
    assert lat["ttfat"]["median"] == pytest.approx(140.0)
    assert lat["e2e"]["median"] == pytest.approx(200.0)
    assert lat["tpot"]["median"] == pytest.approx((200 - 100) / 4)
    assert s["tokens"]["reasoning_total"] == 2 and s["tokens"]["answer_total"] == 3


def test_itl_is_per_token_when_chunks_carry_several() -> None:
    # chunks of 3 tokens every 60 ms -> 3 gaps of 20 ms each per chunk after the first.
    r = rec(0, send=0, chunks=[100 * MS, 160 * MS, 220 * MS], tokens=[3, 3, 3])
    gaps = itl_gaps_ms(r)
    assert gaps.tolist() == pytest.approx([20.0] * 6)
    s = summarize([r])
    assert s["latency_ms"]["itl"]["median"] == pytest.approx(20.0)
    # TPOT over the 9 tokens: (220-100)/8 = 15 ms (the first chunk's 3 tokens arrive together)
    assert s["latency_ms"]["tpot"]["median"] == pytest.approx(15.0)


def test_failures_count_as_infinite_in_error_adjusted_percentiles() -> None:
    ok = [rec(i, send=0, chunks=[(10 + i) * MS, (20 + i) * MS]) for i in range(98)]
    bad = [rec(100 + i, send=0, chunks=[], status="error", kind="http_5xx", out=0) for i in range(2)]
    s = summarize(ok + bad)
    assert s["requests"] == {"total": 100, "completed": 98, "failed": 2, "errors": {"http_5xx": 2}, "warmup": 0}
    assert s["latency_ms"]["ttft"]["p99"] is not None  # the plain percentile ignores failures...
    assert s["latency_ms_error_adjusted"]["ttft"]["p99"] is None  # ...the adjusted one is infinite
    # 100 values sorted, lower order statistic at floor(0.5 * 99) = 49 -> 10 + 49
    assert s["latency_ms_error_adjusted"]["ttft"]["median"] == pytest.approx(59.0)


def test_cancelled_requests_are_not_server_failures() -> None:
    ok = [rec(i, send=0, chunks=[10 * MS, 20 * MS]) for i in range(10)]
    cut = rec(99, send=0, chunks=[], status="error", kind="cancelled", out=0)
    s = summarize([*ok, cut])
    assert s["latency_ms_error_adjusted"]["ttft"]["p99"] == pytest.approx(10.0)


def test_throughput_over_the_measured_window_excludes_warmup() -> None:
    warm = rec(0, send=0, chunks=[5 * MS, 900 * MS], tokens=[50, 50], warmup=True)
    a = rec(1, send=1000 * MS, chunks=[1100 * MS, 1500 * MS], tokens=[1, 99])  # ends 1501 ms
    b = rec(2, send=1200 * MS, chunks=[1300 * MS, 1999 * MS], tokens=[1, 99])  # ends 2000 ms
    s = summarize([warm, a, b])
    # window: first measured send (1000 ms) to last measured end (2000 ms) = 1 s; 200 output tokens.
    assert s["duration_s"] == pytest.approx(1.0)
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(200.0)
    assert s["throughput"]["requests_per_s"] == pytest.approx(2.0)
    assert s["throughput"]["input_tokens_per_s"] == pytest.approx(20.0)
    assert s["requests"]["warmup"] == 1 and s["requests"]["total"] == 2


def test_offered_rate_comes_from_the_schedule_and_lag_from_send_minus_sched() -> None:
    rs = [
        rec(i, send=i * 100 * MS + 2 * MS, sched=i * 100 * MS, chunks=[(i * 100 + 50) * MS, (i * 100 + 60) * MS])
        for i in range(11)
    ]
    s = summarize(rs)
    assert s["throughput"]["offered_requests_per_s"] == pytest.approx(10.0)
    assert s["client"]["schedule_lag_ms"]["median"] == pytest.approx(2.0)


def test_per_user_tokens_per_s_and_goodput() -> None:
    fast = rec(0, send=0, chunks=[100 * MS, 500 * MS], tokens=[1, 99])  # 100 tokens / 0.5 s
    slow = rec(1, send=0, chunks=[3000 * MS, 4000 * MS], tokens=[1, 99])  # 100 tokens / 4 s
    s = summarize([fast, slow], slo={"ttft_ms": 2000})
    assert s["per_user_output_tokens_per_s"]["median"] == pytest.approx((200 + 25) / 2)
    assert s["goodput"]["requests_meeting_slo"] == 1 and s["goodput"]["fraction"] == 0.5


def test_distribution_percentiles_are_linear_interpolation() -> None:
    d = distribution([1.0, 2.0, 3.0, 4.0])
    assert d["median"] == 2.5 and d["p90"] == pytest.approx(3.7) and d["min"] == 1.0 and d["count"] == 4
    assert distribution([])["median"] is None
    assert error_adjusted([1.0, 2.0], 0)["median"] == 1.0


def test_client_verdict() -> None:
    calm = {"client": {"loop_lag_ms_p99": 0.4, "cpu_busy_peak": 0.3, "schedule_lag_ms": {"p99": 1.0}}}
    assert assess_client(calm, open_loop=True)[0] is False
    busy = {"client": {"loop_lag_ms_p99": 12.0, "cpu_busy_peak": 0.99, "schedule_lag_ms": {"p99": 40.0}}}
    saturated, reasons, advice = assess_client(busy, open_loop=True, rx_timestamps="read")
    assert saturated and len(reasons) == 3 and "--concurrency" in advice
    # with kernel receive stamps loop lag delays reading, not timing: reported, never a reason alone
    lagging = {
        "client": {
            "loop_lag_ms_p99": 8.0,
            "cpu_s": 3.0,
            "elapsed_s": 10.0,
            "cpu_busy_peak": 0.99,
            "schedule_lag_ms": {"p99": 1.0},
            "concurrency_held": 0.998,
        }
    }
    assert assess_client(lagging, open_loop=False) == (False, [], "")
    assert assess_client(lagging, open_loop=False, rx_timestamps="read")[0] is True
    # a closed loop that left slots empty, and a client busy over the whole run
    assert (
        "held 80%" in assess_client({"client": {**lagging["client"], "concurrency_held": 0.8}}, open_loop=False)[1][0]
    )
    assert "ceiling" in assess_client({"client": {**lagging["client"], "cpu_s": 9.5}}, open_loop=False)[1][0]
    # kernel stamps: a stall shorter than the gap between tokens delays reading only; a longer one makes
    # one read return several tokens under one stamp (seen: 28 ms p99 against 0.3 ms tokens, TPOT 0.04 ms)
    assert assess_client({**lagging, "latency_ms": {"tpot": {"median": 20.0}}}, open_loop=False)[0] is False
    saturated, reasons, _ = assess_client({**lagging, "latency_ms": {"tpot": {"median": 0.3}}}, open_loop=False)
    assert saturated and reasons == [reasons[0]] and "median TPOT 0.30 ms" in reasons[0]
    # the gap is a stream's spacing (TPOT), not ITL: a server writing tokens in bursts has ITL's median at 0
    bursts = {"itl": {"median": 0.0}, "tpot": {"median": 20.0}}
    assert assess_client({**lagging, "latency_ms": bursts}, open_loop=False)[0] is False
    calm_fast = {**calm, "latency_ms": {"tpot": {"median": 0.3}}}  # under 5 ms of lag is never a reason
    assert assess_client(calm_fast, open_loop=True)[0] is False
    # with the records' share of gaps read together (client.tokens_read_together): stalls of half the gap
    # or more are a reason only when more than READ_TOGETHER_SHARE of the gaps came in one read
    from servescope.results.metrics import READ_TOGETHER_SHARE

    def stalled(lag: float, together: float) -> dict:
        return {
            "client": {**lagging["client"], "loop_lag_ms_p99": lag, "tokens_read_together": together},
            "latency_ms": {"tpot": {"median": 20.0}},
        }

    # a stall longer than the gap is a reason whatever the share (seen in CI: 21.9 ms against 20 ms tokens,
    # 4.6% read together, 2% of gaps off); half the gap is one where the records show tokens read together
    # (seen: 19.8 ms with 2.8% merged and 9.3% read together, which the lag alone did not flag)
    assert assess_client(stalled(21.9, 0.046), open_loop=False)[0] is True
    saturated, reasons, _ = assess_client(stalled(19.8, 0.093), open_loop=False)
    assert saturated and "9.3% of token gaps were read together" in reasons[0]
    assert assess_client(stalled(9.0, 0.5), open_loop=False)[0] is False  # under half the gap
    assert assess_client(stalled(4.0, 0.5), open_loop=False)[0] is False  # under 5 ms
    assert assess_client(stalled(15.0, READ_TOGETHER_SHARE), open_loop=False)[0] is False
    assert assess_client(stalled(15.0, READ_TOGETHER_SHARE + 0.001), open_loop=False)[0] is True
    # ...and none, however long the stall, where so few gaps are 0 that at most 1% of them can be off (a pair
    # read together makes one gap 0 and one long): CI saw 25 ms against 20 ms tokens with every gap but 1%
    # within 0.06 ms of the truth
    from servescope.results.metrics import READ_TOGETHER_FLOOR

    assert assess_client(stalled(25.0, READ_TOGETHER_FLOOR), open_loop=False)[0] is False
    assert assess_client(stalled(25.0, READ_TOGETHER_FLOOR + 0.001), open_loop=False)[0] is True
    share_less = {"client": {**lagging["client"], "loop_lag_ms_p99": 25.0}, "latency_ms": {"tpot": {"median": 20.0}}}
    assert assess_client(share_less, open_loop=False)[0] is True  # no share held: the lag alone decides


def test_summarize_writes_the_keys_the_schema_declares_and_merges_the_run_in_order() -> None:
    """summarize's own blocks are exactly Summary's required keys; the run's keys follow `schema`."""
    from servescope.results.schema import Client, Summary

    ok = [rec(i, send=i * MS, chunks=[(i + 10) * MS, (i + 20) * MS]) for i in range(3)]
    bare = summarize(ok)
    assert set(bare) == set(Summary.__required_keys__) | {"interactivity"}  # NotRequired: older summaries lack it
    assert set(bare["client"]) == set(Client.__required_keys__) == {"schedule_lag_ms"}
    run = {"run_id": "r", "started_at": "2026-01-01T00:00:00+00:00", "interrupted": False}
    s = summarize(ok, run={**run}, client={"cpu_s": 0.5, "read_pauses": 0})
    assert list(s)[:4] == ["schema", "run_id", "started_at", "interrupted"]
    assert list(s["client"]) == ["cpu_s", "read_pauses", "schedule_lag_ms"]
