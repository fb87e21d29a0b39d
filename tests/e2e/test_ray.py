"""`--ray`: one run's shards as Ray actors on the nodes of a real Ray cluster (run/ray_run.py).

The cluster is three Ray nodes in network namespaces on this machine (tests/support/raynet.py, after
../shared/RAY-NETNS.md): the head with the built-in emulator and the servescope CLI (the driver), two
worker nodes that host the shards (`--ray-resource`). Everything crosses real sockets between the
namespaces' addresses; nothing leaves the machine. Skipped, with the reason printed, where the
namespaces cannot be made (not root, not Linux) or Ray is not installed.

Checks: 10,000 requests over the two nodes, every one accounted, the summary equal to the one
recomputed from the pooled records, each shard's self-check with its node and its clock offset (the
nodes share this machine's CLOCK_MONOTONIC, so the true offset is 0 and the measured one must lie
within its own error bound); then one worker node SIGKILLed mid-run: the run finishes, the dead
node's finished records are on disk, its in-flight requests are `worker_lost` records, the rest of
its slice is counted as not sent, and the run says what was lost (exit 1, as --workers). Without
namespaces or Ray: the flag's error says what to install, and `client.remote.RemoteShard` (what the
actors are made of) speaks the worker protocol when driven by plain calls.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from servescope.client.split import shard_of
from servescope.results.schema import RunInfo
from servescope.results.store import MANIFEST, RECORDS, SUMMARY, load_run
from tests.e2e.test_workers import _same
from tests.support.oracle import summarize
from tests.support.raynet import WORKER_RESOURCE, RayNet, ray_cluster, unavailable

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

_PORT = 8800
_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def net() -> Iterator[RayNet]:
    why = unavailable()
    if why is not None:
        print(f"\ntest_ray skipped: {why}", file=sys.stderr)
        pytest.skip(why)
    with ray_cluster(2) as cluster:
        emulator = cluster.popen(
            cluster.head,
            [str(_BIN / "servescope"), "emulate", "--profile", "tiny", "--host", cluster.head_ip, "--port", str(_PORT)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            cluster.wait_port(cluster.head, cluster.head_ip, _PORT, timeout=60)
            yield cluster
        finally:
            emulator.terminate()
            emulator.wait(10)


def _argv(net: RayNet, out: Path, *args: str) -> list[str]:
    return [
        str(_BIN / "servescope"),
        "run",
        "--url",
        f"http://{net.head_ip}:{_PORT}",
        "--ray",
        net.address,
        "--ray-resource",
        WORKER_RESOURCE,
        "--out",
        str(out),
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--no-report",
        "--quiet",
        *args,
    ]


def _read(path: Path) -> Any:
    return json.loads(path.read_text())


def _schema_errors(doc: Any) -> list[str]:
    """The summary against the committed schema (docs/summary.schema.json): the keys --ray adds included."""
    import jsonschema

    schema = _read(Path(__file__).resolve().parents[2] / "docs" / "summary.schema.json")
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(doc)]


def test_ten_thousand_requests_over_two_nodes_all_accounted(net: RayNet, tmp_path: Path) -> None:
    out = tmp_path / "r"
    n = 10_000
    t = time.monotonic()
    proc = net.run(net.head, _argv(net, out, "--num-requests", str(n), "--concurrency", "128"), timeout=300)
    took = time.monotonic() - t
    assert proc.returncode == 0, proc.stderr[-4000:]
    print(f"\n--ray: {n} requests over 2 nodes in {took:.1f} s (CLI wall time, ray.init included)", file=sys.stderr)
    doc = _read(out / SUMMARY)
    assert not _schema_errors(doc)
    records = load_run(out).records
    req = doc["requests"]
    assert req["total"] == n and req["completed"] == n and not req["errors"], req
    assert len(records) == n and sorted(r.id for r in records) == list(range(n))  # every request, once
    import pyarrow.parquet as pq

    assert pq.read_metadata(out / RECORDS).num_rows == n
    # the summary is the pooled records' summary, recomputed (never an average of shards' summaries)
    pooled = [r for r in records if shard_of(r.id, 2) == 1] + [r for r in records if shard_of(r.id, 2) == 0]
    run = cast(RunInfo, {k: doc[k] for k in RunInfo.__annotations__ if k in doc})
    again = summarize(pooled, run=run)
    for block in ("duration_s", "requests", "throughput", "latency_ms", "tokens"):
        _same(again[block], doc[block], block)  # type: ignore[literal-required]

    # each shard's self-check: its node, its process, its CPU and lag, its clock against the driver's
    workers = doc["client"]["workers"]
    assert workers["count"] == 2 and workers["lost_in_flight"] == 0 and "saturated_shard" in workers
    shards = workers["shards"]
    manifest = _read(out / MANIFEST)["workers"]
    assert manifest["engine"] == "ray" and manifest["address"] == net.address
    assert sorted(s["host"] for s in shards) == [net.worker_ip(0), net.worker_ip(1)]  # never the head
    assert [s["pid"] for s in shards] == [m["pid"] for m in manifest["shards"]]
    for s in shards:
        assert not s["died"] and s["requests"] == n // 2 and s["completed"] == n // 2
        assert s["cpu_s"] > 0 and s["loop_lag_ms_p99"] is not None and s["start_late_ms"] is not None
        # one CLOCK_MONOTONIC under every namespace: the true offset is 0, inside the measured bound
        assert s["clock_error_ms"] is not None and 0 < s["clock_error_ms"] < 50
        assert abs(s["clock_offset_ms"]) <= s["clock_error_ms"], s
        print(
            f"  shard {s['index']} on {s['host']}: clock offset {s['clock_offset_ms']:+.3f} ms "
            f"± {s['clock_error_ms']:.3f} ms, CPU {s['cpu_share']:.0%}, started {s['start_late_ms']:.2f} ms late",
            file=sys.stderr,
        )


def test_a_worker_node_killed_mid_run_loses_only_what_it_had(net: RayNet, tmp_path: Path) -> None:
    out = tmp_path / "k"
    n = 3000
    proc = net.popen(
        net.head,
        _argv(net, out, "--num-requests", str(n), "--rate", "500", "--concurrency", "256"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    victim = net.workers[1]
    try:
        deadline = time.monotonic() + 120
        doc: dict[str, Any] = {}
        while not doc and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            try:
                doc = _read(out / MANIFEST).get("workers") or {}
            except (OSError, json.JSONDecodeError):  # not there yet, or caught mid-write
                continue
        assert doc, "no shards in the manifest before the clock"
        time.sleep(doc["lead_s"] + 2.0)  # the clock starts lead_s after; then two seconds of the six
        assert proc.poll() is None, "the run ended before the kill"
        killed = net.kill_node(victim)
        assert killed
        t_kill = time.monotonic()
        _, stderr = proc.communicate(timeout=180)
        after_kill = time.monotonic() - t_kill
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(
        f"\n--ray: killed node {victim} ({len(killed)} processes); the run ended {after_kill:.1f} s later",
        file=sys.stderr,
    )
    assert proc.returncode == 1, stderr[-4000:]
    dead = next(s for s in doc["shards"] if s["host"] == net.worker_ip(1))["index"]
    assert f"ray shard {dead} on {net.worker_ip(1)}" in stderr and "died" in stderr, stderr[-4000:]

    summary = _read(out / SUMMARY)
    assert not _schema_errors(summary)
    records = load_run(out).records
    workers = summary["client"]["workers"]
    mine = [r for r in records if shard_of(r.id, 2) == dead]
    lost = [r for r in mine if r.error_kind == "worker_lost"]
    kept = [r for r in mine if r.status == "ok"]
    assert kept, "the dead node's finished records are gone"
    assert len(mine) == len(kept) + len(lost)
    assert all(r.t_send_ns is not None and r.t_end_ns is not None for r in lost)
    # lost when last heard from, not when the run gave up on it: the window is the planned 6 s, not 6 + 10
    assert summary["duration_s"] < n / 500 + 1.5, summary["duration_s"]
    other = [r for r in records if shard_of(r.id, 2) != dead]
    assert len(other) == n // 2 and all(r.status == "ok" for r in other)  # the other node ran to the end
    # every request accounted: on disk (completed, or lost in flight), or counted as never sent
    assert len({r.id for r in records}) == len(records)
    assert workers["not_sent"] is not None and len(records) + workers["not_sent"] == n
    assert summary["requests"]["errors"] == ({"worker_lost": len(lost)} if lost else {})
    assert workers["lost_in_flight"] == len(lost)
    shard = workers["shards"][dead]
    assert shard["died"] and shard["lost"] == len(lost) and shard["not_sent"] == workers["not_sent"]
    assert not workers["shards"][1 - dead]["died"]
    assert any(f"ray shard {dead}" in note for note in summary["notes"])
    print(
        f"  dead shard: {len(kept)} finished records kept, {len(lost)} lost in flight, "
        f"{workers['not_sent']} never sent; {summary['client']['failure']}",
        file=sys.stderr,
    )


def test_without_ray_the_flag_says_what_to_install(tmp_path: Path) -> None:
    """No Ray importable (blocked here as Python documents: `sys.modules['ray'] = None`): a clear error
    before anything is sent, not a traceback."""
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from servescope.cli import main\n"
        f"sys.argv = ['servescope', 'run', '--ray', '--num-requests', '5', '--out', {str(tmp_path / 'x')!r}]\n"
        "main()"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "--ray needs Ray: pip install 'servescope[ray]'" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "x").exists()


def test_remote_shard_speaks_the_worker_protocol_without_ray() -> None:
    """client.remote.RemoteShard, the class the Ray actors are made of, driven by plain calls: `ready` once its
    connections are open, the start instant delivered in its clock, batches of sent requests and finished
    records pulled during the run, `done` with its result; every request once, none twice."""
    from servescope.client.host import dumps, record_from_fields
    from servescope.client.openai import build_body, encode_body
    from servescope.client.remote import RemoteShard
    from servescope.client.spec import Prepared, ShardSpec
    from tests.support.procs import scripted

    srv = scripted("--ttft-ms", "5", "--itl-ms", "2")
    try:
        body = encode_body(build_body(api="completions", model="m", prompt="hi", max_tokens=8))
        items = [Prepared(id=i, body=body, input_len=1, output_len=8) for i in range(60)]
        spec = ShardSpec(
            url=srv.url + "/v1/completions",
            api="completions",
            headers={"Content-Type": "application/json"},
            items=items,
            concurrency=4,
            preconnect=4,
        )
        shard = RemoteShard(dumps(spec), 3)
        msgs: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + 30
        while not msgs and time.monotonic() < deadline:
            msgs += shard.pull(0.5)
        assert msgs and msgs[0][0] == "ready" and msgs[0][2] == 4, msgs  # (ready, pid, preconnected, …)
        start_ns = shard.clock() + 50_000_000
        shard.deliver(("start", start_ns))
        batches = 0
        while not any(m[0] in ("done", "error") for m in msgs) and time.monotonic() < deadline:
            got = shard.pull(0.5)
            batches += any(m[0] == "batch" for m in got)
            msgs += got
    finally:
        srv.stop()
    kinds = [m[0] for m in msgs]
    assert kinds[0] == "ready" and kinds[-1] == "done" and set(kinds[1:-1]) == {"batch"}, kinds
    assert batches >= 2  # records came back during the run, not only at the end
    sent = [stub[0] for m in msgs if m[0] == "batch" for stub in m[1]]
    records = [record_from_fields(v) for m in msgs if m[0] == "batch" for v in m[2]]
    assert sorted(sent) == sorted(r.id for r in records) == list(range(60))
    assert all(r.status == "ok" and r.output_tokens == 8 for r in records)
    result = msgs[-1][1]
    assert result.index == 3 and result.records == [] and result.start_late_ms is not None
    assert result.t0_ns == start_ns  # the instant as delivered: this host's clock, no conversion


def test_an_address_nothing_answers_at_fails_at_once(tmp_path: Path) -> None:
    """ray.init would retry a dead address for minutes: the run checks it first, before any result is written."""
    import importlib.util
    import socket

    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed")
    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        t = time.monotonic()
        proc = subprocess.run(
            [
                str(_BIN / "servescope"),
                "run",
                "--ray",
                f"127.0.0.1:{port}",
                "--num-requests",
                "5",
                "--out",
                str(tmp_path / "x"),
                "--no-report",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"--ray 127.0.0.1:{port}: nothing answers there" in " ".join(proc.stderr.split())
    assert time.monotonic() - t < 60 and not (tmp_path / "x").exists()
