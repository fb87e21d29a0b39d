"""The offered request rate as docs/metrics.md defines it: the schedule's rate open loop, requests sent
over the measured window closed loop (never a division by the first wave's spread of send times)."""

from __future__ import annotations

from typing import cast

import pytest

from servescope.results.metrics import offered_rate
from servescope.results.records import RequestRecord
from servescope.results.schema import RunInfo
from tests.support.oracle import summarize

MS = 1_000_000


def rec(i: int, send: int, end: int) -> RequestRecord:
    return RequestRecord(
        id=i,
        warmup=False,
        t_sched_ns=send,
        t_send_ns=send,
        t_first_ns=send + 50 * MS,
        t_first_answer_ns=send + 50 * MS,
        t_last_ns=end - MS,
        t_end_ns=end,
        status="ok",
        error_kind=None,
        output_tokens=2,
        chunk_ns=[send + 50 * MS, end - MS],
        chunk_tokens=[1, 1],
        reasoning_tokens=0,
        input_tokens=10,
        input_len=10,
        output_len=2,
    )


def run_doc(mode: str) -> RunInfo:
    return cast(RunInfo, {"load": {"mode": mode, "concurrency": 64 if mode == "concurrency" else None}})


def test_closed_loop_first_wave_is_sends_over_the_window() -> None:
    # 64 requests, one wave sent within 3 ms, each taking ~1 s: 64 sends over a ~1.003 s window.
    rs = [rec(i, send=i * MS * 3 // 64, end=1000 * MS + i * MS * 3 // 64) for i in range(64)]
    s = summarize(rs, run=run_doc("concurrency"))
    window = s["duration_s"]
    assert s["throughput"]["offered_requests_per_s"] == pytest.approx(64 / window)
    # the old formula, (n − 1) / span of send times, read ~21,000 req/s here
    assert s["throughput"]["offered_requests_per_s"] < 2 * s["throughput"]["requests_per_s"]


def test_open_loop_is_the_schedule_rate() -> None:
    rs = [rec(i, send=i * 100 * MS, end=i * 100 * MS + 50 * MS + 2 * MS) for i in range(11)]
    s = summarize(rs, run=run_doc("rate"))
    assert s["throughput"]["offered_requests_per_s"] == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("sched", "window", "closed", "want"),
    [
        ([0, 0, 0, 0], 2.0, False, 2.0),  # every request at one instant (--rate inf): n / window
        ([0, MS, 2 * MS, 3 * MS], 2.0, True, 2.0),  # closed loop: n / window, whatever the spread
        ([0, 500 * MS, 1000 * MS], 2.0, False, 2.0),  # open loop: (n − 1) / span
        ([0, 500 * MS], 0.0, True, 0.0),  # no window: nothing offered over it
        ([], 1.0, True, 0.0),
    ],
)
def test_definition(sched: list[int], window: float, closed: bool, want: float) -> None:
    assert offered_rate(sched, window, closed_loop=closed) == pytest.approx(want)
