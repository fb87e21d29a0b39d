"""Self-validation and precision on real runs: every check passes against the built-in
emulator and llama.cpp's llama-server; --target-precision stops a run once its headline
percentiles are known well enough, or says that the limit came first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import servescope
from tests.support.real_servers import RealServer


def _run(out: Path, *args: str, timeout_s: float = 300) -> dict[str, Any]:
    proc = servescope("run", "--out", str(out), "--no-report", *args, timeout_s=timeout_s)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    s["_stdout"] = proc.stdout
    return s


def _statuses(s: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in s["validation"]}


def test_every_check_passes_on_the_emulator(tmp_path: Path) -> None:
    # 400 requests: enough for a P99 (368); the emulator's deployment (Llama-3.1-8B on one H100) is known
    s = _run(tmp_path, "--num-requests", "400", "--concurrency", "32", "--input-len", "64", "--output-len", "32")
    assert _statuses(s) == dict.fromkeys(
        ("token_counts", "littles_law", "e2e_consistency", "physical_bounds", "percentile_floors", "engine_agreement"),
        "pass",
    ), s["validation"]
    bounds = next(c for c in s["validation"] if c["name"] == "physical_bounds")["figures"]
    assert bounds["deployment"] == "emulator profile llama-3.1-8b"
    assert 0 < bounds["itl_floor_ms"] < bounds["itl_mean_ms"]  # 16 GB of weights at 3.35 TB/s: ~4.8 ms
    assert "validation  6 checks pass" in s["_stdout"]
    # intervals for every headline percentile (how tight depends on how steady this host was)
    ttft = s["precision"]["metrics"]["ttft"]["median"]
    assert ttft["low"] <= ttft["estimate"] <= ttft["high"] and ttft["half_width_pct"] is not None
    assert set(s["precision"]["metrics"]) == {"ttft", "tpot", "itl", "e2e"}
    assert "±" in s["_stdout"]


def test_a_short_run_says_its_p99_is_under_sampled(tmp_path: Path) -> None:
    s = _run(
        tmp_path,
        "--profile",
        "tiny",
        "--num-requests",
        "100",
        "--concurrency",
        "8",
        "--input-len",
        "16",
        "--output-len",
        "8",
    )
    floors = next(c for c in s["validation"] if c["name"] == "percentile_floors")
    assert floors["status"] == "marked" and "TTFT P99 from 100" in floors["why"], floors
    assert s["precision"]["metrics"]["ttft"]["p99"]["high"] is None  # the data cannot bound it
    # marked, not failed: a default-sized run is not called wrong for being short
    assert "validation  5 checks pass" in s["_stdout"] and "percentile_floors: under-sampled" in s["_stdout"]
    assert "fail" not in s["_stdout"].split("validation", 1)[1].split("\n", 1)[0]
    assert "±?" in s["_stdout"]


def test_target_precision_stops_once_the_headline_percentiles_are_known(scripted_server, tmp_path: Path) -> None:
    """A server with steady timing (TTFT 100 ms plus an exponential 5 ms on average, 20 ms a token): a
    couple of thousand requests pin the medians and P99s to ±10%, and the run stops there, far before its
    limit. The spread matters: with a fixed TTFT the P99 sits on a cliff (99% at 100 ms, the host's rare
    stalls above), and a P99 at a cliff edge is honestly not known to ±10% however long the run (seen:
    30,000 requests, P99 102 ms, interval 101.8–119.7 ms). Against the emulator on a shared host the same
    rule may run to the limit: its TTFT drifts with the host's load, and the interval, batched in send
    order, says so."""
    srv = scripted_server("--ttft-ms", "100", "--ttft-spread-ms", "5", "--itl-ms", "20")
    s = _run(
        tmp_path,
        "--url",
        srv.url,
        "--model",
        "m",
        "--api",
        "completions",
        "--num-requests",
        "30000",
        "--concurrency",
        "64",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--target-precision",
        "10%",
    )
    # 10%, not 5%: on a loaded 2-core CI host the P99 of TTFT carries the host's own stalls; the rule is
    # the same
    p = s["precision"]
    assert p["target_pct"] == 10.0 and p["met"] is True, p
    assert p["stop_reason"].startswith("target precision reached"), p["stop_reason"]
    assert s["requests"]["total"] < 30000  # it stopped before the limit...
    for metric in ("ttft", "tpot"):  # ...with the headline percentiles known (the final intervals count the
        # requests still in flight at the stop too: a P99's may move a little from the rule's last look)
        assert p["metrics"][metric]["median"]["half_width_pct"] <= 10.0, p["metrics"][metric]
        assert p["metrics"][metric]["p99"]["low"] is not None, p["metrics"][metric]
    assert s["requests"]["failed"] == 0  # what was in flight at the stop finished and counts
    assert "precision  target precision reached" in s["_stdout"]


def test_target_precision_the_limit_comes_first(tmp_path: Path) -> None:
    s = _run(
        tmp_path,
        "--profile",
        "tiny",
        "--num-requests",
        "120",
        "--concurrency",
        "8",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--target-precision",
        "0.5",
    )
    p = s["precision"]
    assert p["met"] is False and s["requests"]["total"] == 120
    assert p["stop_reason"].startswith("the limit came first") and "ttft p99" in p["stop_reason"], p
    proc = servescope("run", "--profile", "tiny", "--target-precision", "5%", "--out", str(tmp_path / "x"))
    assert proc.returncode != 0 and "needs a limit" in proc.stderr


@pytest.mark.e2e
def test_every_check_passes_against_llama_server(llama_server: RealServer, tmp_path: Path) -> None:
    """A real engine: the server's usage and its own /metrics counter agree with the client's count;
    its deployment is not known here, so the physical bounds are skipped and say why."""
    s = _run(
        tmp_path,
        "--url",
        llama_server.url,
        "--model",
        "tiny-llama",
        "--seed",
        "1",
        "--api",
        "completions",
        "--concurrency",
        "8",
        "--num-requests",
        "400",
        "--input-len",
        "16",
        "--output-len",
        "8",
    )
    assert s["requests"]["failed"] == 0
    assert _statuses(s) == {
        "token_counts": "pass",
        "littles_law": "pass",
        "e2e_consistency": "pass",
        "physical_bounds": "skipped",
        "percentile_floors": "pass",
        "engine_agreement": "skipped",  # llama-server has no request-level latency histograms
    }, s["validation"]
    tokens = next(c for c in s["validation"] if c["name"] == "token_counts")["figures"]
    assert tokens["server_generation_tokens"] == tokens["client_output_tokens"] == 400 * 8, tokens
