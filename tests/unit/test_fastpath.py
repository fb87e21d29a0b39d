"""The fast paths (`client.fastpath` in bulk, `StreamAccumulator`'s template per event) against
parsing every payload: for any stream and any split of it into reads, the client records the same."""

from __future__ import annotations

import asyncio
import json
import random
from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servescope.client.conn import Connection
from servescope.client.fastpath import (
    RunTemplate,
    _bulk_run,
    plain_text_chars,
    token_run,
)
from servescope.client.openai import StreamAccumulator
from servescope.client.sinks import StreamSink

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class _NullTransport:
    def write(self, data: bytes) -> None:
        pass

    def abort(self) -> None:
        pass


class _GeneralOnly:
    """The same sink without its bulk path: every chunk goes through SSE + orjson."""

    def __init__(self, sink: StreamSink) -> None:
        self.on_body = sink.on_body


class _Counting(_GeneralOnly):
    """The sink with its bulk path, counting the tokens that path took."""

    def __init__(self, sink: StreamSink) -> None:
        super().__init__(sink)
        self.sink = sink
        self.taken = 0

    def on_chunks(self, data: bytes, pos: int, t_ns: int) -> int:
        before = len(self.sink.acc.chunk_ns)
        end = self.sink.on_chunks(data, pos, t_ns)
        self.taken += len(self.sink.acc.chunk_ns) - before
        return end


def _drive(wire: bytes, cuts: list[int], api: str, bulk: bool) -> tuple[Any, ...]:
    bounds = sorted({min(c, len(wire)) for c in cuts} | {0, len(wire)})

    async def go() -> tuple[Any, ...]:
        acc = StreamAccumulator(api)
        if not bulk:
            acc._tries = 0  # the reference: never learns a template, so every payload is parsed
        sink = StreamSink(acc, 0)
        wrapper = _Counting(sink) if bulk else _GeneralOnly(sink)
        conn = Connection(None)  # type: ignore[arg-type]
        conn.transport = _NullTransport()  # type: ignore[assignment]
        done = conn.start(b"", b"", wrapper)  # type: ignore[arg-type]
        for i, (a, b) in enumerate(pairwise(bounds)):
            conn.on_data(wire[a:b], 1000 * (i + 1))  # each read its own arrival time
        exc = done.exception() if done.done() else None
        state = (
            acc.chunk_ns,
            acc.chunk_chars,
            acc.t_first_answer_ns,
            acc.usage,
            acc.done,
            acc.error,
            acc.finish_reason,
            type(exc).__name__ if exc else None,
            done.done(),
        )
        return state, getattr(wrapper, "taken", 0)

    return asyncio.run(go())


