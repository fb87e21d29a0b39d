"""The emulator's Responses (`/v1/responses`) and Messages (`/v1/messages`) wires: request prompts,
pre-encoded SSE events, whole bodies (pure: no sockets, no clocks).

Shapes follow vLLM 0.32's routes. A stream sends, in order:

- Responses: `response.created`, `response.in_progress`, then per output item (a `reasoning` item
  for the reasoning tokens, if any, then a `message` item) `response.output_item.added` (and, for the
  message, `response.content_part.added`), one `response.reasoning_text.delta` or
  `response.output_text.delta` per token, the item's `…done` events, and `response.completed`
  carrying the response with its usage. Every event has a `sequence_number`, counted from 0.
- Messages: `message_start` (with `usage.input_tokens`), per content block (`thinking`, if any, then
  `text`) `content_block_start`, one `content_block_delta` per token (`thinking_delta` / `text_delta`)
  and `content_block_stop`; then `message_delta` with the stop reason and `usage.output_tokens`, and
  `message_stop`.

One token per delta (vLLM's Messages route does the same; its Responses route may send several
tokens per delta, which the client handles as multi-token chunks).
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["TypedFrames", "messages_body", "responses_body", "typed_messages", "typed_usage"]


def _j(value: Any) -> bytes:
    return orjson.dumps(value)


def _event(name: str, obj: dict[str, Any]) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (name.encode(), _j(obj))


def typed_messages(api: str, data: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The chat messages a Responses or Messages request asks about (None: the body has none)."""
    if api == "responses":
        inp = data.get("input")
        msgs: list[dict[str, Any]] = []
        if isinstance(data.get("instructions"), str):
            msgs.append({"role": "system", "content": data["instructions"]})
        if isinstance(inp, str):
            return [*msgs, {"role": "user", "content": inp}]
        if isinstance(inp, list) and inp and all(isinstance(m, dict) for m in inp):
            return [*msgs, *({"role": m.get("role", "user"), "content": _text_of(m.get("content"))} for m in inp)]
        return None
    given = data.get("messages")
    if not isinstance(given, list) or not given or not all(isinstance(m, dict) for m in given):
        return None
    out = [{"role": m.get("role", "user"), "content": _text_of(m.get("content"))} for m in given]
    system = data.get("system")
    if system:
        out.insert(0, {"role": "system", "content": _text_of(system)})
    return out


def _text_of(content: Any) -> str:
    if isinstance(content, list):  # content blocks / parts: their text, joined
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def typed_usage(api: str, prompt: int, output: int, reasoning: int) -> dict[str, Any]:
    if api == "responses":
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + output,
        }
    return {"input_tokens": prompt, "output_tokens": output}


def responses_body(
    *, rid: str, created: int, model: str, content: str, reasoning: str | None, finish: str, usage: dict[str, Any]
) -> dict[str, Any]:
    """A whole Responses object (the non-streamed body, and what `response.completed` carries)."""
    output: list[dict[str, Any]] = []
    if reasoning:
        output.append(
            {
                "id": f"rs_{rid}",
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": reasoning}],
                "status": "completed",
            }
        )
    output.append(
        {
            "id": f"msg_{rid}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": content, "annotations": [], "logprobs": None}],
        }
    )
    incomplete = finish == "length"
    return {
        "id": f"resp_{rid}",
        "object": "response",
        "created_at": created,
        "model": model,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "output": output,
        "usage": usage,
    }


