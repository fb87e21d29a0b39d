"""Arrival schedules: absolute offsets, exact mean rate, burstiness, ramp-up."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servescope.workload.schedule import open_loop_offsets_ns, ramp_rates


def test_poisson_schedule_has_exact_mean_rate_and_exponential_gaps() -> None:
    off = np.array(open_loop_offsets_ns(4000, 200.0, burstiness=1.0, seed=3))
    assert off[0] == 0 and np.all(np.diff(off) >= 0)
    assert (len(off) - 1) / (off[-1] / 1e9) == pytest.approx(200.0, rel=1e-6)
    gaps = np.diff(off) / 1e9
    cv = gaps.std() / gaps.mean()
    assert cv == pytest.approx(1.0, abs=0.06)  # exponential: CV 1


def test_burstiness_sets_the_coefficient_of_variation() -> None:
    gaps = np.diff(open_loop_offsets_ns(5000, 50.0, burstiness=4.0, seed=1)) / 1e9
    assert gaps.std() / gaps.mean() == pytest.approx(0.5, abs=0.05)  # 1/sqrt(4)
    const = np.diff(open_loop_offsets_ns(10, 50.0, burstiness=math.inf))
    assert set(const.tolist()) == {20_000_000}


def test_seeded_and_reproducible() -> None:
    assert open_loop_offsets_ns(100, 10.0, seed=7) == open_loop_offsets_ns(100, 10.0, seed=7)
    assert open_loop_offsets_ns(100, 10.0, seed=7) != open_loop_offsets_ns(100, 10.0, seed=8)


def test_rate_inf_sends_everything_at_zero() -> None:
    assert open_loop_offsets_ns(5, math.inf) == [0, 0, 0, 0, 0]


def test_linear_and_exponential_ramps() -> None:
    lin = ramp_rates(5, 1.0, 9.0, "linear")
    assert lin.tolist() == [1.0, 3.0, 5.0, 7.0, 9.0]
    exp = ramp_rates(3, 1.0, 100.0, "exponential")
    assert exp.tolist() == pytest.approx([1.0, 10.0, 100.0])
    off = open_loop_offsets_ns(5, lin, burstiness=math.inf)
    assert np.diff(off).tolist() == [round(1e9 / r) for r in (3.0, 5.0, 7.0, 9.0)]
    with pytest.raises(ValueError):
        ramp_rates(3, 0.0, 5.0, "exponential")
