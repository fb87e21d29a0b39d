"""The simulation held to vLLM's real V1 scheduler on a recorded timeline (tests/fixtures/vllm_scheduler.json,
real output of `benchmarks/vllm_scheduler.py record` against vLLM 0.32's CPU build; its `made_by` says how).

The sim gets vLLM's step costs measured from the recording's calibration runs alone and vLLM's scheduler
settings, nothing fitted to the runs compared: the cohorts (requests one step starts together) are as
large in both, large with fixed output lengths and small with spread ones, TTFT rises by position within a
wave of a fixed-length loop in both, the median ITL agrees within 15%, and so do TTFT median and P90 but
for the closed loop of 512-token prompts (a strict expected failure: docs/plan.md says why)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servescope.sim import replay
from servescope.sim.steptime import StepShape, step_time_s

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_scheduler.json"


@pytest.fixture(scope="module")
def recording() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def rows(recording: dict[str, Any]) -> dict[str, dict[str, Any]]:
    costs = replay.measure_costs(recording)
    return {r["name"]: r for r in replay.compare_all(recording, costs)}


def test_fixture_is_a_recording_of_vllm(recording: dict[str, Any]) -> None:
    assert "benchmarks/vllm_scheduler.py record" in recording["recorded_by"]
    assert recording["made_by"].startswith("benchmarks/vllm_scheduler.py compare")
    settings = recording["vllm_settings"]
    assert settings["max_num_batched_tokens"] == 2048 and settings["block_size"] == 128
    for run in recording["runs"].values():
        assert len(run["requests"]) == run["n"]
        for send, first, last, prompt, out in run["requests"]:
            assert 0 <= send < first <= last and prompt > 0 and out > 0


def test_measured_costs_reproduce_the_calibration(recording: dict[str, Any]) -> None:
    """The step-cost solve reproduces what it was measured from: each c=1 prefill time within 15%."""
    cost = replay.measure_costs(recording).step_cost()
    for run in recording["runs"].values():
        if run["kind"] == "calib" and run["concurrency"] == 1:
            p = sum(r[3] for r in run["requests"]) / run["n"]
            shape = StepShape(prefill_seqs=1, prefill_tokens=round(p), prefill_ctx_pairs=p * p / 2)
            assert step_time_s(cost, shape) == pytest.approx(run["engine"]["prefill_time_mean_s"], rel=0.15)


FIXED = ["fixed-p128-c16", "fixed-p128-c64", "fixed-p512-c16"]
SPREAD = ["spread-p512-c16", "spread-p128-c64"]


@pytest.mark.parametrize("name", FIXED + SPREAD)
def test_cohort_size_agrees_within_15_percent(rows: dict[str, dict[str, Any]], name: str) -> None:
    """How many requests one step starts together, the sim against vLLM, fixed and spread lengths alike."""
    real, sim = rows[name]["cohort_real"], rows[name]["cohort_sim"]
    assert real >= 1 and abs(sim - real) <= 0.15 * real, f"{name}: vLLM {real:.2f}, sim {sim:.2f}"


@pytest.mark.parametrize(
    ("fixed", "spread"), [("fixed-p512-c16", "spread-p512-c16"), ("fixed-p128-c64", "spread-p128-c64")]
)
def test_fixed_lengths_hold_cohorts_that_spread_lengths_dissolve(
    rows: dict[str, dict[str, Any]], fixed: str, spread: str
) -> None:
    """The same load with fixed and with spread (--range-ratio 0.5) lengths: cohorts at least twice as large
    with fixed lengths, in vLLM and in the sim."""
    for side in ("cohort_real", "cohort_sim"):
        assert rows[fixed][side] >= 2 * rows[spread][side], side


@pytest.mark.parametrize("name", FIXED)
def test_cohorts_with_fixed_lengths_in_both(rows: dict[str, dict[str, Any]], name: str) -> None:
    """A fixed-length closed loop: the first send of each wave starts a step alone, the rest follow in
    steps the token budget cuts; in vLLM and in the sim alike."""
    row = rows[name]
    assert replay.ramp(row["wave_real"]) > replay.COHORT_RAMP
    assert replay.ramp(row["wave_sim"]) > replay.COHORT_RAMP


def _itl_within_15_percent(row: dict[str, Any]) -> None:
    real, sim, err = row["itl_p50_s"]
    assert abs(err) <= 0.15, f"{row['name']}: vLLM {real * 1e3:.1f} ms, sim {sim * 1e3:.1f} ms ({err:+.1%})"


@pytest.mark.parametrize("name", [*FIXED, "spread-p512-c16", "poisson-p512-r1"])
def test_median_itl_within_15_percent(rows: dict[str, dict[str, Any]], name: str) -> None:
    _itl_within_15_percent(rows[name])


@pytest.mark.xfail(
    strict=True,
    reason="known miss (docs/plan.md, the real scheduler): at c=64 with spread lengths most steps admit a "
    "request, and the sim's admissions (the front end's time per prompt token) make its steps 18% too long",
)
def test_median_itl_within_15_percent_at_c64_with_spread_lengths(rows: dict[str, dict[str, Any]]) -> None:
    _itl_within_15_percent(rows["spread-p128-c64"])


#: TTFT within 15% holds for these (docs/plan.md, the real scheduler); fixed-p512-c16 is still short
TTFT_HOLDS = ["fixed-p128-c16", "fixed-p128-c64", "spread-p512-c16", "spread-p128-c64", "poisson-p512-r1"]


def _ttft_within_15_percent(row: dict[str, Any]) -> None:
    for key in ("ttft_p50_s", "ttft_p90_s"):
        real, sim, err = row[key]
        assert abs(err) <= 0.15, f"{row['name']} {key}: vLLM {real * 1e3:.1f} ms, sim {sim * 1e3:.1f} ms ({err:+.1%})"


@pytest.mark.parametrize("name", TTFT_HOLDS)
def test_ttft_median_and_p90_within_15_percent(rows: dict[str, dict[str, Any]], name: str) -> None:
    """Send to first token, the sim against vLLM: the engine loses the c=1 front end's time per prompt token
    of each request it admits (`MeasuredCosts.admit_per_token_s`, the slope over the c=1 prompt lengths)."""
    _ttft_within_15_percent(rows[name])


@pytest.mark.xfail(
    strict=True,
    reason="known miss (docs/plan.md, the real scheduler): steps of 512-token prompts and their chunks cost "
    "vLLM's CPU build more than the c=1 prefills and front ends say; TTFT is 15-21% short",
)
def test_ttft_within_15_percent_with_512_token_prompts_in_waves(rows: dict[str, dict[str, Any]]) -> None:
    _ttft_within_15_percent(rows["fixed-p512-c16"])


def test_admission_cost_from_the_c1_front_ends_predicts_the_calibration_waves(recording: dict[str, Any]) -> None:
    """Each calibration wave's step that admits its followers, as the lead's gap times it, is longer than
    the c=1 prefills price its prompts. The c=1 front ends' time per prompt token (client TTFT less vLLM's,
    measured at c=1 only) paid by each admitted prompt accounts for it: each wave's admitting step within
    20% (the per-prompt remainder, fitted to the waves, left out)."""
    costs = replay.measure_costs(recording)
    front = dict(costs.front_points)
    assert front[128] / 128 > costs.admit_per_token_s > (front[1024] - front[128]) / 896 * 0.5
    for name, p, k in (("wave-c16-p128", 128, 15), ("wave-c8-p256", 256, 7)):
        steps = replay._lead_steps(recording["runs"][name], 2048)
        assert [(n, kk) for n, kk, _ in steps] == [(1, k)], (name, steps)
        shape = StepShape(decode_seqs=1, prefill_seqs=k, prefill_tokens=k * p, prefill_ctx_pairs=k * p * p / 2)
        plain = step_time_s(costs.step_cost(), shape)
        assert steps[0][2] > 1.3 * plain, name  # far longer than the prefills price
        assert plain + k * p * costs.admit_per_token_s == pytest.approx(steps[0][2], rel=0.20), name


def test_wave_profile_and_ramp() -> None:
    ttft = [1.0, 2.0, 9.0, 9.0, 1.0, 3.0, 1.0, 4.0]  # waves of 2, the first dropped: (9, 1, 1) and (9, 3, 4)
    assert replay.wave_profile(ttft, 2) == [1.0, 4.0]
    assert replay.ramp([1.0, 4.0]) == 4.0
    assert replay.wave_profile(ttft[:3], 2) == [] and replay.ramp([]) == 0.0
