"""The typed-event wires: the OpenAI Responses API (`/v1/responses`) and the Anthropic Messages API
(`/v1/messages`): request bodies, streamed events and whole bodies (pure, no I/O).

Both stream SSE events whose JSON carries its own `type` (and, from most servers, an `event:` line of
the same name). Which events count (docs/metrics.md, "Responses and Messages"):

- Responses: `response.output_text.delta` (answer), `response.reasoning_text.delta` and
  `response.reasoning_summary_text.delta` (reasoning), `response.function_call_arguments.delta`
  (a tool call) carry generated text; `response.completed` / `response.incomplete` end the stream
  with `response.usage` (`input_tokens`, `output_tokens`, `output_tokens_details.reasoning_tokens`);
  `response.failed` and `error` are in-band errors. `response.created`, `…in_progress`,
  `…output_item.added`, `…content_part.added` and the `…done` events carry no token.
- Messages: `content_block_delta` with a `text_delta` (answer), a `thinking_delta` (reasoning) or an
  `input_json_delta` (a tool call) carries generated text; `message_start` gives
  `message.usage.input_tokens`, `message_delta` gives `usage.output_tokens` (the whole output) and
  the stop reason, `message_stop` ends the stream; `error` is an in-band error. `ping`,
  `content_block_start` (empty text) and `content_block_stop` carry no token.

A delta may carry several tokens (vLLM sends a Responses answer in a few coarse deltas): the
output count is the usage's, spread over the deltas by text length as for chat chunks
(`openai.allocate_tokens`), so `tokens per chunk` says how coarse the stream was.

Usage is mapped to the chat names (`prompt_tokens`, `completion_tokens`,
`completion_tokens_details.reasoning_tokens`) so one `openai._result` serves every API.
"""

from __future__ import annotations

from typing import Any

import orjson

from servescope.client.openai import MalformedResponse, StreamAccumulator, StreamResult, result_of

__all__ = ["EventAccumulator", "TYPED_APIS", "build_typed_body", "interpret_typed", "usage_as_chat"]

TYPED_APIS = ("responses", "messages")

_RESPONSES_ANSWER = {"response.output_text.delta"}
_RESPONSES_REASONING = {"response.reasoning_text.delta", "response.reasoning_summary_text.delta"}
_RESPONSES_TOOL = {"response.function_call_arguments.delta"}
_RESPONSES_END = {"response.completed", "response.incomplete"}


def build_typed_body(
    *,
    api: str,
    model: str,
    prompt: str | list[dict[str, Any]],
    max_tokens: int | None,
    stream: bool,
    ignore_eos: bool,
    min_tokens: bool,
) -> dict[str, Any]:
    """The JSON body of one Responses or Messages request (before `--extra-body` is merged).

    Responses: `ignore_eos` is vLLM's extra field on its Responses route (its `ResponsesRequest`
    reads it; `min_tokens` it does not). Messages: vLLM's route maps the request onto chat and takes
    neither, and Anthropic's API refuses unknown fields, so none is sent: a response may end at EOS
    before `max_tokens`, and its usage says how long it was. `min_tokens` is never sent here."""
    del min_tokens  # (neither API has it)
    body: dict[str, Any] = {"model": model, "stream": stream}
    if api == "responses":
        body["input"] = prompt
        body["store"] = False  # a benchmark's responses are not kept (as vllm bench serve's openai-responses)
        if max_tokens is not None:
            body["max_output_tokens"] = max_tokens
            if ignore_eos:
                body["ignore_eos"] = True
        return body
    msgs = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    system = [m for m in msgs if m.get("role") == "system"]
    if system:  # the Messages API takes the system prompt beside the messages, not among them
        body["system"] = "\n".join(str(m.get("content") or "") for m in system)
        msgs = [m for m in msgs if m.get("role") != "system"]
    body["messages"] = msgs
    if max_tokens is not None:  # (required by the Messages API: a body without it is refused)
        body["max_tokens"] = max_tokens
    return body


