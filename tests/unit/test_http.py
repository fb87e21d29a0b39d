"""The hot-path HTTP client on real loopback sockets: kernel receive timestamps and large writes."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servescope.client.coalesce import ReadCoalescer
from servescope.client.conn import Connection
from servescope.client.pool import ConnectionPool, Endpoint, request_head
from servescope.client.transport import KERNEL_RX_TIMESTAMPS


class _Collect:
    def __init__(self) -> None:
        self.parts: list[tuple[bytes, int]] = []

    def on_body(self, data: bytes, t_ns: int) -> None:
        self.parts.append((data, t_ns))


def _one_shot_server(respond) -> tuple[str, threading.Thread]:
    """A plain-socket server thread: reads one request head + body, then calls respond(conn)."""
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]

    def serve() -> None:
        conn, _ = lsock.accept()
        with conn, lsock:
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(65536)
            head, _, body = buf.partition(b"\r\n\r\n")
            length = int(
                next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length"))
            )
            while len(body) < length:
                body += conn.recv(1 << 20)
            respond(conn, body)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return f"http://127.0.0.1:{port}/v1/completions", t


def _request(url: str, body: bytes, kernel: bool, block_loop_s: float = 0.0) -> tuple[int, _Collect, str]:
    async def go() -> tuple[int, _Collect, str]:
        pool = ConnectionPool(Endpoint.parse(url), kernel_timestamps=kernel)
        sink = _Collect()
        head = request_head(pool.head_prefix("POST", {}), len(body))
        if block_loop_s:  # the event loop is busy elsewhere while the response arrives
            # connected first, so the block falls after the request went out, not during the connect
            assert await pool.preconnect(1) == 1
            asyncio.get_running_loop().call_later(0.001, time.sleep, block_loop_s)
        resp = await pool.request(head, body, sink)
        mode = "kernel" if pool.kernel_timestamps else "read"
        pool.close()
        return resp.status, sink, mode

    return asyncio.run(go())


def test_a_large_body_is_written_whole() -> None:
    """8 MiB does not fit a socket buffer: the rest waits for writability and still goes out in order."""
    body = bytes(range(256)) * (8 * 4096)
    got: list[bytes] = []

    def respond(conn: socket.socket, received: bytes) -> None:
        got.append(received)
        msg = str(len(received)).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(msg), msg))

    url, t = _one_shot_server(respond)
    status, sink, _ = _request(url, body, kernel=True)
    t.join(5)
    assert status == 200 and got == [body]
    assert b"".join(p for p, _ in sink.parts) == str(len(body)).encode()


@pytest.mark.skipif(not KERNEL_RX_TIMESTAMPS, reason="kernel receive timestamps are Linux-only")
@pytest.mark.parametrize("kernel", [True, False])
def test_arrival_is_when_the_bytes_came_not_when_the_loop_got_to_them(kernel: bool) -> None:
    """The server writes a chunk while the client's loop is blocked for 200 ms. Kernel stamps put
    the arrival at the write (within a few ms); read stamps put it after the block."""
    written: list[int] = []

    def respond(conn: socket.socket, _: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        time.sleep(0.05)  # inside the client's 200 ms block
        written.append(time.perf_counter_ns())
        conn.sendall(b"5\r\nhello\r\n0\r\n\r\n")

    url, t = _one_shot_server(respond)
    status, sink, mode = _request(url, b"{}", kernel=kernel, block_loop_s=0.2)
    t.join(5)
    assert status == 200 and mode == ("kernel" if kernel else "read")
    ((data, t_ns),) = sink.parts
    assert data == b"hello"
    late_ms = (t_ns - written[0]) / 1e6
    assert late_ms >= 0  # never before the server wrote it
    if kernel:
        assert late_ms < 20, late_ms
    else:
        assert late_ms > 100, late_ms


def test_tls_endpoints_keep_the_asyncio_transport() -> None:
    pool = ConnectionPool(Endpoint.parse("https://example.invalid/v1"), kernel_timestamps=True)
    assert pool.kernel_timestamps is False
    assert pool.coalesce_reads is False  # no kernel stamps, no coalescing


def test_read_coalescer_pauses_only_while_quick_reads_come_fast() -> None:
    co = ReadCoalescer(on_rate=20_000.0, off_rate=5_000.0, pause_s=0.0)

    def window(quick: int) -> None:  # a 2 ms window ends with `quick` quick reads in it
        co.window_ns = time.perf_counter_ns() - 2_000_000
        co.quick = quick
        co.armed = True
        co.look()

    # (counts with a margin: a window "of 2 ms" is longer by however late `look` runs on a busy host)
    window(30)  # 15,000/s: below the on-rate
    assert (co.busy, co.pauses, co.quick, co.armed) == (False, 0, 0, False)
    window(80)  # 40,000/s: busy, and this round pauses
    assert co.busy and co.pauses == 1 and co.pause_ns >= 0
    co.window_ns = time.perf_counter_ns()
    co.look()  # within the window: every round pauses while busy
    assert co.pauses == 2
    window(18)  # 9,000/s: above the off-rate, still busy
    assert co.busy and co.pauses == 3
    window(8)  # 4,000/s: off
    assert not co.busy and co.pauses == 3


class _NullTransport:
    def write(self, data: bytes) -> None:
        pass


@given(
    st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=8),
    st.lists(st.integers(0, 400), max_size=8),
    st.booleans(),
)
def test_chunked_body_decodes_the_same_however_the_reads_fall(chunks: list[bytes], cuts: list[int], ext: bool) -> None:
    """The tight whole-chunk loop and the general state machine give the same body for any split."""
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for i, c in enumerate(chunks):
        wire += b"%x%s\r\n%s\r\n" % (len(c), b";x=1" if ext and i % 2 else b"", c)
    wire += b"0\r\nX-Trailer: 1\r\n\r\n"
    bounds = sorted({min(c, len(wire)) for c in cuts} | {0, len(wire)})

    async def go() -> bytes:
        conn = Connection(None)  # type: ignore[arg-type]
        conn.transport = _NullTransport()  # type: ignore[assignment]
        sink = _Collect()
        done = conn.start(b"", b"", sink)
        for a, b in pairwise(bounds):
            conn.on_data(wire[a:b], 0)
        assert done.done() and done.exception() is None
        return b"".join(p for p, _ in sink.parts)

    assert asyncio.run(go()) == b"".join(chunks)
