"""A plain-TCP transport that stamps every read with the kernel's receive time (Linux).

With SO_TIMESTAMPNS set, every recvmsg() carries the CLOCK_REALTIME instant the kernel queued the
newest bytes it returns; `StampedTransport` turns that into this process's perf_counter clock and
hands it to its `conn.Connection` with the bytes. Elsewhere (or over TLS) `pool.ConnectionPool`
uses asyncio's own transports, and a read is stamped when its callback runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servescope.client.coalesce import ReadCoalescer
    from servescope.client.conn import Connection

__all__ = ["KERNEL_RX_TIMESTAMPS", "LATENESS_BUCKETS", "LATENESS_SHIFT", "StampedTransport", "open_stamped"]

_perf_ns = time.perf_counter_ns
_real_ns = time.time_ns

# 35 is SO_TIMESTAMPNS (SO_TIMESTAMPNS_OLD) on every Linux architecture but alpha, mips, parisc
# and sparc.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
KERNEL_RX_TIMESTAMPS = sys.platform == "linux"
_READ_SIZE = 64 * 1024  # below malloc's mmap threshold: a 256 KiB read buffer costs ~25 us per read
_ANC_SIZE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_MAX_QUEUED_NS = 60_000_000_000  # a kernel stamp older than this means the wall clock stepped
_unpack_timespec = struct.Struct("@qq").unpack_from
#: How late reads ran after their newest bytes were queued: counts in buckets of 2**LATENESS_SHIFT ns
#: (~0.13 ms), the last one holding every read later than LATENESS_BUCKETS - 1 buckets (~134 ms).
LATENESS_SHIFT = 17
LATENESS_BUCKETS = 1025


class StampedTransport:
    """A plain-TCP transport that reads with `recvmsg` and kernel receive timestamps.

    Why: a read callback runs only when the event loop gets to it. When 512 streams deliver a
    token within the same millisecond, the last callback of that burst runs several ms after its
    bytes arrived, and a timestamp taken in the callback would charge that queueing to the server.
    The kernel stamps each segment as it is queued on the socket; `now - (wall_now - stamp)` turns
    that stamp into this process's perf_counter clock (the two clocks are read back to back, so
    only their difference matters and NTP slewing cannot leak in). A read without a stamp (the
    option refused) falls back to the read's own time, which is what the asyncio path takes.

    Implements what a `Connection` uses of a transport (`conn.Wire`): write, close, abort, is_closing.
    """

    __slots__ = ("_loop", "_sock", "_fd", "_proto", "_wbuf", "_closing", "_coalescer", "_last_ns", "_late")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        proto: Connection,
        coalescer: ReadCoalescer | None = None,
        lateness: list[int] | None = None,
    ) -> None:
        self._loop = loop
        # how late each stamped read ran (`LATENESS_SHIFT`): the share of arrivals a stall may have merged
        self._late = lateness
        self._sock = sock
        self._fd = sock.fileno()
        self._proto = proto
        self._wbuf = bytearray()
        self._closing = False
        self._coalescer = coalescer
        self._last_ns = 0  # arrival time of the previous read (for the coalescer)
        proto.transport = self
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
                if (late := self._late) is not None:
                    late[min(queued >> LATENESS_SHIFT, LATENESS_BUCKETS - 1)] += 1
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

    def _lost(self, exc: Exception | None) -> None:
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        if self._wbuf:
            self._loop.remove_writer(self._fd)
            self._wbuf.clear()
        self._sock.close()
        self._loop.call_soon(self._proto.connection_lost, exc)


async def open_stamped(
    loop: asyncio.AbstractEventLoop,
    host: str,
    port: int,
    proto: Connection,
    coalescer: ReadCoalescer | None = None,
    lateness: list[int] | None = None,
) -> None:
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
        StampedTransport(loop, sock, proto, coalescer, lateness)
        return
    raise err or OSError(f"cannot resolve {host}:{port}")
