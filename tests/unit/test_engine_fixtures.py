"""Replay recorded/written SSE streams of engines that cannot run here through the client's parser.

Each `tests/fixtures/engines/<engine>_<api>_<case>.sse` holds the raw bytes an engine sends; its sidecar
`.json` names the source (engine code/docs it was written from, or "recorded") and the parse expected
by hand: which data event starts TTFT and on which channel, the first answer event, output / reasoning /
input tokens, whether `data: [DONE]` is sent, the finish reason and the answer text.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import orjson
import pytest

from servescope.client.openai import StreamAccumulator
from servescope.client.sse import SSEDecoder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"
CASES = sorted(p.stem for p in FIXTURES.glob("*.sse"))
ENGINES = {"vllm", "sglang", "trtllm", "tgi", "ollama", "litellm", "llamacpppython", "llamacpp", "hfserve"}


def _load(name: str) -> tuple[bytes, dict]:
    raw = (FIXTURES / f"{name}.sse").read_bytes()
    side = json.loads((FIXTURES / f"{name}.json").read_text())
    return raw, side


def _splits(raw: bytes, mode: str) -> list[bytes]:
    """The same bytes as the network might deliver them: whole, byte by byte, or random reads."""
    if mode == "whole":
        return [raw]
    if mode == "bytewise":
        return [raw[i : i + 1] for i in range(len(raw))]
    rng = random.Random(len(raw))
    out, i = [], 0
    while i < len(raw):
        n = rng.randint(1, 97)
        out.append(raw[i : i + n])
        i += n
    return out


def _replay(raw: bytes, api: str, mode: str) -> tuple[StreamAccumulator, list[bytes]]:
    dec = SSEDecoder()
    acc = StreamAccumulator(api)
    payloads: list[bytes] = []
    for piece in _splits(raw, mode):
        for _event, data in dec.feed(piece):
            payloads.append(data)
    for _event, data in dec.close():
        payloads.append(data)
    for index, data in enumerate(payloads):
        acc.on_event(data, index)  # the "timestamp" is the data event's index
    return acc, payloads


def _text(payloads: list[bytes], api: str) -> str:
    out = []
    for data in payloads:
        if data == b"[DONE]":
            continue
        for choice in orjson.loads(data).get("choices") or ():
            out.append((choice.get("delta") or {}).get("content") or "" if api == "chat" else choice.get("text") or "")
    return "".join(out)


def test_fixture_set_is_complete() -> None:
    assert len(CASES) >= 15
    engines = {c.split("_", 1)[0] for c in CASES}
    assert {"vllm", "sglang", "trtllm", "tgi", "ollama", "litellm"} <= engines
    assert engines <= ENGINES
    for name in CASES:
        assert (FIXTURES / f"{name}.json").exists(), f"{name}.sse has no sidecar"


@pytest.mark.parametrize("mode", ["whole", "bytewise", "random"])
@pytest.mark.parametrize("name", CASES)
def test_fixture_parses_as_expected(name: str, mode: str) -> None:
    raw, side = _load(name)
    exp = side["expect"]
    assert side["source"], "every fixture names where its shape comes from"
    acc, payloads = _replay(raw, exp["api"], mode)

    assert acc.done is exp["done"]
    assert len(acc.chunk_ns) == exp["token_chunks"]
    assert acc.chunk_ns[0] == exp["first_token_event"], "TTFT started on the wrong chunk"
    assert acc.t_first_answer_ns == exp["first_answer_event"], "TTFAT started on the wrong chunk"
    assert acc.finish_reason == exp["finish_reason"]
    res = acc.finish()
    assert res.error is None
    assert res.output_tokens == exp["output_tokens"]
    assert res.output_tokens_source == exp["output_tokens_source"]
    assert res.reasoning_tokens == exp["reasoning_tokens"]
    assert res.input_tokens == exp["input_tokens"]
    assert sum(res.chunk_tokens) == exp["output_tokens"]
    assert _text(payloads, exp["api"]) == exp["text"]


@pytest.mark.parametrize("name", CASES)
def test_first_token_channel(name: str) -> None:
    """The chunk that starts TTFT carries text on the channel the sidecar names."""
    raw, side = _load(name)
    exp = side["expect"]
    acc, payloads = _replay(raw, exp["api"], "whole")
    first = orjson.loads(payloads[acc.chunk_ns[0]])["choices"][0]
    if exp["api"] == "completions":
        assert exp["first_channel"] == "text" and first["text"]
    else:
        assert first["delta"].get(exp["first_channel"]), first


def test_chunks_that_never_start_ttft_are_present() -> None:
    """The fixtures do exercise the traps: role-only chunks, usage-only chunks, comments, CRLF, no [DONE]."""
    blobs = {name: _load(name)[0] for name in CASES}
    assert any(b'"choices":[]' in b for b in blobs.values())
    assert any(b'"delta":{"role":"assistant","content":""}' in b for b in blobs.values())
    assert any(b"\r\n" in b for b in blobs.values())
    assert any(b"\n:\n" in b or b.startswith(b":") for b in blobs.values())
    assert any(b.startswith(b"data:{") for b in blobs.values())  # no space after the colon
    assert any(not _load(name)[1]["expect"]["done"] for name in CASES)  # a stream without [DONE]
