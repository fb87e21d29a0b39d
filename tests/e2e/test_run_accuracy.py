"""Measurement accuracy against a server with known timing (issue 2, must-hold 1-3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import urllib.request

import numpy as np

from servebench.store import load_run
from tests.support.procs import servebench

TRUE_TTFT_MS = 100.0
TRUE_ITL_MS = 20.0


def _run(url: str, out: Path, *args: str) -> dict:
    proc = servebench("run", "--url", url, "--model", "m", "--out", str(out), "--quiet", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "summary.json").read_text())


def truth_vs_client(url: str, out: Path) -> dict[str, float]:
    """The server's own record of when it wrote each token (GET /truth, CLOCK_MONOTONIC) against
    what the client measured, request by request (matched on the x-request-id header)."""
    truth = json.loads(urllib.request.urlopen(url + "/truth", timeout=10).read())["requests"]
    run = load_run(out)
    origin = run.manifest["clock"]["origin_ns"]
    true_ttft, client_ttft, true_gaps, client_gaps = [], [], [], []
    for r in run.records:
        t = truth[r.response_id]["token_ns"]
        assert len(t) == len(r.chunk_ns) == r.output_tokens
        true_ttft.append((t[0] - (origin + r.t_send_ns)) / 1e6)
        client_ttft.append((r.t_first_ns - r.t_send_ns) / 1e6)
        true_gaps.append(np.diff(t) / 1e6)
        client_gaps.append(np.diff(r.chunk_ns) / 1e6)
        # a token is never seen before the server wrote it (one clock, one host)
        assert origin + r.chunk_ns[0] >= t[0]
    tg, cg = np.concatenate(true_gaps), np.concatenate(client_gaps)
    return {
        "true_ttft_median": float(np.median(true_ttft)), "ttft_median": float(np.median(client_ttft)),
        "true_itl_median": float(np.median(tg)), "itl_median": float(np.median(cg)),
        "true_itl_p99": float(np.percentile(tg, 99)), "itl_p99": float(np.percentile(cg, 99)),
    }


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
    e = truth_vs_client(srv.url, tmp_path)
    assert abs(e["ttft_median"] - e["true_ttft_median"]) <= 5.0, e
    assert abs(e["itl_median"] - e["true_itl_median"]) <= 0.5, e
    # and the truth is what the flags asked for
    assert abs(e["true_ttft_median"] - TRUE_TTFT_MS) <= 5.0 and abs(e["true_itl_median"] - TRUE_ITL_MS) <= 0.5, e
    assert s["latency_ms"]["ttft"]["median"] == pytest.approx(e["ttft_median"], abs=0.01)
    run = load_run(tmp_path)
    assert len(run.records) == 500
    assert run.manifest["target"]["model"] == "m"


@pytest.mark.timing
def test_concurrency_512_matches_truth(scripted_server, tmp_path: Path) -> None:
    # Truth is when the server really wrote each token: a Python server pacing 512 streams on two
    # cores is itself a few ms late at its P99, and that is not the client's error. The P99 of a
    # 2-second run on a shared 2-core host varies run to run (0.6-3.3 ms seen), so one retry is
    # allowed; both attempts are reported on failure.
    attempts = []
    for k in range(2):
        srv = scripted_server("--ttft-ms", str(TRUE_TTFT_MS), "--itl-ms", str(TRUE_ITL_MS))
        out = tmp_path / f"a{k}"
        s = _run(srv.url, out, "--api", "completions", "--concurrency", "512", "--num-requests", "1024",
                 "--input-len", "128", "--output-len", "128")
        assert s["requests"]["completed"] == 1024
        e = truth_vs_client(srv.url, out)
        assert s["latency_ms"]["itl"]["p99"] == pytest.approx(e["itl_p99"], abs=0.01)
        attempts.append(e)
        if abs(e["ttft_median"] - e["true_ttft_median"]) <= 10.0 and abs(e["itl_p99"] - e["true_itl_p99"]) <= 3.0:
            return
        srv.stop()
    raise AssertionError(f"client error above 10 ms (TTFT median) or 3 ms (ITL P99) twice: {attempts}")


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
