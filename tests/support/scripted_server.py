"""A scripted OpenAI-compatible streaming server with known timing and injectable faults.

Ground truth for client tests: TTFT and the gap between chunks are exactly what the flags say
(paced on absolute deadlines from the request's arrival, so the truth does not drift), and each
fault is produced on the wire for real. Runs in its own process so its CPU never shares the
client's GIL:

    python tests/support/scripted_server.py --port 0 --ttft-ms 100 --itl-ms 20 [--faults ...]

prints `READY http://127.0.0.1:PORT` when listening. Minimal HTTP/1.1 with keep-alive and chunked
transfer encoding, on raw asyncio transports (uvloop when present) so it can pace tens of
thousands of chunks per second.

--trtllm-metrics 404|json serves a TensorRT-LLM-shaped Prometheus page (`trtllm_` names, live counts of
what it served) at GET /prometheus/metrics, and at GET /metrics a 404 or, as trtllm-serve does, JSON.

--cache-reset vllm|sglang serves that engine's prefix-cache reset as the engine answers it (vLLM:
POST /reset_prefix_cache, 200 with an empty body, 409 {"detail": ...} while requests run; SGLang:
POST /flush_cache, 200 "Cache flushed. ..." text, 400 while requests run) and a /metrics page with one
of that engine's gauges, so the capability probe recognises the engine; GET /stats counts the resets.

--faults takes KIND:FRACTION pairs, assigned to requests by a seeded shuffle:
  500, 429        HTTP error with a JSON body
  reset           connection aborted after 3 chunks
  stall           3 chunks, then silence (the client's --timeout must end it)
  malformed       a non-JSON data line after 3 chunks
  truncated       the stream ends cleanly after 3 chunks: no finish_reason, no [DONE]
  nodone          complete stream with finish_reason and usage but no [DONE] (transformers serve)
  bigline         one chunk carries a 1 MB content string in a single SSE line
  u2028           chunks carry U+2028 / U+2029 / U+0085 inside the JSON text
  inband_error    an {"error": ...} object inside a 200 stream
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import random
import sys
import time
from typing import Any

_perf_ns = time.perf_counter_ns


class Config:
    def __init__(self, args: argparse.Namespace) -> None:
        self.ttft_s = args.ttft_ms / 1e3
        self.itl_s = args.itl_ms / 1e3
        # --ttft-spread-ms: an exponential extra on each TTFT (seeded), so its percentiles have a
        # continuous tail instead of a cliff at the fixed value
        self.ttft_spread_s = getattr(args, "ttft_spread_ms", 0.0) / 1e3
        self._rng = random.Random(args.seed)
        self.tokens_per_chunk = args.tokens_per_chunk
        self.role_chunk = not args.no_role_chunk
        self.usage_chunk = not args.no_usage_chunk
        self.reasoning_tokens = args.reasoning_tokens
        self.model = args.model
        faults: list[str] = []
        for part in filter(None, (args.faults or "").split(",")):
            kind, _, frac = part.partition(":")
            faults += [kind] * round(float(frac) * 1000)
        faults += ["ok"] * max(0, 1000 - len(faults))
        random.Random(args.seed).shuffle(faults)
        self.faults = faults
        self.count = 0
        self.lateness_ms: list[float] = []  # paced chunk writes: actual - due, for GET /stats
        # GET /truth: per request (the x-request-id header), arrival and the perf_counter_ns of each
        # token chunk's write (CLOCK_MONOTONIC: the client's perf_counter_ns on the same host)
        self.truth: dict[str, dict] = {}
        self.trtllm_metrics: str | None = getattr(args, "trtllm_metrics", None)
        self.served = {"running": 0, "prompt": 0, "generated": 0, "ttft_sum": 0.0, "ttft_n": 0}
        self.cache_reset: str | None = getattr(args, "cache_reset", None)
        self.cache_resets = 0  # POSTs to the reset endpoint answered 200
        # --write-whole: each streamed response leaves in one write (same bytes): the server's CPU per
        # token drops ~20x, so a no-delay server does not take the cores the clients under test need
        self.write_whole: bool = getattr(args, "write_whole", False)
        self.whole_bodies: dict[tuple[bool, int], bytes] = {}  # (chat, tokens) -> a fault-free body, after the head

    def count_served(self, n_out: int, ttft_s: float | None) -> None:
        """One streamed response sent: the counters GET /metrics reports."""
        served = self.served
        served["prompt"] += 7
        served["generated"] += n_out
        if ttft_s is not None:
            served["ttft_sum"] += ttft_s
            served["ttft_n"] += 1

    def ttft(self) -> float:
        """This request's TTFT in seconds."""
        return self.ttft_s + (self._rng.expovariate(1 / self.ttft_spread_s) if self.ttft_spread_s > 0 else 0.0)

    def next_fault(self) -> str:
        kind = self.faults[self.count % len(self.faults)]
        self.count += 1
        return kind


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def _chunk_obj(chat: bool, reasoning: bool, text: str) -> dict:
    if chat:
        delta = {"reasoning_content": text} if reasoning else {"content": text}
        return {
            "id": "x",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
    return {"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": None}]}


