"""The Responses and Messages wires (client/typedapis.py): bodies, streamed events in the shapes vLLM 0.32
sends (a Responses answer in coarse deltas, a Messages answer one token per delta), whole bodies, and
the emulator serving both (emulator/typedwire.py) read back by the client."""

from __future__ import annotations

import orjson
import pytest

from servescope.client.openai import build_body, interpret_response, new_accumulator
from servescope.client.sinks import StreamSink
from servescope.client.typedapis import EventAccumulator


def _ev(name: str, obj: dict) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (name.encode(), orjson.dumps({"type": name, **obj}))


def responses_stream(deltas: list[str], reasoning: list[str], usage: dict) -> list[bytes]:
    out = [_ev("response.created", {"response": {"status": "in_progress"}, "sequence_number": 0})]
    out.append(_ev("response.in_progress", {"response": {}, "sequence_number": 1}))
    out.append(_ev("response.output_item.added", {"item": {"type": "message"}, "sequence_number": 2}))
    for k, r in enumerate(reasoning):
        out.append(_ev("response.reasoning_text.delta", {"delta": r, "sequence_number": 3 + k}))
    for k, d in enumerate(deltas):
        out.append(_ev("response.output_text.delta", {"delta": d, "logprobs": [], "sequence_number": 10 + k}))
    out.append(_ev("response.output_text.done", {"text": "".join(deltas), "sequence_number": 50}))
    out.append(_ev("response.completed", {"response": {"status": "completed", "usage": usage}, "sequence_number": 51}))
    return out


def feed(api: str, events: list[bytes]) -> EventAccumulator:
    acc = new_accumulator(api)
    assert isinstance(acc, EventAccumulator)
    sink = StreamSink(acc, 0)
    for k, e in enumerate(events):
        sink.on_body(e, 1000 * (k + 1))  # event k arrives at t = 1000 (k + 1) ns
    sink.close()
    return acc


def test_responses_coarse_deltas_take_usages_count_spread_by_text() -> None:
    # vLLM: 8 tokens as 2 output_text deltas
    usage = {"input_tokens": 12, "output_tokens": 8, "output_tokens_details": {"reasoning_tokens": 0}}
    acc = feed("responses", responses_stream([" a b c", " d e f g h"], [], usage))
    res = acc.finish()
    assert acc.done and acc.finish_reason == "completed"
    assert res.output_tokens == 8 and res.output_tokens_source == "usage" and res.input_tokens == 12
    assert res.chunk_tokens == [3, 5]  # 1 each, then the 6 left by text length 6:10 (largest remainder)
    assert acc.chunk_ns == [4000, 5000]  # the two deltas: TTFT starts at the first, not at response.created
    assert acc.t_first_answer_ns == 4000


def test_responses_reasoning_channel_and_incomplete_status() -> None:
    usage = {"input_tokens": 5, "output_tokens": 6, "output_tokens_details": {"reasoning_tokens": 4}}
    events = responses_stream([" x", " y"], ["th", "in", "k"], usage)
    events[-1] = _ev(
        "response.completed",
        {"response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "usage": usage}},
    )
    acc = feed("responses", events)
    res = acc.finish()
    assert acc.chunk_chars == [-2, -2, -1, 2, 2]
    assert acc.chunk_ns[0] == 4000 and acc.t_first_answer_ns == 7000  # TTFT at reasoning, TTFAT at the answer
    assert res.reasoning_tokens == 4 and res.output_tokens == 6 and acc.finish_reason == "max_output_tokens"


def messages_stream(texts: list[str], thinking: list[str], out_tokens: int) -> list[bytes]:
    out = [_ev("message_start", {"message": {"usage": {"input_tokens": 9, "output_tokens": 1}}})]
    out.append(_ev("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": ""}}))
    out += [
        _ev("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": t}}) for t in thinking
    ]
    out.append(_ev("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}}))
    out.append(_ev("ping", {}))
    out += [_ev("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": t}}) for t in texts]
    out.append(_ev("content_block_stop", {"index": 1}))
    out.append(_ev("message_delta", {"delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": out_tokens}}))
    out.append(_ev("message_stop", {}))
    return out


