"""One response in flight: its state (`Stream`, also its truth record), its planned output (length,
reasoning share, finish reason) and its bytes (`Framer`), and which streams a step's burst writes to.

No sockets and no clocks here: `emulator.app` creates streams, `emulator.pacing` writes their bytes.
"""

from __future__ import annotations

import random
import zlib
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from servescope.emulator.tokenizer import Tokenizer
from servescope.emulator.typedwire import TypedFrames, messages_body, responses_body, typed_usage
from servescope.emulator.wire import BadRequest, ChunkTemplates, chat_body, chunked, completion_body, usage_dict
from servescope.sim.engine import StepResult
from servescope.sim.profile import Profile
from servescope.sim.request import SimRequest

if TYPE_CHECKING:
    from servescope.emulator.http import HttpConn

__all__ = ["Stream", "Framer", "BurstPlan", "plan_burst", "held_bytes", "plan_output"]

_DONE = chunked(b"data: [DONE]\n\n")


class Stream:
    """One request in flight (and, afterwards, its truth record)."""

    __slots__ = (
        "conn",
        "rid",
        "chat",
        "api",
        "typed",
        "stream",
        "usage",
        "tpl",
        "ids",
        "n_total",
        "n_cap",
        "n_reason",
        "finish",
        "prompt_len",
        "sent",
        "arrival_ns",
        "token_ns",
        "status",
        "fault_at",
        "fault",
        "sim",
        "write",
        "next",
        "hold_until",
        "held",
    )

    conn: HttpConn | None
    rid: str
    chat: bool  # the prompt is chat messages (chat, Responses, Messages)
    api: str  # "chat" | "completions" | "responses" | "messages"
    typed: TypedFrames | None  # a streamed Responses or Messages response's event bytes
    stream: bool  # SSE; else one JSON body after the last token
    usage: bool  # stream_options.include_usage
    tpl: ChunkTemplates  # set for streaming responses only
    ids: list[int]  # the output's token ids
    n_total: int
    n_cap: int  # the most it could have made: its max_tokens, else the context's room (what a reserve holds)
    n_reason: int  # the first n_reason tokens are reasoning
    finish: str  # "stop" or "length"
    prompt_len: int
    arrival_ns: int
    write: Callable[[bytes], object]  # the connection's transport.write (the burst calls it directly)

    def __init__(self) -> None:
        self.token_ns = array("q")
        self.sent = 0
        self.status = "running"
        self.fault: str | None = None
        self.fault_at = -1
        self.sim: SimRequest | None = None
        self.typed = None
        self.api = "chat"
        self.next: bytes | None = None  # the framed bytes of the next token (streaming)
        # first-token hold (`plan_burst`): 0 before the first token, then the perf_counter_ns its
        # tokens are held until, -1 once released; `held`: tokens the engine made that wait for it
        self.hold_until = 0
        self.held = 0

    def truth(self) -> dict[str, Any]:
        return {
            "id": self.rid,
            "arrival_ns": self.arrival_ns,
            "token_ns": self.token_ns.tolist(),
            "status": self.status,
            "prompt_tokens": self.prompt_len,
            "completion_tokens": self.n_total,
            "reasoning_tokens": self.n_reason,
        }


class Framer:
    """A response's bytes: each streaming token's HTTP chunk (the SSE templates plus the token's JSON
    text, cached per token id), the usage object, the non-streaming body."""

    def __init__(self, tok: Tokenizer, *, reasoning: bool, created: int, model: str) -> None:
        self.tok = tok
        self.reasoning = reasoning
        self.created = created
        self.model = model
        self._tok_json: dict[int, bytes] = {}

    def chunk(self, st: Stream, i: int) -> bytes:
        """The framed bytes of token i of a streaming response (the last one closes the stream)."""
        tid = st.ids[i]
        tj = self._tok_json
        text = tj.get(tid)
        if text is None:
            text = tj[tid] = orjson.dumps(self.tok.token_text(tid))
        if st.typed is not None:
            return self._typed_chunk(st, st.typed, i, text)
        tpl = st.tpl
        pre = tpl.reasoning_pre if i < st.n_reason else tpl.content_pre
        if i + 1 == st.n_total:
            data = pre + text + (tpl.last_post_stop if st.finish == "stop" else tpl.last_post_length)
            if st.usage:
                data += tpl.usage_chunk(self.usage(st))
            return b"%x\r\n%s\r\n" % (len(data), data) + _DONE + b"0\r\n\r\n"
        data = pre + text + tpl.post
        if i == 0 and tpl.role_chunk:
            data = tpl.role_chunk + data
        return b"%x\r\n%s\r\n" % (len(data), data)

    def _typed_chunk(self, st: Stream, frames: TypedFrames, i: int, text: bytes) -> bytes:
        """Token i of a streamed Responses or Messages response, with the events around it."""
        data = frames.token(i, text)
        if i == 0:
            data = frames.opening(st.prompt_len) + data
        elif i == st.n_reason:
            data = frames.switch(self.tok.decode(st.ids[: st.n_reason])) + data
        if i + 1 == st.n_total:
            data += frames.closing(st.n_total, self._typed_whole(st))
            return b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)
        return b"%x\r\n%s\r\n" % (len(data), data)

    def _typed_whole(self, st: Stream) -> dict[str, Any]:
        ids = st.ids[: st.n_total]
        content = self.tok.decode(ids[st.n_reason :])
        reasoning = self.tok.decode(ids[: st.n_reason]) if st.n_reason else None
        usage = typed_usage(st.api, st.prompt_len, st.n_total, st.n_reason)
        if st.api == "responses":
            return responses_body(
                rid=st.rid,
                created=self.created,
                model=self.model,
                content=content,
                reasoning=reasoning,
                finish=st.finish,
                usage=usage,
            )
        return messages_body(
            rid=st.rid, model=self.model, content=content, reasoning=reasoning, finish=st.finish, usage=usage
        )

    def usage(self, st: Stream) -> dict[str, Any]:
        return usage_dict(st.prompt_len, st.n_total, st.n_reason if st.chat and self.reasoning else None)

    def full_body(self, st: Stream) -> bytes:
        """The non-streaming response's JSON body."""
        if st.api in ("responses", "messages"):
            return orjson.dumps(self._typed_whole(st))
        ids = st.ids[: st.n_total]
        if st.chat:
            reasoning = self.tok.decode(ids[: st.n_reason]) if self.reasoning else None
            return chat_body(
                rid=st.rid,
                created=self.created,
                model=self.model,
                content=self.tok.decode(ids[st.n_reason :]),
                reasoning=reasoning,
                finish_reason=st.finish,
                usage=self.usage(st),
            )
        return completion_body(
            rid=st.rid,
            created=self.created,
            model=self.model,
            text=self.tok.decode(ids),
            finish_reason=st.finish,
            usage=self.usage(st),
        )