@functools.lru_cache(maxsize=64)
def _plain_chunk(chat: bool, reasoning: bool, toks: int) -> bytes:
    return _chunk(_sse(_chunk_obj(chat, reasoning, " tok" * toks)))


class _Whole:
    """A transport stand-in that gathers one response's writes and sends them in one (`--write-whole`)."""

    def __init__(self, tr: Any) -> None:
        self.tr = tr
        self.parts: list[bytes] = []
        self.write = self.parts.append

    def abort(self) -> None:
        self.flush()
        self.tr.abort()

    def flush(self) -> None:
        if self.parts:
            self.tr.write(b"".join(self.parts))
            self.parts.clear()


class Handler(asyncio.Protocol):
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.closed = False
        self.serving: asyncio.Task[None] | None = None  # the request being answered (a strong reference)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._maybe_dispatch()

    def _maybe_dispatch(self) -> None:
        if self.busy:
            return
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buf[:head_end].decode("latin-1")
        lines = head.split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == "content-length":
                length = int(v.strip())
        if len(self.buf) < head_end + 4 + length:
            return
        body = self.buf[head_end + 4 : head_end + 4 + length]
        self.buf = self.buf[head_end + 4 + length :]
        t_arrival = time.perf_counter()
        self.busy = True
        self.serving = asyncio.ensure_future(self._serve(method, path, body, t_arrival))

    def _send_simple(self, status: str, obj: object) -> None:
        payload = json.dumps(obj).encode()
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status.encode(), len(payload), payload)
        )

    def _send_raw(self, status: str, payload: bytes, ctype: str | None) -> None:
        assert self.transport is not None
        head = b"HTTP/1.1 %s\r\n" % status.encode()
        if ctype:
            head += b"Content-Type: %s\r\n" % ctype.encode()
        self.transport.write(head + b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))

    def _reset(self, path: str) -> bool:
        """The engine's prefix-cache reset, with the replies its server sends (vllm/entrypoints/serve
        cache router; sglang/srt/entrypoints/http_server.py flush_cache); False: not this engine's path."""
        cfg = self.cfg
        busy = cfg.served["running"] > 0
        if cfg.cache_reset == "vllm" and path == "/reset_prefix_cache":
            if busy:
                self._send_simple("409 Conflict", {"detail": "Prefix cache reset failed."})
            else:
                cfg.cache_resets += 1
                self._send_raw("200 OK", b"", None)  # FastAPI Response(status_code=200)
            return True
        if cfg.cache_reset == "sglang" and path == "/flush_cache":
            text = (
                b"Cache flushed.\nPlease check backend logs for more details. (When there are running or "
                b"waiting requests, the operation will not be performed.)\n"
            )
            if not busy:
                cfg.cache_resets += 1
            self._send_raw(
                "400 Bad Request" if busy else "200 OK",
                text if not busy else b"Flush cache failed.\n",
                "text/plain; charset=utf-8",
            )
            return True
        return False

    def _send_text(self, text: str) -> None:
        payload = text.encode()
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
        )

    async def _serve(self, method: str, path: str, body: bytes, t0: float) -> None:
        try:
            if method == "GET" or not path.endswith("completions"):
                if method == "POST" and self._reset(path):
                    pass
                elif method == "GET" and path.endswith("/stats"):
                    late = sorted(self.cfg.lateness_ms) or [0.0]
                    pick = lambda q: late[min(len(late) - 1, int(q * len(late)))]
                    self._send_simple(
                        "200 OK",
                        {
                            "writes": len(self.cfg.lateness_ms),
                            "lateness_ms_p50": pick(0.5),
                            "lateness_ms_p99": pick(0.99),
                            "lateness_ms_max": late[-1],
                            "cache_resets": self.cfg.cache_resets,
                        },
                    )
                elif method == "GET" and self.cfg.cache_reset and path == "/metrics":
                    gauge = "vllm:num_requests_running" if self.cfg.cache_reset == "vllm" else "sglang:num_running_reqs"
                    self._send_text(
                        f'# TYPE {gauge} gauge\n{gauge}{{model_name="{self.cfg.model}"}} '
                        f"{float(self.cfg.served['running'])}\n"
                    )
                elif method == "GET" and path.endswith("/truth"):
                    self._send_simple("200 OK", {"clock": "perf_counter_ns", "requests": self.cfg.truth})
                elif method == "GET" and self.cfg.trtllm_metrics and path == "/prometheus/metrics":
                    self._send_text(_trtllm_page(self.cfg))
                elif method == "GET" and self.cfg.trtllm_metrics == "json" and path == "/metrics":
                    self._send_simple("200 OK", [])  # trtllm-serve: JSON iteration stats, drained by each read
                elif method == "GET" and path.endswith("/models"):
                    self._send_simple("200 OK", {"object": "list", "data": [{"id": self.cfg.model, "object": "model"}]})
                else:
                    self._send_simple("404 Not Found", {"error": "not found"})
                return
            req = json.loads(body or b"{}")
            self.cfg.served["running"] += 1
            try:
                await self._completion(path, req, t0)
            finally:
                self.cfg.served["running"] -= 1
        finally:
            self.busy = False
            if not self.closed:
                self._maybe_dispatch()

    async def _completion(self, path: str, req: dict, t0: float) -> None:
        cfg = self.cfg
        tr = self.transport
        assert tr is not None
        chat = path.endswith("/chat/completions")
        fault = cfg.next_fault()
        if fault in ("500", "429"):
            self._send_simple(
                "500 Internal Server Error" if fault == "500" else "429 Too Many Requests",
                {"error": {"message": f"injected {fault}", "type": "injected"}},
            )
            return
        n_out = int(req.get("max_tokens") or 16)
        if not req.get("stream"):
            await asyncio.sleep(max(0.0, t0 + cfg.ttft() + cfg.itl_s * (n_out - 1) - time.perf_counter()))
            text = " tok" * n_out
            choice = {"index": 0, "finish_reason": "length"}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            usage = {"prompt_tokens": 7, "completion_tokens": n_out, "total_tokens": n_out + 7}
            self._send_simple("200 OK", {"id": "x", "choices": [choice], "usage": usage})
            return
        if cfg.write_whole and cfg.itl_s == 0:
            key = (chat, n_out)
            if fault == "ok" and key in cfg.whole_bodies:  # the same bytes as last time, after the head
                head = (
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                    b"x-request-id: %d\r\n\r\n" % cfg.count
                )
                tr.write(head + cfg.whole_bodies[key])
                cfg.count_served(n_out, time.perf_counter() - t0)
                return
            whole = _Whole(tr)
            try:
                await self._stream(chat, fault, n_out, t0, whole)
                if fault == "ok" and not cfg.reasoning_tokens:
                    joined = b"".join(whole.parts)
                    cfg.whole_bodies[key] = joined[joined.index(b"\r\n\r\n") + 4 :]
            finally:
                whole.flush()
            return
        await self._stream(chat, fault, n_out, t0, tr)

    async def _stream(self, chat: bool, fault: str, n_out: int, t0: float, tr: Any) -> None:
        cfg = self.cfg
        rid = cfg.count
        token_ns: list[int] = []
        if len(cfg.truth) < 100_000:
            cfg.truth[str(rid)] = {"arrival_ns": int(t0 * 1e9), "token_ns": token_ns}
        tr.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            b"x-request-id: %d\r\n\r\n" % rid
        )
        if chat and cfg.role_chunk:
            tr.write(
                _chunk(
                    _sse(
                        {
                            "id": "x",
                            "object": "chat.completion.chunk",
                            "choices": [
                                {"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}
                            ],
                        }
                    )
                )
            )
        k = cfg.tokens_per_chunk
        ttft_s = cfg.ttft()
        n_chunks = (n_out + k - 1) // k
        sent = 0
        for i in range(n_chunks):
            deadline = t0 + ttft_s + i * cfg.itl_s * k
            delay = deadline - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.closed:
                return
            if len(cfg.lateness_ms) < 2_000_000:
                cfg.lateness_ms.append((time.perf_counter() - deadline) * 1e3)
            if i == 3 and fault in ("reset", "stall", "malformed", "truncated", "inband_error"):
                if fault == "reset":
                    tr.abort()
                    return
                if fault == "stall":
                    if isinstance(tr, _Whole):
                        tr.flush()
                    await asyncio.sleep(3600)
                    return
                if fault == "malformed":
                    tr.write(_chunk(b"data: {this is not json\n\n"))
                    continue
                if fault == "inband_error":
                    tr.write(_chunk(_sse({"error": {"message": "injected in-band error", "code": 500}})))
                    tr.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
                    return
                tr.write(b"0\r\n\r\n")  # truncated
                return
            toks = min(k, n_out - sent)
            sent += toks
            is_reasoning = sent <= cfg.reasoning_tokens
            if fault == "bigline" and i == 1:
                text = "x" * (1 << 20)
            elif fault == "u2028":
                text = " a\u2028b\u2029c\u0085" if toks == 1 else " ".join(["a\u2028b"] * toks)
            else:  # the common chunk: encoded once, so pacing 512 streams costs writes only
                token_ns.append(time.perf_counter_ns())
                tr.write(_plain_chunk(chat, is_reasoning, toks))
                continue
            token_ns.append(time.perf_counter_ns())
            tr.write(_chunk(_sse(_chunk_obj(chat, is_reasoning, text))))
        usage = {"prompt_tokens": 7, "completion_tokens": n_out, "total_tokens": n_out + 7}
        cfg.count_served(n_out, token_ns[0] / 1e9 - t0 if token_ns else None)
        if cfg.reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": min(cfg.reasoning_tokens, n_out)}
        final = {"id": "x", "choices": [{"index": 0, "delta": {}, "text": "", "finish_reason": "length"}]}
        if cfg.usage_chunk:
            tr.write(_chunk(_sse(final)))
            tr.write(_chunk(_sse({"id": "x", "choices": [], "usage": usage})))
        else:
            final["usage"] = usage
            tr.write(_chunk(_sse(final)))
        if fault != "nodone":
            tr.write(_chunk(b"data: [DONE]\n\n"))
        tr.write(b"0\r\n\r\n")


def _trtllm_page(cfg: Config) -> str:
    """What trtllm-serve's /prometheus/metrics says (prometheus_client text), from what this server served."""
    s = cfg.served
    lab = f'engine_type="trtllm",model_name="{cfg.model}"'
    return "".join(
        [
            "# HELP trtllm_num_requests_running Number of requests currently running.\n",
            "# TYPE trtllm_num_requests_running gauge\n",
            f"trtllm_num_requests_running{{{lab}}} {float(s['running'])}\n",
            "# HELP trtllm_num_requests_waiting Number of requests waiting in the queue.\n",
            "# TYPE trtllm_num_requests_waiting gauge\n",
            f"trtllm_num_requests_waiting{{{lab}}} 0.0\n",
            "# HELP trtllm_kv_cache_utilization KV cache utilization (0-1).\n",
            "# TYPE trtllm_kv_cache_utilization gauge\n",
            f"trtllm_kv_cache_utilization{{{lab}}} 0.125\n",
            "# HELP trtllm_prompt_tokens_total Number of prefill tokens processed.\n",
            "# TYPE trtllm_prompt_tokens_total counter\n",
            f"trtllm_prompt_tokens_total{{{lab}}} {float(s['prompt'])}\n",
            "# HELP trtllm_generation_tokens_total Number of generation tokens processed.\n",
            "# TYPE trtllm_generation_tokens_total counter\n",
            f"trtllm_generation_tokens_total{{{lab}}} {float(s['generated'])}\n",
            "# HELP trtllm_time_to_first_token_seconds Histogram of time to first token in seconds.\n",
            "# TYPE trtllm_time_to_first_token_seconds histogram\n",
            f'trtllm_time_to_first_token_seconds_bucket{{{lab},le="+Inf"}} {float(s["ttft_n"])}\n',
            f"trtllm_time_to_first_token_seconds_count{{{lab}}} {float(s['ttft_n'])}\n",
            f"trtllm_time_to_first_token_seconds_sum{{{lab}}} {s['ttft_sum']!r}\n",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--ttft-spread-ms", type=float, default=0.0, help="mean of an exponential extra on each TTFT")
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--reasoning-tokens", type=int, default=0)
    ap.add_argument("--no-role-chunk", action="store_true")
    ap.add_argument("--no-usage-chunk", action="store_true")
    ap.add_argument("--faults", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="m")
    ap.add_argument("--trtllm-metrics", choices=("404", "json"), help="serve TensorRT-LLM's /prometheus/metrics")
    ap.add_argument("--cache-reset", choices=("vllm", "sglang"), help="serve that engine's prefix-cache reset")
    ap.add_argument(
        "--write-whole",
        action="store_true",
        help="with --itl-ms 0: send each streamed response in one write (same bytes, far less server CPU)",
    )
    args = ap.parse_args()
    cfg = Config(args)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = loop.run_until_complete(
        loop.create_server(lambda: Handler(cfg), args.host, args.port, backlog=4096, reuse_address=True)
    )
    port = server.sockets[0].getsockname()[1]
    print(f"READY http://{args.host}:{port}", flush=True)
    try:
        loop.run_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
