"""Interactivity (tokens/s per user), throughput per GPU, the Pareto front and the table read off it.

Every expected number below is computed by hand in the comments, not by the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servescope.errors import ConfigError
from servescope.results.interactivity import (
    DEFAULT_LEVELS,
    ParetoPoint,
    interactivity_block,
    pareto_front,
    parse_levels,
    read_front,
    usd_per_million,
)

# Seven runs of one deployment (x = tokens/s per user, y = output tokens/s per GPU), $2.00 per GPU-hour.
PRICE = 2.0
POINTS = [
    ParetoPoint(10, 1000, "c=64", PRICE),
    ParetoPoint(25, 800, "c=32", PRICE),
    ParetoPoint(40, 500, "c=16", PRICE),
    ParetoPoint(30, 400, "c=12", PRICE),  # dominated by c=16: slower users (30 < 40) AND less throughput (400 < 500)
    ParetoPoint(80, 200, "c=4", PRICE),
    ParetoPoint(120, 60, "c=1", PRICE),
    ParetoPoint(60, 150, "c=6", PRICE),  # dominated by c=4 (80 > 60 and 200 > 150)
]


def test_front_keeps_exactly_the_undominated_points_by_interactivity() -> None:
    front = pareto_front(POINTS)
    assert [p.label for p in front] == ["c=64", "c=32", "c=16", "c=4", "c=1"]
    xs, ys = [p.x for p in front], [p.y for p in front]
    assert xs == sorted(xs) and ys == sorted(ys, reverse=True)


def test_front_edge_cases() -> None:
    assert pareto_front([]) == []
    a = ParetoPoint(50, 100, "a")
    # an identical copy is kept once; equal x with less y, and equal y with less x, are dominated
    assert pareto_front(
        [a, ParetoPoint(50, 100, "copy"), ParetoPoint(50, 90, "lower"), ParetoPoint(40, 100, "slower")]
    ) == [a]
    # non-finite and x <= 0 (no TPOT) points are left out
    assert pareto_front([ParetoPoint(float("nan"), 1), ParetoPoint(0, 5), ParetoPoint(10, float("inf"))]) == []


def test_table_matches_a_hand_computation() -> None:
    front = pareto_front(POINTS)
    # 20 tok/s/user lies between c=64 (10, 1000) and c=32 (25, 800):
    #   t = (20 - 10) / (25 - 10) = 2/3;  y = 1000 + (800 - 1000)·2/3 = 866.67 tok/s/GPU
    #   $ = 2.00 / (866.67 · 3600) · 1e6 = 2e6 / 3,120,000 = $0.6410 per 1M tokens
    r20 = read_front(front, 20)
    assert r20.status == "interpolated" and not r20.extrapolated
    assert r20.y == pytest.approx(866.6667, abs=1e-3)
    assert r20.left is not None and r20.right is not None
    assert (r20.left.label, r20.right.label) == ("c=64", "c=32")
    assert r20.usd_per_1m_tokens == pytest.approx(0.641026, abs=1e-6)
    # 50 between c=16 (40, 500) and c=4 (80, 200): t = 10/40 = 0.25; y = 500 − 300·0.25 = 425
    #   (the dominated c=6 at (60, 150) plays no part);  $ = 2e6 / (425 · 3600) = 2e6 / 1,530,000 = $1.3072
    r50 = read_front(front, 50)
    assert r50.y == pytest.approx(425.0) and r50.usd_per_1m_tokens == pytest.approx(1.307190, abs=1e-6)
    # 100 between c=4 (80, 200) and c=1 (120, 60): t = 20/40 = 0.5; y = 200 − 140·0.5 = 130
    #   $ = 2e6 / (130 · 3600) = 2e6 / 468,000 = $4.2735
    r100 = read_front(front, 100)
    assert r100.y == pytest.approx(130.0) and r100.usd_per_1m_tokens == pytest.approx(4.273504, abs=1e-6)
    # never above either neighbour, never below the lower one
    for r in (r20, r50, r100):
        assert r.left is not None and r.right is not None and r.y is not None
        assert r.right.y <= r.y <= r.left.y
    # on a front point: its own value
    r40 = read_front(front, 40)
    assert r40.status == "measured" and r40.y == 500 and r40.left is not None and r40.left.label == "c=16"


def test_outside_the_front_is_flagged() -> None:
    front = pareto_front(POINTS)
    # below the slowest point (10 tok/s/user): c=64 already serves 5 tok/s/user users with 1000
    # tok/s/GPU, a lower bound for what a heavier load would give
    low = read_front(front, 5)
    assert low.status == "below_range" and low.extrapolated and low.y == 1000
    # $ = 2e6 / (1000 · 3600) = $0.5556
    assert low.usd_per_1m_tokens == pytest.approx(0.555556, abs=1e-6)
    high = read_front(front, 150)  # no run reached 150 tok/s/user (fastest: 120 at c=1)
    assert high.status == "not_reached" and high.extrapolated and high.y is None
    assert high.left is not None and high.left.label == "c=1" and high.usd_per_1m_tokens is None
    assert read_front([], 20).status == "no_data"


def test_cost_and_energy_only_where_known() -> None:
    a = ParetoPoint(10, 1000, "a", None, 0.5)
    b = ParetoPoint(30, 600, "b", None, 0.9)
    r = read_front(pareto_front([a, b]), 20)
    # no price: no $; energy interpolated like throughput: 0.5 + (0.9 − 0.5)·0.5 = 0.7 J/token
    assert r.usd_per_1m_tokens is None and r.j_per_token == pytest.approx(0.7)
    # two different prices on one segment: no single price to read a cost with
    mixed = pareto_front([ParetoPoint(10, 1000, "a", 2.0), ParetoPoint(30, 600, "b", 3.0)])
    assert read_front(mixed, 20).usd_per_1m_tokens is None
    assert usd_per_million(2.0, 0) is None and usd_per_million(None, 10) is None


def test_interactivity_block_by_hand() -> None:
    # TPOTs 10, 20, 40 ms: median 20 ms -> 1000 / 20 = 50 tokens/s per user.
    # Per request 1000/TPOT = 100, 50, 25 (sorted 25, 50, 100): median 50, mean 175/3 = 58.33,
    #   p10 at rank 0.1·2 = 0.2: 25 + 0.2·25 = 30;  p1 at rank 0.02: 25 + 0.02·25 = 25.5;
    #   p90 at rank 1.8: 50 + 0.8·50 = 90.
    # 1,200 output and 6,000 total tokens/s on 4 GPUs: 300 and 1,500 per GPU.
    thr = {"output_tokens_per_s": 1200.0, "total_tokens_per_s": 6000.0}
    b = interactivity_block([10.0, 20.0, 40.0, float("nan")], thr, 4, "--gpus")
    assert b["tokens_per_s_per_user"] == pytest.approx(50.0)
    d = b["per_request_tokens_per_s_per_user"]
    assert d["count"] == 3 and d["median"] == pytest.approx(50.0) and d["mean"] == pytest.approx(175 / 3)
    assert d["p10"] == pytest.approx(30.0) and d["p1"] == pytest.approx(25.5) and d["p90"] == pytest.approx(90.0)
    assert b["gpus"] == 4 and b["gpus_source"] == "--gpus"
    assert b["output_tokens_per_s_per_gpu"] == pytest.approx(300.0)
    assert b["total_tokens_per_s_per_gpu"] == pytest.approx(1500.0)
    unknown = interactivity_block([10.0], thr, None)
    assert unknown["gpus"] is None and unknown["output_tokens_per_s_per_gpu"] is None
    assert unknown["total_tokens_per_s_per_gpu"] is None and unknown["tokens_per_s_per_user"] == 100.0
    empty = interactivity_block([], thr, 1)
    assert empty["tokens_per_s_per_user"] is None and empty["per_request_tokens_per_s_per_user"]["count"] == 0


def test_parse_levels() -> None:
    assert parse_levels(None) == DEFAULT_LEVELS == (20.0, 50.0, 100.0)
    assert parse_levels("100, 20,50,20") == (20.0, 50.0, 100.0)
    assert parse_levels([7.5]) == (7.5,)
    for bad in ("fast", "0", "-5", "", "inf"):
        with pytest.raises(ConfigError):
            parse_levels(bad)


def _summary(x: float, y: float, *, gpus: int | None = 4, usd_per_gpu_hour: float | None = PRICE) -> dict:
    """Just what the Pareto section reads: tokens/s per user, per-GPU output throughput, the price."""
    s: dict = {
        "interactivity": {"tokens_per_s_per_user": x, "gpus": gpus, "output_tokens_per_s_per_gpu": y if gpus else None},
        "throughput": {"output_tokens_per_s": y * (gpus or 1)},
        "latency_ms": {"tpot": {"median": 1000.0 / x}},
    }
    if usd_per_gpu_hour is not None:
        s["cost"] = {"usd_per_gpu_hour": usd_per_gpu_hour, "usd_per_hour": usd_per_gpu_hour * (gpus or 1)}
    return s


def test_report_section_shows_the_hand_computed_table_and_draws_dominated_points_faint() -> None:
    from servescope.report.pareto import pareto_section

    runs = [(p.label, _summary(p.x, p.y)) for p in POINTS]
    html, figs = pareto_section([("sweep", runs)], (5, 20, 50, 100, 150))
    cells = [c.split("</td>")[0] for c in html.split("<td")[1:]]
    cells = [c.split(">", 1)[1] for c in cells]
    rows = [cells[i : i + 4] for i in range(0, len(cells), 4)]  # level, tok/s per GPU, $/1M, where
    # the values of test_table_matches_a_hand_computation / test_outside_the_front_is_flagged, as shown
    assert [r[:3] for r in rows] == [
        ["5", "≥ 1,000.0", "≤ $0.556"],
        ["20", "866.7", "$0.641"],
        ["50", "425.0", "$1.307"],
        ["100", "130.0", "$4.274"],
        ["150", "—", "—"],
    ]
    assert "between c=64" in rows[1][3] and "c=32" in rows[1][3] and "extrapolated" in rows[0][3]
    assert "not reached" in rows[4][3] and "c=1" in rows[4][3]
    assert "J per output token" not in html  # no energy measured: no column
    svg = figs["pareto"]
    assert svg.count('opacity="0.30"') == 3  # the two dominated runs (c=12, c=6) and their legend swatch
    assert "Throughput per GPU vs interactivity" in svg and "output tok/s per GPU" in svg
    for label in ("c=64", "c=32", "c=16", "c=4", "c=1"):
        assert f">{label}</text>" in svg  # front points are labelled


def test_report_section_falls_back_to_the_deployment_when_a_gpu_count_is_unknown() -> None:
    from servescope.report.pareto import pareto_section

    runs = [("a", _summary(10, 100, gpus=None, usd_per_gpu_hour=None)), ("b", _summary(20, 50))]
    html, figs = pareto_section([("s", runs)])
    assert "--gpus" in html and "whole deployment" in figs["pareto"]
    # per deployment: a gives 100 tok/s at 10/user, b 50 × 4 GPUs = 200 at 20/user: b dominates a, so
    # 20 tok/s/user reads b itself (measured: 200.0) and b's is the whole front
    assert ">200.0<" in html and "measured: b" in html and "throughput vs tokens/s per user" in html
    assert pareto_section([("s", [("none", {"latency_ms": {}})])]) == ("", {})


def test_compare_of_two_sweeps_prints_and_writes_the_table(tmp_path: Path) -> None:
    """`servescope compare A B` of two sweeps: the terminal table and compare.json's `interactivity`,
    equal to the pure core's readings of the summaries on disk."""
    from click.testing import CliRunner

    from servescope.report.commands import compare_command
    from servescope.report.data import SweepResult, load_results
    from tests.support.synth import write_synth_sweep

    a = write_synth_sweep(tmp_path / "a", [1, 4, 16], n=30, seed=1, gpus=2, usd_per_hour=5.0)
    b = write_synth_sweep(tmp_path / "b", [1, 4, 16], n=30, seed=2, time_scale=1.3, gpus=2, usd_per_hour=5.0)
    res = CliRunner().invoke(
        compare_command,
        [
            str(a),
            str(b),
            "--out",
            str(tmp_path / "cmp"),
            "--resamples",
            "100",
            "--interactivity-levels",
            "30,60",
            "--no-html",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "Best throughput at each interactivity level" in res.output
    doc = json.loads((tmp_path / "cmp" / "compare.json").read_text())["interactivity"]
    assert doc["per_gpu"] is True and doc["levels"] == [30.0, 60.0]
    got = [(r["side"], r["tokens_per_s_per_user"], r["status"], r["output_tokens_per_s"]) for r in doc["readings"]]
    want = []
    for name, path in (("A", a), ("B", b)):
        sw = load_results(path)
        assert isinstance(sw, SweepResult)
        # per GPU: each point's output tok/s over 2 GPUs; x = 1000 / median TPOT
        pts = []
        for p in sw.points:
            tpot = p.run.summary["latency_ms"]["tpot"]["median"]
            assert tpot
            pts.append(ParetoPoint(1000.0 / tpot, p.run.summary["throughput"]["output_tokens_per_s"] / 2))
        for level in (30.0, 60.0):
            r = read_front(pareto_front(pts), level)
            want.append((name, level, r.status, r.y))
    assert [g[:3] for g in got] == [w[:3] for w in want]
    for g, w in zip(got, want):
        assert (g[3] is None) == (w[3] is None) and (g[3] is None or g[3] == pytest.approx(w[3], rel=1e-9))
    assert any(s != "not_reached" for _, _, s, _ in got)  # some reading is a number


def test_gpu_count_from_the_flag_else_the_emulators_deployment_else_unknown() -> None:
    """run.bench asks the built-in emulator (real HTTP on loopback, /_servescope/info) for its
    deployment's GPUs; --gpus wins; a target that is not our emulator stays unknown."""
    import asyncio

    from servescope.emulator.server import EmulatorThread
    from servescope.run.bench import _gpus
    from servescope.run.config import RunConfig

    with EmulatorThread("llama-3.1-70b") as emu:  # Llama-3.1-70B on 4 H100s (its profile)
        base = emu.url + "/v1"
        assert asyncio.run(_gpus(RunConfig(), base, {}, emulated=True)) == (4, "emulator")
        assert asyncio.run(_gpus(RunConfig(gpus=8), base, {}, emulated=True)) == (8, "--gpus")
        assert asyncio.run(_gpus(RunConfig(), base, {}, emulated=False)) == (None, None)
    with pytest.raises(ConfigError, match="--gpus must be at least 1"):
        RunConfig(gpus=0).validate()
