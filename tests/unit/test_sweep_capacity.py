"""SLO capacity of a grid sweep: the top of the passing run from the lowest load up."""

from __future__ import annotations

from typing import Any

from servescope.sweep.table import slo_capacity


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