def messages_body(
    *, rid: str, model: str, content: str, reasoning: str | None, finish: str, usage: dict[str, Any]
) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    blocks.append({"type": "text", "text": content})
    return {
        "id": f"msg_{rid}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": "max_tokens" if finish == "length" else "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


class TypedFrames:
    """Pre-encoded event bytes of one Responses or Messages stream; a token costs one concatenation
    (and, for Responses, one `%d` for its sequence number)."""

    __slots__ = ("api", "rid", "created", "model", "n_reason", "_tok_pre", "_tok_post", "_rs_pre", "_rs_post")

    def __init__(self, *, api: str, rid: str, created: int, model: str, n_reason: int) -> None:
        self.api, self.rid, self.created, self.model, self.n_reason = api, rid, created, model, n_reason
        if api == "responses":
            self._rs_pre = (
                b'event: response.reasoning_text.delta\ndata: {"type":"response.reasoning_text.delta",'
                b'"item_id":"rs_%s","output_index":0,"content_index":0,"delta":' % rid.encode()
            )
            self._rs_post = b',"sequence_number":%d}\n\n'
            self._tok_pre = (
                b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                b'"item_id":"msg_%s","output_index":%d,"content_index":0,"delta":' % (rid.encode(), int(n_reason > 0))
            )
            self._tok_post = b',"logprobs":[],"sequence_number":%d}\n\n'
        else:
            self._rs_pre = (
                b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                b'"delta":{"type":"thinking_delta","thinking":'
            )
            self._rs_post = b"}}\n\n"
            self._tok_pre = (
                b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
                b'"delta":{"type":"text_delta","text":' % int(n_reason > 0)
            )
            self._tok_post = b"}}\n\n"

    # Responses sequence numbers: created 0, in_progress 1, then the first item's opening events
    # (reasoning: 1 event; message: 2), its tokens, and between the items the reasoning item's 2
    # closing events and the message's 2 opening ones.
    def _seq(self, i: int) -> int:
        if self.n_reason == 0:
            return 4 + i
        return 3 + i + (4 if i >= self.n_reason else 0)

    def token(self, i: int, text: bytes) -> bytes:
        """The delta event of token i (`text`: its JSON string)."""
        if i < self.n_reason:
            post = self._rs_post % self._seq(i) if self.api == "responses" else self._rs_post
            return self._rs_pre + text + post
        post = self._tok_post % self._seq(i) if self.api == "responses" else self._tok_post
        return self._tok_pre + text + post

    def opening(self, prompt_len: int) -> bytes:
        """The events before the first token."""
        rid = self.rid
        if self.api == "messages":
            start = {
                "type": "message_start",
                "message": {
                    "id": f"msg_{rid}",
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": prompt_len, "output_tokens": 0},
                },
            }
            block = {"type": "thinking", "thinking": ""} if self.n_reason else {"type": "text", "text": ""}
            return _event("message_start", start) + _event(
                "content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}
            )
        shell = {
            "id": f"resp_{rid}",
            "object": "response",
            "created_at": self.created,
            "model": self.model,
            "status": "in_progress",
            "output": [],
            "usage": None,
        }
        out = _event("response.created", {"type": "response.created", "response": shell, "sequence_number": 0})
        out += _event("response.in_progress", {"type": "response.in_progress", "response": shell, "sequence_number": 1})
        if self.n_reason:
            return out + self._item_added("reasoning", 0, 2)
        return out + self._item_added("message", 0, 2)

    def _item_added(self, kind: str, index: int, seq: int) -> bytes:
        rid = self.rid
        if kind == "reasoning":
            item = {"id": f"rs_{rid}", "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}
            return _event(
                "response.output_item.added",
                {"type": "response.output_item.added", "output_index": index, "item": item, "sequence_number": seq},
            )
        item = {"id": f"msg_{rid}", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": [], "logprobs": None}
        return _event(
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": index, "item": item, "sequence_number": seq},
        ) + _event(
            "response.content_part.added",
            {
                "type": "response.content_part.added",
                "item_id": f"msg_{rid}",
                "output_index": index,
                "content_index": 0,
                "part": part,
                "sequence_number": seq + 1,
            },
        )

    def switch(self, reasoning: str) -> bytes:
        """Between the last reasoning token and the first answer token."""
        if self.api == "messages":
            return _event("content_block_stop", {"type": "content_block_stop", "index": 0}) + _event(
                "content_block_start",
                {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
            )
        seq = 3 + self.n_reason
        item = {
            "id": f"rs_{self.rid}",
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": reasoning}],
            "status": "completed",
        }
        done = {
            "type": "response.reasoning_text.done",
            "item_id": f"rs_{self.rid}",
            "output_index": 0,
            "content_index": 0,
            "text": reasoning,
            "sequence_number": seq,
        }
        return (
            _event("response.reasoning_text.done", done)
            + _event(
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": 0, "item": item, "sequence_number": seq + 1},
            )
            + self._item_added("message", 1, seq + 2)
        )

    def closing(self, n_total: int, whole: dict[str, Any]) -> bytes:
        """The events after the last token: `whole` is the response's body (`responses_body` /
        `messages_body`), whose usage and stop reason they carry."""
        if self.api == "messages":
            index = int(self.n_reason > 0 and n_total > self.n_reason)
            delta = {"stop_reason": whole["stop_reason"], "stop_sequence": None}
            return (
                _event("content_block_stop", {"type": "content_block_stop", "index": index})
                + _event(
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": delta,
                        "usage": {"output_tokens": whole["usage"]["output_tokens"]},
                    },
                )
                + _event("message_stop", {"type": "message_stop"})
            )
        seq = self._seq(n_total - 1) + 1
        msg = whole["output"][-1]
        index = len(whole["output"]) - 1
        text = msg["content"][0]["text"]
        events = [
            (
                "response.output_text.done",
                {"item_id": msg["id"], "output_index": index, "content_index": 0, "text": text, "logprobs": []},
            ),
            (
                "response.content_part.done",
                {"item_id": msg["id"], "output_index": index, "content_index": 0, "part": msg["content"][0]},
            ),
            ("response.output_item.done", {"output_index": index, "item": msg}),
            ("response.completed", {"response": whole}),
        ]
        return b"".join(
            _event(name, {"type": name, **fields, "sequence_number": seq + k})
            for k, (name, fields) in enumerate(events)
        )