def test_messages_one_token_per_delta_usage_from_message_delta() -> None:
    acc = feed("messages", messages_stream([f" t{i}" for i in range(8)], ["hm"], 9))
    res = acc.finish()
    assert acc.done and acc.finish_reason == "max_tokens"
    assert res.input_tokens == 9  # message_start's input_tokens; its output_tokens (1) is not the count
    assert res.output_tokens == 9 and res.output_tokens_source == "usage"
    assert res.chunk_tokens == [1] * 9 and res.reasoning_tokens == 1  # no reasoning count in usage: allocated
    assert acc.chunk_ns[0] == 3000 and acc.t_first_answer_ns == 6000


def test_in_band_errors_are_kept() -> None:
    acc = feed("messages", [_ev("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}})])
    assert acc.error == "Overloaded" and not acc.chunk_ns
    acc = feed("responses", [_ev("response.failed", {"response": {"error": {"message": "boom"}}})])
    assert acc.error == "boom"


def test_bodies() -> None:
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    r = build_body(api="responses", model="m", prompt=msgs, max_tokens=7, stream=True)
    assert r == {
        "model": "m",
        "stream": True,
        "input": msgs,
        "store": False,
        "max_output_tokens": 7,
        "ignore_eos": True,
    }
    m = build_body(api="messages", model="m", prompt=msgs, max_tokens=7, stream=False, extra_body={"top_k": 1})
    assert m == {"model": "m", "stream": False, "system": "sys", "messages": msgs[1:], "max_tokens": 7, "top_k": 1}


def test_whole_bodies() -> None:
    body = {
        "output": [
            {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "abc"}], "summary": []},
            {"type": "message", "content": [{"type": "output_text", "text": "hello"}]},
        ],
        "usage": {"input_tokens": 3, "output_tokens": 8, "output_tokens_details": {"reasoning_tokens": 2}},
    }
    res, any_text, answer = interpret_response(orjson.dumps(body), "responses")
    assert (res.output_tokens, res.input_tokens, res.reasoning_tokens, any_text, answer) == (8, 3, 2, True, True)
    msg = {"content": [{"type": "text", "text": "hey"}], "usage": {"input_tokens": 4, "output_tokens": 5}}
    res, any_text, answer = interpret_response(orjson.dumps(msg), "messages")
    assert (res.output_tokens, res.input_tokens, any_text, answer) == (5, 4, True, True)
    err = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
    res, any_text, _ = interpret_response(orjson.dumps(err), "messages")
    assert res.error == "bad" and not any_text


@pytest.mark.parametrize("api", ["responses", "messages"])
@pytest.mark.parametrize("reasoning", [0, 3])
def test_the_emulators_stream_reads_back_exactly(api: str, reasoning: int) -> None:
    """The emulator's framed bytes (HTTP chunks) decoded and fed event by event: the count is its usage,
    one chunk per token, the reasoning share as planned, the stream ends properly."""
    from servescope.emulator.stream import Framer, Stream
    from servescope.emulator.tokenizer import get_tokenizer
    from servescope.emulator.typedwire import TypedFrames

    tok = get_tokenizer()
    fr = Framer(tok, reasoning=True, created=1, model="tiny")
    st = Stream()
    st.rid, st.api, st.chat, st.prompt_len = "r1", api, True, 17
    st.ids, st.n_total, st.n_reason, st.finish = list(range(100, 110)), 10, reasoning, "length"
    st.typed = TypedFrames(api=api, rid="r1", created=1, model="tiny", n_reason=reasoning)
    wire = b"".join(fr.chunk(st, i) for i in range(10))
    payload = b""
    pos = 0
    while True:  # undo the chunked framing
        eol = wire.index(b"\r\n", pos)
        size = int(wire[pos:eol], 16)
        if size == 0:
            break
        payload += wire[eol + 2 : eol + 2 + size]
        pos = eol + 4 + size
    acc = feed(api, [payload])
    res = acc.finish()
    assert acc.done and res.output_tokens == 10 and res.input_tokens == 17
    assert res.chunk_tokens == [1] * 10 and sum(1 for c in acc.chunk_chars if c < 0) == reasoning
    whole = orjson.loads(fr.full_body(st))
    again, _, answer = interpret_response(orjson.dumps(whole), api)
    assert again.output_tokens == 10 and answer
    if api == "responses":
        seqs = [
            orjson.loads(line[6:])["sequence_number"] for line in payload.split(b"\n") if line.startswith(b"data: ")
        ]
        assert seqs == list(range(len(seqs)))  # every event numbered, in order, from 0