# (streams that get bytes, their (write, bytes) in the same order, streams whose token leaves no bytes now)
BurstPlan = tuple[list[Stream], list[tuple[Callable[[bytes], object], bytes]], list[Stream]]


def plan_burst(
    res: StepResult,
    deadline_ns: int = 0,
    hold_ns: int = 0,
    chunk: Callable[[Stream, int], bytes] | None = None,
    holding: list[Stream] | None = None,
) -> tuple[BurstPlan, list[Stream]]:
    """The step's burst, made ready before its time: (streams that get bytes, their (write, bytes)
    in the same order, streams whose token leaves no bytes now: non-streaming ones).

    With `hold_ns` > 0 (a deployment's first-token latency, `EngineConfig.first_token_s`, which plan's
    what-if and the validation add to TTFT): a streaming response's first token, and every token the
    engine makes for it within `hold_ns` of it, are held; `emulator.pacing` writes them together when
    the hold ends (or, at the latest, just before this stream's next token). The engine runs the
    request as it would without the hold, so throughput, the batch and the end of the response do not
    move; TTFT grows by the hold and the held tokens arrive together. Non-streaming responses and
    responses with an injected fault (it strikes at its token, not inside a bunched write) are not
    held; streams that start a hold are appended to `holding` (`chunk` frames token i of a stream).

    Returns the burst plan and the streams whose held tokens must be written before this burst."""
    streams: list[Stream] = []
    sends: list[tuple[Callable[[bytes], object], bytes]] = []
    quiet: list[Stream] = []
    first: list[Stream] = []
    for sim in res.tokens or ():
        st: Stream = sim.payload
        if st.status != "running":
            st.sent += 1  # stalled or gone: the engine still counts its token, nothing is written
            continue
        data = st.next
        if data is None:
            quiet.append(st)
            continue
        if hold_ns and st.hold_until >= 0 and st.fault is None:
            hu = st.hold_until
            if hu == 0:
                hu = st.hold_until = deadline_ns + hold_ns
                assert holding is not None
                holding.append(st)
            if deadline_ns < hu:
                st.held += 1
                continue
            st.hold_until = -1
            if st.held:  # this token follows the held ones: they leave first
                assert chunk is not None
                data = chunk(st, st.sent + st.held)
                first.append(st)
        streams.append(st)
        sends.append((st.write, data))
    return (streams, sends, quiet), first


def held_bytes(st: Stream, chunk: Callable[[Stream, int], bytes]) -> bytes:
    """The framed bytes of a stream's held tokens, in order."""
    return b"".join(chunk(st, st.sent + j) for j in range(st.held))


def plan_output(st: Stream, data: dict[str, Any], prompt_len: int, profile: Profile, seed: int) -> None:
    """Decide the output length (seeded EOS unless ignore_eos) and the reasoning share."""
    limit = profile.max_model_len - prompt_len
    mt = data.get("max_completion_tokens", data.get("max_tokens"))
    if limit < 1:
        raise BadRequest(
            f"This model's maximum context length is {profile.max_model_len} tokens. "
            f"However, your request has {prompt_len} input tokens."
        )
    if mt is not None:
        if not isinstance(mt, int) or mt < 1:
            raise BadRequest("max_tokens must be a positive integer")
        if mt > limit:
            raise BadRequest(
                f"This model's maximum context length is {profile.max_model_len} tokens. "
                f"However, you requested {prompt_len + mt} tokens ({prompt_len} in the "
                f"messages, {mt} in the completion). Please reduce the length of the "
                f"messages or completion."
            )
    min_tokens = int(data.get("min_tokens") or 0)
    ignore_eos = bool(data.get("ignore_eos", False))
    rng = random.Random(zlib.crc32(f"{seed}:{st.rid}:{prompt_len}".encode()))
    p = profile
    r = 0
    if p.reasoning:
        r = max(p.reasoning_tokens_min, int(rng.gauss(p.reasoning_tokens_mean, 0.25 * p.reasoning_tokens_mean)))
    cap = mt if mt is not None else (min(limit, p.default_max_tokens) if ignore_eos else limit)
    if ignore_eos:
        n, finish = cap, "length"
    else:
        natural = max(min_tokens, r + 1 + int(rng.expovariate(1.0 / max(1.0, p.eos_mean_tokens - 1))))
        n, finish = (cap, "length") if natural >= cap else (natural, "stop")
    st.n_total = n
    st.n_cap = cap
    st.n_reason = min(r, n)
    st.finish = finish
