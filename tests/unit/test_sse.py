"""The SSE decoder: line endings per the spec, partial reads, big lines, no splitting on U+2028."""

from __future__ import annotations

from itertools import pairwise

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servescope.client.sse import SSEDecoder


def feed_all(chunks: list[bytes]) -> list[tuple[bytes | None, bytes]]:
    dec = SSEDecoder()
    out = []
    for c in chunks:
        out += dec.feed(c)
    return out + dec.close()


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_each_line_ending_the_spec_allows(eol: bytes) -> None:
    raw = b"data: 1" + eol + eol + b"data: 2" + eol + eol
    assert feed_all([raw]) == [(None, b"1"), (None, b"2")]


def test_crlf_split_across_reads_is_one_line_end() -> None:
    # "\r" ends one read and "\n" starts the next: one line end, not an empty line.
    assert feed_all([b"data: a\r", b"\ndata: b\r\n\r\n"]) == [(None, b"a\nb")]


def test_byte_by_byte_equals_whole() -> None:
    raw = b'data: {"x": 1}\n\n: comment\nevent: error\ndata: oops\n\ndata: [DONE]\n\n'
    whole = feed_all([raw])
    assert whole == [(None, b'{"x": 1}'), (b"error", b"oops"), (None, b"[DONE]")]
    assert feed_all([raw[i : i + 1] for i in range(len(raw))]) == whole


def test_unicode_line_separators_stay_inside_the_line() -> None:
    text = "a\u2028b\u2029c\u0085d\x1ce"
    raw = b"data: " + orjson.dumps({"t": text}) + b"\n\n"
    ((_ev, data),) = feed_all([raw])
    assert orjson.loads(data)["t"] == text


def test_one_megabyte_line_over_many_reads() -> None:
    payload = b'{"t": "' + b"x" * (1 << 20) + b'"}'
    raw = b"data: " + payload + b"\n\n"
    chunks = [raw[i : i + 4096] for i in range(0, len(raw), 4096)]
    assert feed_all(chunks) == [(None, payload)]


def test_multi_line_data_joined_and_no_space_variant() -> None:
    assert feed_all([b"data:a\ndata: b\n\n"]) == [(None, b"a\nb")]


def test_unterminated_last_event_is_dispatched_on_close() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"data: tail") == []
    assert dec.close() == [(None, b"tail")]


_PIECES = [
    b'data: {"a": 1}\n\n',
    b"data: [DONE]\n\n",
    b"event: error\n",
    b"data: x\n",
    b": keep-alive\n\n",
    b"data:y\n\n",
    b"\n",
    b"data: two\ndata: lines\n\n",
    b"id: 7\n",
    b"data: \xe2\x80\xa8\n\n",
]


@given(st.lists(st.sampled_from(_PIECES), max_size=12), st.lists(st.integers(0, 200), max_size=6))
def test_any_split_of_any_stream_decodes_like_byte_by_byte(pieces: list[bytes], cuts: list[int]) -> None:
    """The whole-events fast path and the general path agree for every way a stream can be cut."""
    raw = b"".join(pieces)
    reference = feed_all([raw[i : i + 1] for i in range(len(raw))])  # never takes the fast path
    bounds = sorted({min(c, len(raw)) for c in cuts} | {0, len(raw)})
    assert feed_all([raw[a:b] for a, b in pairwise(bounds)]) == reference
    assert feed_all([raw]) == reference


def test_a_read_ending_after_a_whole_line_of_an_unfinished_event() -> None:
    # The second read's "data: b\n" is a complete line of an event that the third read finishes.
    assert feed_all([b"data: a\n\ndata: b\n", b"data: c\n\n"]) == [(None, b"a"), (None, b"b\nc")]
