"""Results written under the project's old name still load: a servebench 0.1.0 run and sweep
(tests/fixtures/legacy, schema ids `servebench.*`) read, summarise and render with servescope."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.cli import cli
from servescope.errors import ConfigError
from servescope.results.schema import SUMMARY_VERSION, current_schema_id
from servescope.results.store import load_run, read_summary

LEGACY = Path(__file__).resolve().parents[1] / "fixtures" / "legacy"


def test_the_fixture_is_what_the_old_version_wrote() -> None:
    assert json.loads((LEGACY / "run" / "summary.json").read_text())["schema"] == "servebench.summary/1"
    assert json.loads((LEGACY / "sweep" / "sweep.json").read_text())["schema"] == "servebench.sweep.command/1"


def test_an_old_id_reads_as_todays_and_others_are_left_alone() -> None:
    assert current_schema_id("servebench.summary/1") == SUMMARY_VERSION == "servescope.summary/1"
    assert current_schema_id("servebench.sweep.command/1") == "servescope.sweep.command/1"
    assert current_schema_id("servescope.plan/1") == "servescope.plan/1"
    assert current_schema_id("other.summary/1") == "other.summary/1"


def test_an_old_run_loads_with_its_figures_and_todays_schema_id() -> None:
    on_disk = json.loads((LEGACY / "run" / "summary.json").read_text())
    run = load_run(LEGACY / "run")
    assert run.summary["schema"] == SUMMARY_VERSION
    assert run.summary["requests"] == on_disk["requests"]
    assert run.summary["latency_ms"] == on_disk["latency_ms"]
    assert len(run.records) == on_disk["requests"]["completed"] + on_disk["requests"]["failed"]
    assert len(run.columns) == len(run.records)


def test_an_old_run_without_its_summary_is_recomputed_from_its_records(tmp_path: Path) -> None:
    """A run killed before its summary: the old records alone give the same counts and TTFT."""
    shutil.copytree(LEGACY / "run", tmp_path / "run")
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    (tmp_path / "run" / "summary.json").unlink()
    run = load_run(tmp_path / "run")
    assert run.summary["schema"] == SUMMARY_VERSION
    assert run.summary["requests"]["completed"] == on_disk["requests"]["completed"]
    assert run.summary["latency_ms"]["ttft"]["median"] == on_disk["latency_ms"]["ttft"]["median"]


def test_a_summary_of_an_unknown_version_is_refused_with_what_it_reads(tmp_path: Path) -> None:
    doc = json.loads((LEGACY / "run" / "summary.json").read_text())
    doc["schema"] = "servescope.summary/9"
    (tmp_path / "summary.json").write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=r"summary/9.*servescope\.summary/1, servebench\.summary/1"):
        read_summary(tmp_path / "summary.json")


@pytest.mark.parametrize("kind", ["run", "sweep"])
def test_servescope_report_renders_an_old_result(tmp_path: Path, kind: str) -> None:
    shutil.copytree(LEGACY / kind, tmp_path / kind)
    res = CliRunner().invoke(cli, ["report", str(tmp_path / kind)])
    assert res.exit_code == 0, res.output
    html = (tmp_path / kind / "report.html").read_text()
    assert "<svg" in html
    if kind == "sweep":  # the overview links each point's own report
        points = json.loads((LEGACY / "sweep" / "sweep.json").read_text())["points"]
        assert all(f"{p['dir']}/report.html" in html for p in points)
