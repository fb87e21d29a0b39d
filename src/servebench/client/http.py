"""A lean HTTP/1.1 client for the hot path, on asyncio transports.

Why our own: a general client (aiohttp) wakes the reading coroutine for every HTTP chunk a server
sends and runs several layers of Python per chunk; for a stream of one token per chunk that cost is
most of the client's CPU per token. Here `_Conn.on_data` is the hot path: it gets one timestamp
per socket read — where the bytes arrived: the kernel's receive timestamp on plain TCP under Linux
(`_StampedTransport`), else the read callback's own clock —, strips the chunked framing of
everything that read holds and hands the body bytes to the response's sink in one call. The
request coroutine sleeps on one future for the whole response.

Scope, on purpose: HTTP/1.1 (and 1.0) over TCP or TLS, keep-alive, bodies framed by
`Transfer-Encoding: chunked`, `Content-Length` or connection close; `Accept-Encoding: identity`
is sent so bodies are never compressed. No proxies, redirects or HTTP/2: setup and pre-flight use
aiohttp; only the measured requests use this.

The seam for tests is `BodySink`: anything with `on_body(data, t_ns)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl as _ssl
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

__all__ = ["BodySink", "ConnectionPool", "HttpError", "ReadCoalescer", "Response", "Endpoint", "request_head"]

_perf_ns = time.perf_counter_ns
_real_ns = time.time_ns
_MAX_HEAD = 64 * 1024

# Kernel receive timestamps (Linux): with SO_TIMESTAMPNS set, every recvmsg() carries the
# CLOCK_REALTIME instant the kernel queued the newest bytes it returns. 35 is SO_TIMESTAMPNS
# (SO_TIMESTAMPNS_OLD) on every Linux architecture but alpha, mips, parisc and sparc.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
KERNEL_RX_TIMESTAMPS = sys.platform == "linux"
_READ_SIZE = 64 * 1024  # below malloc's mmap threshold: a 256 KiB read buffer costs ~25 us per read
_ANC_SIZE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_MAX_QUEUED_NS = 60_000_000_000  # a kernel stamp older than this means the wall clock stepped
_unpack_timespec = struct.Struct("@qq").unpack_from


class HttpError(ConnectionError):
    """The connection broke or the server spoke something that is not HTTP/1.x."""

    def __init__(self, message: str, *, before_response: bool = False) -> None:
        super().__init__(message)
        self.before_response = before_response


class BodySink(Protocol):
    """Gets the body bytes of each read with their arrival time.

    A sink may also have `on_chunks(data, pos, t_ns) -> int`: offered the raw bytes of a chunked
    body at a chunk-size line (after everything before `pos` went to `on_body`), it consumes the
    whole chunks it can read in bulk and returns the position after them. `pos`: none now (one
    chunk goes to `on_body`, then the rest is offered again); -1: none ever, do not ask again."""

    def on_body(self, data: bytes, t_ns: int) -> None: ...


@dataclass(slots=True)
class Response:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    error_body: bytes = b""  # the first bytes of a non-2xx body (for the error record)


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    path: str
    ssl: bool

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        u = urlsplit(url)
        if u.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme in {url!r}")
        tls = u.scheme == "https"
        path = u.path or "/"
        if u.query:
            path += "?" + u.query
        return cls(u.hostname or "127.0.0.1", u.port or (443 if tls else 80), path, tls)


# Parser states
_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILER, _LENGTH, _UNTIL_CLOSE, _DONE = range(8)


class _Conn(asyncio.Protocol):
    __slots__ = ("transport", "pool", "buf", "state", "remaining", "resp", "sink", "bulk", "done",
                 "keep_alive", "got_bytes", "closed", "_error_limit")

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.state = _DONE
        self.remaining = 0
        self.resp: Response | None = None
        self.sink: BodySink | None = None
        self.bulk: Callable[[bytes, int, int], int] | None = None
        self.done: asyncio.Future[None] | None = None
        self.keep_alive = True
        self.got_bytes = False
        self.closed = False
        self._error_limit = 2048

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        if self.state == _UNTIL_CLOSE:
            self._finish()
        elif self.done is not None and not self.done.done():
            msg = f"connection closed by the server{f': {exc}' if exc else ''}"
            self.done.set_exception(HttpError(msg, before_response=not self.got_bytes))

    def data_received(self, data: bytes) -> None:
        self.on_data(data, _perf_ns())

    def on_data(self, data: bytes, t_ns: int) -> None:
        """Bytes of one socket read and when they arrived (perf_counter ns)."""
        if self.done is None or self.done.done():
            return  # bytes after a finished response (or none asked for): ignore
        self.got_bytes = True
        if self.buf:
            data = self.buf + data
            self.buf = b""
        try:
            self._parse(data, t_ns)
        except HttpError as e:
            self.keep_alive = False
            if not self.done.done():
                self.done.set_exception(e)
            if self.transport is not None:
                self.transport.abort()
        except Exception as e:  # a sink's error (e.g. malformed JSON) ends this response
            self.keep_alive = False
            if not self.done.done():
                self.done.set_exception(e)
            if self.transport is not None:
                self.transport.abort()

    # -- request
    def start(self, head: bytes, body: bytes, sink: BodySink) -> asyncio.Future[None]:
        assert self.transport is not None
        self.resp = Response()
        self.sink = sink
        self.bulk = getattr(sink, "on_chunks", None)
        self.state = _HEAD
        self.buf = b""
        self.got_bytes = False
        self.keep_alive = True
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(head + body)
        return self.done

    # -- parsing
    def _emit(self, piece: bytes, t_ns: int) -> None:
        resp = self.resp
        assert resp is not None and self.sink is not None
        if 200 <= resp.status < 300:
            self.sink.on_body(piece, t_ns)
        elif len(resp.error_body) < self._error_limit:
            resp.error_body += piece[: self._error_limit - len(resp.error_body)]

    def _parse(self, data: bytes, t_ns: int) -> None:
        pos = 0
        n = len(data)
        out: list[bytes] = []
        while pos < n:
            state = self.state
            if state == _CHUNK_SIZE:
                one = False  # take one chunk, then offer the rest to the sink's bulk path again
                bulk = self.bulk
                if bulk is not None and 200 <= self.resp.status < 300:  # type: ignore[union-attr]
                    # the sink's own bulk path first (BodySink), after what came before it
                    if out:
                        self._emit(out[0] if len(out) == 1 else b"".join(out), t_ns)
                        out.clear()
                    taken = bulk(data, pos, t_ns)
                    if taken < 0:
                        self.bulk = None
                    elif taken == pos:
                        one = True
                    else:
                        pos = taken
                        if pos >= n:
                            break
                        continue
                # Whole chunks back to back (a stream read in bulk): a tight loop. A chunk
                # extension, the last chunk or a partial one goes through the general step.
                find = data.find
                while (eol := find(b"\r\n", pos)) >= 0:
                    try:
                        size = int(data[pos:eol], 16)
                    except ValueError:
                        break
                    end = eol + 2 + size
                    if size == 0 or end + 2 > n:
                        break
                    out.append(data[eol + 2:end])
                    pos = end + 2
                    if one:
                        break
                if one and out:
                    continue
                if pos >= n:
                    break
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    break
                line = data[pos:eol]
                semi = line.find(b";")
                try:
                    size = int(line if semi < 0 else line[:semi], 16)
                except ValueError:
                    raise HttpError(f"bad chunk size line {line[:40]!r}") from None
                pos = eol + 2
                if size == 0:
                    self.state = _TRAILER
                elif pos + size + 2 <= n:  # the whole chunk is here: one step
                    out.append(data[pos:pos + size])
                    pos += size + 2
                else:
                    self.remaining = size
                    self.state = _CHUNK_DATA
            elif state == _CHUNK_DATA:
                take = min(self.remaining, n - pos)
                out.append(data[pos:pos + take])
                pos += take
                self.remaining -= take
                if self.remaining == 0:
                    self.state = _CHUNK_CRLF
            elif state == _CHUNK_CRLF:
                if n - pos < 2:
                    break
                pos += 2
                self.state = _CHUNK_SIZE
            elif state == _HEAD:
                end = data.find(b"\r\n\r\n", pos)
                if end < 0:
                    if n - pos > _MAX_HEAD:
                        raise HttpError("response head larger than 64 KiB")
                    break
                self._head(data[pos:end])
                pos = end + 4
            elif state == _LENGTH:
                take = min(self.remaining, n - pos)
                out.append(data[pos:pos + take])
                pos += take
                self.remaining -= take
                if self.remaining == 0:
                    self.state = _DONE
            elif state == _UNTIL_CLOSE:
                out.append(data[pos:])
                pos = n
            elif state == _TRAILER:
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    break
                empty = eol == pos
                pos = eol + 2
                if empty:
                    self.state = _DONE
            else:  # _DONE: bytes past the end of the response
                self.keep_alive = False
                pos = n
                break
            if self.state == _DONE:
                break
        if pos < n and self.state not in (_DONE,):
            self.buf = data[pos:]
        if out:
            self._emit(out[0] if len(out) == 1 else b"".join(out), t_ns)
        if self.state == _DONE:
            self._finish()

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        status_line = lines[0].split(b" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
            raise HttpError(f"not an HTTP/1.x response: {lines[0][:60]!r}")
        status = int(status_line[1])
        if 100 <= status < 200:  # interim response: the real one follows
            return
        headers: dict[str, str] = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            headers[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
        resp = self.resp
        assert resp is not None
        resp.status = status
        resp.headers = headers
        conn_hdr = headers.get("connection", "").lower()
        self.keep_alive = (status_line[0] == b"HTTP/1.1" and "close" not in conn_hdr) or "keep-alive" in conn_hdr
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.state = _CHUNK_SIZE
        elif "content-length" in headers:
            self.remaining = int(headers["content-length"])
            self.state = _LENGTH if self.remaining > 0 else _DONE
        elif status in (204, 304):
            self.state = _DONE
        else:
            self.state = _UNTIL_CLOSE
            self.keep_alive = False

    def _finish(self) -> None:
        self.state = _DONE
        if self.done is not None and not self.done.done():
            self.done.set_result(None)


class ReadCoalescer:
    """Read coalescing for streams that deliver faster than a chunk a millisecond
    (kernel-stamped connections only, `_StampedTransport`).

    A client that keeps up with such streams reads each as soon as a chunk is there: at tens of
    thousands of reads a second, the per-read work (an event-loop round, a `recvmsg`, and the ACK
    the kernel sends back to the server from inside it) costs more than the tokens. A read that
    comes less than `quick_ms` after the same connection's previous one is *quick*. Measured over
    windows of 2 ms: once quick reads come at `on_rate` a second or more, every loop round that
    read something quick pauses `pause_s` (about 0.1 ms once the OS has woken it) before the loop
    polls again, so each read carries several chunks; below `off_rate` the pauses stop. Streams
    paced like real decoding (a chunk every few ms or slower) never trigger it.

    Arrival times do not move: a read's time is the kernel's stamp of when its newest bytes were
    queued, whenever the read runs. What a pause can cost: chunks of one stream that arrive less
    than a pause apart share a read and that newest stamp, as they do without pauses whenever a
    stream delivers faster than the loop cycles through its sockets. With `--rx-timestamps read`
    (or over TLS) there is no stamp to keep arrivals exact, and no coalescing.

    Idle costs nothing: a look is armed by a quick read, so a quiet loop blocks in its poll.
    """

    __slots__ = ("quick", "armed", "busy", "window_ns", "pauses", "pause_ns", "quick_ns",
                 "_on_gap_ns", "_off_gap_ns", "_pause_s")

    _WINDOW_NS = 2_000_000

    def __init__(self, *, on_rate: float = 20_000.0, off_rate: float = 5_000.0, quick_ms: float = 1.0,
                 pause_s: float = 20e-6) -> None:
        self.quick = 0  # quick reads in this window
        self.armed = False  # a look is scheduled for the loop's next round
        self.busy = False  # pausing
        self.window_ns = _perf_ns()  # this window's start
        self.pauses = 0
        self.pause_ns = 0  # total time paused (what the pauses really took, wake-up included)
        self.quick_ns = int(quick_ms * 1e6)
        self._on_gap_ns = 1e9 / on_rate
        self._off_gap_ns = 1e9 / off_rate
        self._pause_s = pause_s

    def look(self) -> None:
        """Run in the loop round after a quick read (armed by `_StampedTransport._read_ready`)."""
        self.armed = False
        now = _perf_ns()
        elapsed = now - self.window_ns
        if elapsed >= self._WINDOW_NS:  # a window ended: busy from here on, or not
            gap = self._off_gap_ns if self.busy else self._on_gap_ns
            self.busy = self.quick * gap >= elapsed
            self.quick = 0
            self.window_ns = now
        if self.busy:
            time.sleep(self._pause_s)
            self.pauses += 1
            self.pause_ns += _perf_ns() - now


class _StampedTransport:
    """A plain-TCP transport that reads with `recvmsg` and kernel receive timestamps.

    Why: a read callback runs only when the event loop gets to it. When 512 streams deliver a
    token within the same millisecond, the last callback of that burst runs several ms after its
    bytes arrived, and a timestamp taken in the callback would charge that queueing to the server.
    The kernel stamps each segment as it is queued on the socket; `now - (wall_now - stamp)` turns
    that stamp into this process's perf_counter clock (the two clocks are read back to back, so
    only their difference matters and NTP slewing cannot leak in). A read without a stamp (the
    option refused) falls back to the read's own time, which is what the asyncio path takes.

    Implements what `_Conn` uses of `asyncio.Transport`: write, close, abort, is_closing.
    """

    __slots__ = ("_loop", "_sock", "_fd", "_proto", "_wbuf", "_closing", "_coalescer", "_last_ns")

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, proto: _Conn,
                 coalescer: ReadCoalescer | None = None) -> None:
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._proto = proto
        self._wbuf = bytearray()
        self._closing = False
        self._coalescer = coalescer
        self._last_ns = 0  # arrival time of the previous read (for the coalescer)
        proto.connection_made(self)  # type: ignore[arg-type]
        loop.add_reader(self._fd, self._read_ready)

    def _read_ready(self) -> None:
        try:
            data, anc, _, _ = self._sock.recvmsg(_READ_SIZE, _ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        if anc:
            sec, nsec = _unpack_timespec(anc[0][2])
            # wall clock first, then perf: any pause between the two reads makes the token
            # later, never earlier, than its bytes
            queued = _real_ns() - (sec * 1_000_000_000 + nsec)
            now = _perf_ns()
            if 0 < queued < _MAX_QUEUED_NS:
                now -= queued
        else:
            now = _perf_ns()
        co = self._coalescer
        if co is not None:
            if now - self._last_ns < co.quick_ns:
                co.quick += 1
                if not co.armed:
                    co.armed = True
                    self._loop.call_soon(co.look)
            self._last_ns = now
        if data:
            self._proto.on_data(data, now)
        else:
            self._lost(None)

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        if not self._wbuf:
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as e:
                self._lost(e)
                return
            if sent == len(data):
                return
            data = data[sent:]
            self._loop.add_writer(self._fd, self._write_ready)
        self._wbuf += data

    def _write_ready(self) -> None:
        try:
            sent = self._sock.send(self._wbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        del self._wbuf[:sent]
        if not self._wbuf:
            self._loop.remove_writer(self._fd)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Only ever called once a response has ended, when nothing written is still pending."""
        self._lost(None)

    abort = close

    def _lost(self, exc: BaseException | None) -> None:
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        if self._wbuf:
            self._loop.remove_writer(self._fd)
            self._wbuf.clear()
        self._sock.close()
        self._loop.call_soon(self._proto.connection_lost, exc)


