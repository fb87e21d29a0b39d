"""compare: same-kind runs are within noise; a known speed factor is recovered; CLI and outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.report.commands import compare_command
from servescope.report.compare import compare_sides, load_side, sentence
from tests.support.synth import synth_records, write_synth_run, write_synth_sweep

FACTOR = 1.5


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cmp")
    return {
        "a": write_synth_run(root / "a", synth_records(300, seed=101, concurrency=8)),
        "a2": write_synth_run(root / "a2", synth_records(300, seed=202, concurrency=8)),
        # Same workload, every duration stretched by FACTOR (TTFT, ITL, hence E2E and TPOT).
        "slow": write_synth_run(root / "slow", synth_records(300, seed=303, concurrency=8, time_scale=FACTOR)),
    }


def test_two_runs_of_the_same_kind_are_within_noise(dirs: dict[str, Path]) -> None:
    (comp,) = compare_sides([load_side(str(dirs["a"]), "A"), load_side(str(dirs["a2"]), "B")])
    assert len(comp.estimates) == 10
    for e in comp.estimates:
        assert e.lo <= 1.0 <= e.hi, sentence(e, "A", "B")
        assert e.verdict == "within noise"
        # An interval, not "anything goes": tight for medians and throughput, wider for P99s.
        assert e.hi - e.lo < (1.0 if e.spec.key.endswith("p99") else 0.25), sentence(e, "A", "B")


def test_known_speed_factor_is_inside_every_interval(dirs: dict[str, Path]) -> None:
    (comp,) = compare_sides([load_side(str(dirs["a"]), "A"), load_side(str(dirs["slow"]), "B")])
    for e in comp.estimates:
        expected = 1 / FACTOR if e.spec.higher_is_better else FACTOR
        assert e.lo <= expected <= e.hi, sentence(e, "A", "B")
        assert not e.within_noise and e.verdict == "worse", sentence(e, "A", "B")
    (rev,) = compare_sides([load_side(str(dirs["slow"]), "A"), load_side(str(dirs["a"]), "B")])
    assert all(e.verdict == "better" for e in rev.estimates)


def test_sentence_wording(dirs: dict[str, Path]) -> None:
    (comp,) = compare_sides([load_side(str(dirs["a"]), "A"), load_side(str(dirs["slow"]), "B")])
    s = sentence(comp.estimates[0], "A", "B")
    assert s.startswith("B's output throughput is 0.6") and "× A's (95% CI 0.6" in s and s.endswith("B is worse.")


def test_repeats_side_and_sweeps(dirs: dict[str, Path], tmp_path: Path) -> None:
    rep = load_side(f"{dirs['a']},{dirs['a2']}", "A")
    assert len(rep.runs) == 2
    (comp,) = compare_sides([rep, load_side(str(dirs["slow"]), "B")])
    itl = next(e for e in comp.estimates if e.spec.key == "itl_median")
    assert itl.lo <= FACTOR <= itl.hi
    s1 = write_synth_sweep(tmp_path / "s1", [1, 4, 16], n=60, seed=1)
    s2 = write_synth_sweep(tmp_path / "s2", [4, 16, 32], n=60, seed=2, time_scale=FACTOR)
    comps = compare_sides([load_side(str(s1), "A"), load_side(str(s2), "B")])
    assert [c.label for c in comps] == ["concurrency 4", "concurrency 16"]  # shared load levels only
    for c in comps:
        itl = next(e for e in c.estimates if e.spec.key == "itl_median")
        assert itl.lo <= FACTOR <= itl.hi


def test_compare_command_writes_html_and_json(dirs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = CliRunner().invoke(
        compare_command, [str(dirs["a"]), str(dirs["slow"]), "--out", str(out), "--resamples", "300"]
    )
    assert res.exit_code == 0, res.output
    assert "B's output throughput is" in " ".join(res.output.split())
    doc = json.loads((out / "compare.json").read_text())
    assert doc["schema"] == "servescope.compare/1" and len(doc["comparisons"][0]["metrics"]) == 10
    html = (out / "compare.html").read_text()
    assert "<script" not in html and "95% CI" in html and "overlay_itl_cdf" in html
    again = CliRunner().invoke(
        compare_command, [str(dirs["a"]), str(dirs["slow"]), "--out", str(out), "--resamples", "300"]
    )
    assert again.exit_code == 0 and (out / "compare.html").read_text() == html  # deterministic
    one = CliRunner().invoke(compare_command, [str(dirs["a"])])
    assert one.exit_code == 2


def test_repeats_directory_is_one_side(dirs: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "rep"
    root.mkdir()
    for k in (1, 2):
        write_synth_run(root / f"repeat-{k}", synth_records(150, seed=500 + k, concurrency=8, time_scale=FACTOR))
    (root / "repeats.json").write_text(json.dumps({"repeats": ["repeat-1", "repeat-2"]}))
    side = load_side(str(root), "B")
    assert len(side.runs) == 2
    (comp,) = compare_sides([load_side(str(dirs["a"]), "A"), side])
    itl = next(e for e in comp.estimates if e.spec.key == "itl_median")
    assert itl.lo <= FACTOR <= itl.hi


def test_failures_are_reported_beside_the_ratios(dirs: dict[str, Path], tmp_path: Path) -> None:
    flaky = write_synth_run(tmp_path / "flaky", synth_records(100, seed=7, concurrency=8, fail_every=10))
    (comp,) = compare_sides([load_side(str(dirs["a"]), "A"), load_side(str(flaky), "B")], resamples=200)
    assert comp.failed == ((0, 300), (10, 100))
    assert comp.failures_text() == "Failed requests: A 0 of 300 (0.0%), B 10 of 100 (10.0%)."


def test_differences_in_settings_are_named(tmp_path: Path) -> None:
    a = write_synth_run(tmp_path / "a", synth_records(40, seed=1, output_len=32), concurrency=8)
    b = write_synth_run(tmp_path / "b", synth_records(40, seed=2, output_len=64), concurrency=16, model="other")
    (comp,) = compare_sides([load_side(str(a), "A"), load_side(str(b), "B")], resamples=100)
    assert comp.differences == ["model synthetic-8b vs other", "concurrency 8 vs 16", "output_len 32 vs 64"]
