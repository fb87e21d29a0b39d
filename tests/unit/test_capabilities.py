"""The capability probe against real aiohttp servers on 127.0.0.1 that speak different dialects.

Each test app records the bodies it received, so the tests check what went over the wire, not just
what the probe concluded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from servescope.errors import ProtocolError
from servescope.target.capabilities import (
    KNOWN_ENGINES,
    ROLES,
    Capabilities,
    detect_engine,
    probe,
)
from servescope.target.prometheus import family_names

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _chunk(
    delta: dict[str, Any] | None = None,
    *,
    text: str | None = None,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
    choices: bool = True,
    **extra: Any,
) -> bytes:
    obj: dict[str, Any] = {"id": "x", "object": "chat.completion.chunk", "model": "m", **extra}
    if choices:
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
        if text is not None:
            choice["text"] = text
        else:
            choice["delta"] = delta or {}
        obj["choices"] = [choice]
    else:
        obj["choices"] = []
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + orjson.dumps(obj) + b"\n\n"


async def _stream(request: web.Request, events: list[bytes], close: bool = False) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    if close:
        resp.force_close()  # the connection ends with the response, like llama-server after a stream
    await resp.prepare(request)
    for e in events:
        await resp.write(e)
    await resp.write_eof()
    return resp


def _tokens(body: dict[str, Any]) -> int:
    return int(body.get("max_tokens") or 3)


class App:
    """A loopback OpenAI-ish server; `dialect` picks the quirks."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.bodies: list[dict[str, Any]] = []
        self.app = web.Application()
        self.app.router.add_post("/v1/chat/completions", self.chat)
        self.app.router.add_post("/v1/completions", self.chat)
        if dialect == "vllm":
            self.app.router.add_get("/version", self.json({"version": "0.11.0"}))
            self.app.router.add_get("/metrics", self.metrics)
            self.app.router.add_post("/tokenize", self.tokenize)
        if dialect == "llamacpp":
            self.app.router.add_get("/props", self.json({"default_generation_settings": {}, "build_info": "b1-x"}))
            self.app.router.add_post("/tokenize", self.tokenize)

    @staticmethod
    def json(doc: dict[str, Any]) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            return web.json_response(doc)

        return handler

    async def metrics(self, request: web.Request) -> web.Response:
        text = (
            "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{model_name="m"} 0.0\n'
            'vllm:num_requests_waiting{model_name="m"} 0.0\n'
            'vllm:prompt_tokens_total{model_name="m"} 12.0\n'
            'vllm:generation_tokens_total{model_name="m"} 7.0\n'
            'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 1.0\n'
        )
        return web.Response(text=text, content_type="text/plain")

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        key = "prompt" if self.dialect == "vllm" else "content"
        if key not in body:
            return web.json_response({"error": "bad"}, status=400)
        return web.json_response({"tokens": [1, 2], "count": 2})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        chat = request.path.endswith("/chat/completions")
        n = _tokens(body)
        if self.dialect == "transformers":
            extra = [f for f in ("ignore_eos", "min_tokens", "top_k") if f in body]
            if extra:
                # transformers serve 5.23's exact refusal
                detail = "Unexpected fields in the request: {" + ", ".join(repr(f) for f in extra) + "}"
                return web.json_response({"detail": detail}, status=422)
            events = [_chunk({"role": "assistant", "content": ""})]
            events += [_chunk({"content": f"t{i}"}) for i in range(n - 1)]
            events.append(
                _chunk(
                    {"content": "z"},
                    finish="length",
                    usage={"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 4 + n},
                )
            )
            return await _stream(request, events)  # no [DONE]
        if self.dialect == "strict_ignore_eos" and "ignore_eos" in body:
            return web.json_response({"error": {"message": "Unrecognized request argument: ignore_eos"}}, status=400)
        if self.dialect == "bad_model":
            return web.json_response({"detail": "model 'm' not found"}, status=422)
        if self.dialect == "eos_early":
            events = [_chunk({"content": "hi"}, finish="stop"), b"data: [DONE]\n\n"]
            return await _stream(request, events)
        events = []
        if chat:
            events.append(_chunk({"role": "assistant", "content": None}))
            events += [_chunk({"content": f"t{i}"}, finish="length" if i == n - 1 else None) for i in range(n)]
        else:
            events += [_chunk(text=f"t{i}", finish="length" if i == n - 1 else None) for i in range(n)]
        usage = {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 4 + n}
        if self.dialect == "llamacpp":
            events.append(_chunk(choices=False, usage=usage, timings={"predicted_n": n}))
        else:
            events.append(_chunk(choices=False, usage=usage))
        events.append(b"data: [DONE]\n\n")
        return await _stream(request, events, close=self.dialect == "llamacpp")


def run_probe(dialect: str, api: str = "chat", extra_body: dict[str, Any] | None = None) -> tuple[Capabilities, App]:
    async def main() -> tuple[Capabilities, App]:
        app = App(dialect)
        runner = web.AppRunner(app.app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as s:
                caps = await asyncio.wait_for(
                    probe(s, f"http://127.0.0.1:{port}/v1", "m", api, timeout_s=10, extra_body=extra_body), 30
                )
        finally:
            await runner.cleanup()
        return caps, app

    return asyncio.run(main())


def test_transformers_style_422_is_adapted_and_flagged() -> None:
    caps, app = run_probe("transformers")
    assert caps.probe_status == [422, 200]
    assert sorted(caps.rejected_fields) == ["ignore_eos", "min_tokens"]
    # the retry went out without the rejected fields, the first request with them
    assert "ignore_eos" in app.bodies[0] and "min_tokens" in app.bodies[0]
    assert "ignore_eos" not in app.bodies[1] and "min_tokens" not in app.bodies[1]
    assert caps.output_len_enforced is False
    assert caps.length_enforcement == "none"
    assert caps.sends_done is False
    assert caps.usage_in_stream is True and caps.usage_chunk == "with_choices"
    assert caps.engine == "transformers"
    assert caps.probe_output_tokens == 3
    assert any("[DONE]" in n for n in caps.notes)
    assert caps.to_dict()["rejected_fields"] == caps.rejected_fields


def test_only_the_named_field_is_dropped() -> None:
    caps, app = run_probe("strict_ignore_eos")
    assert caps.probe_status == [400, 200]
    assert caps.rejected_fields == ["ignore_eos"]
    assert app.bodies[1].get("min_tokens") == 3 and "ignore_eos" not in app.bodies[1]
    assert caps.length_enforcement == "min_tokens"
    assert caps.output_len_enforced is None  # unknown engine: consistent with enforcement, not proven


def test_vllm_style_target_detected_with_metrics_and_tokenize() -> None:
    caps, app = run_probe("vllm")
    assert caps.engine == "vllm"
    assert caps.version == {"version": "0.11.0"}
    assert caps.probe_status == [200]
    assert caps.rejected_fields == []
    assert caps.output_len_enforced is True
    assert caps.length_enforcement == "ignore_eos+min_tokens"
    assert caps.sends_done is True
    assert caps.usage_chunk == "separate"
    assert caps.metrics_path == "/metrics"
    assert caps.metrics["running"] == "vllm:num_requests_running"
    assert caps.metrics["generation_tokens"] == "vllm:generation_tokens"
    assert "prefix_hits" not in caps.metrics  # not on this page
    assert caps.tokenize == {"path": "/tokenize", "body": "prompt"}
    assert caps.keeps_alive_after_stream is True  # aiohttp.web keeps the connection open
    body = app.bodies[0]
    assert body["ignore_eos"] is True and body["min_tokens"] == 3 and body["stream"] is True


def test_llamacpp_style_target_on_completions() -> None:
    caps, _ = run_probe("llamacpp", api="completions")
    assert caps.engine == "llamacpp"
    assert caps.has_timings is True
    assert caps.length_enforcement == "ignore_eos"  # llama-server ignores min_tokens
    assert caps.output_len_enforced is True
    assert caps.tokenize == {"path": "/tokenize", "body": "content"}
    assert caps.probe_output_tokens == 3
    assert caps.keeps_alive_after_stream is False
    assert any("closes the connection" in n for n in caps.notes)


def test_refusal_that_names_no_length_field_stops_before_the_clock() -> None:
    with pytest.raises(ProtocolError, match=r"HTTP 422.*stops before the clock"):
        run_probe("bad_model")


def test_extra_body_field_the_server_refuses_stops_before_the_clock() -> None:
    with pytest.raises(ProtocolError, match=r"HTTP 422.*top_k"):
        run_probe("transformers", extra_body={"top_k": 1})


def test_extra_body_goes_out_with_the_probe() -> None:
    _caps, app = run_probe("vllm", extra_body={"seed": 7})
    assert app.bodies[0]["seed"] == 7 and app.bodies[0]["temperature"] == 0


def test_unknown_engine_that_stops_early_is_not_enforced() -> None:
    caps, _ = run_probe("eos_early")
    assert caps.engine is None
    assert caps.output_len_enforced is False
    assert caps.probe_finish_reason == "stop"


def test_unreachable_target_raises_protocol_error() -> None:
    async def main() -> None:
        async with aiohttp.ClientSession() as s:
            await probe(s, "http://127.0.0.1:9/v1", "m", "chat", timeout_s=3)

    with pytest.raises(ProtocolError, match="probe request"):
        asyncio.run(main())


def test_metric_names_strip_suffixes() -> None:
    page = 'a_total 1\nb_bucket{le="1"} 2\nb_sum 3\nb_count 4\n# TYPE c gauge\nc{x="y"} 5\n'
    assert family_names(page) == {"a", "b", "c"}


def test_detect_engine_evidence() -> None:
    assert detect_engine(metric_names={"sglang:num_queue_reqs"})[0] == "sglang"
    assert detect_engine(chunk={"system_fingerprint": "fp_ollama"})[0] == "ollama"
    assert detect_engine(chunk={"system_fingerprint": "3.3.4-native"})[0] == "tgi"
    assert detect_engine(version={"model_id": "x", "max_input_tokens": 1})[0] == "tgi"
    assert detect_engine()[0] is None


def test_table_is_consistent() -> None:
    for name, prof in KNOWN_ENGINES.items():
        assert prof.name == name
        assert prof.stream_usage in ("always", "include_usage", "never")
        if prof.rejects_unknown_fields:
            assert not prof.accepts_ignore_eos
        for role in prof.metrics:
            assert role in ROLES
