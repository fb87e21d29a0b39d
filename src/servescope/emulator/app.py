"""The emulator application: OpenAI routes and request handling, truth, metrics, faults.

`servescope.emulator.server` runs it (and documents the endpoints and the subprocess contract). A
request is parsed and queued on the engine here; `emulator.pacing` steps the engine on the wall clock
and writes the tokens; `emulator.stream` holds each response's state and bytes. See `Emulator`.
"""

from __future__ import annotations

import itertools
import random
import time
import zlib
from bisect import bisect_left
from collections import deque
from typing import Any

import orjson

from servescope import __version__
from servescope.emulator.faults import Faults
from servescope.emulator.http import HttpConn
from servescope.emulator.metrics import Metrics
from servescope.emulator.pacing import Pacer
from servescope.emulator.stream import Framer, Stream, plan_output
from servescope.emulator.tokenizer import get_tokenizer
from servescope.emulator.typedwire import TypedFrames, typed_messages
from servescope.emulator.wire import BadRequest, ChunkTemplates, error_body
from servescope.sim.engine import Engine
from servescope.sim.frontend import FrontEnd
from servescope.sim.profile import Profile
from servescope.sim.request import SimRequest

__all__ = ["Emulator", "chat_prompt"]

_VERSION = f"{__version__}-servescope-emulator"


def chat_prompt(messages: list[dict[str, Any]]) -> str:
    """The emulator's chat template: `<|role|>\\ncontent\\n` per message, then `<|assistant|>\\n`."""
    parts: list[str] = []
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<|{m.get('role', 'user')}|>\n{content}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


