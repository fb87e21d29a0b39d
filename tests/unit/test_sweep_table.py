"""A sweep's figures (sweep/table.py): the saturation diagnosis on crafted summaries, the rows and the
summary table, and the SLO capacity of a grid sweep (the top of the passing run from the lowest load up)."""

from __future__ import annotations

from typing import Any

from servescope.sweep.summary import table_text
from servescope.sweep.table import diagnose, point_row, slo_capacity


def summ(
    tok_s: float,
    ttft_ms: float,
    *,
    client: bool = False,
    waiting: float | None = None,
    mode: str = "concurrency",
    offered: float = 1.0,
    done: float = 1.0,
) -> dict[str, Any]:
    return {
        "load": {"mode": mode},
        "throughput": {"output_tokens_per_s": tok_s, "requests_per_s": done, "offered_requests_per_s": offered},
        "latency_ms": {"ttft": {"median": ttft_ms, "p99": ttft_ms * 2}, "itl": {"median": 5.0, "p99": 9.0}},
        "client": {"saturated": client, "reasons": ["schedule lag p99 40.0 ms > 10 ms"] if client else []},
        "server": None if waiting is None else {"waiting": waiting, "kv_usage": 0.5, "preemptions": 0},
    }


def test_knee_is_first_step_adding_less_than_ten_percent_and_server_queues() -> None:
    loads = [1, 2, 4, 8, 16, 32]
    tput = [100, 190, 350, 600, 630, 640]  # 8 -> 16 adds 5%
    ttft = [20, 21, 25, 40, 120, 300]
    d = diagnose(
        loads, [summ(t, f, waiting=w) for t, f, w in zip(tput, ttft, [0, 0, 0, 0, 7, 23])], label="concurrency"
    )
    assert d["saturation_load"] == 8
    assert d["next_step_gain"] == 630 / 600 - 1
    assert d["bottleneck"] == "server"
    assert any("waiting" in e for e in d["evidence"]) and any("TTFT" in e for e in d["evidence"])
    assert "concurrency 8" in d["text"]


def test_client_bottleneck_and_unsorted_input() -> None:
    loads = [4, 1, 2]
    d = diagnose(loads, [summ(300, 20, client=True), summ(100, 20), summ(290, 21, client=True)])
    assert d["saturation_load"] == 2 and d["bottleneck"] == "client"


def test_still_growing_is_not_saturated() -> None:
    d = diagnose([1, 2, 4], [summ(100, 10), summ(200, 10), summ(390, 10)], label="concurrency")
    assert d["saturation_load"] is None and "not saturated" in d["text"]


def test_open_loop_offered_vs_completed() -> None:
    loads = [1.0, 2.0, 4.0]
    ss = [
        summ(100, 10, mode="rate", offered=1, done=1),
        summ(104, 10, mode="rate", offered=2, done=1.3),
        summ(105, 11, mode="rate", offered=4, done=1.3),
    ]
    d = diagnose(loads, ss, label="request rate")
    assert d["saturation_load"] == 1.0 and d["bottleneck"] == "server"
    assert any("offered" in e for e in d["evidence"])


def test_row_and_table_text() -> None:
    s = summ(600, 40)
    s["cost"] = {"usd_per_1m_output_tokens": 9.259}
    s["slo_check"] = {"passed": False}
    row = point_row({"dir": "c0008", "load_label": "c=8", "input_len": 128, "output_len": 64}, s)
    assert row["output_tokens_per_s"] == 600 and row["slo_passed"] is False
    text = table_text([row])
    assert "c=8" in text and "$9.259" in text and "fail" in text and "goodput" not in text
    s["goodput"] = {"requests_per_s": 12.5}
    assert "12.50" in table_text([point_row({"dir": "c0008", "load_label": "c=8"}, s)])


def points(seq: list[tuple[int, bool]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    pts = [{"dir": f"c{c}", "concurrency": c} for c, _ in seq]
    sums = [{"slo_check": {"passed": ok}, "cost": {"usd_per_1m_output_tokens": 10.0 / c}} for c, ok in seq]
    return pts, sums


def test_capacity_is_last_pass_before_first_failure() -> None:
    cap = slo_capacity(*points([(4, False), (1, True), (2, True), (8, False)]), "concurrency")
    assert cap["load"] == 2 and cap["dir"] == "c2" and cap["cost"]["usd_per_1m_output_tokens"] == 5.0
    assert "note" not in cap


def test_pass_above_a_failure_is_noted_not_taken() -> None:
    cap = slo_capacity(*points([(1, True), (2, False), (4, True), (8, False)]), "concurrency")
    assert cap["load"] == 1 and "4 passed again above the failure at 2" in cap["note"]


def test_nothing_passes() -> None:
    assert slo_capacity(*points([(1, False), (2, False)]), "concurrency")["load"] is None
