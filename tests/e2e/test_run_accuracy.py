"""Measurement accuracy against a server with known timing (issue 2, must-hold 1-3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servebench.store import load_run
from tests.support.procs import servebench

TRUE_TTFT_MS = 100.0
TRUE_ITL_MS = 20.0


def _run(url: str, out: Path, *args: str) -> dict:
    proc = servebench("run", "--url", url, "--model", "m", "--out", str(out), "--quiet", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "summary.json").read_text())


def test_concurrency_64_matches_truth(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", str(TRUE_TTFT_MS), "--itl-ms", str(TRUE_ITL_MS))
    s = _run(srv.url, tmp_path, "--api", "completions", "--concurrency", "64", "--num-requests", "500",
             "--input-len", "128", "--output-len", "128")
    assert s["schema"] == "servebench.summary/1"
    for key in ("run_id", "started_at", "duration_s", "target", "load", "workload", "requests", "throughput",
                "latency_ms", "tokens", "per_user_output_tokens_per_s", "goodput", "client"):
        assert key in s, key
    assert set(s["latency_ms"]) == {"ttft", "tpot", "itl", "e2e", "ttfat"}
    assert s["requests"]["completed"] == 500 and s["requests"]["failed"] == 0
    assert s["tokens"]["output_total"] == 500 * 128
    assert abs(s["latency_ms"]["ttft"]["median"] - TRUE_TTFT_MS) <= 5.0, s["latency_ms"]["ttft"]
    assert abs(s["latency_ms"]["itl"]["median"] - TRUE_ITL_MS) <= 0.5, s["latency_ms"]["itl"]
    run = load_run(tmp_path)
    assert len(run.records) == 500
    assert run.manifest["target"]["model"] == "m"


@pytest.mark.slow
def test_concurrency_512_matches_truth(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", str(TRUE_TTFT_MS), "--itl-ms", str(TRUE_ITL_MS))
    s = _run(srv.url, tmp_path, "--api", "completions", "--concurrency", "512", "--num-requests", "1024",
             "--input-len", "128", "--output-len", "128")
    assert s["requests"]["completed"] == 1024
    assert abs(s["latency_ms"]["ttft"]["median"] - TRUE_TTFT_MS) <= 10.0, s["latency_ms"]["ttft"]
    # Truth: every gap is 20 ms, so the true P99 ITL is 20 ms.
    assert abs(s["latency_ms"]["itl"]["p99"] - TRUE_ITL_MS) <= 3.0, s["latency_ms"]["itl"]


def test_three_token_chunks_role_chunk_reasoning_and_usage_chunk(scripted_server, tmp_path: Path) -> None:
    """Chat with a role-only first chunk, 10 reasoning tokens first, 3 tokens per chunk, usage-only last chunk."""
    srv = scripted_server("--ttft-ms", "100", "--itl-ms", "20", "--tokens-per-chunk", "3",
                          "--reasoning-tokens", "12")
    s = _run(srv.url, tmp_path, "--api", "chat", "--concurrency", "4", "--num-requests", "8",
             "--output-len", "60")
    lat = s["latency_ms"]
    assert abs(lat["ttft"]["median"] - 100) <= 5  # the role chunk (sent at once) did not start TTFT
    assert abs(lat["ttfat"]["median"] - (100 + 4 * 60)) <= 5  # answer starts with chunk 5 (tokens 13-15)
    assert abs(lat["itl"]["median"] - 20) <= 0.5  # per token, not per chunk (60 ms)
    assert abs(lat["tpot"]["median"] - 19 * 60 / 59) <= 0.5  # (t_last - t_first) / (n - 1)
    assert s["tokens"]["output_total"] == 8 * 60 and s["tokens"]["reasoning_total"] == 8 * 12


def test_non_streaming_run(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", "50", "--itl-ms", "1")
    s = _run(srv.url, tmp_path, "--no-stream", "--concurrency", "4", "--num-requests", "12", "--output-len", "20")
    assert s["requests"]["completed"] == 12
    assert s["latency_ms"]["ttft"]["median"] == pytest.approx(s["latency_ms"]["e2e"]["median"])
    assert s["latency_ms"]["itl"]["count"] == 0


@pytest.mark.slow
def test_poisson_200_rps_for_20_s_achieves_its_rate(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", "2", "--itl-ms", "1")
    s = _run(srv.url, tmp_path, "--api", "completions", "--rate", "200", "--burstiness", "1",
             "--num-requests", "4000", "--input-len", "16", "--output-len", "4", "--seed", "1")
    assert s["requests"]["completed"] == 4000
    run = load_run(tmp_path)
    sends = sorted(r.t_send_ns for r in run.records)
    achieved = (len(sends) - 1) / ((sends[-1] - sends[0]) / 1e9)
    assert achieved == pytest.approx(200.0, rel=0.02)
    assert s["throughput"]["offered_requests_per_s"] == pytest.approx(200.0, rel=1e-3)
    assert s["client"]["schedule_lag_ms"]["p99"] < 10
