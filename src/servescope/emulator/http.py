"""A lean HTTP/1.1 server on asyncio's Protocol API: keep-alive, pipelining, chunked responses.

Just enough HTTP for an OpenAI-compatible emulator that must never be the bottleneck: no
framework, no per-request objects beyond a header dict, writes go straight to the transport.
The application object gets `dispatch(conn, method, path, query, headers, body)` and answers
through `conn.respond(...)` or `conn.start_stream(...)` / `conn.write(...)` / `conn.end_stream(...)`;
`on_disconnect(conn)` tells it a client went away while a response was in progress.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

__all__ = ["HttpApp", "HttpConn", "REASONS"]

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    411: "Length Required",
    413: "Payload Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_MAX_HEAD = 64 * 1024
_MAX_BODY = 64 * 1024 * 1024


class HttpApp(Protocol):
    def dispatch(
        self, conn: HttpConn, method: str, path: str, query: str, headers: dict[str, str], body: bytes
    ) -> None: ...

    def on_disconnect(self, conn: HttpConn) -> None: ...


class HttpConn(asyncio.Protocol):
    """One client connection. `busy` while a response is in progress; later requests wait in `buf`."""

    __slots__ = ("app", "transport", "buf", "busy", "closed", "keep_alive", "current", "_parsing", "_continued")

    def __init__(self, app: HttpApp) -> None:
        self.app = app
        self.transport: Any = None
        self.buf = bytearray()
        self.busy = False
        self.closed = False
        self.keep_alive = True
        self.current: object | None = None  # the application's in-flight response state (opaque here)
        self._parsing = False
        self._continued = False

    # ---------------------------------------------------------------- asyncio
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._process()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.current is not None:
            self.app.on_disconnect(self)
            self.current = None

    # ---------------------------------------------------------------- parsing
    def _process(self) -> None:
        if self._parsing:
            return
        self._parsing = True
        try:
            while not self.busy and not self.closed and self.buf:
                if not self._one():
                    return
        finally:
            self._parsing = False

    def _one(self) -> bool:
        buf = self.buf
        while buf[:2] == b"\r\n":  # empty lines before a request line are ignored (RFC 9112 2.2)
            del buf[:2]
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > _MAX_HEAD:
                self._fail(431)
            return False
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._fail(400)
            return False
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        start = end + 4
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._dechunk(start)
            if body is None:
                return False
        else:
            try:
                n = int(headers.get("content-length", "0") or 0)
            except ValueError:
                self._fail(400)
                return False
            if n > _MAX_BODY:
                self._fail(413)
                return False
            if len(buf) < start + n:
                if headers.get("expect", "").lower() == "100-continue" and not self._continued:
                    self._continued = True
                    self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return False
            self._continued = False
            body = bytes(buf[start : start + n])
            del buf[: start + n]
        conn_hdr = headers.get("connection", "").lower()
        self.keep_alive = ("close" not in conn_hdr) if version == "HTTP/1.1" else ("keep-alive" in conn_hdr)
        path, _, query = target.partition("?")
        self.busy = True
        self.app.dispatch(self, method, path, query, headers, body)
        return True

    def _dechunk(self, start: int) -> bytes | None:
        """Decode a complete chunked request body starting at `start`; None if incomplete."""
        buf = self.buf
        pos = start
        out = bytearray()
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            try:
                size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
            except ValueError:
                self._fail(400)
                return None
            if size == 0:
                fin = buf.find(b"\r\n\r\n", eol)
                if fin < 0:
                    return None
                del buf[: fin + 4]
                return bytes(out)
            if len(buf) < eol + 2 + size + 2:
                return None
            out += buf[eol + 2 : eol + 2 + size]
            pos = eol + 2 + size + 2

    def _fail(self, status: int) -> None:
        self.keep_alive = False
        self.busy = True
        self.respond(status, b'{"error":"bad request"}')

    # ---------------------------------------------------------------- writing
    def _head(self, status: int, ctype: str, extra: tuple[tuple[str, str], ...], length: int | None) -> bytes:
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}", f"content-type: {ctype}"]
        lines += [f"{k}: {v}" for k, v in extra]
        lines.append(f"content-length: {length}" if length is not None else "transfer-encoding: chunked")
        if not self.keep_alive:
            lines.append("connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def respond(
        self, status: int, body: bytes, ctype: str = "application/json", extra: tuple[tuple[str, str], ...] = ()
    ) -> None:
        """A complete response; the connection then serves the next request."""
        if not self.closed:
            self.transport.write(self._head(status, ctype, extra, len(body)) + body)
        self._done()

    def start_stream(
        self, status: int = 200, ctype: str = "text/event-stream", extra: tuple[tuple[str, str], ...] = ()
    ) -> None:
        if not self.closed:
            self.transport.write(self._head(status, ctype, (*extra, ("cache-control", "no-cache")), None))

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)

    def end_stream(self, last: bytes = b"") -> None:
        """Write `last` (already chunk-framed) plus the terminating chunk; serve the next request."""
        if not self.closed:
            self.transport.write(last + b"0\r\n\r\n")
        self._done()

    def finish_stream(self) -> None:
        """The stream's last bytes (terminating chunk included) were written: serve the next request."""
        self._done()

    def close(self) -> None:
        """Close the connection now (after flushing what was written)."""
        self.current = None
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _done(self) -> None:
        self.current = None
        self.busy = False
        if not self.keep_alive:
            self.close()
            return
        if self.buf and not self._parsing:
            asyncio.get_running_loop().call_soon(self._process)