def _frame(payloads: list[bytes], upper: set[int], merge: set[int], split: set[int]) -> bytes:
    """SSE events in HTTP chunks: one per chunk, except where told to use uppercase hex, share a
    chunk with the next event, or spread over two chunks."""
    events = [b"data: " + p + b"\n\n" for p in payloads]
    chunks: list[bytes] = []
    i = 0
    while i < len(events):
        ev = events[i]
        if i in merge and i + 1 < len(events):
            ev += events[i + 1]
            i += 1
        if i in split and len(ev) > 2:
            chunks += [ev[: len(ev) // 2], ev[len(ev) // 2 :]]
        else:
            chunks.append(ev)
        i += 1
    wire = b""
    for j, c in enumerate(chunks):
        wire += (b"%X" if j in upper else b"%x") % len(c) + b"\r\n" + c + b"\r\n"
    return wire + b"0\r\n\r\n"


_PLAIN_CHARS = list("ab z0.,/")
_ODD_CHARS = ['"', "\\", "\n", "\t", "\x01", "\u00e9", "\u4e2d", "\U0001f600", "\u2028"]
# mostly texts a template can take verbatim, some that need a parse
_TEXT = st.one_of(
    st.text(alphabet=st.sampled_from(_PLAIN_CHARS), max_size=4),
    st.text(alphabet=st.sampled_from(_PLAIN_CHARS + _ODD_CHARS), max_size=4),
)
_KINDS = ["tok", "reason", "role", "created", "usage", "finish", "bad", "done", "raw"]


@st.composite
def _streams(draw: st.DrawFn) -> tuple[str, list[bytes]]:
    api = draw(st.sampled_from(["completions", "chat"]))
    spaced = draw(st.booleans())  # Python's json.dumps separators (", ", ": ") instead of compact
    ascii_only = draw(st.booleans())  # non-ASCII escaped as \\uXXXX

    def enc(obj: dict[str, Any]) -> bytes:
        if spaced or ascii_only:
            return json.dumps(obj, ensure_ascii=ascii_only, separators=(", ", ": ") if spaced else (",", ":")).encode()
        return orjson.dumps(obj)

    created = 1700000000
    payloads: list[bytes] = []
    # runs of one kind, so that templates are learned and then used
    runs = draw(st.lists(st.tuples(st.sampled_from(_KINDS), st.integers(1, 8)), max_size=8))
    kinds = [kind for kind, n in runs for _ in range(n)]
    for kind in kinds:
        text = draw(_TEXT)
        if kind == "created":  # a field that changes mid-stream: the template no longer fits
            created += 1
            kind = "tok"
        if kind == "raw":  # bytes written by hand: the text escaped where JSON needs no escape, and
            # a plain "ab" (or another text) under the same key elsewhere: no template may be cut there
            other = (
                b"ab" if draw(st.booleans()) else text.encode("ascii", "ignore").replace(b"\\", b"").replace(b'"', b"")
            )
            key = b"text" if api == "completions" else b"content"
            where = b'"text":"a\\u0062"' if api == "completions" else b'"delta":{"content":"a\\u0062"}'
            payloads.append(b'{"id":"x","choices":[{"index":0,%s,"x":{"%s":"%s"}}]}' % (where, key, other))
            continue
        if kind == "bad":
            payloads.append(b'{"choices": [')
            continue
        if kind == "done":
            payloads.append(b"[DONE]")
            continue
        base: dict[str, Any] = {"id": "cmpl-7", "object": "x", "created": created, "model": "m"}
        if kind == "usage":
            payloads.append(enc({**base, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}}))
            continue
        finish = "length" if kind == "finish" else None
        if api == "completions":
            choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        elif kind == "role":
            choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        elif kind == "reason":
            choice = {"index": 0, "delta": {"reasoning_content": text}, "finish_reason": finish}
        else:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
        payloads.append(enc({**base, "choices": [choice]}))
    return api, payloads


@settings(max_examples=300, deadline=None)
@given(
    _streams(),
    st.lists(st.integers(0, 6000), max_size=12),
    st.sets(st.integers(0, 30), max_size=3),
    st.sets(st.integers(0, 30), max_size=3),
    st.sets(st.integers(0, 30), max_size=3),
)
def test_bulk_path_records_exactly_what_the_general_path_records(stream, cuts, upper, merge, split) -> None:
    api, payloads = stream
    wire = HEAD + _frame(payloads, upper, merge, split)
    general, _ = _drive(wire, cuts, api, bulk=False)
    fast, _ = _drive(wire, cuts, api, bulk=True)
    assert fast == general


def _events(api: str, payloads: list[bytes], learn: bool) -> tuple[Any, ...]:
    acc = StreamAccumulator(api)
    if not learn:
        acc._tries = 0
    err = None
    for i, p in enumerate(payloads):
        try:
            acc.on_event(p, i)
        except ValueError as e:
            err = (i, type(e).__name__)
            break
    return (
        acc.chunk_ns,
        acc.chunk_chars,
        acc.t_first_answer_ns,
        acc.usage,
        acc.done,
        acc.error,
        acc.finish_reason,
        err,
    )


@settings(max_examples=300, deadline=None)
@given(_streams())
def test_template_path_per_event_records_exactly_what_parsing_records(stream) -> None:
    api, payloads = stream
    assert _events(api, payloads, learn=True) == _events(api, payloads, learn=False)


def test_a_plain_stream_read_in_bulk_goes_through_the_bulk_path() -> None:
    """Not just equal: the fast path is the one taking the tokens (else the test above proves little)."""
    payloads = [
        orjson.dumps({"id": "c", "choices": [{"index": 0, "text": f" w{i}", "finish_reason": None}]}) for i in range(64)
    ]
    payloads.append(orjson.dumps({"id": "c", "choices": [{"index": 0, "text": "!", "finish_reason": "length"}]}))
    wire = HEAD + _frame([*payloads, b"[DONE]"], set(), set(), set())
    cuts = [len(HEAD) + 200 * i for i in range(1, 4)] + [len(wire) // 2]
    (chunk_ns, chars, *_rest), taken = _drive(wire, cuts, "completions", bulk=True)
    assert len(chunk_ns) == 65 and chars[:3] == [3, 3, 3]
    assert taken >= 55, taken  # all but the chunks before the template and the finishing one


def test_token_run_stops_before_the_first_chunk_it_cannot_read_verbatim() -> None:
    tpl = RunTemplate(b'{"t":"', b'"}')

    def chunk(text: bytes) -> bytes:
        ev = b'data: {"t":"' + text + b'"}\n\n'
        return b"%x\r\n%s\r\n" % (len(ev), ev)

    good = chunk(b"ab") + chunk(b"\xc3\xa9") + chunk(b"")
    end, chars = token_run(good + chunk(b'q\\"') + chunk(b"cd"), 0, tpl)
    assert (end, chars) == (len(good), [2, 1, 0])
    assert token_run(b"xx" + good, 2, tpl) == (2 + len(good), [2, 1, 0])
    assert token_run(good[:-1], 0, tpl)[1] == [2, 1]  # the last chunk has not fully arrived
    assert token_run(b"5\r\nhello\r\n", 0, tpl) == (0, [])
    assert [plain_text_chars(t) for t in (b"abc", b"\xe4\xb8\xad", b"a\x1fb", b"\xff", b'"')] == [3, 1, -1, -1, -1]


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=12), st.integers(0, 60))
def test_chunk_by_chunk_and_bulk_runs_agree(texts: list[str], cut: int) -> None:
    """`token_run` reads a short run chunk by chunk and a long one in bulk: the same answer either way
    (JSON-escaped texts, so some runs stop early; the wire may end inside a chunk)."""
    few = RunTemplate(b'{"t":"', b'"}')
    few.few_bytes = 1 << 30  # always chunk by chunk
    wire = b""
    for t in texts:
        ev = b'data: {"t":' + orjson.dumps(t) + b"}\n\n"
        wire += b"%x\r\n%s\r\n" % (len(ev), ev)
    wire = wire[: max(0, len(wire) - cut)]
    assert token_run(wire, 0, few) == _bulk_run(wire, 0, few)


