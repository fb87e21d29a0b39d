"""Faults on the wire: every sent request is accounted for, by kind."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from servescope.results.store import load_run
from tests.support.procs import servescope
from tests.support.scripted_server import Config

FAULTS = (
    "500:0.08,429:0.08,reset:0.08,stall:0.05,malformed:0.08,truncated:0.05,nodone:0.08,"
    "bigline:0.05,u2028:0.1,inband_error:0.05"
)
# what the client must call each fault; nodone/bigline/u2028 are valid responses
EXPECTED_KIND = {
    "500": "http_5xx",
    "429": "http_429",
    "reset": "reset",
    "stall": "timeout",
    "malformed": "malformed_sse",
    "truncated": "no_done",
    "inband_error": "stream_error",
}


def expected_faults(n: int, seed: int = 0) -> Counter[str]:
    cfg = Config(
        argparse.Namespace(
            ttft_ms=0,
            itl_ms=0,
            tokens_per_chunk=1,
            no_role_chunk=False,
            no_usage_chunk=False,
            reasoning_tokens=0,
            model="m",
            faults=FAULTS,
            seed=seed,
        )
    )
    return Counter(cfg.next_fault() for _ in range(n))


def test_every_fault_is_recorded_by_kind_and_nothing_is_lost(scripted_server, tmp_path: Path) -> None:
    n = 240
    srv = scripted_server("--ttft-ms", "5", "--itl-ms", "2", "--faults", FAULTS)
    proc = servescope(
        "run",
        "--url",
        srv.url,
        "--model",
        "m",
        "--api",
        "chat",
        "--concurrency",
        "24",
        "--num-requests",
        str(n),
        "--output-len",
        "12",
        "--timeout",
        "2",
        "--no-probe",
        "--out",
        str(tmp_path),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    faults = expected_faults(n)
    want_errors = Counter()
    for fault, count in faults.items():
        if fault in EXPECTED_KIND:
            want_errors[EXPECTED_KIND[fault]] += count
    assert s["requests"]["total"] == n
    assert s["requests"]["completed"] + s["requests"]["failed"] == n
    assert s["requests"]["errors"] == dict(sorted(want_errors.items()))
    records = load_run(tmp_path).records
    assert len(records) == n
    ok = [r for r in records if r.status == "ok"]
    # U+2028 inside content, a 1 MB line and a stream without [DONE] are complete, correct answers
    assert len(ok) == faults["ok"] + faults["nodone"] + faults["bigline"] + faults["u2028"]
    assert all(r.output_tokens == 12 for r in ok)
    # error-adjusted percentiles see the failures
    assert s["latency_ms_error_adjusted"]["e2e"]["p99"] is None


def test_unicode_separators_do_not_split_tokens(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", "5", "--itl-ms", "1", "--faults", "u2028:1.0")
    proc = servescope(
        "run",
        "--url",
        srv.url,
        "--model",
        "m",
        "--concurrency",
        "2",
        "--num-requests",
        "4",
        "--output-len",
        "10",
        "--no-probe",
        "--out",
        str(tmp_path),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    recs = load_run(tmp_path).records
    assert [r.chunks for r in recs] == [10] * 4  # one chunk per token, none split at U+2028


def test_errors_before_any_load(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server()
    unknown = servescope("run", "--url", srv.url, "--model", "nope", "--out", str(tmp_path / "a"))
    assert unknown.returncode == 2
    assert "unknown model 'nope'" in unknown.stderr and "serves m" in unknown.stderr
    assert not (tmp_path / "a" / "requests.parquet").exists() and not (tmp_path / "a" / "requests.parts").exists()
    dead = servescope("run", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "b"))
    assert dead.returncode == 2 and "cannot reach" in dead.stderr
    bad = servescope(
        "run",
        "--url",
        srv.url,
        "--rate",
        "5",
        "--ramp-up-strategy",
        "linear",
        "--ramp-up-start-rps",
        "1",
        "--ramp-up-end-rps",
        "4",
    )
    assert bad.returncode == 2 and "drop --rate" in bad.stderr
    for err in (unknown.stderr, dead.stderr, bad.stderr):
        assert "Traceback" not in err and len(err.strip().splitlines()) <= 3


def test_run_checks_run_level_slos_and_goodput(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", "50", "--itl-ms", "2")
    proc = servescope(
        "run",
        "--url",
        srv.url,
        "--model",
        "m",
        "--concurrency",
        "4",
        "--num-requests",
        "16",
        "--output-len",
        "8",
        "--no-probe",
        "--out",
        str(tmp_path),
        "--slo",
        "ttft_p99_ms=20,itl_p99_ms=100,ttft_ms=1000",
    )
    assert proc.returncode == 0, proc.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["slo_check"]["passed"] is False  # TTFT is 50 ms, the limit 20 ms
    assert [c["passed"] for c in s["slo_check"]["checks"]] == [False, True]
    assert s["goodput"]["fraction"] == 1.0 and s["goodput"]["slo"] == {"ttft_ms": 1000.0}
    assert "SLO" in proc.stdout and "fail" in proc.stdout


def test_a_run_where_every_request_fails_exits_1_and_says_so(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--faults", "500:1.0")
    proc = servescope(
        "run",
        "--url",
        srv.url,
        "--model",
        "m",
        "--concurrency",
        "2",
        "--num-requests",
        "6",
        "--no-probe",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 1, proc.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["requests"] == {"total": 6, "completed": 0, "failed": 6, "errors": {"http_5xx": 6}, "warmup": 0}
    assert any("every request failed" in n for n in s["notes"])
    assert "every request failed" in proc.stdout
