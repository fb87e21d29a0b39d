"""Measurement accuracy against a server with known timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from servescope.client.transport import KERNEL_RX_TIMESTAMPS
from servescope.results.metrics import LOOP_LAG_P99_MS, READ_TOGETHER_SHARE
from servescope.results.store import load_run
from tests.support.oracle import itl_gaps_ms, summarize
from tests.support.procs import servescope
from tests.support.truth import truth_twin, truth_vs_client

TRUE_TTFT_MS = 100.0
TRUE_ITL_MS = 20.0


def _run(url: str, out: Path, *args: str) -> dict:
    proc = servescope("run", "--url", url, "--model", "m", "--out", str(out), "--quiet", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "summary.json").read_text())


def test_concurrency_64_matches_truth(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", str(TRUE_TTFT_MS), "--itl-ms", str(TRUE_ITL_MS))
    s = _run(
        srv.url,
        tmp_path,
        "--api",
        "completions",
        "--concurrency",
        "64",
        "--num-requests",
        "500",
        "--input-len",
        "128",
        "--output-len",
        "128",
    )
    assert s["schema"] == "servescope.summary/1"
    for key in (
        "run_id",
        "started_at",
        "duration_s",
        "target",
        "load",
        "workload",
        "requests",
        "throughput",
        "latency_ms",
        "tokens",
        "per_user_output_tokens_per_s",
        "goodput",
        "client",
    ):
        assert key in s, key
    assert set(s["latency_ms"]) == {"ttft", "tpot", "itl", "e2e", "ttfat"}
    assert s["requests"]["completed"] == 500 and s["requests"]["failed"] == 0
    assert s["tokens"]["output_total"] == 500 * 128
    e = truth_vs_client(srv.url, tmp_path)
    assert abs(e["ttft_median"] - e["true_ttft_median"]) <= 5.0, e
    assert abs(e["itl_median"] - e["true_itl_median"]) <= 0.5, e
    # and the truth is what the flags asked for (loosely: the server runs on a shared host)
    assert abs(e["true_ttft_median"] - TRUE_TTFT_MS) <= 20 and abs(e["true_itl_median"] - TRUE_ITL_MS) <= 2, e
    assert s["latency_ms"]["ttft"]["median"] == pytest.approx(e["ttft_median"], abs=0.01)
    run = load_run(tmp_path)
    assert len(run.records) == 500
    assert run.manifest["target"]["model"] == "m"
    assert run.manifest["clock"]["rx_timestamps"] == "kernel"


# 512 streams of 40 ms tokens: 12,800 tokens/s, which the client and the Python server beside it carry on two
# cores with room (2026-11-27, 8 runs: loop lag p99 4.0-11.5 ms, no gap read together, gap error P99 <= 0.064
# ms). At 20 ms tokens both sat at their line on this host: in 27 runs 0-8% of gaps were more than 3 ms off
# and the verdict was judged on a coin flip (CI on 87d97aa failed on one; docs/metrics.md, "Client self-check").
PACED_ITL_MS = 40.0


def _near_the_verdicts_line(client: dict, gap: float | None) -> str:
    """Which of `assess_client`'s stall lines the run's own figures sit within 10% of ("" for none): loop lag
    p99 against the median TPOT, or against half of it with the share of gaps read together against
    `READ_TOGETHER_SHARE`."""
    lag, together = client.get("loop_lag_ms_p99") or 0.0, client.get("tokens_read_together")
    if not gap:
        return ""
    if 0.9 <= lag / gap <= 1.1:
        return f"loop lag p99 {lag:.1f} ms, median TPOT {gap:.1f} ms"
    if together is not None and lag > 0.45 * gap and 0.9 <= together / READ_TOGETHER_SHARE <= 1.1:
        return f"loop lag p99 {lag:.1f} ms, {together:.1%} of gaps read together"
    return ""


def _judge_512(srv_url: str, tmp_path: Path, s: dict) -> bool:
    """The c=512 figures against the truth, and the client verdict against them: not "saturated" while
    TTFT and ITL are within 5 ms of the truth and every token gap but 1% within 3 ms, "saturated" for a
    stated reason otherwise (skips where neither can be judged). True where the figures were right."""
    assert s["requests"]["completed"] == 1024
    e = truth_vs_client(srv_url, tmp_path)
    assert s["latency_ms"]["itl"]["p99"] == pytest.approx(e["itl_p99"], abs=0.01)
    client = s["client"]
    records, _ = truth_twin(srv_url, tmp_path)  # the share of gaps read together is the records' zero gaps
    gaps = np.concatenate([itl_gaps_ms(r) for r in records])
    assert client["tokens_read_together"] == pytest.approx(float(np.mean(gaps == 0)), abs=1e-12)
    errors = {
        "ttft_median": abs(e["ttft_median"] - e["true_ttft_median"]),
        "itl_p99": abs(e["itl_p99"] - e["true_itl_p99"]),
        "gap_error_p99": e["gap_error_p99"],
    }
    # One set of bounds for "the figures are right". ITL's P99 sits where the gap distribution is steep, so
    # a few tail gaps move it: seen 3.04 ms off with every gap but 1% within 0.07 ms of the truth.
    right = errors["ttft_median"] <= 5.0 and errors["itl_p99"] <= 5.0 and errors["gap_error_p99"] <= 3.0
    # Near the line (0.5-2% of gaps more than 3 ms off: each merged pair puts two gaps off) the self-check
    # cannot tell which side a run is on: the share of tokens read together that it reads also holds the
    # tokens a starved server wrote together (results.metrics.READ_TOGETHER_SHARE; docs/metrics.md).
    if 0.005 <= e["gaps_off_3ms"] <= 0.02 and right == client["saturated"]:
        pytest.skip(
            f"{e['gaps_off_3ms']:.2%} of gaps more than 3 ms off, near the line: verdict not judged "
            f"({client['reasons']}, {errors})"
        )
    # ...and where the client's own evidence sits within 10% of the verdict's line, the verdict is a coin flip
    # on the probe's noise, whatever the truth (CI on f463623: loop lag p99 19.6 ms against a 20 ms TPOT,
    # 3.3% of gaps read together, 2.25% of gaps more than 3 ms off, not flagged)
    near = _near_the_verdicts_line(client, s["latency_ms"]["tpot"]["median"])
    if near and right == client["saturated"]:
        pytest.skip(
            f"the client's evidence is near its verdict's line ({near}): verdict not judged "
            f"({e['gaps_off_3ms']:.2%} of gaps more than 3 ms off, {client['reasons']}, {errors})"
        )
    if right:
        # the figures are right, token gap by token gap: the client did not limit them, and must not say it
        # did. (ITL's P99 alone can agree while 1-5% of gaps were read together: seen with busy processes
        # beside the client, gap error P99 13-22 ms against an ITL P99 within 1.4 ms.)
        assert not client["saturated"], (client, errors)
        return True
    # A client that falls more than one token gap behind reads two chunks of a stream at once and can only
    # give both the newer one's kernel stamp; that may happen only when the client says it was the bottleneck,
    # and only the figures that show the host could not keep up may excuse the run: sends that lagged (slots
    # not refilled, the closed loop's concurrency_held), a client CPU at its ceiling, or stalls longer than
    # the gap between tokens (tokens read together under one stamp).
    assert client["saturated"], (
        f"the figures are wrong and the client did not say it limited them: {errors}, "
        f"{e['gaps_off_3ms']:.2%} of gaps more than 3 ms off, {client}"
    )
    assert any("sends lag" in r or "CPU" in r or "read together" in r for r in client["reasons"]), client
    return False


def test_concurrency_512_matches_truth(scripted_server, tmp_path: Path) -> None:
    """512 streams at a pace the host carries: the figures are right and the client verdict clear."""
    # Truth is when the server really wrote each chunk: a Python server pacing 512 streams on
    # two cores is itself some ms late at its P99, and that is not the client's error.
    srv = scripted_server("--ttft-ms", str(TRUE_TTFT_MS), "--itl-ms", str(PACED_ITL_MS))
    s = _run(
        srv.url,
        tmp_path,
        "--api",
        "completions",
        "--concurrency",
        "512",
        "--num-requests",
        "1024",
        "--input-len",
        "128",
        "--output-len",
        "128",
    )
    if not _judge_512(srv.url, tmp_path, s):
        pytest.skip(f"the host could not keep up ({'; '.join(s['client']['reasons'])}): accuracy not judged")
    client = s["client"]
    assert client["concurrency_held"] is not None and client["concurrency_held"] >= 0.9, client
    assert [c["status"] for c in s["validation"] if c["name"] == "e2e_consistency"] == ["pass"], s["validation"]


def test_concurrency_512_beside_a_busy_process_is_called_saturated_when_it_merges_tokens(
    scripted_server, tmp_path: Path
) -> None:
    """512 streams of 20 ms tokens with a process spinning beside the client and the server on two cores:
    the client is descheduled for longer than a token gap, reads tokens together, and must say so (2026-11-27,
    6 runs: 2.4-18.5% of gaps more than 3 ms off, loop lag p99 27-42 ms, 33-50% of gaps read together,
    every run flagged). A host with cores to spare may keep the figures right: then the verdict must be clear."""
    srv = scripted_server("--ttft-ms", str(TRUE_TTFT_MS), "--itl-ms", str(TRUE_ITL_MS))
    spin = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end:\n    pass"]
    )
    try:
        s = _run(
            srv.url,
            tmp_path,
            "--api",
            "completions",
            "--concurrency",
            "512",
            "--num-requests",
            "1024",
            "--input-len",
            "128",
            "--output-len",
            "128",
        )
    finally:
        spin.kill()
        spin.wait()
    _judge_512(srv.url, tmp_path, s)


def test_concurrency_512_sends_that_lag_are_called_saturated(scripted_server, tmp_path: Path) -> None:
    """The same server and 512 streams, but an open-loop rate (20,000 requests/s) no client process
    can send at: the schedule runs ahead of the sends, and the verdict says so, naming the figure."""
    srv = scripted_server("--ttft-ms", str(TRUE_TTFT_MS), "--itl-ms", str(TRUE_ITL_MS))
    s = _run(
        srv.url,
        tmp_path,
        "--api",
        "completions",
        "--rate",
        "20000",
        "--concurrency",
        "512",
        "--num-requests",
        "1024",
        "--input-len",
        "16",
        "--output-len",
        "16",
    )
    client = s["client"]
    assert client["schedule_lag_ms"]["p99"] > 10, client  # the sends really lagged...
    assert client["saturated"], client  # ...and the verdict says so, and why
    assert any(r.startswith("sends lag the schedule") for r in client["reasons"]), client["reasons"]


@pytest.mark.skipif(not KERNEL_RX_TIMESTAMPS, reason="read coalescing needs kernel receive timestamps")
def test_read_coalescing_pauses_for_sub_millisecond_streams_and_keeps_arrivals_true(
    scripted_server, tmp_path: Path
) -> None:
    """Streams faster than a chunk a millisecond make the loop pause between polls (so reads carry
    several chunks); arrivals stay the kernel's stamps: never before the write, at most a pause or
    two after it. Streams paced like decoding (test above, 20 ms) make it pause (next to) never.

    A stall of the host (another process on two cores) holds every read for its length, and with 32
    streams writing ~64 tokens a millisecond, one stall of a few ms delays over 1% of a 0.4 s run's
    tokens: the P99 is judged against the stall the client's verdict tolerates (`LOOP_LAG_P99_MS`,
    5 ms; beyond it the run must be flagged), not a tighter one of its own. Seen 2026-11-27, 12 runs:
    P99 0.13-3.66 ms, each within ~1 ms of the run's loop-lag P99 (0.49-4.60 ms). Longer runs are no
    cure: at 1,500 requests the client reached its CPU ceiling and flagged itself in 3 runs of 4."""
    srv = scripted_server("--ttft-ms", "5", "--itl-ms", "0.5")
    s = _run(
        srv.url,
        tmp_path,
        "--api",
        "completions",
        "--concurrency",
        "32",
        "--num-requests",
        "300",
        "--input-len",
        "16",
        "--output-len",
        "64",
    )
    assert s["tokens"]["output_total"] == 300 * 64
    assert load_run(tmp_path).manifest["clock"]["read_coalescing"] is True
    assert s["client"]["read_pauses"] > 0 and s["client"]["read_pause_ms"] > 0, s["client"]
    e = truth_vs_client(srv.url, tmp_path)  # (and every token was seen after its write)
    accurate = (
        e["arrival_delay_median"] <= 0.5 and e["arrival_delay_p99"] <= LOOP_LAG_P99_MS and e["gap_error_p99"] <= 3.0
    )
    if not accurate:
        assert s["client"]["saturated"], f"inaccurate and not flagged as client-limited: {e} {s['client']}"
        pytest.skip(f"client saturated on this host: accuracy not judged: {e}")


def test_paced_streams_and_the_flag_turn_read_coalescing_off(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", "20", "--itl-ms", str(TRUE_ITL_MS))
    s = _run(
        srv.url,
        tmp_path / "paced",
        "--api",
        "completions",
        "--concurrency",
        "64",
        "--num-requests",
        "128",
        "--input-len",
        "16",
        "--output-len",
        "32",
    )
    # a stream's last chunks (finish, [DONE], end) come together: the odd quick read, no more
    assert s["client"]["read_pause_ms"] <= 0.005 * s["duration_s"] * 1e3, s["client"]
    fast = scripted_server("--ttft-ms", "5", "--itl-ms", "0.5")
    s = _run(
        fast.url,
        tmp_path / "off",
        "--api",
        "completions",
        "--concurrency",
        "32",
        "--num-requests",
        "64",
        "--input-len",
        "16",
        "--output-len",
        "64",
        "--no-read-coalescing",
    )
    assert s["client"]["read_pauses"] == 0
    assert load_run(tmp_path / "off").manifest["clock"]["read_coalescing"] is False


def test_read_time_stamps_at_concurrency_64(scripted_server, tmp_path: Path) -> None:
    """--rx-timestamps read (the portable path: a read is stamped when its callback runs)."""
    srv = scripted_server("--ttft-ms", str(TRUE_TTFT_MS), "--itl-ms", str(TRUE_ITL_MS))
    _run(
        srv.url,
        tmp_path,
        "--api",
        "completions",
        "--concurrency",
        "64",
        "--num-requests",
        "256",
        "--input-len",
        "16",
        "--output-len",
        "64",
        "--rx-timestamps",
        "read",
    )
    assert load_run(tmp_path).manifest["clock"]["rx_timestamps"] == "read"
    e = truth_vs_client(srv.url, tmp_path)
    assert abs(e["ttft_median"] - e["true_ttft_median"]) <= 5.0, e
    assert abs(e["itl_median"] - e["true_itl_median"]) <= 0.5, e


def test_three_token_chunks_role_chunk_reasoning_and_usage_chunk(scripted_server, tmp_path: Path) -> None:
    """Chat with a role-only first chunk, 12 reasoning tokens first, 3 tokens per chunk, usage-only last chunk."""
    srv = scripted_server("--ttft-ms", "100", "--itl-ms", "20", "--tokens-per-chunk", "3", "--reasoning-tokens", "12")
    s = _run(srv.url, tmp_path, "--api", "chat", "--concurrency", "4", "--num-requests", "8", "--output-len", "60")
    assert s["tokens"]["output_total"] == 8 * 60 and s["tokens"]["reasoning_total"] == 8 * 12
    client, true = truth_twin(srv.url, tmp_path)
    assert all(r.chunk_tokens == [3] * 20 for r in client)
    # what the server really did, through the same formulas: the client must agree closely...
    truth = summarize(true)["latency_ms"]
    lat = s["latency_ms"]
    for metric, tol in (("ttft", 2), ("ttfat", 2), ("itl", 0.5), ("tpot", 0.5)):
        assert abs(lat[metric]["median"] - truth[metric]["median"]) <= tol, (metric, lat[metric], truth[metric])
    # ...and the semantics hold: the role chunk (sent at once) did not start TTFT, the reasoning
    # channel did; the answer starts with chunk 5 (tokens 13-15); ITL is per token, not per chunk
    # (60 ms); TPOT is (t_last - t_first) / (n - 1). Loose bounds (the server shares the host),
    # still far from the wrong answers (TTFT ~0, TTFAT ~100, ITL 60 or 0, TPOT ~60).
    assert 95 <= lat["ttft"]["median"] <= 180
    assert 95 + 4 * 60 <= lat["ttfat"]["median"] <= 180 + 4 * 60
    assert 18 <= lat["itl"]["median"] <= 30
    assert 18 <= lat["tpot"]["median"] <= 30


def test_non_streaming_run(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", "50", "--itl-ms", "1")
    s = _run(srv.url, tmp_path, "--no-stream", "--concurrency", "4", "--num-requests", "12", "--output-len", "20")
    assert s["requests"]["completed"] == 12
    assert s["latency_ms"]["ttft"]["median"] == pytest.approx(s["latency_ms"]["e2e"]["median"])
    assert s["latency_ms"]["itl"]["count"] == 0


@pytest.mark.slow
def test_poisson_200_rps_for_20_s_achieves_its_rate(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", "2", "--itl-ms", "1")
    s = _run(
        srv.url,
        tmp_path,
        "--api",
        "completions",
        "--rate",
        "200",
        "--burstiness",
        "1",
        "--num-requests",
        "4000",
        "--input-len",
        "16",
        "--output-len",
        "4",
        "--seed",
        "1",
    )
    assert s["requests"]["completed"] == 4000
    run = load_run(tmp_path)
    sends = sorted(r.t_send_ns for r in run.records)
    achieved = (len(sends) - 1) / ((sends[-1] - sends[0]) / 1e9)
    assert achieved == pytest.approx(200.0, rel=0.02)
    assert s["throughput"]["offered_requests_per_s"] == pytest.approx(200.0, rel=1e-3)
    # the typical send leaves on time; the tail is the host's (a stalled shared host once gave
    # p99 17.7 ms, and the run then says so in client.saturated)
    assert s["client"]["schedule_lag_ms"]["median"] < 2
    assert s["client"]["schedule_lag_ms"]["min"] >= 0  # never sent before it was due
