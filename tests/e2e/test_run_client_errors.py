"""Errors of the client's own: recorded as `client_error`, never lost, never put on the server.

Real loopback servers; the fault is injected by replacing a function the request path really
calls (not a mock server), so everything around it runs as in a run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servescope.client import shard as shard_mod
from servescope.client import sinks as sinks_mod
from servescope.client.openai import build_body, encode_body
from servescope.client.shard import CLIENT_ERROR_STREAK, Shard
from servescope.client.spec import Prepared, ShardResult, ShardSpec
from servescope.results.store import read_records
from servescope.run.bench import run_benchmark_sync
from servescope.run.config import RunConfig


def _items(n: int, *, open_loop: bool = False) -> list[Prepared]:
    body = encode_body(build_body(api="completions", model="m", prompt="hello", max_tokens=8))
    return [
        Prepared(id=i, body=body, input_len=1, output_len=8, offset_ns=i * 2_000_000 if open_loop else None)
        for i in range(n)
    ]


def _raise_on(calls: set[int], exc: Callable[[], Exception], real: Callable[..., Any]) -> Callable[..., Any]:
    """`real`, except that the calls numbered in `calls` (0-based) raise `exc()`."""
    count = [0]

    def hooked(*args: Any, **kwargs: Any) -> Any:
        k = count[0]
        count[0] += 1
        if k in calls:
            raise exc()
        return real(*args, **kwargs)

    return hooked


def _peak_in_flight(result: ShardResult, after_ns: int = 0) -> int:
    """The most requests in flight at once, from `after_ns` on."""
    events = sorted([(r.t_send_ns or 0, 1) for r in result.records] + [(r.t_end_ns or 0, -1) for r in result.records])
    depth = peak = 0
    for t, d in events:
        depth += d
        if t >= after_ns:
            peak = max(peak, depth)
    return peak


@pytest.mark.parametrize("open_loop", [False, True])
def test_one_unexpected_exception_is_one_client_error_and_the_run_goes_on(
    scripted_server, monkeypatch: pytest.MonkeyPatch, open_loop: bool
) -> None:
    srv = scripted_server("--ttft-ms", "20", "--itl-ms", "5")
    n, c = 40, 4
    monkeypatch.setattr(
        shard_mod, "request_head", _raise_on({7}, lambda: RuntimeError("injected fault"), shard_mod.request_head)
    )
    spec = ShardSpec(
        url=srv.url + "/v1/completions",
        api="completions",
        headers={},
        items=_items(n, open_loop=open_loop),
        concurrency=c,
        open_loop=open_loop,
        num_requests=n,
        preconnect=c,
    )
    result = asyncio.run(Shard(spec).run())
    assert result.failure is None and not result.interrupted
    assert len(result.records) == n and sorted(r.id for r in result.records) == list(range(n))  # all accounted
    failed = [r for r in result.records if r.status != "ok"]
    assert len(failed) == 1 and failed[0].error_kind == "client_error"
    assert "RuntimeError: injected fault" in (failed[0].error_detail or "")
    assert failed[0].t_send_ns is not None  # counted as sent
    assert sum(r.status == "ok" for r in result.records) == n - 1
    assert all(r.output_tokens == 8 for r in result.records if r.status == "ok")
    if not open_loop:  # the worker that hit it went on: c requests in flight after it, not c - 1
        assert _peak_in_flight(result, after_ns=failed[0].t_end_ns or 0) == c


def test_a_value_error_of_our_own_is_a_client_error_not_malformed_sse(
    scripted_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ValueError raised in the hot path (the bulk reader, inside the connection's read callback)
    is the client's, not the server's: the server's bytes were fine."""
    srv = scripted_server("--ttft-ms", "5", "--itl-ms", "0", "--no-usage-chunk")
    monkeypatch.setattr(
        sinks_mod, "token_run", _raise_on({0}, lambda: ValueError("ours, not the server's"), sinks_mod.token_run)
    )
    spec = ShardSpec(
        url=srv.url + "/v1/completions",
        api="completions",
        headers={},
        items=_items(8),
        concurrency=2,
        num_requests=8,
        preconnect=2,
    )
    result = asyncio.run(Shard(spec).run())
    failed = [r for r in result.records if r.status != "ok"]
    assert len(result.records) == 8 and len(failed) == 1, [(r.error_kind, r.error_detail) for r in failed]
    assert failed[0].error_kind == "client_error"
    assert "ValueError: ours, not the server's" in (failed[0].error_detail or "")
    assert "fastpath" not in (failed[0].error_detail or "")  # where: the hook's frame, named in the detail
    assert "test_run_client_errors.py" in (failed[0].error_detail or "")


def test_an_exception_on_every_request_ends_the_run_with_its_name(
    scripted_server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same bug on every request: the run stops after CLIENT_ERROR_STREAK of them (not after
    all --num-requests), says why, and still accounts for every request it sent."""
    srv = scripted_server("--ttft-ms", "5", "--itl-ms", "1")
    n = 1000
    monkeypatch.setattr(
        shard_mod, "request_head", _raise_on(set(range(10**6)), lambda: KeyError("always"), shard_mod.request_head)
    )
    cfg = RunConfig(
        url=srv.url,
        model="m",
        api="completions",
        concurrency=4,
        num_requests=n,
        output_len=8,
        probe=False,
        quiet=True,
        report=False,
        out=str(tmp_path),
    )
    outcome = run_benchmark_sync(cfg)
    assert outcome.failure is not None and "KeyError: 'always'" in outcome.failure
    assert f"{CLIENT_ERROR_STREAK} requests in a row" in outcome.failure
    assert outcome.exit_code == 1
    s = json.loads((tmp_path / "summary.json").read_text())
    req = s["requests"]
    assert CLIENT_ERROR_STREAK <= req["total"] < n  # it stopped early
    assert req["completed"] + req["failed"] == req["total"] and req["errors"] == {"client_error": req["total"]}
    assert s["client"]["failure"] == outcome.failure
    assert any("stopped sending early" in note and "KeyError" in note for note in s["notes"])
    assert len(read_records(tmp_path)) == req["total"]
