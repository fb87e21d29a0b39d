"""A pure, incremental Server-Sent Events decoder (no I/O).

Lines end at ``\\r\\n``, ``\\r`` or ``\\n`` and nowhere else (the SSE spec); in particular U+2028,
U+2029, U+0085 and the other characters `str.splitlines` splits on stay inside a line. An event is
dispatched at a blank line; several `data:` lines of one event are joined with ``\\n``; comments
(lines starting with ``:``) are dropped. Payloads stay bytes: JSON is parsed by the caller, lazily.

Hot path: `feed` is called once per network read. A read holding whole ``data: ...\\n\\n`` events and
no ``\\r`` (what every engine sends) takes the fast path: one split, no per-byte work.
"""

from __future__ import annotations

__all__ = ["SSEDecoder"]


class SSEDecoder:
    """Feed raw bytes; get back the complete events as `(event_type, data)` pairs.

    `event_type` is None for the default ("message") type. A partial line is kept until its end
    arrives, so a 1 MB data line split over many reads costs one join, not a quadratic copy.
    """

    __slots__ = ("_pending", "_data", "_event", "_cr")

    def __init__(self) -> None:
        self._pending: list[bytes] = []  # pieces of an unfinished line
        self._data: list[bytes] = []  # data lines of the event being built
        self._event: bytes | None = None
        self._cr = False  # the previous read ended with "\r": a following "\n" belongs to it

    def feed(self, chunk: bytes) -> list[tuple[bytes | None, bytes]]:
        if not chunk:
            return []
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if self._event is None and not self._data and b"\r" not in chunk:
            # Fast path (what every engine sends): whole `data: {...}` events of one line each,
            # maybe after the rest of a line the previous read began and before the start of one
            # the next read ends. Anything else goes the general way below, nothing changed.
            text = b"".join(self._pending) + chunk if self._pending else chunk
            last = text.rfind(b"\n\n")
            if last >= 0 and text.find(b"\n", last + 2) < 0:
                out: list[tuple[bytes | None, bytes]] = []
                for part in text[:last].split(b"\n\n"):
                    if part[:6] != b"data: " or b"\n" in part:
                        break
                    out.append((None, part[6:]))
                else:
                    self._pending.clear()
                    if last + 2 < len(text):
                        self._pending.append(text[last + 2 :])
                    return out
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                self._cr = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = chunk.split(b"\n")
        tail = lines.pop()  # after the last "\n": an unfinished line (often b"")
        if self._pending and lines:  # without lines, the whole read is part of a line that has not ended yet
            self._pending.append(lines[0])
            lines[0] = b"".join(self._pending)
            self._pending.clear()
        out = []
        for line in lines:
            if not line:
                if self._data:
                    data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                    out.append((self._event, data))
                    self._data = []
                self._event = None
                continue
            if line[:5] == b"data:":
                value = line[5:]
            elif line[:1] == b":":
                continue
            else:
                field, _sep, value = line.partition(b":")
                if field == b"event":
                    self._event = value[1:] if value[:1] == b" " else value
                continue  # id:, retry: and unknown fields do not concern a benchmark
            self._data.append(value[1:] if value[:1] == b" " else value)
        if tail:
            self._pending.append(tail)
        return out

    @property
    def idle(self) -> bool:
        """Between events: no partial line, no event being built."""
        return not (self._pending or self._data or self._cr) and self._event is None

    def close(self) -> list[tuple[bytes | None, bytes]]:
        """End of stream: an unterminated final line and event are still dispatched."""
        out = self.feed(b"\n\n") if (self._pending or self._data) else []
        self._pending.clear()
        return out

    @property
    def buffered_bytes(self) -> int:
        return sum(map(len, self._pending)) + sum(map(len, self._data))
