"""Chart ticks and number formatting (report/ticks.py): round linear steps, 1-2-5 decades, compact labels."""

from __future__ import annotations

import itertools
import math

from servescope.report.ticks import format_number, log_ticks, nice_ticks


def test_nice_ticks_cover_range_on_round_steps() -> None:
    t = nice_ticks(3.0, 137.0)
    assert t[0] <= 3.0 and t[-1] >= 137.0
    steps = {round(b - a, 9) for a, b in itertools.pairwise(t)}
    assert len(steps) == 1 and steps.pop() in (10, 20, 25, 50)
    assert nice_ticks(0.013, 0.97) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(5.0, 5.0)[0] < 5.0 < nice_ticks(5.0, 5.0)[-1]  # degenerate range widened


def test_log_ticks_are_1_2_5_per_decade() -> None:
    assert log_ticks(1, 200) == [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0]
    t = log_ticks(0.3, 70000)
    assert t[0] <= 0.3 and t[-1] >= 70000 and len(t) <= 9


def test_format_number() -> None:
    assert format_number(25000, 5000) == "25k"
    assert format_number(1_500_000, 500_000) == "1.5M"
    assert format_number(0.1234) == "0.123"
    assert format_number(7.0) == "7"
    assert format_number(2.5, 2.5) == "2.5"
    assert format_number(math.inf) == "∞"
