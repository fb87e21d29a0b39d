"""Keep-alive connections to one endpoint, and the bytes of a request's head.

`ConnectionPool.request` is what the shard awaits once per request; the bytes of the response go
from the transport straight to the connection's parser (`conn.Connection.on_data`) and its sink.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl as _ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from servescope.client.coalesce import ReadCoalescer
from servescope.client.conn import BodySink, Connection, HttpError, Response
from servescope.client.transport import KERNEL_RX_TIMESTAMPS, LATENESS_BUCKETS, open_stamped

__all__ = ["PRECONNECT_WAVE", "ConnectionPool", "Endpoint", "request_head"]

#: Connects in flight at once while opening connections before the clock (`ConnectionPool.preconnect`).
PRECONNECT_WAVE = 128


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


class ConnectionPool:
    """Keep-alive connections to one host:port, opened on demand or ahead of the clock."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        connect_timeout_s: float = 10.0,
        reuse: bool = True,
        kernel_timestamps: bool = True,
        coalesce_reads: bool = True,
    ) -> None:
        """`reuse=False` for servers that close every connection after a streamed response
        (llama-server does, despite its Keep-Alive header): a fresh connection is then opened in
        the background as each response ends, so no request waits for a connect.

        `kernel_timestamps`: read plain-TCP connections with kernel receive timestamps (Linux;
        see `transport.StampedTransport`). Off, or over TLS, a read is stamped when its callback runs.

        `coalesce_reads`: with kernel timestamps, pause the loop briefly when streams deliver
        faster than a chunk a millisecond (`ReadCoalescer`; `self.coalescer` counts the pauses)."""
        self.endpoint = endpoint
        self.kernel_timestamps = kernel_timestamps and KERNEL_RX_TIMESTAMPS and not endpoint.ssl
        self.coalesce_reads = coalesce_reads and self.kernel_timestamps
        self.coalescer: ReadCoalescer | None = None  # made on the first stamped connect
        # stamped reads by how late they ran after their bytes came (transport.LATENESS_SHIFT buckets)
        self.lateness: list[int] = [0] * LATENESS_BUCKETS if self.kernel_timestamps else []
        self.reuse = reuse
        self._spare_tasks: set[asyncio.Task[None]] = set()
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[Connection] = []
        self._all: set[Connection] = set()
        self._ssl = _ssl.create_default_context() if endpoint.ssl else None

    async def _open(self) -> Connection:
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        async with asyncio.timeout(self.connect_timeout_s):
            if self.kernel_timestamps:
                if self.coalesce_reads and self.coalescer is None:
                    self.coalescer = ReadCoalescer()
                conn = Connection(self)
                await open_stamped(loop, ep.host, ep.port, conn, self.coalescer, self.lateness)
            else:
                _, conn = await loop.create_connection(lambda: Connection(self), ep.host, ep.port, ssl=self._ssl)
        self._all.add(conn)
        return conn

    def _take_idle(self) -> Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
            self.forget(conn)
        return None

    async def _add_spare(self) -> None:
        with contextlib.suppress(OSError, TimeoutError):  # the next request opens its own and reports what fails
            self._idle.append(await self._open())

    async def preconnect(self, n: int, *, wave: int | None = None, budget_s: float | None = None) -> int:
        """Open up to n idle connections now (before the clock); returns how many opened.

        At most `wave` (`PRECONNECT_WAVE`) connects are in flight at once: a burst of thousands of SYNs
        overflows a server's accept backlog, and a dropped SYN is sent again only after 1 s (then 3 s). A
        connect that fails is tried again while `budget_s` (default: twice the connect timeout) lasts: the
        connections a run needs open before the clock, not inside it; after a round in which none opened
        (refused or reset at once) it waits 50 ms, doubling, before the next. What is left when the budget
        ends opens inside the window, and is counted there."""
        loop = asyncio.get_running_loop()
        end = loop.time() + (budget_s if budget_s is not None else 2 * self.connect_timeout_s)
        sem = asyncio.Semaphore(max(1, wave or PRECONNECT_WAVE))

        async def one() -> bool:
            async with sem:
                try:
                    async with asyncio.timeout_at(end):
                        conn = await self._open()
                except (OSError, TimeoutError):
                    return False
                self._idle.append(conn)
                return True

        opened, left, pause = 0, n, 0.05
        while left > 0 and loop.time() < end:
            ok = sum(await asyncio.gather(*(one() for _ in range(left))))
            opened, left = opened + ok, left - ok
            if not ok and left:  # refused or reset at once (a full queue, a limit): wait a little, then again
                await asyncio.sleep(max(0.0, min(pause, end - loop.time())))
                pause *= 2
        return opened

    def forget(self, conn: Connection) -> None:
        """Drop a connection that closed (its own `connection_lost`) or that a request gave up."""
        self._all.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)

    async def request(
        self, head: bytes, body: bytes, sink: BodySink, on_send: Callable[[int | None], None] | None = None
    ) -> Response:
        """Send one request and wait for its whole response; body bytes go to `sink`.

        `on_send(setup_ns)` is called just before the bytes are written (the shard takes `t_send` there),
        with the time this request waited for a connection to be opened for it (connect, and the TLS
        handshake over https), or None when it went on one already open.
        A pooled connection that the server had closed while idle fails before any response byte;
        such a request is sent once more, on a fresh connection, and `on_send` is called again: a
        stale pool is the client's business and never counts in the request's TTFT.
        """
        setup_ns: int | None = None
        for attempt in (0, 1):
            conn = self._take_idle() if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                began = time.perf_counter_ns()
                conn = await self._open()
                setup_ns = (setup_ns or 0) + time.perf_counter_ns() - began
            if on_send is not None:
                on_send(setup_ns)
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
                self.forget(conn)
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
        lines = [f"{method} {ep.path} HTTP/1.1", f"Host: {host}", "Accept-Encoding: identity", "Connection: keep-alive"]
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
