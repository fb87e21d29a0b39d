"""`vllm bench serve` and SGLang `bench_serving` command lines run unchanged as `servescope run ...` (a real
subprocess, as a user's script would run it) against the built-in emulator and llama.cpp's llama-server;
their result files land where their tools put them, with the recorded keys and our summary's numbers."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import ServerProcess, servescope
from tests.support.real_servers import RealServer

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "foreign"


def vllm_argv(base_url: str, model: str) -> list[str]:
    """A `vllm bench serve` command line as users write it, word for word."""
    return [
        "--backend",
        "vllm",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--dataset-name",
        "random",
        "--random-input-len",
        "128",
        "--random-output-len",
        "16",
        "--num-prompts",
        "20",
        "--max-concurrency",
        "4",
        "--ignore-eos",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--save-result",
        "--result-dir",
        "out",
    ]


def sglang_argv(port: int, model: str) -> list[str]:
    return [
        "--backend",
        "sglang",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        model,
        "--dataset-name",
        "random",
        "--random-input-len",
        "128",
        "--random-output-len",
        "16",
        "--random-range-ratio",
        "1",
        "--num-prompts",
        "20",
        "--max-concurrency",
        "4",
        "--request-rate",
        "inf",
        "--output-file",
        "sglang.jsonl",
        "--disable-tqdm",
    ]


def _run(cwd: Path, argv: list[str]) -> None:
    p = servescope("run", *argv, timeout_s=240, cwd=cwd)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"


def check_vllm(cwd: Path) -> dict[str, Any]:
    files = sorted((cwd / "out").glob("*.json"))
    assert len(files) == 1, files
    doc = json.loads(files[0].read_text())
    recorded = json.loads((FIXTURES / "vllm_result.json").read_text())
    assert list(doc) == list(recorded)
    ours = cwd / "out" / files[0].stem  # servescope's result directory beside it, same stem
    summary = json.loads((ours / "summary.json").read_text())
    lat = summary["latency_ms"]
    assert doc["completed"] == summary["requests"]["completed"] == 20 and doc["failed"] == 0
    assert doc["total_output_tokens"] == summary["tokens"]["output_total"] == 320
    assert doc["request_throughput"] == summary["throughput"]["requests_per_s"]
    assert doc["output_throughput"] == summary["throughput"]["output_tokens_per_s"]
    for theirs, key in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "e2e")):
        assert doc[f"median_{theirs}_ms"] == doc[f"p50_{theirs}_ms"] == lat[key]["median"]
        assert doc[f"p99_{theirs}_ms"] == lat[key]["p99"] and doc[f"mean_{theirs}_ms"] == lat[key]["mean"]
    assert doc["max_concurrency"] == 4 and doc["request_rate"] == "inf" and doc["num_prompts"] == 20
    manifest = json.loads((ours / "manifest.json").read_text())
    cfg = manifest["config"]
    assert (cfg["api"], cfg["concurrency"], cfg["rate"], cfg["input_len"], cfg["output_len"], cfg["ignore_eos"]) == (
        "completions",
        4,
        None,
        128,
        16,
        True,
    )
    return doc


def check_sglang(cwd: Path) -> dict[str, Any]:
    lines = (cwd / "sglang.jsonl").read_text().splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    recorded = json.loads((FIXTURES / "sglang_result.jsonl").read_text().splitlines()[0])
    assert list(doc) == list(recorded)
    (ours,) = (cwd / "servescope-results").iterdir()
    summary = json.loads((ours / "summary.json").read_text())
    assert doc["completed"] == summary["requests"]["completed"] == 20
    assert doc["total_output_tokens"] == summary["tokens"]["output_total"] == 320
    assert doc["median_ttft_ms"] == summary["latency_ms"]["ttft"]["median"]
    assert doc["p99_itl_ms"] == summary["latency_ms"]["itl"]["p99"]
    assert doc["output_throughput"] == summary["throughput"]["output_tokens_per_s"]
    assert summary["requests"]["warmup"] == 1  # SGLang's one warm-up request, excluded
    return doc


@pytest.fixture(scope="module")
def emulator() -> Iterator[ServerProcess]:
    s = ServerProcess([sys.executable, "-m", "servescope.emulator.server", "--profile", "tiny", "--port", "0"])
    yield s
    s.stop()


def _port(url: str) -> int:
    return int(url.rstrip("/").removesuffix("/v1").rsplit(":", 1)[1])


def test_vllm_command_line_runs_unchanged_against_the_emulator(emulator: ServerProcess, tmp_path: Path) -> None:
    _run(tmp_path, vllm_argv(f"http://127.0.0.1:{_port(emulator.url)}", "tiny"))
    check_vllm(tmp_path)


def test_sglang_command_line_runs_unchanged_against_the_emulator(emulator: ServerProcess, tmp_path: Path) -> None:
    _run(tmp_path, sglang_argv(_port(emulator.url), "tiny"))
    doc = check_sglang(tmp_path)
    assert doc["backend"] == "sglang" and doc["random_range_ratio"] == 1


def test_vllm_command_line_runs_unchanged_against_llama_server(llama_server: RealServer, tmp_path: Path) -> None:
    _run(tmp_path, vllm_argv(llama_server.root, "tiny-llama"))
    check_vllm(tmp_path)


def test_sglang_command_line_runs_unchanged_against_llama_server(llama_server: RealServer, tmp_path: Path) -> None:
    _run(tmp_path, sglang_argv(llama_server.port, "tiny-llama"))
    check_sglang(tmp_path)


def test_a_refused_flag_stops_the_cli_before_any_connection(tmp_path: Path) -> None:
    srv = socket.create_server(("127.0.0.1", 0))
    srv.setblocking(False)
    port = srv.getsockname()[1]
    try:
        p = servescope(
            "run", *vllm_argv(f"http://127.0.0.1:{port}", "m"), "--save-detailed", cwd=tmp_path, timeout_s=60
        )
        with pytest.raises(BlockingIOError):
            srv.accept()  # nobody connected
    finally:
        srv.close()
    assert p.returncode == 2 and p.stdout == ""
    err = " ".join(p.stderr.split())
    assert "--save-detailed" in err and "instead: " in err and "Nothing was sent" in err
    assert not (tmp_path / "out").exists()
