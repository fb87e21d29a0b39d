"""Read coalescing: brief loop pauses while streams deliver faster than a chunk a millisecond.

Used only on kernel-stamped connections (`transport.StampedTransport`), where a read's arrival time
is the kernel's stamp and so does not move when the read runs later.
"""

from __future__ import annotations

import time

__all__ = ["ReadCoalescer"]

_perf_ns = time.perf_counter_ns


class ReadCoalescer:
    """Read coalescing for streams that deliver faster than a chunk a millisecond
    (kernel-stamped connections only, `transport.StampedTransport`).

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

    __slots__ = (
        "quick",
        "armed",
        "busy",
        "window_ns",
        "pauses",
        "pause_ns",
        "quick_ns",
        "_on_gap_ns",
        "_off_gap_ns",
        "_pause_s",
    )

    _WINDOW_NS = 2_000_000

    def __init__(
        self, *, on_rate: float = 20_000.0, off_rate: float = 5_000.0, quick_ms: float = 1.0, pause_s: float = 20e-6
    ) -> None:
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
        """Run in the loop round after a quick read (armed by `StampedTransport._read_ready`)."""
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