_ENGINES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"


@pytest.mark.parametrize("name", sorted(p.stem for p in _ENGINES.glob("*.sse")))
@pytest.mark.parametrize("cut_seed", [0, 1, 2])
def test_fast_paths_agree_on_every_engines_wire_format(name: str, cut_seed: int) -> None:
    """The recorded/written streams of nine engines (tests/fixtures/engines), each event in its own
    HTTP chunk as engines send them and each running chunk repeated (a long stream, so templates are
    learnt and used), over random reads: the fast paths record what parsing every event records."""
    raw = (_ENGINES / f"{name}.sse").read_bytes()
    api = json.loads((_ENGINES / f"{name}.json").read_text())["expect"]["api"]
    sep = b"\r\n\r\n" if b"\r\n\r\n" in raw else b"\n\n"
    events = [e + sep for e in raw.split(sep) if e.strip()]
    body = b""
    for ev in events:
        running = b'"finish_reason":null' in ev.replace(b" ", b"")
        for _ in range(24 if running else 1):
            body += b"%x\r\n%s\r\n" % (len(ev), ev)
    wire = HEAD + body + b"0\r\n\r\n"
    rng = random.Random(cut_seed)
    cuts = sorted(rng.randrange(len(wire)) for _ in range(rng.randint(0, 40)))
    general, _ = _drive(wire, cuts, api, bulk=False)
    fast, taken = _drive(wire, cuts, api, bulk=True)
    assert fast == general
    if name.split("_")[0] in ("vllm", "sglang", "trtllm") and "continuous_usage" not in name:
        assert taken > 0  # and the fast path did take part (usage in every chunk: it must not)
