"""`--workers N`: one run over N worker processes on this host (run/workers.py), as a user runs it.

Real processes all the way: the CLI in a subprocess, its spawned workers, the built-in emulator on
loopback. Checks: the merged summary is the summary of every shard's records pooled; a closed loop's
concurrency is held across shards; an open loop sends the planned stream (rate and arrival process)
from one common start; a worker killed with SIGKILL mid-run loses only its in-flight requests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from servescope.client.split import shard_of
from servescope.results.records import RequestRecord
from servescope.results.schema import RunInfo
from servescope.results.store import MANIFEST, SUMMARY, load_run
from servescope.workload.schedule import open_loop_offsets_ns
from tests.support.oracle import summarize
from tests.support.procs import servescope

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the start instant is CLOCK_MONOTONIC")

_SMALL = ("--input-len", "32", "--output-len", "16", "--no-report", "--quiet")


def _read(path: Path) -> Any:
    return json.loads(path.read_text())


def _run(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = servescope("run", "--out", str(out), *_SMALL, *args, timeout_s=240)
    return proc


def _same(a: Any, b: Any, where: str) -> None:
    """Equal, floats to 1e-9 relative (a value written to JSON and read back, or summed in another order)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, int | float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), where
    else:
        assert a == b, where


def _in_flight_max(records: list[RequestRecord]) -> int:
    events = sorted(
        [(r.t_send_ns or 0, 1) for r in records] + [(r.t_end_ns or 0, -1) for r in records], key=lambda e: (e[0], e[1])
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def test_closed_loop_merged_summary_is_the_pooled_records_summary(tmp_path: Path) -> None:
    out = tmp_path / "c"
    proc = _run(out, "--workers", "2", "--concurrency", "6", "--num-requests", "90", "--warmup", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = _read(out / SUMMARY)
    records = load_run(out).records
    assert len(records) == 94 and sorted(r.id for r in records) == list(range(94))
    # each worker's own records, pooled shard after shard: the run's summary is theirs, recomputed
    by_shard = [[r for r in records if shard_of(r.id, 2) == s] for s in (0, 1)]
    assert [len(b) for b in by_shard] == [47, 47]
    pooled = by_shard[1] + by_shard[0]
    run = cast(RunInfo, {k: doc[k] for k in RunInfo.__annotations__ if k in doc})
    again = summarize(pooled, run=run)
    for block in (
        "duration_s",
        "requests",
        "throughput",
        "latency_ms",
        "latency_ms_error_adjusted",
        "tokens",
        "per_user_output_tokens_per_s",
    ):
        _same(again[block], doc[block], block)  # type: ignore[literal-required]
    assert doc["requests"]["completed"] == 90 and doc["requests"]["warmup"] == 4

    # concurrency held across shards: 6 in flight between the first wave and the last send, never more
    assert _in_flight_max(records) == 6
    assert doc["client"]["concurrency_held"] >= 0.9
    workers = doc["client"]["workers"]
    assert workers["count"] == 2 and workers["lost_in_flight"] == 0
    shards = workers["shards"]
    assert [s["concurrency"] for s in shards] == [3, 3]
    assert [s["requests"] for s in shards] == [47, 47]
    assert all(s["cpu_s"] > 0 and s["loop_lag_ms_p99"] is not None and not s["died"] for s in shards)
    pids = [p["pid"] for p in _read(out / MANIFEST)["workers"]["processes"]]
    assert [s["pid"] for s in shards] == pids and os.getpid() not in pids and len(set(pids)) == 2
    for s in (0, 1):  # each shard's figures are its own records'
        assert _in_flight_max([r for r in by_shard[s] if not r.warmup]) <= 3


def test_open_loop_sends_the_planned_stream_from_one_start(tmp_path: Path) -> None:
    out = tmp_path / "o"
    n, rate = 300, 150.0
    proc = _run(out, "--workers", "2", "--rate", str(rate), "--num-requests", str(n), "--seed", "5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = _read(out / SUMMARY)
    records = sorted(load_run(out).records, key=lambda r: r.id)
    assert doc["requests"]["completed"] == n
    # every arrival at its planned absolute time from the common start, whichever shard sent it
    planned = open_loop_offsets_ns(n, rate, burstiness=1.0, seed=5)
    assert [r.t_sched_ns for r in records] == list(planned)
    lag_ms = np.array([(r.t_send_ns or 0) - r.t_sched_ns for r in records]) / 1e6
    assert np.median(lag_ms) < 2.0, np.median(lag_ms)
    assert doc["throughput"]["offered_requests_per_s"] == pytest.approx(rate, rel=0.2)
    span_s = (max(r.t_send_ns or 0 for r in records) - min(r.t_send_ns or 0 for r in records)) / 1e9
    planned_span_s = (planned[-1] - planned[0]) / 1e9
    assert span_s == pytest.approx(planned_span_s, abs=0.02)  # the merged stream keeps the rate
    # both shards sent from the same origin: each one's first send is at its own first planned time
    for s in (0, 1):
        first = min((r for r in records if shard_of(r.id, 2) == s), key=lambda r: r.t_sched_ns)
        assert first.t_sched_ns == planned[s]
        assert 0 <= (first.t_send_ns or 0) - first.t_sched_ns < 20_000_000
    assert [s["requests"] for s in doc["client"]["workers"]["shards"]] == [150, 150]


def test_killed_worker_loses_only_its_in_flight_requests(tmp_path: Path) -> None:
    out = tmp_path / "k"
    cmd = [
        sys.executable,
        "-m",
        "servescope.cli",
        "run",
        "--out",
        str(out),
        *_SMALL,
        "--workers",
        "2",
        "--concurrency",
        "8",
        "--num-requests",
        "400",
        "--output-len",
        "32",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        pids: list[int] = []
        while not pids and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            if (out / MANIFEST).is_file():
                try:
                    pids = [p["pid"] for p in _read(out / MANIFEST).get("workers", {}).get("processes", [])]
                except json.JSONDecodeError:  # caught mid-write
                    continue
        assert pids, "no worker PIDs in the manifest before the clock"
        time.sleep(2.0)  # the clock starts LEAD_S after the manifest; then some requests finish
        assert proc.poll() is None, "the run ended before the kill"
        os.kill(pids[1], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stderr[-3000:]
    assert "worker 1" in stderr and "died" in stderr and "SIGKILL" in stderr, stderr[-3000:]
    doc = _read(out / SUMMARY)
    records = load_run(out).records
    mine = [r for r in records if shard_of(r.id, 2) == 1]
    lost = [r for r in mine if r.error_kind == "worker_lost"]
    kept = [r for r in mine if r.status == "ok"]
    assert kept, "the dead worker's finished records are gone"
    assert 1 <= len(lost) <= 4  # its share of --concurrency 8 was in flight
    assert all(r.t_send_ns is not None and r.t_end_ns is not None for r in lost)
    assert all("pid" in (r.error_detail or "") for r in lost)
    assert len(mine) == len(kept) + len(lost) < 200  # the rest of its slice was never sent
    other = [r for r in records if shard_of(r.id, 2) == 0]
    assert len(other) == 200 and all(r.status == "ok" for r in other)  # the other worker ran to the end
    assert doc["requests"]["errors"] == {"worker_lost": len(lost)}
    workers = doc["client"]["workers"]
    assert workers["lost_in_flight"] == len(lost)
    assert workers["shards"][1]["died"] and workers["shards"][1]["lost"] == len(lost)
    assert not workers["shards"][0]["died"]
    assert any("worker process was lost" in note for note in doc["notes"])
    assert "SIGKILL" in (doc["client"]["failure"] or "")


def test_stop_rule_is_asked_of_the_merged_records_and_forwarded() -> None:
    """--target-precision's seam: the rule sees every shard's records, and its verdict stops every worker
    from sending; what is in flight then finishes (nothing is cancelled)."""
    import asyncio

    from servescope.client.openai import build_body, encode_body
    from servescope.client.spec import Prepared, ShardSpec
    from servescope.run.workers import ProcessShards
    from tests.support.procs import scripted

    class Enough:
        """A stop rule that has seen enough after 20 completed requests, from whichever shard."""

        def __init__(self) -> None:
            self.seen: list[int] = []

        def observe(self, record: RequestRecord) -> None:
            self.seen.append(shard_of(record.id, 2))

        def __call__(self) -> str | None:
            return "enough" if len(self.seen) >= 20 else None

    enough = Enough()

    srv = scripted("--ttft-ms", "5", "--itl-ms", "5")
    try:
        body = encode_body(build_body(api="completions", model="m", prompt="hi", max_tokens=16))
        items = [Prepared(id=i, body=body, input_len=1, output_len=16) for i in range(400)]
        spec = ShardSpec(
            url=srv.url + "/v1/completions",
            api="completions",
            headers={"Content-Type": "application/json"},
            items=items,
            concurrency=4,
            preconnect=4,
        )
        shards = ProcessShards(spec, workers=2, enough=enough)
        result = asyncio.run(shards.run())
    finally:
        srv.stop()
    assert shards.stopped_by == "enough" and set(enough.seen) == {0, 1}
    assert sorted(enough.seen) == sorted(shard_of(r.id, 2) for r in result.records)  # every record, once
    assert 20 <= len(result.records) < 200  # 400 at ~0.1 s each on 4 slots would take ~10 s
    assert all(r.status == "ok" for r in result.records)
    assert not result.failure and not result.interrupted