class Emulator:
    """The application: HTTP routes, request handling, and what follows each token (metrics, truth)."""

    def __init__(
        self,
        profile: Profile,
        *,
        faults: Faults | None = None,
        seed: int = 0,
        served_model_name: str | None = None,
        truth_limit: int = 50_000,
    ) -> None:
        self.profile = profile
        self.model = served_model_name or profile.served_model_name
        self.engine = Engine(profile.engine)
        self.tok = get_tokenizer()
        self.faults = faults or Faults()
        self._fault_rng = random.Random(self.faults.seed)
        self._seed = seed
        self._ids = itertools.count(1)
        self._created = int(time.time())
        words = self.tok.word_ids()
        rng = random.Random(seed)
        self._text_ids = [rng.choice(words) for _ in range(1 << 16)]
        self._truth: deque[Stream] = deque(maxlen=truth_limit)
        # the requests received that the engine has not seen: the API server's front end, on the
        # perf_counter clock (items: conn, headers, body, api, arrival ns)
        self._front = FrontEnd(profile.engine.frontend_s)
        self.metrics = Metrics()
        self._resets: list[int] = []  # POST /reset_prefix_cache: cached blocks dropped by each
        self.framer = Framer(self.tok, reasoning=profile.reasoning, created=self._created, model=self.model)
        self.pacer = Pacer(
            self.engine,
            inbox=self._front,
            admit=self._admit,
            ready_in=self._ready_in,
            deliver=self._deliver,
            iteration_tokens=self.metrics.iteration_tokens,
            hold_s=profile.engine.first_token_s,
            chunk=self.framer.chunk,
        )

    def start(self) -> None:
        """Start the engine loop on the running event loop."""
        self.pacer.start()

    async def stop(self) -> None:
        await self.pacer.stop()

    def pacing(self) -> dict[str, Any]:
        """Emission error |actual write - engine emission time| over all tokens so far, in ms."""
        return self.pacer.report()

    # ------------------------------------------------------------------ after a burst
    def _deliver(self, sent: list[tuple[Stream, int]]) -> None:
        """The bookkeeping of the streams a burst wrote to (t: the write's perf_counter_ns): their
        token times, ITL/TTFT, the end of a response, a fault's strike, the next token's bytes."""
        itl = self.metrics.itl
        itl_counts = itl.counts
        itl_bounds = itl.bounds
        itl_sum = 0.0
        itl_n = 0
        chunk = self.framer.chunk
        for st, t in sent:
            if st.status != "running":  # the client went away while the burst waited: nothing sent
                st.sent += 1
                continue
            st.token_ns.append(t)
            i = st.sent
            st.sent = i + 1
            tokens = st.token_ns
            if i:
                gap = (t - tokens[i - 1]) * 1e-9
                itl_counts[bisect_left(itl_bounds, gap)] += 1
                itl_sum += gap
                itl_n += 1
            else:
                self.metrics.ttft.observe((t - st.arrival_ns) * 1e-9)
            if i + 1 == st.n_total:
                if st.stream:
                    conn = st.conn
                    assert conn is not None
                    conn.finish_stream()
                else:
                    self._respond_full(st)
                self._finished(st, t)
            elif i + 1 == st.fault_at:
                self._apply_fault(st)
            elif st.stream:
                st.next = chunk(st, i + 1)
        itl.total += itl_sum
        itl.n += itl_n

    def _finished(self, st: Stream, t_ns: int) -> None:
        st.status = "ok"
        st.conn = None
        self.metrics.observe_finished(st, t_ns)

    def _apply_fault(self, st: Stream) -> None:
        if st.fault == "drop":
            st.status = "dropped"
            conn = st.conn
            st.conn = None
            if st.sim is not None:
                self.engine.abort(st.sim)
            self.metrics.success["abort"] += 1
            if conn is not None:
                conn.close()
        elif st.fault == "stall":
            st.status = "stalled"  # the engine finishes it; nothing more is written

    def _respond_full(self, st: Stream) -> None:
        conn = st.conn
        assert conn is not None
        conn.respond(200, self.framer.full_body(st), extra=(("x-request-id", st.rid),))

    # ------------------------------------------------------------------ HTTP
    def on_disconnect(self, conn: HttpConn) -> None:
        st = conn.current
        if isinstance(st, Stream) and st.status in ("running", "stalled"):
            if st.status == "running":
                st.status = "aborted"
                self.metrics.success["abort"] += 1
            if st.sim is not None:
                self.engine.abort(st.sim)
            st.conn = None

    def dispatch(
        self, conn: HttpConn, method: str, path: str, query: str, headers: dict[str, str], body: bytes
    ) -> None:
        try:
            if method == "POST":
                if path == "/v1/chat/completions":
                    return self._enqueue(conn, headers, body, "chat")
                if path == "/v1/completions":
                    return self._enqueue(conn, headers, body, "completions")
                if path == "/v1/responses":
                    return self._enqueue(conn, headers, body, "responses")
                if path == "/v1/messages":
                    return self._enqueue(conn, headers, body, "messages")
                if path in ("/tokenize", "/v1/tokenize"):
                    return self._tokenize(conn, body)
                if path in ("/detokenize", "/v1/detokenize"):
                    return self._detokenize(conn, body)
                if path == "/reset_prefix_cache":
                    return self._reset_prefix_cache(conn)
            elif method == "GET":
                if path == "/metrics":
                    return conn.respond(200, self._metrics(), "text/plain; version=0.0.4; charset=utf-8")
                if path == "/health":
                    return conn.respond(200, b"", "text/plain")
                if path == "/version":
                    return conn.respond(200, orjson.dumps({"version": _VERSION}))
                if path == "/v1/models":
                    return conn.respond(200, self._models())
                if path == "/_servescope/truth":
                    return conn.respond(200, self._truth_body(query))
                if path == "/_servescope/pacing":
                    return conn.respond(200, orjson.dumps(self.pacing()))
                if path == "/_servescope/info":
                    return conn.respond(200, orjson.dumps(self._info()))
            return conn.respond(404, error_body(f"no route {method} {path}", "NotFoundError", 404))
        except BadRequest as e:
            return conn.respond(e.status, error_body(str(e), e.kind, e.status))
        except Exception as e:  # a bug: answer 500 rather than hang the connection
            return conn.respond(500, error_body(f"{type(e).__name__}: {e}", "InternalServerError", 500))

    def _truth_body(self, query: str) -> bytes:
        """`?id=X` one request; `?clear=1` forget the finished ones after answering."""
        params = dict(p.partition("=")[::2] for p in query.split("&") if p)
        recs = list(self._truth)
        if "id" in params:
            recs = [s for s in recs if s.rid == params["id"]]
        body = orjson.dumps({"clock": "perf_counter_ns", "requests": [s.truth() for s in recs]})
        if params.get("clear") in ("1", "true"):
            keep = [s for s in self._truth if s.status in ("running", "stalled")]
            self._truth.clear()
            self._truth.extend(keep)
        return body

    def _models(self) -> bytes:
        return orjson.dumps(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model,
                        "object": "model",
                        "created": self._created,
                        "owned_by": "servescope",
                        "root": self.model,
                        "parent": None,
                        "max_model_len": self.profile.max_model_len,
                        "permission": [],
                    }
                ],
            }
        )

    def _info(self) -> dict[str, Any]:
        e = self.profile.engine
        return {
            "profile": self.profile.name,
            "model": self.model,
            "gpus": self.profile.gpus,
            "gpu": self.profile.gpu,
            "description": self.profile.description,
            "max_model_len": e.max_model_len,
            "max_num_seqs": e.max_num_seqs,
            "kv_tokens": e.kv_tokens,
            "block_size": e.block_size,
            "max_num_batched_tokens": e.max_num_batched_tokens,
            "max_prefill_tokens": e.max_prefill_tokens,
            "reasoning": self.profile.reasoning,
            "prefix_cache_resets": list(self._resets),
            "faults": {
                "error_500": self.faults.error_500,
                "error_429": self.faults.error_429,
                "drop": self.faults.drop,
                "stall": self.faults.stall,
                "seed": self.faults.seed,
            },
        }

    def _metrics(self) -> bytes:
        return self.metrics.render(self.model, self.engine.stats, self.profile.engine)

    # ------------------------------------------------------------------ tokenize
    def _json(self, body: bytes) -> dict[str, Any]:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise BadRequest("request body is not valid JSON") from None
        if not isinstance(data, dict):
            raise BadRequest("request body must be a JSON object")
        return data

    def _check_model(self, data: dict[str, Any]) -> None:
        m = data.get("model")
        if m is not None and m not in (self.model, self.profile.name):
            raise BadRequest(f"The model `{m}` does not exist.", 404, "NotFoundError")

    def _prompt_ids(self, data: dict[str, Any], chat: bool) -> list[int]:
        if chat:
            msgs = data.get("messages")
            if not isinstance(msgs, list) or not msgs:
                raise BadRequest("'messages' must be a non-empty list")
            return self.tok.encode(chat_prompt(msgs))
        p = data.get("prompt")
        if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
            p = p[0]
        if isinstance(p, str):
            return self.tok.encode(p)
        if isinstance(p, list) and all(isinstance(x, int) for x in p):
            return list(p)
        raise BadRequest("'prompt' must be a string or a list of token ids (one prompt)")

    def _tokenize(self, conn: HttpConn, body: bytes) -> None:
        data = self._json(body)
        self._check_model(data)
        ids = self._prompt_ids(data, chat="messages" in data)
        conn.respond(
            200,
            orjson.dumps(
                {"count": len(ids), "max_model_len": self.profile.max_model_len, "tokens": ids, "token_strs": None}
            ),
        )

    def _detokenize(self, conn: HttpConn, body: bytes) -> None:
        data = self._json(body)
        self._check_model(data)
        ids = data.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(x, int) and 0 <= x < self.tok.vocab_size for x in ids):
            raise BadRequest("'tokens' must be a list of token ids")
        conn.respond(200, orjson.dumps({"prompt": self.tok.decode(ids)}))

    def _reset_prefix_cache(self, conn: HttpConn) -> None:
        """vLLM's `POST /reset_prefix_cache`: forget every cached prefix block (200, empty body), or,
        while requests run or wait (their blocks are held), 409 as vLLM answers then."""
        if self.engine.has_work() or self._front:
            return conn.respond(409, orjson.dumps({"detail": "Prefix cache reset failed."}))
        self._resets.append(self.engine.pool.drop_cached())
        return conn.respond(200, b"", "text/plain")

    # ------------------------------------------------------------------ generate
    def _enqueue(self, conn: HttpConn, headers: dict[str, str], body: bytes, api: str) -> None:
        """Note the arrival now; the engine loop admits it at the first step boundary after the front end
        is done with it (see `_admit`)."""
        now = time.perf_counter_ns()
        self._front.send(now * 1e-9, (conn, headers, body, api, now))
        self.pacer.wake()

    def _ready_in(self) -> float:
        """Seconds until the front end is done with the first request in the inbox (0: it is)."""
        return max(0.0, self._front.next_at() - time.perf_counter()) if self._front else 0.0

    def _admit(self) -> None:
        """Parse, tokenize and queue the requests that arrived since the last step and that the front
        end is done with (`EngineConfig.frontend_s`: the API server's work per request, which the
        requests inside share, `sim.frontend.FrontEnd`; a later one waits for a later boundary).

        Done by the engine loop right after a step's token burst, where the work cannot delay a
        burst (the next step starts at the previous deadline; the engine only schedules at step
        boundaries anyway), rather than in the socket callbacks that run while a burst is due.
        """
        for _, (conn, headers, body, api, arrival_ns) in self._front.pop_until(time.perf_counter()):
            if conn.closed:
                continue
            try:
                self._generate(conn, headers, body, api=api, arrival_ns=arrival_ns)
            except BadRequest as e:
                conn.respond(e.status, error_body(str(e), e.kind, e.status))
            except Exception as e:  # a bug: answer 500 rather than hang the connection
                conn.respond(500, error_body(f"{type(e).__name__}: {e}", "InternalServerError", 500))

    def _generate(self, conn: HttpConn, headers: dict[str, str], body: bytes, *, api: str, arrival_ns: int) -> None:
        data = self._json(body)
        chat = api != "completions"
        typed = api in ("responses", "messages")
        if typed:  # the chat request it amounts to: its messages, its length field
            msgs = typed_messages(api, data)
            if msgs is None:
                raise BadRequest(
                    "'input' must be a string or a list of messages"
                    if api == "responses"
                    else "'messages' must be a non-empty list"
                )
            data = {
                **data,
                "messages": msgs,
                "max_tokens": data.get("max_output_tokens" if api == "responses" else "max_tokens"),
            }
        self._check_model(data)
        rid = headers.get("x-request-id") or f"{next(self._ids):08x}"
        if int(data.get("n") or 1) != 1:
            raise BadRequest("only n=1 is supported")
        ids = self._prompt_ids(data, chat)
        prompt_len = len(ids)
        st = Stream()
        st.rid, st.chat, st.arrival_ns, st.prompt_len = rid, chat, arrival_ns, prompt_len
        st.api = api
        st.stream = bool(data.get("stream", False))
        opts = data.get("stream_options") or {}
        st.usage = bool(opts.get("include_usage", False)) if isinstance(opts, dict) else False
        st.n_reason = 0
        st.n_total = 0
        plan_output(st, data, prompt_len, self.profile, self._seed)
        if typed and st.n_reason >= st.n_total:
            st.n_reason = st.n_total - 1  # (these APIs' answer item always holds a token)
        kind = self.faults.draw(self._fault_rng)
        hdr = (("x-request-id", rid),)
        if kind in ("error_500", "error_429"):
            st.status = kind
            self._truth.append(st)
            status = 500 if kind == "error_500" else 429
            msg = "emulated internal error" if status == 500 else "emulated rate limit"
            return conn.respond(
                status, error_body(msg, "InternalServerError" if status == 500 else "RateLimitError", status), extra=hdr
            )
        if kind is not None:
            st.fault = kind
            st.fault_at = 1 + self._fault_rng.randrange(st.n_total - 1) if st.n_total > 1 else 0
        start = zlib.crc32(f"{self._seed}:{rid}".encode()) & 0xFFFF  # stable across processes
        ring = self._text_ids
        n = st.n_total
        st.ids = ring[start : start + n] if start + n <= len(ring) else [ring[(start + k) & 0xFFFF] for k in range(n)]
        st.conn = conn
        st.write = conn.transport.write  # the burst calls it directly (HttpConn.write adds a frame)
        if st.stream:
            st.tpl = ChunkTemplates(chat=chat, rid=rid, created=self._created, model=self.model)
            if typed:
                st.typed = TypedFrames(api=api, rid=rid, created=self._created, model=self.model, n_reason=st.n_reason)
            st.next = self.framer.chunk(st, 0)
        conn.current = st
        self._truth.append(st)
        if st.fault_at == 0:  # a one-token response: the fault strikes before any token
            if st.fault == "drop":
                st.status = "dropped"
                st.conn = None
                conn.close()
            else:
                st.status = "stalled"
                if st.stream:
                    conn.start_stream(extra=hdr)
            return
        sim = SimRequest(
            rid,
            prompt_len,
            st.n_total,
            arrival_s=arrival_ns / 1e9,
            prompt_token_ids=ids,
            payload=st,
            limit_tokens=st.n_cap,
        )
        st.sim = sim
        try:
            self.engine.add(sim)
        except ValueError as e:
            st.status = "rejected"
            conn.current = None
            raise BadRequest(str(e)) from None
        if st.stream:
            conn.start_stream(extra=hdr)
        self.pacer.wake()
