"""The engine's own view of latency on a real run: the built-in emulator serves vLLM's request-level
histograms on its /metrics, observed from its own timestamps; the run's `engine_view` counts exactly
the requests the client completed between the two scrapes (warm-up included), its phases add up, the
engine's TTFT sits just under the client's, `engine_agreement` passes, and the report shows the view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.procs import servescope

pytestmark = pytest.mark.e2e


def test_the_emulator_serves_the_engine_view(tmp_path: Path) -> None:
    n, warmup, out_len = 80, 4, 8
    proc = servescope(
        "run",
        "--profile",
        "tiny",
        "--num-requests",
        str(n),
        "--warmup",
        str(warmup),
        "--concurrency",
        "8",
        "--input-len",
        "16",
        "--output-len",
        str(out_len),
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["requests"]["completed"] == n
    view = s["engine_view"]
    # the engine saw the measured requests and the warm-up (between the scrapes), nothing else
    assert view["requests_completed"] == view["requests_sent"] == view["engine_requests"] == n + warmup
    assert view["engine_requests_metric"] == "vllm:e2e_request_latency_seconds"
    for key in ("ttft", "e2e"):
        m = view["metrics"][key]
        assert m["count"] == m["client_count"] == n + warmup, (key, m)
    ttft = view["metrics"]["ttft"]
    assert ttft["metric"] == "vllm:time_to_first_token_seconds"
    # the engine stamps the first token when it writes it, the client when it reads it
    assert ttft["client_minus_engine_ms"] >= -1.0 and ttft["client_mean_ms"] > 0
    lo, hi = ttft["median_bucket_ms"]
    assert lo <= ttft["median_ms"] <= hi  # vLLM's TTFT buckets: the estimate stays in its bucket
    assert view["metrics"]["itl"]["count"] >= view["metrics"]["itl"]["client_count"] > 0
    phases = view["phases"]
    assert set(phases) == {"queue", "prefill", "decode", "inference"}
    assert all(p["count"] == n + warmup for p in phases.values()), phases
    # the time in the RUNNING phase is prefill then decode, request by request
    both = phases["prefill"]["mean_ms"] + phases["decode"]["mean_ms"]
    assert phases["inference"]["mean_ms"] == pytest.approx(both, rel=1e-6)
    check = next(c for c in s["validation"] if c["name"] == "engine_agreement")
    assert check["status"] == "pass", check
    assert check["figures"]["engine_requests"] == n + warmup
    html = (tmp_path / "report.html").read_text()
    assert "Engine's view of latency" in html and "vllm:request_inference_time_seconds" in html
