"""summary.json against its committed JSON Schema (docs/summary.schema.json, generated from results.schema).

What is validated is the committed file itself, with jsonschema: the summaries of a real run and of a
real sweep against the built-in emulator, every test helper's output, a summary recomputed from the
records of a killed run. A test also fails when the committed file differs from the generated one, and
the schema rejects a drift (a key no type declares, a wrong type) in the blocks it closes.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from servescope.errors import ConfigError
from servescope.results import schema, schemagen
from servescope.results.store import SUMMARY, load_run, read_summary, write_json
from servescope.sweep.command import sweep_command
from tests.support.synth import synth_records, write_synth_run, write_synth_sweep

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "summary.schema.json"
# A run-level limit (slo_check), per-request limits (goodput): every block a run can write.
SLO = "ttft_ms=5000,ttft_p99_ms=10000,goodput_fraction=0.5"


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    doc = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(doc)
    cls.check_schema(doc)
    return cls(doc)


def errors(validator: jsonschema.protocols.Validator, doc: Any) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(doc)]


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`servescope run` against the built-in emulator: 30 requests, with an SLO."""
    out = tmp_path_factory.mktemp("schema") / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "servescope.cli",
            "run",
            "--num-requests",
            "30",
            "--warmup",
            "2",
            "--concurrency",
            "4",
            "--input-len",
            "32",
            "--output-len",
            "16",
            "--slo",
            SLO,
            "--no-report",
            "--quiet",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_committed_schema_is_the_generated_one() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schemagen.render(), (
        "docs/summary.schema.json is stale: run `python -m servescope.results.schemagen --write`"
    )
    assert schemagen.main(["--check"]) == 0


def test_real_run_summary_validates(validator: jsonschema.protocols.Validator, real_run: Path) -> None:
    doc = read(real_run / SUMMARY)
    assert errors(validator, doc) == []
    assert doc["schema"] == schema.SUMMARY_VERSION
    # A real run writes every key the type declares, except what only a sweep adds.
    assert set(schema.Summary.__annotations__) - set(doc) == {"cost"}
    assert set(schema.Client.__annotations__) - {"workers"} == set(doc["client"])  # workers: --workers N > 1
    assert set(schema.Load.__annotations__) == set(doc["load"])
    assert set(schema.Target.__annotations__) == set(doc["target"])
    assert doc["goodput"] is not None and doc["slo_check"]["passed"] is not None and doc["server"] is not None


def test_summary_recomputed_from_records_validates(
    validator: jsonschema.protocols.Validator, real_run: Path, tmp_path: Path
) -> None:
    killed = tmp_path / "killed"
    killed.mkdir()
    for name in ("requests.parquet", "manifest.json"):  # killed before the summary was written
        (killed / name).write_bytes((real_run / name).read_bytes())
    run = load_run(killed)
    assert errors(validator, run.summary) == []
    assert run.summary["interrupted"] is True and run.summary["requests"]["total"] == 30


