"""The fused fast path: a run of token chunks read in bulk, without a per-token parse (pure, no I/O).

What every engine sends while a stream runs is, per token, one HTTP chunk holding one SSE event of
one `data: ` line holding a JSON chunk that is byte-identical to the previous one but for its text
(same id, created, model, nulls). Once the stream's `StreamAccumulator` has seen such a chunk it
knows the bytes before and after the text (its *template*, checked there by a probe parse). Then a
read of such chunks needs no JSON parse: a short read is checked chunk by chunk with byte
comparisons; a long one is cut apart at its CRLFs, rebuilt under the template and compared with
what came in one C-level comparison (`_bulk_run`).

Exactness: a chunk is taken here only when the general path (chunked decoding, `SSEDecoder`,
`orjson.loads`, `StreamAccumulator.on_event`) would give the very same result: its size line
reads as the general path reads it and equals its payload's length, its payload is `data: ` +
template prefix + text + template suffix + a blank line, and the text holds no `"`, `\\`, control
character or invalid UTF-8 (so JSON reads it verbatim). The first chunk that is anything else ends
the run, and from there the general path takes over. Property tests hold the paths together.
"""

from __future__ import annotations

import re
from itertools import accumulate, chain, repeat
from operator import getitem
from typing import cast

__all__ = ["RunTemplate", "plain_text_chars", "token_run"]

# a JSON string body read verbatim: no quote, no backslash, no control character
_PLAIN = re.compile(rb'[^"\\\x00-\x1f]*\Z').match


class _SizeLines(dict[int, bytes]):
    """chunk length -> the size line a server writes for it (lowercase hex, no leading zeros)."""

    def __missing__(self, n: int) -> bytes:
        line = self[n] = b"%x" % n
        return line


_SIZE_LINE = _SizeLines()
_FEW = 4  # a read of at most this many template chunks goes chunk by chunk (less set-up cost)


class RunTemplate:
    """What a stream's plain token chunks look like on the wire, around their text."""

    __slots__ = ("head", "tail", "text", "before_text", "after_text", "min_size", "few_bytes")

    def __init__(self, pre: bytes, post: bytes) -> None:
        self.head = b"data: " + pre  # a payload (between the chunk's CRLFs, no blank line) starts so
        self.tail = post + b"\n\n"  # and ends so
        self.text = slice(len(self.head), -len(self.tail))
        self.before_text = b"\r\n" + self.head  # after a chunk's size line
        self.after_text = self.tail + b"\r\n"  # to the next chunk's size line
        self.min_size = len(self.head) + len(self.tail)  # a payload with an empty text
        # a read longer than this holds more than _FEW chunks of short texts: `_bulk_run` is cheaper
        self.few_bytes = _FEW * (self.min_size + 12)


def plain_text_chars(text: bytes) -> int:
    """Characters in the body of a JSON string that needs no unescaping; -1 when it does (or is
    not valid UTF-8), i.e. when only a real JSON parse can say what it holds."""
    if _PLAIN(text) is None:
        return -1
    if text.isascii():
        return len(text)
    try:
        return len(text.decode())
    except UnicodeDecodeError:
        return -1


def token_run(data: bytes, pos: int, tpl: RunTemplate) -> tuple[int, list[int]]:
    """The run of whole template chunks at `data[pos:]` (chunked framing, `pos` at a size line).

    Returns (the position just past the run, each chunk's text length in characters, 0 for an
    empty text). (pos, []) when the first chunk is not one.

    A read of a few chunks (what a client keeping up with its streams gets) goes chunk by chunk;
    a longer one goes through `_bulk_run`.
    """
    n = len(data)
    if n - pos > tpl.few_bytes:
        return _bulk_run(data, pos, tpl)
    before, after = tpl.before_text, tpl.after_text
    lb, la = len(before), len(after)
    chars: list[int] = []
    find = data.find
    while (eol := find(b"\r\n", pos)) >= 0:
        try:
            size = int(data[pos:eol], 16)  # as the general path reads a size line
        except ValueError:
            break
        end = eol + 4 + size  # past the chunk's closing CRLF
        if size < tpl.min_size or end > n or not data.startswith(before, eol) or not data.startswith(after, end - la):
            break
        c = plain_text_chars(data[eol + lb : end - la])
        if c < 0:
            break
        chars.append(c)
        pos = end
    return pos, chars


def _bulk_run(data: bytes, pos: int, tpl: RunTemplate) -> tuple[int, list[int]]:
    """`token_run` for a long read, with no per-chunk Python.

    How: split at CRLF into (size line, payload) pairs, cut each payload's text out where the
    template puts it, rebuild the bytes those texts make under the template (canonical size lines
    included) and compare with what came: equal means every chunk is a template chunk. Else a
    binary search on prefixes finds the longest run that is (usually all but a finishing chunk).
    """
    parts = (data[pos:] if pos else data).split(b"\r\n")
    k = (len(parts) - 1) // 2  # (size line, payload) pairs with their closing CRLF read
    if k <= 0:
        return pos, []
    payloads = parts[1 : 2 * k : 2]
    texts = cast("list[bytes]", list(map(getitem, payloads, repeat(tpl.text))))  # slices of bytes are bytes
    sizes = list(map(_SIZE_LINE.__getitem__, map(len, payloads)))
    rebuilt = b"".join(chain.from_iterable(zip(sizes, repeat(tpl.before_text), texts, repeat(tpl.after_text))))
    ends: list[int] | None = None
    if not data.startswith(rebuilt, pos):
        ends = _chunk_ends(sizes, texts, tpl)
        lo, hi = 0, k  # the first lo chunks match, the first hi do not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if data.startswith(rebuilt[: ends[mid - 1]], pos):
                lo = mid
            else:
                hi = mid
        if lo == 0:
            return pos, []
        texts = texts[:lo]
    joined = b"".join(texts)
    if _PLAIN(joined) is not None and joined.isascii():
        chars = list(map(len, texts))
        if ends is None:
            return pos + len(rebuilt), chars
    else:  # some text needs a closer look: stop before the first one only a parse can read
        chars = []
        for t in texts:
            c = plain_text_chars(t)
            if c < 0:
                break
            chars.append(c)
        if not chars:
            return pos, []
        if ends is None:
            ends = _chunk_ends(sizes, texts, tpl)
    return pos + ends[len(chars) - 1], chars


def _chunk_ends(sizes: list[bytes], texts: list[bytes], tpl: RunTemplate) -> list[int]:
    """Where each rebuilt chunk ends, from the run's start."""
    fixed = len(tpl.before_text) + len(tpl.after_text)
    return list(accumulate(len(s) + len(t) + fixed for s, t in zip(sizes, texts)))
