"""The emulator on loopback, started through its subprocess contract (`READY http://...`)."""

from __future__ import annotations

import http.client
import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.procs import ServerProcess

pytestmark = pytest.mark.e2e


def _emulator(*args: str) -> ServerProcess:
    return ServerProcess([sys.executable, "-m", "servescope.emulator.server", *args])


@pytest.fixture(scope="module")
def tiny() -> Iterator[str]:
    s = _emulator("--profile", "tiny", "--seed", "3")
    yield s.url
    s.stop()


@pytest.fixture(scope="module")
def reasoning() -> Iterator[str]:
    s = _emulator("--profile", "tiny-reasoning")
    yield s.url
    s.stop()


class Resp:
    def __init__(self, status: int, headers: dict[str, str], body: bytes, events: list[Any] | None, done: bool) -> None:
        self.status, self.headers, self.body, self.events, self.done = status, headers, body, events, done

    def json(self) -> Any:
        return json.loads(self.body)


def call(
    url: str, method: str, path: str, body: Any = None, *, timeout: float = 30.0, headers: dict[str, str] | None = None
) -> Resp:
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"content-type": "application/json", **(headers or {})})
    r = conn.getresponse()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    raw = r.read()
    conn.close()
    events: list[Any] | None = None
    done = False
    if hdrs.get("content-type", "").startswith("text/event-stream"):
        events = []
        for line in raw.decode().split("\n"):
            if line.startswith("data: "):
                payload = line[6:]
                if payload == "[DONE]":
                    done = True
                else:
                    events.append(json.loads(payload))
    return Resp(r.status, hdrs, raw, events, done)


def chat(url: str, content: str = "Say something.", headers: dict[str, str] | None = None, **kw: Any) -> Resp:
    return call(
        url,
        "POST",
        "/v1/chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": content}], **kw},
        headers=headers,
    )


def test_models_health_version(tiny: str) -> None:
    models = call(tiny, "GET", "/v1/models").json()
    assert models["data"][0]["id"] == "tiny"
    assert models["data"][0]["max_model_len"] == 8192
    assert call(tiny, "GET", "/health").status == 200
    assert "version" in call(tiny, "GET", "/version").json()
    assert call(tiny, "GET", "/nope").status == 404


def test_chat_streaming_with_usage(tiny: str) -> None:
    r = chat(tiny, max_tokens=20, ignore_eos=True, stream=True, stream_options={"include_usage": True})
    assert r.status == 200 and r.done and r.events
    rid = r.headers["x-request-id"]
    assert all(e["id"] == f"chatcmpl-{rid}" for e in r.events)
    token_events = [e for e in r.events if e["choices"] and e["choices"][0]["delta"].get("content")]
    assert len(token_events) == 20
    assert r.events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert token_events[-1]["choices"][0]["finish_reason"] == "length"
    usage_chunk = r.events[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 20
    # the streamed text re-tokenizes to exactly the reported number of tokens
    text = "".join(e["choices"][0]["delta"]["content"] for e in token_events)
    tok = call(tiny, "POST", "/tokenize", {"model": "tiny", "prompt": text}).json()
    assert tok["count"] == 20


def test_chat_non_streaming(tiny: str) -> None:
    r = chat(tiny, max_tokens=7, ignore_eos=True)
    assert r.status == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] == 7
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["id"] == f"chatcmpl-{r.headers['x-request-id']}"
    content = body["choices"][0]["message"]["content"]
    assert call(tiny, "POST", "/tokenize", {"prompt": content}).json()["count"] == 7


def test_completions_streaming_and_not(tiny: str) -> None:
    r = call(
        tiny,
        "POST",
        "/v1/completions",
        {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 9, "ignore_eos": True, "stream": True},
    )
    assert r.done and r.events
    assert sum(1 for e in r.events if e["choices"] and e["choices"][0]["text"]) == 9
    assert all(e["object"] == "text_completion" for e in r.events)
    r2 = call(tiny, "POST", "/v1/completions", {"prompt": [1000, 2000, 3000], "max_tokens": 5, "ignore_eos": True})
    body = r2.json()
    assert body["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 5,
        "total_tokens": 8,
        "prompt_tokens_details": None,
    }