def usage_as_chat(usage: Any) -> dict[str, Any] | None:
    """A Responses or Messages usage object in the chat names (None when it is not an object).
    Messages' `cache_read_input_tokens` and `cache_creation_input_tokens` are input tokens too."""
    if not isinstance(usage, dict):
        return None
    out: dict[str, Any] = {}
    inp = usage.get("input_tokens")
    if isinstance(inp, int):
        for extra in ("cache_read_input_tokens", "cache_creation_input_tokens"):
            more = usage.get(extra)
            if isinstance(more, int):
                inp += more
        out["prompt_tokens"] = inp
    outp = usage.get("output_tokens")
    if isinstance(outp, int):
        out["completion_tokens"] = outp
    details = usage.get("output_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("reasoning_tokens"), int):
        out["completion_tokens_details"] = {"reasoning_tokens": details["reasoning_tokens"]}
    return out


class EventAccumulator(StreamAccumulator):
    """`StreamAccumulator` for the typed-event APIs: same fields, same `finish`; no template (a
    Responses event carries a `sequence_number` that changes each time), one parse per event."""

    __slots__ = ("messages",)

    def __init__(self, api: str) -> None:
        super().__init__(api)
        self.messages = api == "messages"
        self._tries = 0  # never learns a template: `learning` and `template` say so to the sink

    def on_event(self, data: bytes, t_ns: int) -> None:
        """One SSE data payload (any event type). Raises `orjson.JSONDecodeError` on malformed JSON
        and `MalformedResponse` on JSON that is not an event object."""
        if data == b"[DONE]":  # (not sent by these APIs; harmless when a proxy adds it)
            self.done = True
            return
        obj = orjson.loads(data)
        if type(obj) is not dict:
            raise MalformedResponse("SSE data is not a JSON object")
        try:
            if self.messages:
                self._messages_event(obj, t_ns)
            else:
                self._responses_event(obj, t_ns)
        except (AttributeError, TypeError, KeyError, IndexError) as e:
            raise MalformedResponse(f"SSE data of an unexpected shape ({type(e).__name__}: {e})") from e

    def _text(self, text: Any, sign: int, t_ns: int, answer: bool) -> None:
        if not isinstance(text, str) or not text:
            return
        self.chunk_ns.append(t_ns)
        self.chunk_chars.append(sign * len(text))
        if answer and self.t_first_answer_ns is None:
            self.t_first_answer_ns = t_ns

    def _responses_event(self, obj: dict[str, Any], t_ns: int) -> None:
        typ = obj.get("type")
        if typ in _RESPONSES_ANSWER:
            self._text(obj.get("delta"), 1, t_ns, True)
        elif typ in _RESPONSES_REASONING:
            self._text(obj.get("delta"), -1, t_ns, False)
        elif typ in _RESPONSES_TOOL:
            self._text(obj.get("delta"), 1, t_ns, False)
        elif typ in _RESPONSES_END:
            resp = obj.get("response") or {}
            self.usage = usage_as_chat(resp.get("usage"))
            self.done = True
            details = resp.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            self.finish_reason = str(reason or resp.get("status") or typ)
        elif typ == "response.failed":
            resp = obj.get("response") or {}
            self.error = _error_text(resp.get("error") or "response.failed")
            self.usage = usage_as_chat(resp.get("usage")) or self.usage
            self.done = True
        elif typ == "error":
            self.error = _error_text(obj.get("error") or obj)

    def _messages_event(self, obj: dict[str, Any], t_ns: int) -> None:
        typ = obj.get("type")
        if typ == "content_block_delta":
            delta = obj.get("delta") or {}
            kind = delta.get("type")
            if kind == "text_delta":
                self._text(delta.get("text"), 1, t_ns, True)
            elif kind == "thinking_delta":
                self._text(delta.get("thinking"), -1, t_ns, False)
            elif kind == "input_json_delta":
                self._text(delta.get("partial_json"), 1, t_ns, False)
        elif typ == "content_block_start":
            block = obj.get("content_block") or {}
            if block.get("type") == "text":  # (empty from every server seen; text here is text)
                self._text(block.get("text"), 1, t_ns, True)
            elif block.get("type") == "thinking":
                self._text(block.get("thinking"), -1, t_ns, False)
        elif typ == "message_start":
            usage = usage_as_chat((obj.get("message") or {}).get("usage"))
            if usage and "prompt_tokens" in usage:  # its output_tokens is a placeholder (0 or 1)
                self.usage = {"prompt_tokens": usage["prompt_tokens"]}
        elif typ == "message_delta":
            usage = usage_as_chat(obj.get("usage"))
            if usage:
                self.usage = {**(self.usage or {}), **usage}
            reason = (obj.get("delta") or {}).get("stop_reason")
            if reason:
                self.finish_reason = str(reason)
        elif typ == "message_stop":
            self.done = True
        elif typ == "error":
            self.error = _error_text(obj.get("error") or obj)


def interpret_typed(obj: dict[str, Any], api: str) -> tuple[StreamResult, bool, bool]:
    """A whole Responses or Messages body (parsed): (result, has_any_text, has_answer_text)."""
    if obj.get("type") == "error" or (api == "responses" and obj.get("error")):
        return result_of(None, [], _error_text(obj.get("error") or obj)), False, False
    chars: list[int] = []
    answer_seen = False
    if api == "responses":
        for item in obj.get("output") or ():
            kind = item.get("type")
            if kind == "reasoning":
                parts = [*(item.get("content") or ()), *(item.get("summary") or ())]
                n = sum(len(p.get("text") or "") for p in parts)
                if n:
                    chars.append(-n)
            elif kind == "message":
                n = sum(len(p.get("text") or "") for p in item.get("content") or () if p.get("type") == "output_text")
                if n:
                    chars.append(n)
                    answer_seen = True
            elif kind == "function_call":
                chars.append(len(item.get("arguments") or "") + len(item.get("name") or "") or 1)
                answer_seen = True
    else:
        for block in obj.get("content") or ():
            kind = block.get("type")
            if kind == "thinking" and block.get("thinking"):
                chars.append(-len(block["thinking"]))
            elif kind == "text" and block.get("text"):
                chars.append(len(block["text"]))
                answer_seen = True
            elif kind == "tool_use":
                chars.append(len(orjson.dumps(block.get("input") or {})) + len(block.get("name") or ""))
                answer_seen = True
    return result_of(usage_as_chat(obj.get("usage")), chars, None), bool(chars), answer_seen


def _error_text(err: Any) -> str:
    if isinstance(err, dict):
        return str(err.get("message") or err)[:500]
    return str(err)[:500]
