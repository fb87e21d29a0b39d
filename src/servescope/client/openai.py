"""The OpenAI-compatible wire: request bodies (built before the clock) and stream interpretation.

`StreamAccumulator.on_event` is the per-event path: a template check (below) or one `orjson.loads`,
a few dict lookups and list appends. Everything else (token allocation over chunks, usage
fallbacks) happens once per request in `finish`.

Template fast path: within one stream, token chunks are byte-identical but for their text (same
id, created, model, nulls). After one such chunk is parsed, the accumulator keeps the bytes before
and after its text field (checked once by parsing a probe through them). A later payload with that
exact prefix and suffix, and a middle free of `"`, `\\` and control characters (so the middle can
only be that string's content, read verbatim), is exactly the same chunk with another text: its
length is taken without a parse. Anything else (another field changed, an escape in the text, a
finish reason, usage) is parsed in full. Results are identical either way (a property test holds
the two paths together).

Which chunks count (docs/metrics.md): a chunk is *token-carrying* when it carries generated text on
any channel — `text` (completions), `delta.content`, `delta.reasoning_content`, `delta.reasoning`
or `delta.tool_calls`. A role-only chunk (`{"role": "assistant", "content": null}` or `""`) and a
usage-only chunk (`choices: []`) carry no token and never start TTFT.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import repeat
from operator import neg
from typing import Any

import orjson

from servescope.client.fastpath import RunTemplate, plain_text_chars
from servescope.urls import api_base

__all__ = [
    "API_PATHS",
    "MalformedResponse",
    "StreamAccumulator",
    "StreamResult",
    "allocate_tokens",
    "build_body",
    "encode_body",
    "interpret_response",
    "new_accumulator",
    "normalize_base_url",
    "prompt_api",
    "result_of",
]

API_PATHS = {
    "chat": "/chat/completions",
    "completions": "/completions",
    "responses": "/responses",
    "messages": "/messages",
}


class MalformedResponse(ValueError):
    """The server's bytes are not the JSON the OpenAI wire promises (a payload that is not an
    object, or an object of the wrong shape). With `orjson.JSONDecodeError`, the only errors a
    request records as `malformed_sse`: any other exception is the client's own."""


def normalize_base_url(url: str) -> str:
    """`http://h:p`, `http://h:p/` and `http://h:p/v1/` all become `http://h:p/v1` (servescope.urls)."""
    return api_base(url)


