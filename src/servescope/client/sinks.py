"""Where a response's body bytes go: per read, straight from the connection's parser.

`StreamSink` is the per-token hot path of a streamed response (SSE events to the accumulator, or
whole runs of template chunks in bulk through `fastpath.token_run`); `BufferSink` keeps a
non-streamed body whole.
"""

from __future__ import annotations

from servescope.client.fastpath import token_run
from servescope.client.openai import StreamAccumulator
from servescope.client.sse import SSEDecoder

__all__ = ["BufferSink", "StreamSink"]

_BULK_MISSES = 32  # offers of a response's chunks the bulk path may decline before it stops trying


class StreamSink:
    """Body bytes of one streamed response -> SSE events -> the accumulator, timestamped."""

    __slots__ = ("dec", "acc", "t0", "feed", "on_event", "misses", "all_events")

    def __init__(self, acc: StreamAccumulator, t0_ns: int) -> None:
        self.dec = SSEDecoder()
        self.acc = acc
        self.t0 = t0_ns
        self.feed = self.dec.feed
        self.on_event = acc.on_event
        self.misses = 0
        self.all_events = acc.named_events  # the Responses and Messages APIs name every event

    def on_chunks(self, data: bytes, pos: int, t_ns: int) -> int:
        """Whole HTTP chunks of the stream's plain token template, read in bulk (`fastpath`)."""
        tpl = self.acc.template
        if tpl is None:
            return pos if self.acc.learning else -1
        if not self.dec.idle:
            return pos
        end, chars = token_run(data, pos, tpl)
        if chars:
            self.acc.add_run(chars, t_ns - self.t0)
        elif self.misses < _BULK_MISSES:
            self.misses += 1  # a finishing chunk, an escaped text: a few per stream
        else:
            return -1  # most chunks are not plain ones: stop trying
        return end

    def on_body(self, data: bytes, t_ns: int) -> None:
        t = t_ns - self.t0
        for event, payload in self.feed(data):
            if event is None or event == b"message" or self.all_events:
                self.on_event(payload, t)
            elif event == b"error":
                self.acc.error = payload.decode("utf-8", "replace")[:500]

    def close(self) -> None:
        for event, payload in self.dec.close():
            if event is None or event == b"message" or self.all_events:
                self.on_event(payload, self.acc.chunk_ns[-1] if self.acc.chunk_ns else 0)


class BufferSink:
    """A non-streamed body: kept whole; the arrival of its last byte is the token time."""

    __slots__ = ("parts", "t0", "t_last_ns")

    def __init__(self, t0_ns: int) -> None:
        self.parts: list[bytes] = []
        self.t0 = t0_ns
        self.t_last_ns = 0

    def on_body(self, data: bytes, t_ns: int) -> None:
        self.parts.append(data)
        self.t_last_ns = t_ns - self.t0
