"""servescope against Hugging Face `transformers serve` (CPU torch), the tiny model, 127.0.0.1 only.

A second dialect: no `data: [DONE]`, usage always on the finish chunk, and unknown request fields
(`ignore_eos`, `min_tokens`) refused with HTTP 422. The probe must adapt before the clock, so the run
measures generation — never a run of 422s — and says that output lengths were not enforced.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from servescope.client.openai import (
    API_PATHS,
    StreamAccumulator,
    build_body,
    encode_body,
)
from servescope.client.sse import SSEDecoder
from servescope.results.store import load_run
from servescope.target.capabilities import probe
from tests.support.procs import servescope
from tests.support.real_servers import RealServer
from tests.support.tiny_model import HUB_REPO_ID

pytestmark = pytest.mark.e2e
MODEL = HUB_REPO_ID


def run(srv: RealServer, out: Path, *args: str, timeout_s: float = 300) -> tuple[int, str, dict[str, Any] | None]:
    proc = servescope(
        "run",
        "--url",
        srv.url,
        "--model",
        MODEL,
        "--out",
        str(out),
        "--quiet",
        "--seed",
        "2",
        *args,
        timeout_s=timeout_s,
    )
    summary = out / "summary.json"
    doc = json.loads(summary.read_text()) if summary.is_file() else None
    return proc.returncode, proc.stdout + proc.stderr, doc


async def _stream(url: str, api: str, max_tokens: int) -> tuple[StreamAccumulator, int]:
    body = build_body(
        api=api, model=MODEL, prompt="hello there " * 3, max_tokens=max_tokens, ignore_eos=False, min_tokens=False
    )
    dec, acc = SSEDecoder(), StreamAccumulator(api)
    async with aiohttp.ClientSession() as s:
        t_send = time.perf_counter_ns()
        async with s.post(
            url + API_PATHS[api],
            data=encode_body(body),
            headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=120),
        ) as r:
            assert r.status == 200, await r.text()
            async for piece in r.content.iter_any():
                t = time.perf_counter_ns()
                for _ev, data in dec.feed(piece):
                    acc.on_event(data, t)
    return acc, t_send


def test_probe_adapts_to_422(hf_serve: RealServer) -> None:
    async def main() -> Any:
        async with aiohttp.ClientSession() as s:
            return await probe(s, hf_serve.url, MODEL, "chat", timeout_s=120)

    caps = asyncio.run(main())
    assert caps.probe_status == [422, 200]
    assert sorted(caps.rejected_fields) == ["ignore_eos", "min_tokens"]
    assert caps.engine == "transformers", caps.engine_evidence
    assert caps.output_len_enforced is False and caps.length_enforcement == "none"
    assert caps.sends_done is False
    assert caps.usage_in_stream is True and caps.usage_chunk == "with_choices"
    assert caps.probe_output_tokens == 3
    assert caps.keeps_alive_after_stream is True  # uvicorn keeps the connection
    assert caps.response_model and caps.response_model != MODEL  # it answers with "<id>@main"


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_stream_shape_one_chunk_per_token_no_done(hf_serve: RealServer, api: str) -> None:
    acc, _t_send = asyncio.run(_stream(hf_serve.url, api, 9))
    res = acc.finish()
    assert acc.done is False  # no data: [DONE]
    assert acc.finish_reason == "length"
    assert res.output_tokens_source == "usage" and res.output_tokens == 9
    assert len(acc.chunk_ns) == 9  # the tiny model's trick: one non-empty text chunk per token
    assert acc.chunk_ns == sorted(acc.chunk_ns)


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_run_adapts_and_counts_match_usage(hf_serve: RealServer, tmp_path: Path, api: str) -> None:
    n_req, out_len = 16, 12
    rc, output, s = run(
        hf_serve,
        tmp_path,
        "--api",
        api,
        "--concurrency",
        "8",
        "--num-requests",
        str(n_req),
        "--input-len",
        "16",
        "--output-len",
        str(out_len),
    )
    assert rc == 0, output[-3000:]
    assert s is not None
    assert s["requests"]["completed"] == n_req and s["requests"]["failed"] == 0, s["requests"]
    assert s["tokens"]["output_total"] == n_req * out_len
    assert s["workload"]["output_len_enforced"] is False
    assert any("not enforced" in n for n in s.get("notes", [])), s.get("notes")
    res = load_run(tmp_path)
    caps = res.manifest["target"]["capabilities"]
    assert sorted(caps["rejected_fields"]) == ["ignore_eos", "min_tokens"]
    for r in res.records:
        assert r.ok and r.http_status in (None, 200), r
        assert r.output_tokens_source == "usage" and r.output_tokens == out_len
        assert r.chunks == out_len
    assert s["latency_ms"]["ttft"]["median"] > 0 and s["latency_ms"]["tpot"]["median"] > 0


def test_probe_stops_before_the_clock_on_a_refused_extra_field(hf_serve: RealServer) -> None:
    """A field only --extra-body adds, and that the server refuses, ends the probe with the server's words."""
    from servescope.errors import ProtocolError

    async def main() -> Any:
        async with aiohttp.ClientSession() as s:
            return await probe(s, hf_serve.url, MODEL, "chat", timeout_s=120, extra_body={"not_a_field": 1})

    with pytest.raises(ProtocolError, match=r"HTTP 422.*not_a_field.*stops before the clock"):
        asyncio.run(main())
