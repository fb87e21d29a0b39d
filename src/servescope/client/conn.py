"""One keep-alive HTTP/1.1 connection of the hot path: it sends a request and parses the response.

Why our own client: a general one (aiohttp) wakes the reading coroutine for every HTTP chunk a
server sends and runs several layers of Python per chunk; for a stream of one token per chunk that
cost is most of the client's CPU per token. Here `Connection.on_data` is the hot path: it gets one
timestamp per socket read — where the bytes arrived: the kernel's receive timestamp on plain TCP
under Linux (`transport.StampedTransport`), else the read callback's own clock —, strips the
chunked framing of everything that read holds and hands the body bytes to the response's sink in
one call. The request coroutine sleeps on one future for the whole response.

Scope, on purpose: HTTP/1.1 (and 1.0) over TCP or TLS, keep-alive, bodies framed by
`Transfer-Encoding: chunked`, `Content-Length` or connection close; `Accept-Encoding: identity`
is sent so bodies are never compressed. No proxies, redirects or HTTP/2: setup and pre-flight use
aiohttp; only the measured requests use this (`pool.ConnectionPool`).

The seam for tests is `BodySink`: anything with `on_body(data, t_ns)`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from servescope.client.pool import ConnectionPool

__all__ = ["BodySink", "Connection", "HttpError", "Response", "Wire"]

_perf_ns = time.perf_counter_ns
_MAX_HEAD = 64 * 1024


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


class Wire(Protocol):
    """What a `Connection` uses of its transport: an asyncio transport, or a
    `transport.StampedTransport`."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...

    def is_closing(self) -> bool: ...


@dataclass(slots=True)
class Response:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    error_body: bytes = b""  # the first bytes of a non-2xx body (for the error record)


# Parser states
_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILER, _LENGTH, _UNTIL_CLOSE, _DONE = range(8)


class Connection(asyncio.Protocol):
    """The response parser of one connection, fed by its transport one socket read at a time."""

    __slots__ = (
        "transport",
        "pool",
        "buf",
        "state",
        "remaining",
        "resp",
        "sink",
        "bulk",
        "done",
        "keep_alive",
        "got_bytes",
        "closed",
        "_error_limit",
    )

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.transport: Wire | None = None
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

    # -- asyncio.Protocol (a `StampedTransport` sets `transport` itself)
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
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
        except Exception as e:  # bad HTTP, or a sink's error (e.g. malformed JSON): ends this response
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
                    out.append(data[eol + 2 : end])
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
                    out.append(data[pos : pos + size])
                    pos += size + 2
                else:
                    self.remaining = size
                    self.state = _CHUNK_DATA
            elif state == _CHUNK_DATA:
                take = min(self.remaining, n - pos)
                out.append(data[pos : pos + take])
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
                out.append(data[pos : pos + take])
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
