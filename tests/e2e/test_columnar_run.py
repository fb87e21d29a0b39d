"""A real run (the built-in emulator) leaves requests.parquet that pandas and DuckDB open without
servescope, with the columns and units docs/results.md documents; its summary is the one the
record-by-record oracle (tests/support/oracle.py) computes; export works from the command line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from servescope.results.columns import SCHEMA
from servescope.results.store import read_records
from tests.support import oracle

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results.md"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("columnar") / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "servescope.cli",
            "run",
            "--num-requests",
            "40",
            "--warmup",
            "2",
            "--concurrency",
            "4",
            "--input-len",
            "32",
            "--output-len",
            "16",
            "--no-report",
            "--quiet",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_requests_parquet_opens_in_pandas_and_duckdb(run_dir: Path) -> None:
    path = run_dir / "requests.parquet"
    assert path.is_file() and not (run_dir / "requests.parts").exists() and not (run_dir / "requests.jsonl").exists()
    frame = pd.read_parquet(path)
    assert len(frame) == 42 and list(frame.columns) == SCHEMA.names
    ok = frame[frame["status"] == "ok"]
    assert len(ok) == 42 and (ok["output_tokens"] == 16).all()
    # units: ns from the run origin; chunk offsets in ns after the send
    first_offset = ok["chunk_offsets_ns"].map(lambda a: int(a[0]))
    assert (ok["t_send_ns"] + first_offset == ok["t_first_ns"]).all()
    assert (ok["chunk_offsets_ns"].map(len) == ok["chunks"]).all()
    rows = duckdb.sql(
        f"select count(*), sum(output_tokens), max(len(chunk_offsets_ns)), "
        f"median((t_first_ns - t_send_ns) / 1e6) from read_parquet('{path}') "
        f"where not warmup and status = 'ok'"
    ).fetchall()
    summary = json.loads((run_dir / "summary.json").read_text())
    n, tokens, longest, ttft_median = rows[0]
    assert (n, tokens) == (40, summary["tokens"]["output_total"]) and longest == 16
    assert ttft_median == pytest.approx(summary["latency_ms"]["ttft"]["median"], rel=1e-9)


def test_every_column_is_documented_with_its_unit(run_dir: Path) -> None:
    text = DOCS.read_text(encoding="utf-8")
    documented = dict(re.findall(r"^\| `([a-z_]+)` \| ([^|]+) \|", text, flags=re.M))
    assert set(SCHEMA.names) <= set(documented), set(SCHEMA.names) - set(documented)
    for name in SCHEMA.names:
        if name.endswith("_ns"):
            assert "ns" in documented[name], name


def test_run_summary_is_the_record_summary(run_dir: Path) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    want = json.loads(
        json.dumps(
            oracle.summarize(
                read_records(run_dir),
                run={k: summary[k] for k in ("run_id", "started_at", "target", "load", "workload", "interrupted")},
            )
        )
    )
    for key in (
        "requests",
        "throughput",
        "latency_ms",
        "latency_ms_error_adjusted",
        "tokens",
        "per_user_output_tokens_per_s",
        "duration_s",
    ):
        assert summary[key] == want[key], key
    assert summary["client"]["schedule_lag_ms"] == want["client"]["schedule_lag_ms"]


def test_export_from_the_command_line(run_dir: Path, tmp_path: Path) -> None:
    for fmt in ("csv", "jsonl", "parquet"):
        out = tmp_path / f"r.{fmt}"
        proc = subprocess.run(
            [sys.executable, "-m", "servescope.cli", "export", str(run_dir), "--format", fmt, "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0 and f"42 records: {out}" in proc.stdout, proc.stderr
    assert len(pd.read_csv(tmp_path / "r.csv")) == 42
    assert len(read_records(tmp_path / "r.jsonl")) == 42
    assert pd.read_parquet(tmp_path / "r.parquet").equals(pd.read_parquet(run_dir / "requests.parquet"))
