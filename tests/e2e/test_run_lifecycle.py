"""Sessions, stopping and killing a run (the multi-turn shard contract)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.parquet as pq

from servescope.client.openai import build_body, encode_body
from servescope.client.shard import Shard
from servescope.client.spec import Prepared, ShardSpec
from servescope.results.store import load_run, read_records


def _body(turn: int) -> bytes:
    return encode_body(build_body(api="completions", model="m", prompt="x " * (turn + 1), max_tokens=5))


def test_multi_turn_sessions_send_turns_in_order_with_think_time(scripted_server) -> None:
    srv = scripted_server("--ttft-ms", "20", "--itl-ms", "5")
    items = [
        Prepared(
            id=s * 3 + t,
            body=_body(t),
            input_len=t + 1,
            output_len=5,
            session=s,
            turn=t,
            think_ns=50_000_000 if t else 0,
        )
        for s in range(4)
        for t in range(3)
    ]
    spec = ShardSpec(url=srv.url + "/v1/completions", api="completions", headers={}, items=items, concurrency=2)
    result = asyncio.run(Shard(spec).run())
    assert len(result.records) == 12 and all(r.status == "ok" for r in result.records)
    by_session: dict[int, list] = {}
    for r in result.records:
        by_session.setdefault(r.session, []).append(r)
    for recs in by_session.values():
        recs.sort(key=lambda r: r.turn)
        assert [r.turn for r in recs] == [0, 1, 2]
        for prev, nxt in pairwise(recs):
            # the next turn waits for the previous answer plus 50 ms of think time
            assert nxt.t_send_ns >= prev.t_end_ns + 50_000_000
    # concurrency counts sessions: never more than 2 sessions' requests in flight at once
    events = sorted([(r.t_send_ns, 1) for r in result.records] + [(r.t_end_ns, -1) for r in result.records])
    depth = peak = 0
    for _, d in events:
        depth += d
        peak = max(peak, depth)
    assert peak <= 2


def _start_run(srv_url: str, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servescope.cli",
            "run",
            "--url",
            srv_url,
            "--model",
            "m",
            "--concurrency",
            "8",
            "--num-requests",
            "400",
            "--output-len",
            "40",
            "--no-probe",
            "--out",
            str(out),
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_records(run_dir: Path, n: int, timeout_s: float = 30) -> None:
    """Until the run has flushed at least n records to disk (requests.parts/ while it runs)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(read_records(run_dir)) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} records in {run_dir} after {timeout_s} s")


def test_sigint_stops_cleanly_with_a_summary_of_what_completed(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", "10", "--itl-ms", "10")
    proc = _start_run(srv.url, tmp_path)
    _wait_for_records(tmp_path, 16)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["interrupted"] is True
    assert 16 <= s["requests"]["completed"] < 400
    records = read_records(tmp_path)
    ok = [r for r in records if r.status == "ok"]
    cancelled = [r for r in records if r.error_kind == "cancelled"]
    assert len(ok) == s["requests"]["completed"]
    assert len(cancelled) <= 8  # only what was in flight
    assert s["latency_ms"]["ttft"]["count"] == len(ok)


def test_sigkill_leaves_every_completed_record_readable(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", "10", "--itl-ms", "10")
    proc = _start_run(srv.url, tmp_path)
    _wait_for_records(tmp_path, 24)
    proc.kill()  # SIGKILL: no flush, no join of the parts
    proc.wait(10)
    parts = sorted((tmp_path / "requests.parts").glob("part-*.parquet"))
    assert parts and not (tmp_path / "requests.parquet").exists()
    # every part written is a whole Parquet file, readable without servescope
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
    records = read_records(tmp_path)
    assert len(records) >= 24
    assert len(records) == rows == len({r.id for r in records})
    assert all(r.status == "ok" and r.output_tokens == 40 and len(r.chunk_ns) == 40 for r in records)
    frame = pd.read_parquet(tmp_path / "requests.parts")
    assert len(frame) == rows and (frame["output_tokens"] == 40).all()
    query = f"select count(*) from read_parquet('{tmp_path}/requests.parts/*.parquet')"
    assert duckdb.sql(query).fetchall() == [(rows,)]
    assert load_run(tmp_path).summary["requests"]["completed"] == rows  # recomputed from the parts
    assert not (tmp_path / "summary.json").exists()
    assert json.loads((tmp_path / "manifest.json").read_text())["target"]["model"] == "m"


def test_run_writes_a_report_that_re_renders_byte_identical(scripted_server, tmp_path: Path) -> None:
    from tests.support.procs import servescope

    srv = scripted_server("--ttft-ms", "5", "--itl-ms", "1")
    proc = servescope(
        "run",
        "--url",
        srv.url,
        "--model",
        "m",
        "--concurrency",
        "4",
        "--num-requests",
        "20",
        "--output-len",
        "16",
        "--no-probe",
        "--out",
        str(tmp_path),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    first = (tmp_path / "report.html").read_bytes()
    charts = {p.name: p.read_bytes() for p in (tmp_path / "charts").glob("*.svg")}
    assert charts
    again = servescope("report", str(tmp_path))
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "report.html").read_bytes() == first
    assert {p.name: p.read_bytes() for p in (tmp_path / "charts").glob("*.svg")} == charts


def test_idle_workers_do_not_spin_while_the_last_requests_finish(scripted_server, tmp_path: Path) -> None:
    """6 requests at concurrency 4: two workers run out of work after the first wave while two
    more requests stream for ~2 s. The client must sit idle then (a wait loop once spun at 98%)."""
    from tests.support.procs import servescope

    srv = scripted_server("--ttft-ms", "20", "--itl-ms", "20")
    proc = servescope(
        "run",
        "--url",
        srv.url,
        "--model",
        "m",
        "--concurrency",
        "4",
        "--num-requests",
        "6",
        "--output-len",
        "100",
        "--no-probe",
        "--no-report",
        "--out",
        str(tmp_path),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    client = json.loads((tmp_path / "summary.json").read_text())["client"]
    assert client["cpu_busy_peak"] < 0.5, client
