"""TensorRT-LLM keeps its Prometheus page at /prometheus/metrics (its /metrics is JSON iteration stats, or
absent): a run must read the page where the probe found it, and the server's figures must reach summary.json.

The target is the scripted server with `--trtllm-metrics`, a real HTTP server on loopback whose page counts
what it really served, so the window's deltas are known exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.procs import servescope


@pytest.mark.parametrize("plain_metrics", ["404", "json"])
def test_trtllm_server_figures_reach_the_summary(scripted_server, tmp_path: Path, plain_metrics: str) -> None:
    n, out_len, ttft_ms = 12, 8, 20
    srv = scripted_server("--ttft-ms", str(ttft_ms), "--itl-ms", "1", "--trtllm-metrics", plain_metrics)
    proc = servescope(
        "run",
        "--url",
        srv.url,
        "--model",
        "m",
        "--concurrency",
        "4",
        "--num-requests",
        str(n),
        "--input-len",
        "16",
        "--output-len",
        str(out_len),
        "--out",
        str(tmp_path),
        "--quiet",
        "--no-report",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    caps = manifest["target"]["capabilities"]
    assert caps["engine"] == "trtllm" and caps["metrics_path"] == "/prometheus/metrics"
    server = json.loads((tmp_path / "summary.json").read_text())["server"]
    assert server is not None, "no server-side figures: the scrape missed /prometheus/metrics"
    # the window holds the measured requests only (the probe's came before the first scrape)
    assert server["generation_tokens"] == n * out_len
    assert server["prompt_tokens"] == n * 7  # the scripted server reports 7 prompt tokens a request
    assert server["running"] == 0.0 and server["kv_usage"] == 0.125
    assert server["metrics_used"]["generation_tokens"] == "trtllm_generation_tokens"
    assert server["metrics_used"]["ttft_hist"] == "trtllm_time_to_first_token_seconds"
    # the server's own clock: its 20 ms sleep reads 19.9x ms on its histogram at times
    assert ttft_ms - 1 <= server["latency_ms"]["ttft_mean_ms"] < ttft_ms + 100
