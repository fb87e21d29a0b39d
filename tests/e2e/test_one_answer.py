"""One model, one answer: `servebench run` against `servebench emulate <deployment flags>` and
`servebench plan <the same flags>`'s what-if at the same load agree (issue 13).

Both resolve the deployment to one engine configuration (`deploy.deployment.Deployment`): the
emulator runs it on the wall clock, plan on a virtual clock. Closed loop, fixed lengths, ignore_eos.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import ServerProcess

pytestmark = pytest.mark.e2e

SERVEBENCH = str(Path(sys.executable).parent / "servebench")
CONCURRENCY, INPUT_LEN, OUTPUT_LEN = 16, 256, 64

DEPLOYMENTS = {
    "llama-8b-1xh100": ["--model", "Llama-3.1-8B", "--gpu", "h100", "--gpus", "1"],
    "llama-70b-4xh100-tp4": ["--model", "Llama-3.1-70B", "--gpu", "h100", "--gpus", "4", "--tp", "4"],
    "deepseek-r1-fp8-8xh200": ["--model", "DeepSeek-R1", "--gpu", "h200", "--gpus", "8", "--quant", "fp8"],
}


def _plan(flags: list[str], num_requests: int) -> dict:
    p = subprocess.run([SERVEBENCH, "plan", *flags, "--concurrency", str(CONCURRENCY), "--input-len", str(INPUT_LEN),
                        "--output-len", str(OUTPUT_LEN), "--num-requests", str(num_requests), "--json", "-"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    (pt,) = json.loads(p.stdout)["whatif"]["points"]
    return pt


def _run(url: str, out: Path, num_requests: int) -> dict:
    p = subprocess.run([SERVEBENCH, "run", "--url", url, "--api", "completions", "--concurrency", str(CONCURRENCY),
                        "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN), "--ignore-eos",
                        "--num-requests", str(num_requests), "--out", str(out), "-q"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("name", list(DEPLOYMENTS))
def test_emulator_and_plan_agree(name: str, tmp_path: Path) -> None:
    flags = DEPLOYMENTS[name]
    n = 4 * CONCURRENCY
    emu = ServerProcess([SERVEBENCH, "emulate", *flags, "--port", "0"])
    try:
        measured = _run(emu.url, tmp_path / name, n)
    finally:
        emu.stop()
    predicted = _plan(flags, n)
    tps, itl = measured["throughput"]["output_tokens_per_s"], measured["latency_ms"]["itl"]["median"]
    assert measured["load"]["concurrency"] == CONCURRENCY
    assert tps == pytest.approx(predicted["output_tokens_per_s"], rel=0.10), (tps, predicted)
    assert itl == pytest.approx(predicted["itl_ms_p50"], rel=0.10), (itl, predicted)
