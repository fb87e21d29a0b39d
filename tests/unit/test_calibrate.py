"""Calibration of the step-time knobs to measured points (plan/calibrate.py): the fit, TTFT lower
bounds, each point at its measured length, reading measurements, leave-one-out refits."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from servescope.deploy.deployment import Deployment
from servescope.errors import ConfigError
from servescope.plan.calibrate import MeasuredPoint, calibrate, load_measurements
from servescope.plan.whatif import knobs_yaml, whatif
from tests.support.plan_deployments import awq_deployment, measured_by


def test_calibration_on_seed_low_concurrency_predicts_c100_within_10pct() -> None:
    # seed 001 (test-only; vLLM 0.7.3, DeepSeek-V3-AWQ, 8xH100, 1024 in / 256 out), concurrency <= 15:
    # c=1 ~33 tok/s, ITL ~30 ms; c=5 ~103 tok/s, ~46 ms; c=15 ~245 tok/s, ~50 ms; "when the concurrency
    # reaches 8, the first token does not appear until after 1 second" (a lower bound). Measured at
    # c=100: ~620 tok/s. The model predicts 650 (+5%) since compute efficiency has a factor per architecture
    # class (comp.arch.mla-moe 0.55 for DeepSeek on the 2025-H1 releases, fitted on the corpus, never on the
    # seeds); 749 (+21%) before it, an xfail from the 580-point refit until then (docs/plan.md).
    dep, _m = awq_deployment()
    points = [
        MeasuredPoint(1, 1024, 256, 33, 30),
        MeasuredPoint(5, 1024, 256, 103, 46),
        MeasuredPoint(8, 1024, 256, None, ttft_ms_at_least=1000),
        MeasuredPoint(15, 1024, 256, 245, 50),
    ]
    cal, report = calibrate(dep, points)
    assert "calibrated on 4 points" in report and "TTFT" in report
    (c1, c8, c100) = whatif(dep, cal, input_len=1024, output_len=256, concurrencies=(1, 8, 100))
    assert c1.output_tokens_per_s == pytest.approx(33, rel=0.15)
    assert c8.ttft_ms_p50 >= 1000 * 0.97
    assert c100.output_tokens_per_s == pytest.approx(620, rel=0.10)
    assert yaml.safe_load(knobs_yaml(cal))["knobs"]["mem_efficiency"] == pytest.approx(cal.mem_efficiency, rel=1e-3)


def test_a_ttft_lower_bound_pulls_only_from_below() -> None:
    """`MeasuredPoint.ttft_ms_at_least`: a bound the model already meets leaves the knobs where they
    start (it adds nothing to the loss); one above the model's TTFT slows the model until it is met,
    and not much past it (which knobs move is the fit's choice: with one point many can). A point that
    measures nothing is refused."""
    dep, _m = awq_deployment()
    start = dep.knobs()
    (c8,) = whatif(dep, start, input_len=1024, output_len=256, concurrencies=(8,))
    met = MeasuredPoint(8, 1024, 256, None, ttft_ms_at_least=0.5 * c8.ttft_ms_p50)
    cal, report = calibrate(dep, [met], max_evals=40)
    assert cal == start and "at least" in report
    above = MeasuredPoint(8, 1024, 256, None, ttft_ms_at_least=2.0 * c8.ttft_ms_p50)
    cal, _ = calibrate(dep, [above], max_evals=60)
    (got,) = whatif(dep, cal, input_len=1024, output_len=256, concurrencies=(8,))
    assert cal != start
    assert 0.9 * 2.0 * c8.ttft_ms_p50 <= got.ttft_ms_p50 <= 1.25 * 2.0 * c8.ttft_ms_p50
    with pytest.raises(ConfigError, match="measures nothing"):
        calibrate(dep, [MeasuredPoint(8, 1024, 256, None)])


def test_calibration_simulates_each_point_at_its_measured_length() -> None:
    """The fit simulates a measured point with the requests the run sent (`num_requests`): points the
    engine itself made at 8 requests a user are reproduced exactly at its own knobs, which the default
    4c + 4 requests do not do (a closed loop's waves, and with them the median TTFT, depend on the run's
    length), and a fit from other knobs finds its compute efficiency again."""
    from servescope.plan.calibrate import _loss
    from servescope.plan.whatif import engine_config, simulate_point

    dep = Deployment.build(model="Llama-3.1-8B", gpu="a100", gpus=1, max_model_len=4096)
    truth = dataclasses.replace(dep.knobs(), compute_efficiency=0.3, mem_efficiency=0.5, step_overhead_s=0.006)
    cfg = engine_config(dep, truth)
    pts = []
    for c in (1, 5, 15):
        sim = simulate_point(cfg, concurrency=c, input_len=256, output_len=64, num_requests=8 * c)
        pts.append(
            MeasuredPoint(c, 256, 64, sim.output_tokens_per_s, sim.itl_ms_p50, sim.ttft_ms_p50, num_requests=8 * c)
        )
    assert _loss(dep, truth, pts, truth) == pytest.approx(0.0, abs=1e-12)
    assert _loss(dep, truth, [dataclasses.replace(p, num_requests=None) for p in pts], truth) > 1e-4
    cal, _ = calibrate(dep, pts, start=dataclasses.replace(truth, compute_efficiency=0.5, mem_efficiency=0.3))
    assert cal.compute_efficiency == pytest.approx(0.3, rel=0.05)
    # memory efficiency and the per-step overhead trade against each other at these batch sizes; what they
    # predict together at c=100 is what must come back
    (want,) = whatif(dep, truth, input_len=256, output_len=64, concurrencies=(100,), num_requests=200)
    (got,) = whatif(dep, cal, input_len=256, output_len=64, concurrencies=(100,), num_requests=200)
    assert got.output_tokens_per_s == pytest.approx(want.output_tokens_per_s, rel=0.03)


def test_load_measurements_from_results_and_yaml(tmp_path) -> None:
    run = tmp_path / "runs" / "c5"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(
        json.dumps(
            {
                "schema": "servescope.summary/1",
                "load": {"concurrency": 5},
                "workload": {"input_len": 1024, "output_len": 256},
                "throughput": {"output_tokens_per_s": 103.0},
                "latency_ms": {"itl": {"median": 46.0}, "ttft": {"median": 800}},
                "requests": {"total": 40, "completed": 40, "failed": 0},
            }
        )
    )
    (pt,) = load_measurements(tmp_path / "runs")
    assert (pt.concurrency, pt.output_tokens_per_s, pt.itl_ms, pt.ttft_ms) == (5, 103.0, 46.0, 800.0)
    assert pt.num_requests == 40
    f = tmp_path / "points.yaml"
    f.write_text("points:\n  - {concurrency: 1, input_len: 1024, output_len: 256, output_tokens_per_s: 33}\n")
    (pt,) = load_measurements(f)
    assert pt.itl_ms is None and pt.output_tokens_per_s == 33 and pt.num_requests is None
    f.write_text("points:\n  - {concurrency: 5, input_len: 1024, output_len: 256, itl_ms: 46, num_requests: 20}\n")
    (pt,) = load_measurements(f)
    assert pt.num_requests == 20
    f.write_text("points:\n  - {concurrency: 8, input_len: 1024, output_len: 256, ttft_ms_at_least: 1000}\n")
    (pt,) = load_measurements(f)
    assert pt.output_tokens_per_s is None and pt.ttft_ms_at_least == 1000.0
    f.write_text("points:\n  - {concurrency: 8, input_len: 1024, output_len: 256}\n")
    with pytest.raises(ConfigError, match="measures nothing"):
        load_measurements(f)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError):
        load_measurements(empty)


def test_leave_one_out_refits_without_each_point_and_needs_three() -> None:
    from servescope.plan.calibrate import leave_one_out

    dep = Deployment.build(model="Llama-3.1-8B", gpu="a100")
    truth = dataclasses.replace(
        dep.knobs(), mem_efficiency=0.5 * dep.knobs().mem_efficiency, step_overhead_s=4 * dep.knobs().step_overhead_s
    )
    points = measured_by(dep, truth, (1, 4, 16))
    assert leave_one_out(dep, points[:2], max_evals=40) == []
    loo = leave_one_out(dep, points, max_evals=60)
    assert [left.concurrency for left, _ in loo] == [1, 4, 16]
    full, _ = calibrate(dep, points, max_evals=60)
    for left, knobs in loo:
        rest = [p for p in points if p is not left]
        assert knobs == calibrate(dep, rest, max_evals=60)[0]  # the same fit, one point fewer
    assert any(k != full for _, k in loo)
    # a point set whose only other points are latency bounds leaves that fit out
    bound = MeasuredPoint(8, 256, 64, None, ttft_ms_at_least=1.0)
    assert [left.concurrency for left, _ in leave_one_out(dep, [points[0], bound, bound], max_evals=20)] == [8, 8]
