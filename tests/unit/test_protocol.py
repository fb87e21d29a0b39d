"""Chunk interpretation: which chunks start TTFT, token counts, the known bugs pinned shut."""

from __future__ import annotations

import orjson
import pytest

from servescope.client.conn import HttpError
from servescope.client.openai import (
    MalformedResponse,
    StreamAccumulator,
    allocate_tokens,
    build_body,
    interpret_response,
    normalize_base_url,
)
from servescope.client.outcome import exception_kind


def chat(delta: dict | None = None, usage: dict | None = None, choices: bool = True, finish=None) -> bytes:
    obj: dict = {"id": "x", "object": "chat.completion.chunk"}
    obj["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []
    if usage is not None:
        obj["usage"] = usage
    return orjson.dumps(obj)


def test_role_only_first_chunk_does_not_start_ttft() -> None:
    acc = StreamAccumulator("chat")
    acc.on_event(chat({"role": "assistant", "content": None}), 100)
    acc.on_event(chat({"role": "assistant", "content": ""}), 150)
    acc.on_event(chat({"content": "Hello"}), 200)
    assert acc.chunk_ns == [200]
    assert acc.t_first_answer_ns == 200


def test_reasoning_first_chunk_starts_ttft_but_not_ttfat() -> None:
    acc = StreamAccumulator("chat")
    acc.on_event(chat({"reasoning_content": "Let me think"}), 100)
    acc.on_event(chat({"reasoning": " more"}), 120)  # newer vLLM field name
    acc.on_event(chat({"content": "42"}), 300)
    assert acc.chunk_ns == [100, 120, 300]
    assert acc.t_first_answer_ns == 300
    res = acc.finish()
    assert res.reasoning_tokens == 2 and res.output_tokens == 3


def test_usage_only_final_chunk_counts_tokens_not_time() -> None:
    acc = StreamAccumulator("chat")
    acc.on_event(chat({"content": "a"}), 10)
    acc.on_event(chat({"content": "b"}), 20)
    acc.on_event(chat(usage={"prompt_tokens": 5, "completion_tokens": 2}, choices=False), 999)
    acc.on_event(b"[DONE]", 1000)
    res = acc.finish()
    assert acc.chunk_ns == [10, 20] and acc.done
    assert (res.output_tokens, res.output_tokens_source, res.input_tokens) == (2, "usage", 5)


def test_tool_call_delta_is_a_token_carrying_chunk() -> None:
    acc = StreamAccumulator("chat")
    acc.on_event(chat({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": '{"a"'}}]}), 50)
    assert acc.chunk_ns == [50]


def test_three_token_chunks_allocated_from_usage() -> None:
    acc = StreamAccumulator("completions")
    for i in range(4):
        acc.on_event(orjson.dumps({"choices": [{"index": 0, "text": " a b c"}]}), i * 60)
    acc.on_event(orjson.dumps({"choices": [], "usage": {"completion_tokens": 12}}), 999)
    assert acc.finish().chunk_tokens == [3, 3, 3, 3]


def test_allocation_sums_to_usage_and_follows_text_length() -> None:
    alloc = allocate_tokens([4, 12, 4], 10)
    assert sum(alloc) == 10 and alloc[1] > alloc[0]
    assert allocate_tokens([5, 5], 1) == [1, 1]  # never a chunk with zero tokens
    assert allocate_tokens([], 7) == []


def test_no_usage_falls_back_to_counted_chunks() -> None:
    acc = StreamAccumulator("completions")
    acc.on_event(orjson.dumps({"choices": [{"text": "a"}]}), 1)
    acc.on_event(orjson.dumps({"choices": [{"text": "b"}]}), 2)
    res = acc.finish()
    assert (res.output_tokens, res.output_tokens_source) == (2, "counted")


def test_in_band_error_object_is_kept() -> None:
    acc = StreamAccumulator("chat")
    acc.on_event(orjson.dumps({"error": {"message": "boom", "code": 500}}), 1)
    assert acc.finish().error == "boom"


def test_non_streamed_chat_with_reasoning() -> None:
    body = orjson.dumps(
        {
            "choices": [{"message": {"role": "assistant", "reasoning_content": "hmm", "content": "ok"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 7}},
        }
    )
    res, has_text, has_answer = interpret_response(body, "chat")
    assert (res.output_tokens, res.reasoning_tokens, has_text, has_answer) == (9, 7, True, True)


def test_request_body_asks_for_exact_lengths_and_usage() -> None:
    body = build_body(api="chat", model="m", prompt="hi", max_tokens=64)
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["max_tokens"] == 64 and body["ignore_eos"] is True and body["min_tokens"] == 64
    assert body["stream_options"] == {"include_usage": True}
    plain = build_body(
        api="completions",
        model="m",
        prompt="hi",
        max_tokens=8,
        ignore_eos=False,
        min_tokens=False,
        extra_body={"temperature": 0},
    )
    assert "ignore_eos" not in plain and "min_tokens" not in plain and plain["temperature"] == 0


def test_base_url_with_or_without_v1() -> None:
    for url in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/"):
        assert normalize_base_url(url) == "http://h:1/v1"


@pytest.mark.parametrize(
    "payload",
    [
        b"[1, 2]",
        b'{"choices": 5}',
        b'{"choices": [7]}',
        b'{"choices": "ab"}',
        b'{"choices": [{"delta": {"content": 3}}]}',
        b'{"choices": {"a": 1}}',
    ],
)
def test_json_of_the_wrong_shape_is_the_servers_malformed_data(payload: bytes) -> None:
    with pytest.raises(MalformedResponse):
        StreamAccumulator("chat").on_event(payload, 0)
    with pytest.raises(MalformedResponse):
        interpret_response(payload.replace(b"delta", b"message"), "chat")


def test_a_usage_of_another_type_is_no_usage() -> None:
    acc = StreamAccumulator("completions")
    acc.on_event(b'{"choices": [{"text": "hi"}], "usage": [1]}', 5)
    assert acc.finish().output_tokens_source == "counted"
    acc.on_event(b'{"choices": [], "usage": {"completion_tokens": 3, "completion_tokens_details": 7}}', 6)
    assert acc.finish().output_tokens == 3


def _raised(exc: Exception) -> Exception:
    try:
        raise exc
    except Exception as e:
        return e


def test_only_the_servers_bytes_are_malformed_sse_the_rest_of_ours_is_client_error() -> None:
    try:
        orjson.loads(b"{nope")
    except orjson.JSONDecodeError as e:
        decode_error = e
    assert exception_kind(decode_error, got_tokens=True)[0] == "malformed_sse"
    assert exception_kind(MalformedResponse("x"), got_tokens=True)[0] == "malformed_sse"
    kind, detail = exception_kind(_raised(ValueError("our own")), got_tokens=True)
    assert kind == "client_error" and detail.startswith("ValueError: our own (at test_protocol.py:")
    assert exception_kind(_raised(KeyError("k")), got_tokens=False)[0] == "client_error"
    assert exception_kind(HttpError("closed"), got_tokens=False) == ("reset", "closed")
    assert exception_kind(ConnectionRefusedError(111, "refused"), got_tokens=False)[0] == "connect"
    assert exception_kind(ConnectionResetError(104, "reset"), got_tokens=True)[0] == "reset"
