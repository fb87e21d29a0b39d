"""results.energy: energy over the measured window by hand, from counters and from power."""

from __future__ import annotations

import pytest

from servescope.results.energy import GpuReading, energy_block, integrate, interp


def R(t: float, gpu: str = "g0", **kw: float) -> GpuReading:
    return GpuReading(t, gpu, **kw)


def test_interp_and_integrate_are_piecewise_linear_held_flat_outside() -> None:
    ts, vs = [0.0, 2.0], [100.0, 300.0]
    assert interp(ts, vs, -1) == 100 and interp(ts, vs, 1) == 200 and interp(ts, vs, 5) == 300
    assert integrate(ts, vs, 0, 2) == pytest.approx(400)  # (100 + 300) / 2 × 2
    assert integrate(ts, vs, 1, 3) == pytest.approx(250 + 300)  # (200 + 300) / 2 × 1, then 300 × 1
    assert integrate(ts, vs, 2, 2) == 0


def test_energy_counter_interpolated_at_the_window_ends() -> None:
    # 300 W: the counter gains 300 J a second; the window [0.5, 2.5] holds 600 J
    rs = [
        R(
            t,
            energy_j=1000 + 300 * t,
            power_w=999.0,
            util_pct=50 if t < 1.5 else 100,
            mem_used_mib=10 * t,
            sm_clock_mhz=1500,
        )
        for t in (0.0, 1.0, 2.0, 3.0)
    ]
    e = energy_block(rs, (0.5, 2.5), output_tokens=1200, source="dcgm")
    assert e["available"] is True and e["method"] == "energy counter"  # the counter, not the power gauge
    assert e["energy_j"] == pytest.approx(600)
    assert e["mean_power_w"] == pytest.approx(300)
    assert e["joules_per_output_token"] == pytest.approx(0.5)
    assert e["joules_per_1m_output_tokens"] == pytest.approx(500_000)
    assert e["kwh_per_1m_output_tokens"] == pytest.approx(500_000 / 3.6e6)
    assert e["output_tokens_per_s_per_kw"] == pytest.approx((1200 / 2) / 0.3)  # = tokens per kJ: 2000
    assert e["coverage"] == 1.0 and e["gpus"] == 1 and e["samples"] == 4 and e["window_s"] == 2
    # utilisation: 50 until 1.0, a ramp to 100 at 2.0, 100 after; over [0.5, 2.5]: (25 + 75 + 50) / 2
    assert e["gpu_util_pct_mean"] == pytest.approx(75)
    assert e["sm_clock_mhz_mean"] == pytest.approx(1500)
    assert e["mem_used_mib_max"] == 30


def test_power_integral_without_a_counter_and_gpus_summed() -> None:
    g0 = [R(0, "a", power_w=100), R(2, "a", power_w=300)]  # 400 J over [0, 2]
    g1 = [R(0, "b", energy_j=0), R(2, "b", energy_j=200)]  # 100 W by its counter
    e = energy_block(g0 + g1, (0.0, 2.0), output_tokens=100, source="dcgm")
    assert e["energy_j"] == pytest.approx(600) and e["mean_power_w"] == pytest.approx(300)
    assert e["method"] == "mixed" and e["gpus"] == 2
    per = {g["gpu"]: g for g in e["per_gpu"]}
    assert per["a"]["method"] == "power integral" and per["a"]["energy_j"] == pytest.approx(400)
    assert per["b"]["method"] == "energy counter" and per["b"]["mean_power_w"] == pytest.approx(100)
    assert e["joules_per_output_token"] == pytest.approx(6)


def test_a_counter_that_goes_down_is_not_used() -> None:
    rs = [R(0, energy_j=5000, power_w=200), R(1, energy_j=10, power_w=200)]  # reset: use the power
    e = energy_block(rs, (0.0, 1.0), output_tokens=10, source="dcgm")
    assert e["method"] == "power integral" and e["energy_j"] == pytest.approx(200)


def test_partial_coverage_extends_the_covered_mean_power() -> None:
    rs = [R(1, energy_j=0), R(2, energy_j=300)]  # 300 W over [1, 2]; the window is [0, 2]
    e = energy_block(rs, (0.0, 2.0), output_tokens=60, source="dcgm")
    assert e["coverage"] == 0.5 and e["energy_j"] == pytest.approx(600)


def test_not_available_says_why() -> None:
    assert energy_block([], (0, 1), output_tokens=1, source="dcgm") == {
        "available": False,
        "why": "dcgm: no sample was read during the run",
    }
    assert energy_block([R(0, power_w=1)], None, output_tokens=1, source="nvml")["available"] is False
    only_util = energy_block([R(0, util_pct=5)], (0, 1), output_tokens=1, source="dcgm")
    assert only_util["available"] is False and "neither power nor" in only_util["why"]
    no_tokens = energy_block([R(0, power_w=100), R(1, power_w=100)], (0, 1), output_tokens=0, source="dcgm")
    assert no_tokens["energy_j"] == pytest.approx(100) and no_tokens["joules_per_output_token"] is None