def test_sweep_point_summaries_validate(validator: jsonschema.protocols.Validator, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    res = CliRunner().invoke(
        sweep_command,
        [
            "--no-report",
            "--no-probe",
            "--concurrency",
            "1,4",
            "--num-requests",
            "12",
            "--input-len",
            "16",
            "--output-len",
            "8",
            "--slo",
            SLO,
            "--gpu-hour-price",
            "2.5",
            "--gpus",
            "2",
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    points = read(out / "sweep.json")["points"]
    assert len(points) == 2
    for p in points:
        doc = read(out / p["dir"] / SUMMARY)
        assert errors(validator, doc) == [], p["dir"]
        assert doc["cost"]["gpus"] == 2 and doc["slo_check"]["checks"]


def _synth_summaries(root: Path) -> dict[str, Any]:
    """Every way the tests call the helpers that write summaries."""
    runs = {
        "plain": write_synth_run(root / "plain", synth_records(40, seed=1)),
        "failures+warmup+slo": write_synth_run(
            root / "fail", synth_records(60, seed=2, fail_every=7, warmup=3), slo={"ttft_ms": 200.0, "tpot_ms": 25.0}
        ),
        "rate": write_synth_run(root / "rate", synth_records(30, seed=3), rate_rps=5.0),
        "all-failed": write_synth_run(root / "none", synth_records(5, seed=4, fail_every=1)),
    }
    docs = {name: read(p / SUMMARY) for name, p in runs.items()}
    for name, kwargs in {
        "sweep": {},
        "sweep+slo+cost": {"itl_p99_limit_ms": 30.0, "usd_per_hour": 20.0},
        "sweep+lengths": {"lengths": [(128, 32), (1024, 32)], "itl_p99_limit_ms": 30.0},
    }.items():
        sw = write_synth_sweep(root / name, [1, 8], n=20, **kwargs)
        for p in read(sw / "sweep.json")["points"]:
            docs[f"{name}/{p['dir']}"] = read(sw / p["dir"] / SUMMARY)
    return docs


def test_test_helpers_write_summaries_that_validate(validator: jsonschema.protocols.Validator, tmp_path: Path) -> None:
    docs = _synth_summaries(tmp_path)
    assert len(docs) == 4 + 2 + 2 + 4
    for name, doc in docs.items():
        assert errors(validator, doc) == [], name
    assert "cost" in docs["sweep+slo+cost/c0008"] and "slo_check" in docs["sweep+slo+cost/c0008"]


@pytest.mark.parametrize(
    ("where", "change"),
    [
        ("a key no type declares, top level", lambda d: d.update(latency={})),
        ("a key no type declares, in a block", lambda d: d["throughput"].update(tokens_per_s=1.0)),
        ("a key no type declares, in a distribution", lambda d: d["latency_ms"]["ttft"].update(p999=1.0)),
        ("a key no type declares, in the client", lambda d: d["client"].update(cpu_percent={"mean": 1.0})),
        ("a missing key", lambda d: d["requests"].pop("failed")),
        ("a wrong type", lambda d: d["requests"].update(total="30")),
        ("a wrong value", lambda d: d["tokens"].update(input_source="guessed")),
        ("another version", lambda d: d.update(schema="servescope.summary/0")),
    ],
)
def test_schema_rejects_drift(
    validator: jsonschema.protocols.Validator, tmp_path: Path, where: str, change: Any
) -> None:
    doc = read(write_synth_run(tmp_path / "run", synth_records(20, seed=5)) / SUMMARY)
    assert errors(validator, doc) == []
    bad = copy.deepcopy(doc)
    change(bad)
    assert errors(validator, bad), where


def test_open_blocks_take_keys_the_engine_or_workload_adds(
    validator: jsonschema.protocols.Validator, tmp_path: Path
) -> None:
    doc = read(write_synth_run(tmp_path / "run", synth_records(20, seed=6)) / SUMMARY)
    doc["workload"]["mix"] = [{"input_len": 128, "output_len": 32, "weight": 1.0}]
    doc["server"] = {
        "metrics_used": {"running": "sglang:num_running_reqs"},
        "prefix_cache_hit_rate": None,
        "running": 3.0,
        "some_engine_gauge": 1.0,
    }
    assert errors(validator, doc) == []


def test_older_summaries_of_the_same_version_load_and_validate(
    validator: jsonschema.protocols.Validator, real_run: Path, tmp_path: Path
) -> None:
    """A summary from before read coalescing (no client.read_pauses) or server metrics (no `server`),
    and one from before versioning (no `schema`), still load."""
    doc = read(real_run / SUMMARY)
    for key in ("read_pauses", "read_pause_ms"):
        del doc["client"][key]
    del doc["server"]
    assert errors(validator, doc) == []
    old = tmp_path / "old"
    old.mkdir()
    write_json(old / SUMMARY, doc)
    assert load_run(old).summary == doc
    del doc["schema"]
    write_json(old / SUMMARY, doc)
    assert read_summary(old / SUMMARY)["requests"]["total"] == 30


def test_a_summary_of_an_unknown_version_is_refused(tmp_path: Path) -> None:
    p = write_synth_run(tmp_path / "run", synth_records(10, seed=7))
    doc = read(p / SUMMARY)
    doc["schema"] = "servescope.summary/99"
    write_json(p / SUMMARY, doc)
    with pytest.raises(ConfigError, match="summary/99"):
        load_run(p)