def test_eos_ends_early_without_ignore_eos(tiny: str) -> None:
    lengths: list[int] = []

    def one(i: int) -> None:
        lengths.append(chat(tiny, f"q{i}", max_tokens=400).json()["usage"]["completion_tokens"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(lengths) == 12
    assert all(1 <= n <= 400 for n in lengths)
    assert any(n < 400 for n in lengths)  # tiny's mean EOS length is 128
    assert len(set(lengths)) > 3
    r = chat(tiny, "q", max_tokens=50, min_tokens=50).json()
    assert r["usage"]["completion_tokens"] == 50


def test_length_validation(tiny: str) -> None:
    r = chat(tiny, max_tokens=10_000)
    assert r.status == 400
    assert "maximum context length" in r.json()["message"]
    assert call(tiny, "POST", "/v1/completions", {"model": "other", "prompt": "x"}).status == 404
    assert call(tiny, "POST", "/v1/completions", {"prompt": "x", "n": 2}).status == 400


def test_tokenize_detokenize_shapes(tiny: str) -> None:
    r = call(tiny, "POST", "/tokenize", {"model": "tiny", "prompt": "Hello, world!"}).json()
    assert r["count"] == len(r["tokens"]) == 4 and r["max_model_len"] == 8192
    assert call(tiny, "POST", "/detokenize", {"tokens": r["tokens"]}).json()["prompt"] == "Hello, world!"
    msgs = [{"role": "user", "content": "Hello, world!"}]
    m = call(tiny, "POST", "/tokenize", {"messages": msgs}).json()
    assert m["count"] > r["count"]  # the chat template adds tokens
    # prompt tokens in usage equal /tokenize's count for the same messages
    u = call(tiny, "POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 2}).json()
    assert u["usage"]["prompt_tokens"] == m["count"]


def test_exact_length_prompt_from_word_tokens(tiny: str) -> None:
    # A client builds an N-token prompt: tokenize filler text, cut to N ids, detokenize, re-check.
    filler = " ".join(["the model will answer this question with care"] * 40)
    ids = call(tiny, "POST", "/tokenize", {"prompt": filler}).json()["tokens"]
    for n in (1, 33, 200):
        text = call(tiny, "POST", "/detokenize", {"tokens": ids[:n]}).json()["prompt"]
        assert call(tiny, "POST", "/tokenize", {"prompt": text}).json()["count"] == n
        r = call(tiny, "POST", "/v1/completions", {"prompt": text, "max_tokens": 1}).json()
        assert r["usage"]["prompt_tokens"] == n


def test_reasoning_channel(reasoning: str) -> None:
    r = call(
        reasoning,
        "POST",
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "9.11 and 9.8, which is greater?"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert r.done and r.events
    deltas = [e["choices"][0]["delta"] for e in r.events if e["choices"]]
    kinds = ["r" if d.get("reasoning_content") else "c" if d.get("content") else "-" for d in deltas]
    seq = "".join(k for k in kinds if k != "-")
    assert seq.startswith("r") and "c" in seq
    assert "cr" not in seq  # all reasoning first, then the answer
    usage = r.events[-1]["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] == seq.count("r")
    assert usage["completion_tokens"] == len(seq)
    body = call(
        reasoning,
        "POST",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 200, "ignore_eos": True},
    ).json()
    msg = body["choices"][0]["message"]
    assert msg["reasoning_content"] and msg["content"]
    assert body["usage"]["completion_tokens"] == 200
    assert 8 <= body["usage"]["completion_tokens_details"]["reasoning_tokens"] < 200


def _metric_values(url: str) -> dict[str, float]:
    text = call(url, "GET", "/metrics").body.decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = s.name + ("" if "finished_reason" not in s.labels else f"[{s.labels['finished_reason']}]")
            if "le" in s.labels:
                key += f"[le={s.labels['le']}]"
            out[key] = s.value
    return out


def test_metrics_parse_and_match_usage() -> None:
    s = _emulator("--profile", "tiny")
    try:
        before = _metric_values(s.url)
        assert before["vllm:prompt_tokens_total"] == 0
        prompt = completion = 0
        results: list[dict[str, Any]] = []

        def one(i: int) -> None:
            results.append(chat(s.url, f"question {i} " * (i + 1), max_tokens=10 + i, ignore_eos=True).json())

        threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for body in results:
            prompt += body["usage"]["prompt_tokens"]
            completion += body["usage"]["completion_tokens"]
        after = _metric_values(s.url)
        assert len(results) == 16
        assert after["vllm:prompt_tokens_total"] == prompt
        assert after["vllm:generation_tokens_total"] == completion
        assert after["vllm:request_success_total[length]"] == 16
        assert after["vllm:time_to_first_token_seconds_count"] == 16
        assert after["vllm:e2e_request_latency_seconds_count"] == 16
        for phase in ("queue", "prefill", "decode"):
            assert after[f"vllm:request_{phase}_time_seconds_count"] == 16
        # every step computes the uncached prompt tokens and one token per decoding sequence; the first
        # output token of each request is sampled by its last prefill step
        hits = after["vllm:prefix_cache_hits_total"]
        assert after["vllm:iteration_tokens_total_sum"] == prompt - hits + completion - 16
        assert after["vllm:inter_token_latency_seconds_count"] == completion - 16
        assert after["vllm:num_requests_running"] == 0 and after["vllm:num_requests_waiting"] == 0
        assert after["vllm:prefix_cache_queries_total"] >= prompt
        text = call(s.url, "GET", "/metrics").body.decode()
        info = next(f for f in text_string_to_metric_families(text) if f.name == "vllm:cache_config_info")
        assert info.samples[0].labels["num_gpu_blocks"] == str(524288 // 16)
        for name in (
            "vllm:kv_cache_usage_perc",
            "vllm:num_preemptions_total",
            "vllm:prefix_cache_hits_total",
            "vllm:request_time_per_output_token_seconds_count",
        ):
            assert name in after
    finally:
        s.stop()


def test_prefix_cache_hits_for_shared_prefix(tiny: str) -> None:
    before = _metric_values(tiny)
    shared = "You are a helpful assistant. " * 40
    for i in range(3):
        call(tiny, "POST", "/v1/completions", {"prompt": shared + f"Question {i}?", "max_tokens": 2})
    after = _metric_values(tiny)
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    assert hits >= 2 * 160  # the 2nd and 3rd requests reuse ~200 cached tokens each


def test_truth_matches_client_view(tiny: str) -> None:
    rid = "truth-check-1"
    t0 = time.perf_counter_ns()
    r = chat(tiny, max_tokens=12, ignore_eos=True, stream=True, headers={"x-request-id": rid})
    t1 = time.perf_counter_ns()
    assert r.headers["x-request-id"] == rid
    truth = call(tiny, "GET", "/_servescope/truth").json()
    assert truth["clock"] == "perf_counter_ns"
    rec = next(x for x in truth["requests"] if x["id"] == rid)
    assert rec["status"] == "ok" and rec["completion_tokens"] == 12 and len(rec["token_ns"]) == 12
    assert t0 <= rec["arrival_ns"] <= rec["token_ns"][0] and rec["token_ns"][-1] <= t1
    assert rec["token_ns"] == sorted(rec["token_ns"])
    # tiny's single-stream step is ~3 ms: the gaps reflect the engine, not a fixed sleep
    gaps_ms = [(b - a) / 1e6 for a, b in zip(rec["token_ns"], rec["token_ns"][1:])]
    assert 0.5 < sorted(gaps_ms)[len(gaps_ms) // 2] < 100.0


def test_cli_contract_errors() -> None:
    import subprocess

    p = subprocess.run(
        [sys.executable, "-m", "servescope.emulator.server", "--profile", "no-such-profile"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2 and p.stdout == "" and "unknown profile" in p.stderr
    p = subprocess.run(
        [sys.executable, "-m", "servescope.emulator.server", "--fault-500", "0.8", "--fault-drop", "0.5"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2 and "fault" in p.stderr
    p = subprocess.run(
        [sys.executable, "-m", "servescope.emulator.server", "--realtime-priority", "120"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2 and p.stdout == "" and "--realtime-priority must be 1-99" in p.stderr


def test_default_profile_is_the_one_run_serves() -> None:
    """`servescope emulate` with no --profile (nor --model) serves the same profile as `servescope run`
    without --url: one default, `deploy.DEFAULT_PROFILE`."""
    from servescope.deploy import DEFAULT_PROFILE
    from servescope.target import preflight

    assert preflight.EmulatorProcess().profile == DEFAULT_PROFILE == "llama-3.1-8b"
    s = _emulator()
    try:
        info = call(s.url, "GET", "/_servescope/info").json()
    finally:
        s.stop()
    assert info["profile"] == DEFAULT_PROFILE


def _fifo_permitted() -> bool:
    """Whether this process may take SCHED_FIFO (tried in a child, which then exits)."""
    import subprocess

    code = "import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(5))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not hasattr(os, "SCHED_FIFO"), reason="SCHED_FIFO is Linux-only")
def test_realtime_priority_is_taken_or_its_refusal_reported() -> None:
    s = _emulator("--profile", "tiny", "--realtime-priority", "5")
    try:
        r = chat(
            s.url, "hello there", max_tokens=8, ignore_eos=True, stream=True, stream_options={"include_usage": True}
        )
        pacing = call(s.url, "GET", "/_servescope/pacing").json()
    finally:
        s.stop()
    assert r.status == 200 and r.done and r.events[-1]["usage"]["completion_tokens"] == 8
    if _fifo_permitted():
        assert pacing["scheduling"] == "SCHED_FIFO 5"
    else:
        assert pacing["scheduling"].startswith("normal (SCHED_FIFO 5 refused")


def _stream_outcome(url: str, max_tokens: int, timeout: float) -> str:
    """'ok', 'http_500', 'http_429', 'dropped' (connection closed early) or 'stalled' (timed out)."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    body = json.dumps(
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    ).encode()
    conn.request("POST", "/v1/chat/completions", body=body, headers={"content-type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        r.read()
        conn.close()
        return f"http_{r.status}"
    try:
        raw = r.read()
    except http.client.IncompleteRead:
        conn.close()
        return "dropped"
    except TimeoutError:
        conn.close()
        return "stalled"
    conn.close()
    return "ok" if raw.rstrip().endswith(b"data: [DONE]") else "dropped"


def test_faults_are_produced_and_seeded() -> None:
    s = _emulator(
        "--profile",
        "tiny",
        "--fault-500",
        "0.2",
        "--fault-429",
        "0.2",
        "--fault-drop",
        "0.2",
        "--fault-stall",
        "0.2",
        "--fault-seed",
        "11",
    )
    try:
        outcomes = [_stream_outcome(s.url, 30, timeout=0.8) for _ in range(30)]
        truth = call(s.url, "GET", "/_servescope/truth").json()["requests"]
    finally:
        s.stop()
    counts = {k: outcomes.count(k) for k in ("ok", "http_500", "http_429", "dropped", "stalled")}
    assert all(v >= 1 for v in counts.values()), counts
    assert sum(counts.values()) == 30
    statuses = [x["status"] for x in truth]
    assert statuses.count("error_500") == counts["http_500"]
    assert statuses.count("error_429") == counts["http_429"]
    assert statuses.count("dropped") == counts["dropped"]
    for x in truth:  # dropped and stalled requests sent some tokens, then stopped
        if x["status"] in ("dropped", "stalled"):
            assert 1 <= len(x["token_ns"]) < 30
    # the same seed gives the same fault sequence
    s2 = _emulator(
        "--profile",
        "tiny",
        "--fault-500",
        "0.2",
        "--fault-429",
        "0.2",
        "--fault-drop",
        "0.2",
        "--fault-stall",
        "0.2",
        "--fault-seed",
        "11",
    )
    try:
        again = [_stream_outcome(s2.url, 30, timeout=0.8) for _ in range(12)]
    finally:
        s2.stop()
    assert again == outcomes[:12]


def test_kv_pressure_preempts_and_completes_everything() -> None:
    s = _emulator("--profile", "tiny", "--kv-tokens", "2048", "--max-num-seqs", "64")
    try:
        results: list[Resp] = []

        def one(i: int) -> None:
            results.append(
                chat(
                    s.url,
                    f"request number {i} " * 8,
                    max_tokens=200,
                    ignore_eos=True,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )

        threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        busy = 0.0
        for _ in range(100):  # while they run, the gauges show it
            mid = _metric_values(s.url)
            busy = max(busy, mid["vllm:num_requests_running"] + mid["vllm:num_requests_waiting"])
            if busy:
                break
            time.sleep(0.01)
        for t in threads:
            t.join(60)
        after = _metric_values(s.url)
    finally:
        s.stop()
    assert len(results) == 16
    for r in results:
        assert r.done and r.events is not None
        assert r.events[-1]["usage"]["completion_tokens"] == 200
        assert sum(1 for e in r.events if e["choices"] and e["choices"][0]["delta"].get("content")) == 200
    assert after["vllm:num_preemptions_total"] > 0
    assert busy > 0
    assert after["vllm:generation_tokens_total"] == 16 * 200


def test_in_process_thread_server() -> None:
    from servescope.emulator.server import EmulatorThread

    with EmulatorThread("tiny") as emu:
        r = chat(emu.url, max_tokens=5, ignore_eos=True)
        assert r.json()["usage"]["completion_tokens"] == 5
        assert emu.app is not None and emu.app.engine.stats.finished == 1


def _token_times(url: str, max_tokens: int) -> tuple[list[float], float]:
    """One streamed completion read line by line: each token event's arrival (s from the send) and the
    [DONE] event's."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    body = json.dumps(
        {"model": "tiny", "prompt": "hello there", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    ).encode()
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body, headers={"content-type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200
    times: list[float] = []
    while True:  # the chunked framing's size lines are read as lines too and skipped
        line = r.fp.readline()
        assert line, "stream ended without [DONE]"
        if line.startswith(b"data: [DONE]"):
            done = time.perf_counter() - t0
            break
        if line.startswith(b"data: {"):
            times.append(time.perf_counter() - t0)
    conn.close()
    return times, done


def test_first_token_latency_is_added_to_ttft_only(tmp_path: Path) -> None:
    """A profile's `first_token_s` (a deployment's: its knobs' first-token latency, which plan adds to
    TTFT) holds a stream's first tokens: the client's TTFT grows by it, the tokens made meanwhile
    arrive together, and the response ends when it would have without the hold."""
    from servescope.emulator.server import EmulatorThread

    prof = tmp_path / "held.yaml"
    prof.write_text("extends: tiny\nname: tiny\nfirst_token_s: 0.06\n")
    n = 80  # ~3 ms a step alone: ~240 ms of decode, the first ~20 tokens inside the hold
    runs = {}
    for name in ("tiny", str(prof)):
        with EmulatorThread(name) as emu:
            runs[name] = sorted((_token_times(emu.url, n) for _ in range(3)), key=lambda x: x[1])[1]
    (base, base_done), (held, held_done) = runs["tiny"], runs[str(prof)]
    assert len(base) == len(held) == n
    assert base[0] < 0.03
    assert held[0] - base[0] == pytest.approx(0.06, abs=0.015)
    assert held_done == pytest.approx(base_done, abs=0.02)  # the end does not move

    def together(times: list[float]) -> int:
        return sum(1 for a, b in itertools.pairwise(times) if b - a < 0.0005)

    assert together(held) >= together(base) + 10  # the ~20 tokens made during the hold left in one write
    # after the hold, tokens follow the engine's pace again
    assert held[-1] - held[-20] == pytest.approx(base[-1] - base[-20], abs=0.015)


def test_a_burst_shares_the_front_end(tmp_path: Path) -> None:
    """A profile's `frontend_s` (a deployment's: its knobs' per-request front-end time, which plan's
    simulation passes requests through) is shared by the requests inside the front end (processor
    sharing, `sim.frontend.FrontEnd`): of four requests sent together, none streams its first token
    before ~4 x frontend_s, and then all four start within a few steps, as they do at once without it
    (first come first served would have let the first through after 1 x frontend_s)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from servescope.emulator.server import EmulatorThread

    prof = tmp_path / "fe.yaml"
    prof.write_text("extends: tiny\nname: tiny\nfrontend_s: 0.05\n")
    first: dict[str, list[float]] = {}
    for name in ("tiny", str(prof)):
        # the four threads send together (a pool's threads start one by one: on a busy CI host the first
        # sent ~17 ms before the rest and had the front end to itself that long, done at 0.149 s)
        start = threading.Barrier(4)

        def send(url: str, start: threading.Barrier = start) -> tuple[list[float], float]:
            start.wait()
            return _token_times(url, 8)

        with EmulatorThread(name) as emu, ThreadPoolExecutor(4) as pool:
            runs = list(pool.map(send, [emu.url] * 4))
            first[name] = sorted(times[0] for times, _ in runs)
    assert first["tiny"][-1] < 0.04
    fe = first[str(prof)]
    # the four sends spread over a few ms, which the first sent has to itself
    assert fe[0] >= 0.2 - 0.015 and fe[-1] < 0.2 + 0.04, fe
    assert fe[-1] - fe[0] < 0.04, fe


def test_seeded_lengths_and_text_reproduce_across_processes() -> None:
    def sample(seed: str) -> list[tuple[int, str]]:
        s = _emulator("--profile", "tiny", "--seed", seed)
        try:
            out = []
            for i in range(4):
                b = call(s.url, "POST", "/v1/completions", {"prompt": f"p{i}", "max_tokens": 100}).json()
                out.append((b["usage"]["completion_tokens"], b["choices"][0]["text"]))
            return out
        finally:
            s.stop()

    a, b, c = sample("5"), sample("5"), sample("6")
    assert a == b
    assert a != c