async def _open_stamped(loop: asyncio.AbstractEventLoop, host: str, port: int, proto: _Conn,
                        coalescer: ReadCoalescer | None = None) -> None:
    """Connects a non-blocking socket with receive timestamps on and attaches `proto` to it."""
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    err: OSError | None = None
    for family, type_, proto_num, _, addr in infos:
        sock = socket.socket(family, type_, proto_num)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with contextlib.suppress(OSError):  # refused: reads carry no stamp and take their own time
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            await loop.sock_connect(sock, addr)
        except OSError as e:
            sock.close()
            err = e
            continue
        except BaseException:
            sock.close()
            raise
        _StampedTransport(loop, sock, proto, coalescer)
        return
    raise err or OSError(f"cannot resolve {host}:{port}")


class ConnectionPool:
    """Keep-alive connections to one host:port, opened on demand or ahead of the clock."""

    def __init__(self, endpoint: Endpoint, *, connect_timeout_s: float = 10.0, reuse: bool = True,
                 kernel_timestamps: bool = True, coalesce_reads: bool = True) -> None:
        """`reuse=False` for servers that close every connection after a streamed response
        (llama-server does, despite its Keep-Alive header): a fresh connection is then opened in
        the background as each response ends, so no request waits for a connect.

        `kernel_timestamps`: read plain-TCP connections with kernel receive timestamps (Linux;
        see `_StampedTransport`). Off, or over TLS, a read is stamped when its callback runs.

        `coalesce_reads`: with kernel timestamps, pause the loop briefly when streams deliver
        faster than a chunk a millisecond (`ReadCoalescer`; `self.coalescer` counts the pauses)."""
        self.endpoint = endpoint
        self.kernel_timestamps = kernel_timestamps and KERNEL_RX_TIMESTAMPS and not endpoint.ssl
        self.coalesce_reads = coalesce_reads and self.kernel_timestamps
        self.coalescer: ReadCoalescer | None = None  # made on the first stamped connect
        self.reuse = reuse
        self._spare_tasks: set[asyncio.Task[None]] = set()
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[_Conn] = []
        self._all: set[_Conn] = set()
        self._ssl = _ssl.create_default_context() if endpoint.ssl else None

    async def _open(self) -> _Conn:
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        factory: Callable[[], _Conn] = lambda: _Conn(self)  # noqa: E731
        async with asyncio.timeout(self.connect_timeout_s):
            if self.kernel_timestamps:
                if self.coalesce_reads and self.coalescer is None:
                    self.coalescer = ReadCoalescer()
                conn = factory()
                await _open_stamped(loop, ep.host, ep.port, conn, self.coalescer)
            else:
                _, conn = await loop.create_connection(factory, ep.host, ep.port, ssl=self._ssl)
        self._all.add(conn)
        return conn

    def _take_idle(self) -> _Conn | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
            self._forget(conn)
        return None

    async def _add_spare(self) -> None:
        try:
            self._idle.append(await self._open())
        except (OSError, TimeoutError):
            pass  # the next request opens its own and reports what fails

    async def preconnect(self, n: int) -> int:
        """Open up to n idle connections now (before the clock); returns how many opened."""
        results = await asyncio.gather(*(self._open() for _ in range(n)), return_exceptions=True)
        conns = [c for c in results if isinstance(c, _Conn)]
        self._idle.extend(conns)
        return len(conns)

    def _forget(self, conn: _Conn) -> None:
        self._all.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)

    async def request(
        self, head: bytes, body: bytes, sink: BodySink, on_send: Callable[[], None] | None = None
    ) -> Response:
        """Send one request and wait for its whole response; body bytes go to `sink`.

        `on_send` is called just before the bytes are written (the runner takes `t_send` there).
        A pooled connection that the server had closed while idle fails before any response byte;
        such a request is sent once more, on a fresh connection, and `on_send` is called again: a
        stale pool is the client's business and never counts in the request's TTFT.
        """
        for attempt in (0, 1):
            conn = self._take_idle() if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                conn = await self._open()
            if on_send is not None:
                on_send()
            try:
                await conn.start(head, body, sink)
            except HttpError as e:
                if reused and e.before_response and attempt == 0:
                    continue
                raise
            except BaseException:
                # cancelled or timed out mid-response: the connection is in an unknown state
                if conn.transport is not None:
                    conn.transport.abort()
                self._forget(conn)
                raise
            resp = conn.resp
            assert resp is not None
            if self.reuse and conn.keep_alive and not conn.closed:
                self._idle.append(conn)
            else:
                if conn.transport is not None:
                    conn.transport.close()
                if not self.reuse:  # the server closes after each response: connect the next now
                    self._spare_tasks.add(t := asyncio.ensure_future(self._add_spare()))
                    t.add_done_callback(self._spare_tasks.discard)
            return resp
        raise HttpError("unreachable")  # pragma: no cover

    def head_prefix(self, method: str, headers: dict[str, str]) -> bytes:
        """Request line and headers up to Content-Length, encoded once before the clock.

        A request's head is `prefix + b"Content-Length: N\\r\\n\\r\\n"` (see `request_head`).
        """
        ep = self.endpoint
        host = ep.host if ep.port in (80, 443) else f"{ep.host}:{ep.port}"
        lines = [f"{method} {ep.path} HTTP/1.1", f"Host: {host}", "Accept-Encoding: identity",
                 "Connection: keep-alive"]
        for k, v in headers.items():
            if k.lower() not in ("host", "content-length", "connection", "accept-encoding"):
                lines.append(f"{k}: {v}")
        return ("\r\n".join(lines) + "\r\n").encode("latin-1")

    def close(self) -> None:
        for task in list(self._spare_tasks):
            task.cancel()
        for conn in list(self._all):
            if conn.transport is not None:
                conn.transport.abort()
        self._all.clear()
        self._idle.clear()


def request_head(prefix: bytes, body_len: int) -> bytes:
    return prefix + b"Content-Length: %d\r\n\r\n" % body_len
