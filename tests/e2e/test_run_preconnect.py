"""Connections the client could not open before the clock are named, not hidden.

The server here limits connections for real: its listen backlog is small (the kernel queues a few
connects it has not accepted, and drops the SYNs of the rest), and once the run has scraped /metrics it
stops accepting for a while from the client's first connect on. A client that gives up
opening them before the clock (its budget for it spent) opens the rest inside the measured window,
and must count them, with their set-up time; a client that tries again opens them all before it.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servescope.run import bench
from servescope.run.bench import run_benchmark_sync
from servescope.run.config import RunConfig

_PAUSE_S = 0.6  # no accepts for this long from the first connect after /metrics
_CONNECT_TIMEOUT_S = 0.8  # the client's; < 1 s, when a dropped SYN is sent again


def _stream(n_tokens: int) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

    def event(text: str, reason: str | None) -> dict[str, object]:
        choice = {"index": 0, "text": text, "finish_reason": reason}
        return {"id": "x", "object": "text_completion", "choices": [choice]}

    events = [event(f" t{i}", None) for i in range(n_tokens)] + [event("", "length")]
    for e in events:
        payload = b"data: " + json.dumps(e).encode() + b"\n\n"
        out += b"%x\r\n%s\r\n" % (len(payload), payload)
    payload = b"data: [DONE]\n\n"
    return out + b"%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload)


class _LimitedServer:
    """A minimal OpenAI-compatible server (GET /v1/models, streamed POST …/completions, 404 else)."""

    def __init__(self, backlog: int = 1, pause_s: float = _PAUSE_S) -> None:
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(backlog)
        self.pause_s = pause_s
        self.url = f"http://127.0.0.1:{self.lsock.getsockname()[1]}"
        self.accepted = 0
        self.armed = False  # set by /metrics: accept nothing for pause_s from the next connect on
        self.paused = False  # the pause has been armed once
        self.closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self) -> None:
        while not self.closed:
            if self.armed:
                # the pause runs from the client's first connect, however long after /metrics it comes
                while not select.select([self.lsock], [], [], 0.05)[0]:
                    if self.closed:
                        return
                time.sleep(self.pause_s)
                self.armed = False
                self.lsock.listen(4096)  # (Linux: a listening socket takes a new backlog) no limit from here
                continue
            try:
                conn, _ = self.lsock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                method, path = lines[0].split(b" ")[:2]
                length = next(
                    (
                        int(v)
                        for k, _, v in (ln.partition(b":") for ln in lines[1:])
                        if k.strip().lower() == b"content-length"
                    ),
                    0,
                )
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                if method == b"GET" and path == b"/v1/models":
                    body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                        % (len(body), body)
                    )
                elif method == b"POST" and path.endswith(b"/completions"):
                    conn.sendall(_stream(8))
                else:
                    if path.endswith(b"metrics") and not self.paused:
                        self.paused = self.armed = True  # the run is about to connect
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    def close(self) -> None:
        self.closed = True
        self.lsock.close()


@pytest.fixture
def limited_server() -> Iterator[_LimitedServer]:
    srv = _LimitedServer()
    try:
        yield srv
    finally:
        srv.close()


def test_connections_not_opened_before_the_clock_are_recorded(
    limited_server: _LimitedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(bench, "_CONNECT_TIMEOUT_S", _CONNECT_TIMEOUT_S)
    # one round of connects before the clock, no second try: the queue holds a few, the rest time out
    monkeypatch.setattr(bench, "_PRECONNECT_BUDGET_S", _CONNECT_TIMEOUT_S)
    n = 8
    cfg = RunConfig(
        url=limited_server.url,
        model="m",
        api="completions",
        concurrency=n,
        num_requests=2 * n,
        input_len=16,
        output_len=8,
        probe=False,
        quiet=True,
        report=False,
        out=str(tmp_path),
    )
    outcome = run_benchmark_sync(cfg)
    assert outcome.exit_code == 0 and outcome.failure is None
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    conns = manifest["connections"]
    assert conns["requested"] == n
    assert 0 < conns["preconnected"] < n  # the queue held a few; the rest timed out before the clock
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["client"]["preconnect_shortfall"] == n - conns["preconnected"]
    assert any(f"{conns['preconnected']} of {n} connections opened before the clock" in note for note in s["notes"])
    # the missing ones were opened inside the window, and every request completed on them
    assert s["requests"]["total"] == s["requests"]["completed"] == 2 * n
    # ...each by the request that first needed it, which keeps its set-up time (the rest reused them)
    setup = s["client"]["setup"]
    assert setup["requests"] == setup["ms"]["count"] == n - conns["preconnected"], setup
    assert setup["ms"]["min"] > 0 and 0 < setup["share_of_time_to_first_token"] < 1, setup


def test_a_connection_still_opening_at_the_timeout_fails_connect_not_timeout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A server that accepts nothing for longer than --timeout once the run begins: the requests that
    needed a connection opened inside the window never sent a byte, so they failed to connect (kind
    `connect`); `timeout` is for a request sent and not answered in time (once `timeout` for both)."""
    monkeypatch.setattr(bench, "_CONNECT_TIMEOUT_S", _CONNECT_TIMEOUT_S)
    monkeypatch.setattr(bench, "_PRECONNECT_BUDGET_S", _CONNECT_TIMEOUT_S)
    srv = _LimitedServer(pause_s=4.0)
    try:
        n = 8
        cfg = RunConfig(
            url=srv.url,
            model="m",
            api="completions",
            concurrency=n,
            num_requests=n,
            input_len=16,
            output_len=8,
            timeout=1.0,
            probe=False,
            quiet=True,
            report=False,
            out=str(tmp_path),
        )
        run_benchmark_sync(cfg)
    finally:
        srv.close()
    s = json.loads((tmp_path / "summary.json").read_text())
    late = n - json.loads((tmp_path / "manifest.json").read_text())["connections"]["preconnected"]
    assert late > 0, s["notes"]  # the paused queue held a few connects; the rest were left for the window
    # ...and those sent on the connections opened before the clock (open to the client, held in the
    # queue) timed out, or completed where the server had taken theirs before its pause
    req = s["requests"]
    assert req["errors"]["connect"] == late and set(req["errors"]) <= {"connect", "timeout"}, (req, late)
    assert req["errors"].get("timeout", 0) + req["completed"] == n - late, (req, late)


