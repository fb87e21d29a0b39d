"""`servescope sweep` flag errors: all reported before any server starts (exit status 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.sweep.command import sweep_command


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--find-max", "concurrency"], "--find-max needs a run-level SLO"),
        (["--find-max", "concurrency", "--slo", "ttft_ms=100"], "--find-max needs a run-level SLO"),
        (["--find-max", "concurrency", "--slo", "itl_p99_ms=50", "--rate", "1,2"], "drop --rate"),
        (["--concurrency", "1,2", "--rate", "1,2"], "give one concurrency"),
        (["--rate", "auto", "--duration", "5"], "--num-requests"),
        (["--lengths", "10:5", "--input-len", "10"], "drop --input-len"),
        (["--concurrency", "0"], "at least 1"),
        (["--slo", "mlperf:nope"], "unknown MLPerf preset"),
        (["--gpus", "0"], "--gpus must be at least 1"),
        (["--gpu-price", "h100-nope"], "unknown"),
        (["--url", "http://127.0.0.1:9", "--emulator-args", "--max-num-seqs 4"], "--emulator-args"),
    ],
)
def test_errors_before_anything_runs(tmp_path: Path, args: list[str], message: str) -> None:
    res = CliRunner().invoke(sweep_command, [*args, "--out", str(tmp_path / "s")])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())  # rich wraps long lines
    assert not (tmp_path / "s" / "sweep.json").exists()


def test_help_lists_sweep_flags() -> None:
    res = CliRunner().invoke(sweep_command, ["--help"])
    assert res.exit_code == 0
    for flag in ("--find-max", "--resume", "--gpu-hour-price", "--lengths", "--slo", "--num-requests"):
        assert flag in res.output
