"""The API server's front end (`sim.frontend.FrontEnd`): processor sharing with a fixed service time."""

from __future__ import annotations

import pytest

from servescope.sim.frontend import FrontEnd


def test_requests_inside_together_share_the_service() -> None:
    # alone: one service time; four sent at once: none leaves before 4 x s, and then all four leave
    assert FrontEnd.departures(0.25, [3.0]) == [3.25]
    assert FrontEnd.departures(1.0, [0.0] * 4) == [4.0] * 4
    # overlap: the first is alone for 0.5 s (0.5 left), then two share it: the first leaves at 1.5,
    # the second (0.5 done by then) at 2.0; the third finds the front end empty
    assert FrontEnd.departures(1.0, [0.0, 0.5, 3.0]) == pytest.approx([1.5, 2.0, 4.0])
    # no service: every request leaves as it arrives
    assert FrontEnd.departures(0.0, [0.0, 0.0, 1.0]) == [0.0, 0.0, 1.0]


def test_a_later_send_delays_a_tentative_departure_and_not_a_final_one() -> None:
    front = FrontEnd(1.0)
    front.send(0.0, "a")
    assert front.next_at() == 1.0 and len(front) == 1
    front.send(0.5, "b")  # a has 0.5 left, now at half speed: it leaves at 1.5, not 1.0
    assert front.next_at() == pytest.approx(1.5)
    assert front.pop_before(1.5) == []  # strictly before: a leaves at 1.5 exactly
    assert front.pop_until(1.5) == [(pytest.approx(1.5), "a")]
    front.send(1.9, "c")  # b left at 2.0 had it stayed alone; with c beside it from 1.9 it leaves at 2.1
    t, item = front.pop_first()
    assert item == "b" and t == pytest.approx(2.1)
    assert [x for _, x in front.pop_until(10.0)] == ["c"] and len(front) == 0
    assert front.next_at() == float("inf")
    with pytest.raises(IndexError, match="empty"):
        front.pop_first()


def test_first_come_first_served_would_fail_the_burst_shape() -> None:
    """The property the model relies on: of a burst of N, the first to reach the engine waits about
    N service times (first come first served would let it through after one)."""
    n, s = 1000, 0.005
    out = FrontEnd.departures(s, [0.0] * n)
    assert min(out) == pytest.approx(n * s) and max(out) == pytest.approx(n * s)
    with pytest.raises(ValueError, match=">= 0"):
        FrontEnd(-1.0)