def test_connects_that_time_out_before_the_clock_are_tried_again(
    limited_server: _LimitedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same server and client with the default budget (two connect timeouts): the connects the
    paused server dropped are tried again once the first round timed out, and all open before the clock."""
    monkeypatch.setattr(bench, "_CONNECT_TIMEOUT_S", _CONNECT_TIMEOUT_S)
    n = 8
    cfg = RunConfig(
        url=limited_server.url,
        model="m",
        api="completions",
        concurrency=n,
        num_requests=2 * n,
        input_len=16,
        output_len=8,
        probe=False,
        quiet=True,
        report=False,
        out=str(tmp_path),
    )
    assert run_benchmark_sync(cfg).exit_code == 0
    assert json.loads((tmp_path / "manifest.json").read_text())["connections"] == {"requested": n, "preconnected": n}
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["client"]["preconnect_shortfall"] == 0 and s["client"]["setup"]["requests"] == 0


_STREAMS = 2048


def _many_streams(url: str, out: Path) -> dict:
    cfg = RunConfig(
        url=url,
        model="m",
        api="completions",
        concurrency=_STREAMS,
        num_requests=_STREAMS,
        input_len=16,
        output_len=8,
        workers=2,
        probe=False,
        quiet=True,
        report=False,
        out=str(out),
    )
    outcome = run_benchmark_sync(cfg)
    assert outcome.exit_code == 0 and outcome.failure is None
    s = json.loads((out / "summary.json").read_text())
    # every request recorded; a connection the full accept queue dropped after its handshake may be reset
    # by the server (its failure is the server's, and counted), never lost
    assert s["requests"]["total"] == _STREAMS, s["requests"]
    assert set(s["requests"]["errors"]) <= {"reset", "connect"}, s["requests"]
    return s


def _open_before_or_counted(s: dict, out: Path) -> bool:
    """Every connection open before the clock, or the late ones counted with their set-up time and a
    verdict that is not "ok" and says why. True where some were late."""
    conns = json.loads((out / "manifest.json").read_text())["connections"]
    client = s["client"]
    assert conns["requested"] == _STREAMS  # one per stream, over both workers (not capped)
    assert sum(w["preconnected"] for w in client["workers"]["shards"]) == conns["preconnected"]
    late = _STREAMS - conns["preconnected"]
    assert client["preconnect_shortfall"] == late
    # each late connection was opened by the request that needed it: its set-up is kept, unless the
    # connect itself failed (a record of kind connect, never sent)
    connect_failed = s["requests"]["errors"].get("connect", 0)
    assert client["setup"]["requests"] == client["setup"]["ms"]["count"] == late - connect_failed, client["setup"]
    if not late:
        assert s["requests"]["completed"] == _STREAMS
        return False
    assert client["setup"]["ms"]["min"] > 0
    assert client["saturated"], client  # not "ok"...
    assert any(
        "connection opened inside the window" in r or "connections opened inside" in r for r in client["reasons"]
    )
    return True


def test_2048_streams_over_2_workers_against_a_small_backlog_open_before_the_clock(tmp_path: Path) -> None:
    """A listener with a backlog of 8 that stops accepting for a moment as the client connects: the
    client's connects in waves, tried again, open all 2,048 before the clock, or it says which did not."""
    srv = _LimitedServer(backlog=8, pause_s=0.3)
    try:
        s = _many_streams(srv.url, tmp_path)
    finally:
        srv.close()
    _open_before_or_counted(s, tmp_path)


def test_2048_streams_over_2_workers_whose_connections_open_late_are_not_ok(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same listener paused for 2 s and a client that may spend only 0.3 s opening connections: most
    open inside the window, after their dropped SYNs are sent again (1 s, then 3 s). They are counted with
    their set-up time, and the verdict says the run is not to be trusted, and why."""
    monkeypatch.setattr(bench, "_PRECONNECT_BUDGET_S", 0.3)
    srv = _LimitedServer(backlog=8, pause_s=2.0)
    try:
        s = _many_streams(srv.url, tmp_path)
    finally:
        srv.close()
    assert _open_before_or_counted(s, tmp_path)  # some were late: this run provokes it


def test_a_run_that_opened_every_connection_says_so(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", "5", "--itl-ms", "1")
    cfg = RunConfig(
        url=srv.url,
        model="m",
        concurrency=4,
        num_requests=8,
        output_len=8,
        probe=False,
        quiet=True,
        report=False,
        out=str(tmp_path),
    )
    assert run_benchmark_sync(cfg).exit_code == 0
    assert json.loads((tmp_path / "manifest.json").read_text())["connections"] == {"requested": 4, "preconnected": 4}
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["client"]["preconnect_shortfall"] == 0 and s["client"]["failure"] is None
    assert not any("connections opened before the clock" in note for note in s["notes"])
