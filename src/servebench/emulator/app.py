"""The emulator application: OpenAI routes, the engine loop on the wall clock, metrics, truth, faults.

`servebench.emulator.server` runs it (and documents the endpoints and the subprocess contract); this
module holds the request handling and the pacing loop. See `Emulator`.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import sys
import time
import zlib
from array import array
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass
from typing import Any

import orjson

from servebench.emulator.http import HttpConn
from servebench.emulator.wire import (
    E2E_BUCKETS_S,
    ITERATION_TOKENS_BUCKETS,
    ITL_BUCKETS_S,
    TTFT_BUCKETS_S,
    ChunkTemplates,
    Histogram,
    chat_body,
    chunked,
    completion_body,
    error_body,
    render_metrics,
    usage_dict,
)
from servebench.errors import ConfigError
from servebench.sim.engine import Engine, StepResult
from servebench.sim.request import SimRequest
from servebench.sim.profile import Profile
from servebench.emulator.tokenizer import get_tokenizer

__all__ = ["Faults", "Emulator", "chat_prompt"]

_VERSION = "0.1.0-servebench-emulator"
_DONE = chunked(b"data: [DONE]\n\n")
_LATE_BUCKET_NS = 10_000  # pacing histogram resolution: 10 us
_LATE_BUCKETS = 10_000  # up to 100 ms
_MAX_BEHIND_S = 0.025


@dataclass(frozen=True, slots=True)
class Faults:
    """Fractions of requests that fail, by kind; drawn in arrival order from `seed`."""

    error_500: float = 0.0
    error_429: float = 0.0
    drop: float = 0.0
    stall: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        vals = (self.error_500, self.error_429, self.drop, self.stall)
        if any(v < 0 or v > 1 for v in vals) or sum(vals) > 1 + 1e-9:
            raise ConfigError("fault fractions must be in [0, 1] and sum to at most 1")


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


class _Stream:
    """One request in flight (and, afterwards, its truth record)."""

    __slots__ = ("conn", "rid", "chat", "stream", "usage", "tpl", "ids", "n_total", "n_reason", "finish",
                 "prompt_len", "sent", "arrival_ns", "token_ns", "status", "fault_at", "fault", "sim",
                 "write", "next")

    def __init__(self) -> None:
        self.token_ns = array("q")
        self.sent = 0
        self.status = "running"
        self.fault: str | None = None
        self.fault_at = -1
        self.sim: SimRequest | None = None
        self.next: bytes | None = None  # the framed bytes of the next token (streaming)

    def truth(self) -> dict[str, Any]:
        return {"id": self.rid, "arrival_ns": self.arrival_ns, "token_ns": self.token_ns.tolist(),
                "status": self.status, "prompt_tokens": self.prompt_len, "completion_tokens": self.n_total,
                "reasoning_tokens": self.n_reason}


class Emulator:
    """The application: HTTP routes, the engine loop, metrics and truth."""

    def __init__(self, profile: Profile, *, faults: Faults | None = None, seed: int = 0,
                 served_model_name: str | None = None, truth_limit: int = 50_000) -> None:
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
        self._tok_json: dict[int, bytes] = {}
        self._truth: deque[_Stream] = deque(maxlen=truth_limit)
        self._inbox: deque[tuple[HttpConn, dict[str, str], bytes, bool, int]] = deque()
        self._wake: asyncio.Event | None = None
        self._late = [0] * (_LATE_BUCKETS + 1)
        self._late_max_ns = 0
        self._early = 0  # tokens written before their emission time (the burst's first half)
        self.ttft = Histogram(TTFT_BUCKETS_S)
        self.itl = Histogram(ITL_BUCKETS_S)
        self.tpot = Histogram(ITL_BUCKETS_S)
        self.e2e = Histogram(E2E_BUCKETS_S)
        self.queue = Histogram(E2E_BUCKETS_S)
        self.prefill = Histogram(E2E_BUCKETS_S)
        self.decode = Histogram(E2E_BUCKETS_S)
        self.iteration_tokens = Histogram(ITERATION_TOKENS_BUCKETS)
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self._task: asyncio.Task[None] | None = None
        self._send_cost_s = 5e-6  # EWMA of the wall time to emit one token (send + bookkeeping)
        self._burst_s = 0.0  # total wall time spent in token bursts
        self._wake_late_s: deque[float] = deque(maxlen=10_000)  # burst start - planned start, recent steps
        self.scheduling = "normal"  # what the loop runs under (emulator --realtime-priority)

    # ------------------------------------------------------------------ engine loop
    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._task.add_done_callback(_report_crash)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        engine = self.engine
        assert self._wake is not None
        next_start: float | None = None
        perf = time.perf_counter
        while True:
            if self._inbox:
                self._admit()
            if not engine.has_work():
                self._wake.clear()
                if not self._inbox:
                    await self._wake.wait()
                    next_start = None
                continue
            now = perf()
            # Back to back from the last deadline (late steps catch up, keeping the model's throughput);
            # if we fell more than _MAX_BEHIND_S behind (or were idle), restart the clock at now.
            start = next_start if next_start is not None and now - next_start < _MAX_BEHIND_S else now
            res = engine.step(start)
            if res is not None:
                self.iteration_tokens.observe(res.decode_seqs + res.prefill_tokens)
            if res is None:
                next_start = None
                await asyncio.sleep(0)
                continue
            deadline = start + res.duration_s
            # The step's tokens leave in one burst (a send per stream); centre it on the deadline.
            # Everything but the sends is made ready now, before the wait.
            plan = self._plan(res)
            n = len(plan[0]) + len(plan[2])
            half = min(0.003, 0.5 * n * self._send_cost_s)
            go = deadline - half
            rem = go - perf()
            # Coarse wait on the loop (its timers have ~1 ms granularity), always yielding once so
            # new requests are read; then a fine sleep to the burst start.
            await asyncio.sleep(rem - 0.002 if rem > 0.0025 else 0)
            rem = go - perf()
            while rem > 0:
                if rem > 0.0003:
                    time.sleep(rem - 0.0002)
                rem = go - perf()
            if n:
                t0 = perf()
                t1 = self._emit(plan, int(deadline * 1e9))
                # per-token burst cost, clamped so a burst stretched by descheduling does not skew it
                sample = min(max((t1 - t0) / n, 1e-6), 40e-6)
                self._send_cost_s = 0.8 * self._send_cost_s + 0.2 * sample
                self._burst_s += t1 - t0
                self._wake_late_s.append(t0 - go)
            next_start = deadline

    def _chunk(self, st: _Stream, i: int) -> bytes:
        """The framed bytes of token i of a streaming response (the last one closes the stream)."""
        tid = st.ids[i]
        tj = self._tok_json
        text = tj.get(tid)
        if text is None:
            text = tj[tid] = orjson.dumps(self.tok.token_text(tid))
        tpl = st.tpl
        pre = tpl.reasoning_pre if i < st.n_reason else tpl.content_pre
        if i + 1 == st.n_total:
            data = pre + text + (tpl.last_post_stop if st.finish == "stop" else tpl.last_post_length)
            if st.usage:
                data += tpl.usage_chunk(self._usage(st))
            return b"%x\r\n%s\r\n" % (len(data), data) + _DONE + b"0\r\n\r\n"
        data = pre + text + tpl.post
        if i == 0 and tpl.role_chunk:
            data = tpl.role_chunk + data
        return b"%x\r\n%s\r\n" % (len(data), data)

    def _plan(self, res: StepResult) -> tuple[list[_Stream], list[tuple[Any, bytes]], list[_Stream]]:
        """The step's burst, made ready before its time: (streams that get bytes, their (write, bytes)
        in the same order, streams whose token leaves no bytes now: non-streaming ones)."""
        streams: list[_Stream] = []
        sends: list[tuple[Any, bytes]] = []
        quiet: list[_Stream] = []
        for sim in res.tokens or ():
            st: _Stream = sim.payload
            if st.status != "running":
                st.sent += 1  # stalled or gone: the engine still counts its token, nothing is written
                continue
            data = st.next
            if data is None:
                quiet.append(st)
            else:
                streams.append(st)
                sends.append((st.write, data))
        return streams, sends, quiet

    def _emit(self, plan: tuple[list[_Stream], list[tuple[Any, bytes]], list[_Stream]], deadline_ns: int) -> float:
        """Write the step's tokens (the burst: one send per stream, nothing else), then do the
        bookkeeping. Returns the burst's end (perf_counter seconds)."""
        streams, sends, quiet = plan
        perf_ns = time.perf_counter_ns
        stamps: list[int] = []
        stamp = stamps.append
        t0 = perf_ns()
        for write, data in sends:
            stamp(perf_ns())  # just before the bytes go to the socket: causal with any client
            try:
                write(data)
            except RuntimeError:  # uvloop: the client went away since the plan was made
                pass
        burst_end = time.perf_counter()
        sent = list(zip(streams, stamps))
        if quiet:  # non-streaming: the token was generated now; its body leaves with the last one
            sent += [(st, t0) for st in quiet]
        # bookkeeping, off the burst
        late = self._late
        itl_counts = self.itl.counts
        itl_bounds = self.itl.bounds
        itl_sum = 0.0
        itl_n = 0
        max_late = self._late_max_ns
        early = 0
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
                self.ttft.observe((t - st.arrival_ns) * 1e-9)
            d = t - deadline_ns
            if d < 0:
                d = -d  # early (the burst is centred on the deadline): count |error|
                early += 1
            if d > max_late:
                max_late = d
            b = d // _LATE_BUCKET_NS
            late[b if b < _LATE_BUCKETS else _LATE_BUCKETS] += 1
            if i + 1 == st.n_total:
                if st.stream:
                    st.conn.finish_stream()
                else:
                    self._respond_full(st)
                self._finished(st, t)
            elif i + 1 == st.fault_at:
                self._apply_fault(st)
            elif st.stream:
                st.next = self._chunk(st, i + 1)
        self._late_max_ns = max_late
        self._early += early
        self.itl.total += itl_sum
        self.itl.n += itl_n
        return burst_end

    def _finished(self, st: _Stream, t_ns: int) -> None:
        st.status = "ok"
        st.conn = None
        self.success[st.finish] += 1
        self.e2e.observe((t_ns - st.arrival_ns) * 1e-9)
        sim = st.sim
        if sim is not None and sim.first_scheduled_s >= 0:
            sched_ns = int(sim.first_scheduled_s * 1e9)
            self.queue.observe(max(0, sched_ns - st.arrival_ns) * 1e-9)
            self.prefill.observe(max(0, st.token_ns[0] - sched_ns) * 1e-9)
            self.decode.observe((t_ns - st.token_ns[0]) * 1e-9)
        if st.n_total > 1:
            self.tpot.observe((t_ns - st.token_ns[0]) * 1e-9 / (st.n_total - 1))

    def _apply_fault(self, st: _Stream) -> None:
        if st.fault == "drop":
            st.status = "dropped"
            conn = st.conn
            st.conn = None
            if st.sim is not None:
                self.engine.abort(st.sim)
            self.success["abort"] += 1
            conn.close()
        elif st.fault == "stall":
            st.status = "stalled"  # the engine finishes it; nothing more is written

    def _usage(self, st: _Stream) -> dict[str, Any]:
        return usage_dict(st.prompt_len, st.n_total, st.n_reason if st.chat and self.profile.reasoning else None)

    def _respond_full(self, st: _Stream) -> None:
        ids = st.ids[: st.n_total]
        if st.chat:
            reasoning = self.tok.decode(ids[: st.n_reason]) if self.profile.reasoning else None
            body = chat_body(rid=st.rid, created=self._created, model=self.model,
                             content=self.tok.decode(ids[st.n_reason:]), reasoning=reasoning,
                             finish_reason=st.finish, usage=self._usage(st))
        else:
            body = completion_body(rid=st.rid, created=self._created, model=self.model, text=self.tok.decode(ids),
                                   finish_reason=st.finish, usage=self._usage(st))
        st.conn.respond(200, body, extra=(("x-request-id", st.rid),))

    # ------------------------------------------------------------------ HTTP
    def on_disconnect(self, conn: HttpConn) -> None:
        st = conn.current
        if isinstance(st, _Stream) and st.status in ("running", "stalled"):
            if st.status == "running":
                st.status = "aborted"
                self.success["abort"] += 1
            if st.sim is not None:
                self.engine.abort(st.sim)
            st.conn = None

    def dispatch(self, conn: HttpConn, method: str, path: str, query: str, headers: dict[str, str],
                 body: bytes) -> None:
        try:
            if method == "POST":
                if path == "/v1/chat/completions":
                    return self._enqueue(conn, headers, body, True)
                if path == "/v1/completions":
                    return self._enqueue(conn, headers, body, False)
                if path in ("/tokenize", "/v1/tokenize"):
                    return self._tokenize(conn, body)
                if path in ("/detokenize", "/v1/detokenize"):
                    return self._detokenize(conn, body)
            elif method == "GET":
                if path == "/metrics":
                    return conn.respond(200, self._metrics(), "text/plain; version=0.0.4; charset=utf-8")
                if path == "/health":
                    return conn.respond(200, b"", "text/plain")
                if path == "/version":
                    return conn.respond(200, orjson.dumps({"version": _VERSION}))
                if path == "/v1/models":
                    return conn.respond(200, self._models())
                if path == "/_servebench/truth":
                    return conn.respond(200, self._truth_body(query))
                if path == "/_servebench/pacing":
                    return conn.respond(200, orjson.dumps(self.pacing()))
                if path == "/_servebench/info":
                    return conn.respond(200, orjson.dumps(self._info()))
            return conn.respond(404, error_body(f"no route {method} {path}", "NotFoundError", 404))
        except _BadRequest as e:
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
        return orjson.dumps({"object": "list", "data": [{
            "id": self.model, "object": "model", "created": self._created, "owned_by": "servebench",
            "root": self.model, "parent": None, "max_model_len": self.profile.max_model_len, "permission": []}]})

    def _info(self) -> dict[str, Any]:
        e = self.profile.engine
        return {"profile": self.profile.name, "model": self.model, "description": self.profile.description,
                "max_model_len": e.max_model_len, "max_num_seqs": e.max_num_seqs, "kv_tokens": e.kv_tokens,
                "block_size": e.block_size, "max_num_batched_tokens": e.max_num_batched_tokens,
                "reasoning": self.profile.reasoning, "faults": {
                    "error_500": self.faults.error_500, "error_429": self.faults.error_429,
                    "drop": self.faults.drop, "stall": self.faults.stall, "seed": self.faults.seed}}

    def pacing(self) -> dict[str, Any]:
        """Emission error |actual write - engine emission time| over all tokens so far, in ms."""
        n = sum(self._late)

        def q(p: float) -> float:
            if n == 0:
                return 0.0
            rank = p * n
            acc = 0
            for i, c in enumerate(self._late):
                acc += c
                if acc >= rank:
                    return (i + 1) * _LATE_BUCKET_NS / 1e6
            return self._late_max_ns / 1e6

        return {"tokens": n, "p50_ms": q(0.5), "p90_ms": q(0.9), "p99_ms": q(0.99), "p999_ms": q(0.999),
                "max_ms": self._late_max_ns / 1e6, "steps": self.engine.stats.steps,
                "emit_wall_s": self._burst_s, "send_cost_us": self._send_cost_s * 1e6,
                "wake_late_p50_ms": _pct(self._wake_late_s, 0.5) * 1e3,
                "wake_late_p99_ms": _pct(self._wake_late_s, 0.99) * 1e3,
                "early_share": self._early / n if n else 0.0,
                "process_cpu_s": time.process_time(), "scheduling": self.scheduling}

    def _metrics(self) -> bytes:
        s = self.engine.stats
        e = self.profile.engine
        return render_metrics(
            model=self.model,
            info={"vllm:cache_config_info": ("Information of the LLMEngine CacheConfig", {
                "block_size": str(e.block_size), "num_gpu_blocks": str(e.kv_blocks),
                "enable_prefix_caching": str(e.enable_prefix_caching), "cache_dtype": "auto"})},
            gauges={
                "vllm:num_requests_running": ("Number of requests in model execution batches.", s.running),
                "vllm:num_requests_waiting": ("Number of requests waiting to be processed.", s.waiting),
                "vllm:kv_cache_usage_perc": ("KV-cache usage. 1 means 100 percent usage.", s.kv_usage),
            },
            counters={
                "vllm:num_preemptions": ("Cumulative number of preemptions.", s.preemptions),
                "vllm:prompt_tokens": ("Number of prefill tokens processed.", s.prompt_tokens),
                "vllm:generation_tokens": ("Number of generation tokens processed.", s.generation_tokens),
                "vllm:prefix_cache_queries": ("Prefix cache queries, in tokens.", s.prefix_queries),
                "vllm:prefix_cache_hits": ("Prefix cache hits, in tokens.", s.prefix_hits),
                "vllm:request_success": ("Count of successfully processed requests.", dict(self.success)),
            },
            histograms={
                "vllm:time_to_first_token_seconds": ("Histogram of time to first token in seconds.", self.ttft),
                "vllm:inter_token_latency_seconds": ("Histogram of inter-token latency in seconds.", self.itl),
                "vllm:request_time_per_output_token_seconds": (
                    "Histogram of time_per_output_token_seconds per request.", self.tpot),
                "vllm:e2e_request_latency_seconds": ("Histogram of e2e request latency in seconds.", self.e2e),
                "vllm:request_queue_time_seconds": (
                    "Histogram of time spent in WAITING phase for request.", self.queue),
                "vllm:request_prefill_time_seconds": (
                    "Histogram of time spent in PREFILL phase for request.", self.prefill),
                "vllm:request_decode_time_seconds": (
                    "Histogram of time spent in DECODE phase for request.", self.decode),
                "vllm:iteration_tokens_total": ("Histogram of number of tokens per engine_step.",
                                                self.iteration_tokens),
            },
        )

    # ------------------------------------------------------------------ tokenize
    def _json(self, body: bytes) -> dict[str, Any]:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise _BadRequest("request body is not valid JSON") from None
        if not isinstance(data, dict):
            raise _BadRequest("request body must be a JSON object")
        return data

    def _check_model(self, data: dict[str, Any]) -> None:
        m = data.get("model")
        if m is not None and m not in (self.model, self.profile.name):
            raise _BadRequest(f"The model `{m}` does not exist.", 404, "NotFoundError")

    def _prompt_ids(self, data: dict[str, Any], chat: bool) -> list[int]:
        if chat:
            msgs = data.get("messages")
            if not isinstance(msgs, list) or not msgs:
                raise _BadRequest("'messages' must be a non-empty list")
            return self.tok.encode(chat_prompt(msgs))
        p = data.get("prompt")
        if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
            p = p[0]
        if isinstance(p, str):
            return self.tok.encode(p)
        if isinstance(p, list) and all(isinstance(x, int) for x in p):
            return list(p)
        raise _BadRequest("'prompt' must be a string or a list of token ids (one prompt)")

    def _tokenize(self, conn: HttpConn, body: bytes) -> None:
        data = self._json(body)
        self._check_model(data)
        ids = self._prompt_ids(data, chat="messages" in data)
        conn.respond(200, orjson.dumps({"count": len(ids), "max_model_len": self.profile.max_model_len,
                                        "tokens": ids, "token_strs": None}))

    def _detokenize(self, conn: HttpConn, body: bytes) -> None:
        data = self._json(body)
        self._check_model(data)
        ids = data.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(x, int) and 0 <= x < self.tok.vocab_size for x in ids):
            raise _BadRequest("'tokens' must be a list of token ids")
        conn.respond(200, orjson.dumps({"prompt": self.tok.decode(ids)}))

    # ------------------------------------------------------------------ generate
    def _enqueue(self, conn: HttpConn, headers: dict[str, str], body: bytes, chat: bool) -> None:
        """Note the arrival now; the engine loop admits it at the next step boundary (see `_admit`)."""
        self._inbox.append((conn, headers, body, chat, time.perf_counter_ns()))
        assert self._wake is not None
        self._wake.set()

    def _admit(self) -> None:
        """Parse, tokenize and queue the requests that arrived since the last step.

        Done by the engine loop right after a step's token burst, where the work cannot delay a
        burst (the next step starts at the previous deadline; the engine only schedules at step
        boundaries anyway), rather than in the socket callbacks that run while a burst is due.
        """
        inbox = self._inbox
        while inbox:
            conn, headers, body, chat, arrival_ns = inbox.popleft()
            if conn.closed:
                continue
            try:
                self._generate(conn, headers, body, chat=chat, arrival_ns=arrival_ns)
            except _BadRequest as e:
                conn.respond(e.status, error_body(str(e), e.kind, e.status))
            except Exception as e:  # a bug: answer 500 rather than hang the connection
                conn.respond(500, error_body(f"{type(e).__name__}: {e}", "InternalServerError", 500))

    def _generate(self, conn: HttpConn, headers: dict[str, str], body: bytes, *, chat: bool,
                  arrival_ns: int) -> None:
        data = self._json(body)
        self._check_model(data)
        rid = headers.get("x-request-id") or f"{next(self._ids):08x}"
        if int(data.get("n") or 1) != 1:
            raise _BadRequest("only n=1 is supported")
        ids = self._prompt_ids(data, chat)
        prompt_len = len(ids)
        st = _Stream()
        st.rid, st.chat, st.arrival_ns, st.prompt_len = rid, chat, arrival_ns, prompt_len
        st.stream = bool(data.get("stream", False))
        opts = data.get("stream_options") or {}
        st.usage = bool(opts.get("include_usage", False)) if isinstance(opts, dict) else False
        st.n_reason = 0
        st.n_total = 0
        self._plan_output(st, data, prompt_len)
        kind = self._draw_fault()
        hdr = (("x-request-id", rid),)
        if kind in ("error_500", "error_429"):
            st.status = kind
            self._truth.append(st)
            status = 500 if kind == "error_500" else 429
            msg = "emulated internal error" if status == 500 else "emulated rate limit"
            return conn.respond(status, error_body(msg, "InternalServerError" if status == 500 else
                                                   "RateLimitError", status), extra=hdr)
        if kind is not None:
            st.fault = kind
            st.fault_at = 1 + self._fault_rng.randrange(st.n_total - 1) if st.n_total > 1 else 0
        start = zlib.crc32(f"{self._seed}:{rid}".encode()) & 0xFFFF  # stable across processes
        ring = self._text_ids
        n = st.n_total
        st.ids = ring[start:start + n] if start + n <= len(ring) else [ring[(start + k) & 0xFFFF] for k in range(n)]
        st.conn = conn
        st.write = conn.transport.write  # the burst calls it directly (HttpConn.write adds a frame)
        st.tpl = ChunkTemplates(chat=chat, rid=rid, created=self._created, model=self.model) if st.stream else None
        if st.stream:
            st.next = self._chunk(st, 0)
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
        sim = SimRequest(rid, prompt_len, st.n_total, arrival_s=arrival_ns / 1e9, prompt_token_ids=ids, payload=st)
        st.sim = sim
        try:
            self.engine.add(sim)
        except ValueError as e:
            st.status = "rejected"
            conn.current = None
            raise _BadRequest(str(e)) from None
        if st.stream:
            conn.start_stream(extra=hdr)
        assert self._wake is not None
        self._wake.set()

    def _plan_output(self, st: _Stream, data: dict[str, Any], prompt_len: int) -> None:
        """Decide the output length (seeded EOS unless ignore_eos) and the reasoning share."""
        limit = self.profile.max_model_len - prompt_len
        mt = data.get("max_completion_tokens", data.get("max_tokens"))
        if limit < 1:
            raise _BadRequest(f"This model's maximum context length is {self.profile.max_model_len} tokens. "
                              f"However, your request has {prompt_len} input tokens.")
        if mt is not None:
            if not isinstance(mt, int) or mt < 1:
                raise _BadRequest("max_tokens must be a positive integer")
            if mt > limit:
                raise _BadRequest(f"This model's maximum context length is {self.profile.max_model_len} tokens. "
                                  f"However, you requested {prompt_len + mt} tokens ({prompt_len} in the "
                                  f"messages, {mt} in the completion). Please reduce the length of the "
                                  f"messages or completion.")
        min_tokens = int(data.get("min_tokens") or 0)
        ignore_eos = bool(data.get("ignore_eos", False))
        rng = random.Random(zlib.crc32(f"{self._seed}:{st.rid}:{prompt_len}".encode()))
        p = self.profile
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
        st.n_reason = min(r, n)
        st.finish = finish

    def _draw_fault(self) -> str | None:
        f = self.faults
        if not (f.error_500 or f.error_429 or f.drop or f.stall):
            return None
        u = self._fault_rng.random()
        for kind, frac in (("error_500", f.error_500), ("error_429", f.error_429), ("drop", f.drop),
                           ("stall", f.stall)):
            if u < frac:
                return kind
            u -= frac
        return None


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        import traceback

        traceback.print_exception(task.exception(), file=sys.stderr)
        print("servebench.emulator.server: engine loop crashed", file=sys.stderr)


def _pct(values: Any, p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))] if v else 0.0


class _BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