def build_body(
    *,
    api: str,
    model: str,
    prompt: str | list[dict[str, Any]],
    max_tokens: int | None,
    stream: bool = True,
    ignore_eos: bool = True,
    min_tokens: bool = True,
    extra_body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body of one request. `prompt` is a string, or chat messages for `api="chat"` (and
    for the Responses and Messages APIs, `client.typedapis`)."""
    if api in ("responses", "messages"):
        from servescope.client.typedapis import build_typed_body  # (it imports this module)

        typed = build_typed_body(
            api=api,
            model=model,
            prompt=prompt,
            max_tokens=max_tokens,
            stream=stream,
            ignore_eos=ignore_eos,
            min_tokens=min_tokens,
        )
        if extra_body:
            typed.update(extra_body)
        return typed
    body: dict[str, Any] = {"model": model, "stream": stream}
    if api == "chat":
        body["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if max_tokens is not None:
        if api == "chat":
            body["max_completion_tokens"] = max_tokens
        body["max_tokens"] = max_tokens
        if ignore_eos:
            body["ignore_eos"] = True
        if min_tokens:
            body["min_tokens"] = max_tokens
    if stream:
        body["stream_options"] = {"include_usage": True}
    if extra_body:
        body.update(extra_body)
    return body


def encode_body(body: dict[str, Any]) -> bytes:
    """The body's bytes, copied to their exact size: orjson's own bytes keep its 4 KB write buffer
    (200,000 prepared bodies held 780 MB instead of 40 MB)."""
    return bytes(memoryview(orjson.dumps(body)))


@dataclass(slots=True)
class StreamResult:
    """What one response amounted to, after the stream (or the body) ended."""

    output_tokens: int
    output_tokens_source: str  # "usage" | "counted"
    reasoning_tokens: int
    input_tokens: int | None
    chunk_tokens: list[int]
    error: str | None = None  # an in-band error object the server sent


class StreamAccumulator:
    """Interprets the data payloads of one streamed response.

    The caller passes each payload with the `perf_counter_ns()` of the read that delivered it.
    Arrival times of token-carrying chunks go to `chunk_ns`; their text length goes to
    `chunk_chars` (negative for the reasoning channel) for the token allocation in `finish`.
    """

    __slots__ = (
        "chat",
        "named_events",
        "chunk_ns",
        "chunk_chars",
        "t_first_answer_ns",
        "usage",
        "done",
        "error",
        "finish_reason",
        "_pre",
        "_post",
        "_sign",
        "_lens",
        "_tries",
        "_run",
    )

    def __init__(self, api: str) -> None:
        self.chat = api == "chat"
        self.named_events = api in ("responses", "messages")  # every SSE event type goes to on_event
        self.chunk_ns: list[int] = []
        self.chunk_chars: list[int] = []
        self.t_first_answer_ns: int | None = None
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.error: str | None = None
        self.finish_reason: str | None = None
        # the template (module docstring): bytes before and after the text of a plain token chunk
        self._pre = b""  # no template yet: the length check below never passes
        self._post = b""
        self._sign = 1  # +1: answer text (or completions text), -1: reasoning
        self._lens = (0, 0, 1 << 62)  # len(pre), len(post), len(pre) + len(post)
        self._tries = _TEMPLATE_TRIES
        self._run: RunTemplate | None = None

    def on_event(self, data: bytes, t_ns: int) -> None:
        """One SSE data payload. Raises `orjson.JSONDecodeError` on malformed JSON and
        `MalformedResponse` on JSON that is not a chunk object."""
        if data.startswith(self._pre) and data.endswith(self._post):
            lp, ls, both = self._lens
            n = len(data)
            if n >= both:
                chars = plain_text_chars(data[lp : n - ls])
                if chars > 0:  # only the text changed: no parse needed
                    self.chunk_ns.append(t_ns)  # (the template's own chunk set t_first_answer_ns)
                    self.chunk_chars.append(chars if self._sign > 0 else -chars)
                    return
                if chars == 0:
                    return  # an empty text: no token, and nothing else differs
        if data == b"[DONE]":
            self.done = True
            return
        obj = orjson.loads(data)
        if type(obj) is not dict:
            raise MalformedResponse("SSE data is not a JSON object")
        # A field of the wrong type is the server's malformed data (the try costs nothing unless
        # raised); the template is learnt after it, so an error of ours is never put on the server.
        learn: str | None = None
        try:
            usage = obj.get("usage")
            if usage:
                self.usage = usage
            choices = obj.get("choices")
            if not choices:
                err = obj.get("error")
                if err is not None:
                    self.error = _error_text(err)
                return
            choice = choices[0]
            if self.chat:
                delta = choice.get("delta")
                if delta:
                    answer = delta.get("content")
                    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                    tools = delta.get("tool_calls")
                    if answer or reasoning or tools:
                        self.chunk_ns.append(t_ns)
                        if answer:
                            if self.t_first_answer_ns is None:
                                self.t_first_answer_ns = t_ns
                            self.chunk_chars.append(len(answer) + (len(reasoning) if reasoning else 0))
                        elif reasoning:
                            self.chunk_chars.append(-len(reasoning))
                        else:
                            self.chunk_chars.append(_tool_chars(tools))
                        if (
                            self._tries
                            and not tools
                            and not usage
                            and not choice.get("finish_reason")
                            and (not answer or not reasoning)
                        ):
                            learn = "content" if answer else _reasoning_key(delta)
            else:
                text = choice.get("text")
                if text:
                    self.chunk_ns.append(t_ns)
                    if self.t_first_answer_ns is None:
                        self.t_first_answer_ns = t_ns
                    self.chunk_chars.append(len(text))
                    if self._tries and not usage and not choice.get("finish_reason"):
                        learn = "text"
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = reason
        except (AttributeError, TypeError, KeyError, IndexError) as e:
            raise MalformedResponse(f"SSE data of an unexpected shape ({type(e).__name__}: {e})") from e
        if learn is not None:
            self._learn(data, obj, learn)

    @property
    def template(self) -> RunTemplate | None:
        """This stream's plain token chunks on the wire (`fastpath.token_run`), once known."""
        return self._run

    @property
    def learning(self) -> bool:
        """No template yet, but the next plain chunks may give one."""
        return self._run is None and self._tries > 0

    def add_run(self, chars: list[int], t_ns: int) -> None:
        """Token chunks of the template read in bulk (`fastpath.token_run`): their text lengths,
        0 for an empty text (no token), all delivered by one read at `t_ns`."""
        if 0 in chars:
            chars = [c for c in chars if c]
        if not chars:
            return
        self.chunk_ns.extend(repeat(t_ns, len(chars)))  # (the template's own chunk set t_first_answer_ns)
        self.chunk_chars.extend(chars if self._sign > 0 else map(neg, chars))

    def _learn(self, data: bytes, obj: dict[str, Any], key: str) -> None:
        """Take this plain token chunk as the template, if its text can be cut out exactly."""
        self._tries -= 1
        holder = _text_holder(obj, self.chat)
        text = holder[key]
        enc = orjson.dumps(text)
        if plain_text_chars(enc[1:-1]) < 0:
            return  # an escape in the text: its wire form may differ from ours; wait for a plain one
        hits = list(re.finditer(b'"' + key.encode() + rb'"\s*:\s*' + re.escape(enc), data))
        if len(hits) != 1:
            return
        start, end = hits[0].end() - len(enc) + 1, hits[0].end() - 1  # the text between the quotes
        pre, post = data[:start], data[end:]
        # The hit may be another field holding the same text (this one's wire form escaped): a
        # probe through the cut must land in this field. (It cannot change any other value: a
        # plain string body is read verbatim wherever it stands.)
        try:
            ok = _text_holder(orjson.loads(pre + b"sb probe" + post), self.chat)[key] == "sb probe"
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            ok = False
        if ok:
            self._pre, self._post = pre, post
            self._lens = (len(pre), len(post), len(pre) + len(post))
            self._sign = -1 if key != "content" and self.chat else 1
            self._tries = 0
            self._run = RunTemplate(pre, post)

    def finish(self) -> StreamResult:
        return result_of(self.usage, self.chunk_chars, self.error)


def prompt_api(api: str) -> str:
    """The prompt dialect of `api`: "chat" (messages, the server applies its chat template: chat,
    Responses, Messages) or "completions" (one text)."""
    return "completions" if api == "completions" else "chat"


def new_accumulator(api: str) -> StreamAccumulator:
    """The accumulator of one streamed response of `api` (`client.typedapis` for the typed-event APIs)."""
    if api in ("responses", "messages"):
        from servescope.client.typedapis import EventAccumulator  # (it imports this module)

        return EventAccumulator(api)
    return StreamAccumulator(api)


def interpret_response(body: bytes, api: str) -> tuple[StreamResult, bool, bool]:
    """A non-streamed response: (result, has_any_text, has_answer_text)."""
    obj = orjson.loads(body)
    if type(obj) is not dict:
        raise MalformedResponse("response is not a JSON object")
    try:
        if api in ("responses", "messages"):
            from servescope.client.typedapis import interpret_typed  # (it imports this module)

            return interpret_typed(obj, api)
        if "error" in obj and not obj.get("choices"):
            return result_of(None, [], _error_text(obj["error"])), False, False
        chars: list[int] = []
        answer_seen = False
        for choice in obj.get("choices") or ():
            if api == "chat":
                msg = choice.get("message") or {}
                answer = msg.get("content") or ""
                reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
                tools = msg.get("tool_calls")
                if reasoning:
                    chars.append(-len(reasoning))
                if answer:
                    chars.append(len(answer))
                    answer_seen = True
                elif tools:
                    chars.append(_tool_chars(tools))
                    answer_seen = True
            else:
                text = choice.get("text") or ""
                if text:
                    chars.append(len(text))
                    answer_seen = True
        return result_of(obj.get("usage"), chars, None), bool(chars), answer_seen
    except (AttributeError, TypeError, KeyError, IndexError) as e:
        raise MalformedResponse(f"a response of an unexpected shape ({type(e).__name__}: {e})") from e


def allocate_tokens(chars: list[int], total: int) -> list[int]:
    """Split `total` tokens over chunks in proportion to their text length (largest remainder).

    Each chunk gets at least one token while tokens last; the result sums to `total` exactly when
    `total >= len(chars)`. With no usage from the server, `total == len(chars)`: one per chunk.
    """
    n = len(chars)
    if n == 0:
        return []
    if total <= n:
        return [1] * n
    weights = [abs(c) or 1 for c in chars]
    if min(weights) == max(weights):  # every chunk the same size: an even split
        base, extra = divmod(total, n)
        return [base + (1 if i < extra else 0) for i in range(n)]
    spare = total - n  # one token per chunk first, the rest by text length
    wsum = sum(weights)
    shares = [spare * w / wsum for w in weights]
    alloc = [1 + int(s) for s in shares]
    left = total - sum(alloc)
    if left:
        order = sorted(range(n), key=lambda i: (-(shares[i] - int(shares[i])), i))
        for i in order[:left]:
            alloc[i] += 1
    return alloc


def result_of(usage: dict[str, Any] | None, chars: list[int], error: str | None) -> StreamResult:
    if not isinstance(usage, dict):
        usage = None  # (a server's `usage` of another type is no usage)
    completion = usage.get("completion_tokens") if usage else None
    prompt = usage.get("prompt_tokens") if usage else None
    counted = len(chars)
    if isinstance(completion, int) and completion >= 0:
        total, source = completion, "usage"
    else:
        total, source = counted, "counted"
    alloc = allocate_tokens(chars, total)
    reasoning = None
    if usage:
        details = usage.get("completion_tokens_details")
        reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if not isinstance(reasoning, int):
        reasoning = sum(k for k, c in zip(alloc, chars) if c < 0)
    return StreamResult(
        output_tokens=total,
        output_tokens_source=source,
        reasoning_tokens=reasoning,
        input_tokens=prompt if isinstance(prompt, int) else None,
        chunk_tokens=alloc,
        error=error,
    )


_TEMPLATE_TRIES = 4  # plain chunks a stream may try to learn a template from before giving up


def _text_holder(obj: dict[str, Any], chat: bool) -> dict[str, Any]:
    choice = obj["choices"][0]
    return choice["delta"] if chat else choice


def _reasoning_key(delta: dict[str, Any]) -> str:
    return "reasoning_content" if delta.get("reasoning_content") else "reasoning"


def _tool_chars(tools: Any) -> int:
    n = 0
    for call in tools if isinstance(tools, list) else ():
        fn = (call.get("function") or {}) if isinstance(call, dict) else {}
        n += len(fn.get("arguments") or "") + len(fn.get("name") or "")
    return n or 1


def _error_text(err: Any) -> str:
    if isinstance(err, dict):
        return str(err.get("message") or err)[:500]
    return str(err)[:500]
