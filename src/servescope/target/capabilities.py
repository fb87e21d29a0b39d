"""What a target engine can do, from a table of known engines and a cheap probe before the clock.

Engines that speak "the OpenAI API" differ in ways that change a benchmark's numbers:
whether `ignore_eos` / `min_tokens` are accepted (exact output lengths), whether `data: [DONE]` ends
the stream, where `usage` arrives, which `/tokenize` and `/metrics` they expose. `KNOWN_ENGINES` holds
what each engine's documentation and source say (docs/compatibility.md is the human-readable form);
`probe` checks the live target in a few requests and returns `Capabilities`, which the runner uses to
drop rejected request fields, write what was detected into the manifest and flag
`output_len_enforced: false` in the summary. The engine facts live in the one table, engines.py;
metric pages are read by the one Prometheus reader, prometheus.py.

The probe never runs while the clock runs, and never raises for a missing optional endpoint; it raises
`ProtocolError` only when even the adapted streaming request is refused, so that a run stops before
the clock with a clear message instead of recording a benchmark of HTTP errors.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from servescope.client.openai import API_PATHS, StreamAccumulator, build_body, new_accumulator
from servescope.client.sse import SSEDecoder
from servescope.errors import ProtocolError
from servescope.target.engines import (
    KNOWN_ENGINES,
    METRIC_PREFIXES,
    METRICS_PATHS,
    ROLES,
    VERSION_PATHS,
    EngineProfile,
)
from servescope.target.prometheus import family_names
from servescope.urls import server_root

__all__ = ["KNOWN_ENGINES", "LENGTH_FIELDS", "ROLES", "Capabilities", "EngineProfile", "detect_engine", "probe"]

LENGTH_FIELDS = ("ignore_eos", "min_tokens")  # the fields a server may reject, in build_body's names
_PROBE_MAX_TOKENS = 3
_PROBE_PROMPT = "Say hello."
_CLOSE_WAIT_S = 0.1  # after a streamed response: a FIN within this long means "closes after each stream"


@dataclass(slots=True)
class Capabilities:
    """What the probe found. `to_dict()` is what goes into manifest.json (no secrets, JSON-safe)."""

    api: str
    engine: str | None = None  # a KNOWN_ENGINES key, or None when not recognised
    engine_evidence: list[str] = field(default_factory=list)
    version: Any = None
    rejected_fields: list[str] = field(default_factory=list)  # drop these from every request body
    length_enforcement: str = "none"  # "ignore_eos+min_tokens" | "ignore_eos" | "min_tokens" | "none"
    output_len_enforced: bool | None = None  # None: cannot tell (unknown engine, ambiguous probe)
    sends_done: bool | None = None
    usage_in_stream: bool | None = None
    usage_chunk: str | None = None  # "separate" (choices []) | "with_choices" | None
    stream_usage: str | None = None  # from the table: "always" | "include_usage" | "never"
    has_timings: bool = False  # llama.cpp's non-standard `timings` object on the last chunk
    # False: the server closes the TCP connection right after each streamed response (llama-server
    # does, while its headers still say Keep-Alive): a client must not reuse such a connection.
    keeps_alive_after_stream: bool | None = None
    response_model: str | None = None  # the `model` the server answered with (may differ)
    probe_output_tokens: int | None = None
    probe_finish_reason: str | None = None
    probe_status: list[int] = field(default_factory=list)  # HTTP status of each probe request
    probe_error: str | None = None
    metrics_path: str | None = None
    metrics: dict[str, str] = field(default_factory=dict)  # role (engines.ROLES) -> name on the live page
    tokenize: dict[str, str] | None = None  # {"path": ..., "body": ...} that answered
    notes: list[str] = field(default_factory=list)
    probe_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def detect_engine(
    *,
    version: Any = None,
    metric_names: set[str] | None = None,
    chunk: dict[str, Any] | None = None,
    server_header: str | None = None,
    rejected_body: str | None = None,
) -> tuple[str | None, list[str]]:
    """Best guess of the engine from what the probe saw, with the evidence for it."""
    ev: list[str] = []
    for prefix, name in METRIC_PREFIXES:
        if metric_names and any(n.startswith(prefix) for n in metric_names):
            return name, [f"/metrics has {prefix}* families"]
    if chunk is not None:
        if "timings" in chunk:
            return "llamacpp", ["stream chunks carry a `timings` object"]
        if chunk.get("system_fingerprint") == "fp_ollama":
            return "ollama", ["system_fingerprint fp_ollama"]
        if str(chunk.get("system_fingerprint") or "").endswith("-native"):
            ev.append("system_fingerprint <version>-native")
            return "tgi", ev
    if isinstance(version, dict):
        if "model_id" in version and "max_input_tokens" in version:
            return "tgi", ["/info"]
        if "default_generation_settings" in version or "build_info" in version:
            return "llamacpp", ["/props"]
    if server_header and "llama.cpp" in server_header.lower():
        return "llamacpp", [f"Server: {server_header}"]
    if rejected_body and "Unexpected fields in the request" in rejected_body:
        # transformers serve (5.x): {"detail": "Unexpected fields in the request: {'ignore_eos', ...}"}
        return "transformers", ["HTTP 422 'Unexpected fields in the request'"]
    return None, ev


def _mentioned(body: str, fields: tuple[str, ...]) -> list[str]:
    return [f for f in fields if f in body]


async def _get(session: aiohttp.ClientSession, url: str, timeout_s: float) -> tuple[int, bytes, str]:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            return r.status, await r.read(), r.headers.get("Content-Type", "")
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return 0, b"", ""


async def _post_json(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], timeout_s: float
) -> tuple[int, Any]:
    try:
        async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            raw = await r.read()
            try:
                return r.status, orjson.loads(raw)
            except ValueError:
                return r.status, None
    except (TimeoutError, aiohttp.ClientError):
        return 0, None


async def _probe_version(session: aiohttp.ClientSession, root: str) -> tuple[Any, str | None]:
    results = await asyncio.gather(*(_get(session, root + p, 3.0) for p in VERSION_PATHS))
    for path, (status, body, _ctype) in zip(VERSION_PATHS, results):
        if status == 200 and body[:1] == b"{":
            try:
                return orjson.loads(body), path
            except ValueError:
                continue
    return None, None


async def _probe_metrics(session: aiohttp.ClientSession, root: str) -> tuple[str | None, set[str]]:
    for path in METRICS_PATHS:  # TensorRT-LLM's /metrics is JSON: its Prometheus page is the next path
        status, body, _ctype = await _get(session, root + path, 3.0)
        if status == 200 and body and body[:1] not in (b"{", b"["):
            names = family_names(body.decode("utf-8", "replace"))
            if names:
                return path, names
    return None, set()


async def _probe_tokenize(
    session: aiohttp.ClientSession, root: str, model: str, engine: str | None
) -> dict[str, str] | None:
    shapes: list[tuple[str, str]] = []
    prof = KNOWN_ENGINES.get(engine or "")
    if prof is not None:
        if prof.tokenize is None:
            return None
        shapes.append(prof.tokenize)
    else:
        shapes += [("/tokenize", "prompt"), ("/tokenize", "content")]
    for path, shape in shapes:
        body: dict[str, Any] = {shape: "hello world"}
        if shape == "prompt":
            body["model"] = model
        status, doc = await _post_json(session, root + path, body, 3.0)
        if status == 200 and doc is not None:
            tokens = doc.get("tokens") if isinstance(doc, dict) else doc
            if isinstance(tokens, list) and tokens:
                return {"path": path, "body": shape}
    return None


async def _stream_once(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], api: str, timeout_s: float
) -> tuple[int, str, StreamAccumulator | None, dict[str, Any] | None, str]:
    """One streamed request: (status, error body, accumulator, last JSON chunk, where usage came)."""
    try:
        async with session.post(
            url,
            data=orjson.dumps(body),
            headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as r:
            if r.status != 200:
                return r.status, (await r.read()).decode("utf-8", "replace")[:2000], None, None, ""
            dec = SSEDecoder()
            acc = new_accumulator(api)
            last: dict[str, Any] | None = None
            usage_where = ""
            n = 0
            async for piece in r.content.iter_any():
                events = dec.feed(piece)
                for _ev, data in events:
                    n += 1
                    acc.on_event(data, n)
                    if data != b"[DONE]":
                        obj = orjson.loads(data)
                        if isinstance(obj, dict):
                            last = obj
                            if obj.get("usage"):
                                usage_where = "separate" if not obj.get("choices") else "with_choices"
                if n > 10_000:  # a probe asks for 3 tokens; never loop on a runaway stream
                    break
            for _ev, data in dec.close():
                acc.on_event(data, n + 1)
            return 200, "", acc, last, usage_where
    except (TimeoutError, aiohttp.ClientError) as e:
        return 0, f"{type(e).__name__}: {e}", None, None, ""
    except ValueError as e:  # not JSON in a data line
        raise ProtocolError(f"{url} streamed something that is not OpenAI JSON: {e}") from None


async def _keeps_alive_after_stream(url: str, body: dict[str, Any], timeout_s: float) -> bool | None:
    """Send the accepted probe body on a raw connection; after the response, does the socket stay open?

    None when it cannot tell (TLS, not chunked, an error). Costs one more 3-token request and a
    `_CLOSE_WAIT_S` wait: a server that closes sends its FIN right behind the terminal chunk (llama-server
    on loopback: ~0.1 ms after it), so a connection still open and quiet that long after stays open.
    (The wait was 0.3 s: most of a run's start-up, see benchmarks/startup.py.)
    """
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None:
        return None
    port = parts.port or 80
    payload = orjson.dumps(body)
    head = (
        f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {parts.hostname}:{port}\r\n"
        "Connection: keep-alive\r\nAccept-Encoding: identity\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode("latin-1")
    writer = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(parts.hostname, port)
            writer.write(head + payload)
            await writer.drain()
            status_line = await reader.readline()
            if b" 200 " not in status_line:
                return None
            headers = (await reader.readuntil(b"\r\n\r\n")).lower()
            if b"transfer-encoding: chunked" not in headers:
                return None
            while True:  # the chunked body, to its terminal chunk
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    await reader.readline()  # the empty trailer line
                    break
                await reader.readexactly(size + 2)
        try:
            extra = await asyncio.wait_for(reader.read(1), _CLOSE_WAIT_S)
        except TimeoutError:
            return True  # still open and quiet: reusable
        return False if extra == b"" else None
    except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
        return None
    finally:
        if writer is not None:
            writer.close()


def _enforcement(rejected: list[str]) -> str:
    kept = [f for f in LENGTH_FIELDS if f not in rejected]
    return "+".join(kept) if kept else "none"


async def probe(
    session: aiohttp.ClientSession,
    base_url: str,
    model: str,
    api: str,
    *,
    timeout_s: float = 60.0,
    extra_body: dict[str, Any] | None = None,
) -> Capabilities:
    """Probe `base_url` (…/v1) before the clock: version, /metrics, /tokenize, one tiny stream.

    The streamed request is the run's own body shape (`build_body`) with `max_tokens` 3. On HTTP
    400/422 naming `ignore_eos` or `min_tokens`, those fields are dropped and the request retried; the
    dropped fields land in `rejected_fields` and `output_len_enforced` becomes False. Pass the run's
    `extra_body` so that a field the server refuses stops the run here, before the clock.
    """
    t0 = time.perf_counter()
    base = base_url.rstrip("/")
    root = server_root(base_url)
    caps = Capabilities(api=api)

    (version, version_path), (metrics_path, names) = await asyncio.gather(
        _probe_version(session, root), _probe_metrics(session, root)
    )
    caps.version = version
    caps.metrics_path = metrics_path
    engine, evidence = detect_engine(version=version, metric_names=names)

    # The streamed request, adapted until accepted (at most one retry per length field + 1).
    url = base + API_PATHS[api]
    rejected: list[str] = []
    acc = last = None
    usage_where = ""
    rejected_body = ""
    for _attempt in range(len(LENGTH_FIELDS) + 1):
        body = build_body(
            api=api,
            model=model,
            prompt=_PROBE_PROMPT,
            max_tokens=_PROBE_MAX_TOKENS,
            ignore_eos="ignore_eos" not in rejected,
            min_tokens="min_tokens" not in rejected,
            extra_body={"temperature": 0, **(extra_body or {})},
        )
        status, err, acc, last, usage_where = await _stream_once(session, url, body, api, timeout_s)
        caps.probe_status.append(status)
        if status == 200:
            break
        newly = [f for f in _mentioned(err, LENGTH_FIELDS) if f not in rejected and f in body]
        if status in (400, 422) and newly:
            rejected += newly
            rejected_body = err
            continue
        if status == 0:
            raise ProtocolError(f"the probe request to {url} failed: {err}; check --url and the server's log")
        raise ProtocolError(
            f"{url} refused the probe request with HTTP {status}: {err.strip()[:300]!r}. "
            "servescope stops before the clock instead of recording errors as a benchmark; "
            "adjust --api, --model or --extra-body (or pass --no-probe to send anyway)"
        )
    caps.rejected_fields = rejected
    caps.length_enforcement = _enforcement(rejected)

    assert acc is not None
    res = acc.finish()
    caps.sends_done = acc.done
    caps.usage_in_stream = acc.usage is not None
    caps.usage_chunk = usage_where or None
    caps.probe_output_tokens = res.output_tokens
    caps.probe_finish_reason = acc.finish_reason
    if last is not None:
        caps.has_timings = "timings" in last
        caps.response_model = last.get("model")
    if engine is None:
        engine, evidence = detect_engine(version=version, chunk=last, rejected_body=rejected_body or None)
    caps.engine, caps.engine_evidence = engine, evidence
    prof = KNOWN_ENGINES.get(engine or "")
    if version is not None and version_path:
        caps.engine_evidence.append(f"answered {version_path}")

    # Output-length enforcement: known engines by their documented behaviour, others by the probe.
    if prof is not None:
        honours = (prof.accepts_ignore_eos and "ignore_eos" not in rejected) or (
            prof.accepts_min_tokens and "min_tokens" not in rejected
        )
        caps.output_len_enforced = bool(honours)
        if not honours and not rejected:
            caps.length_enforcement = "none"
            caps.notes.append(f"{engine} accepts but ignores ignore_eos/min_tokens: requests may stop at EOS")
        elif prof.accepts_ignore_eos and not prof.accepts_min_tokens and "ignore_eos" not in rejected:
            caps.length_enforcement = "ignore_eos"
        caps.stream_usage = prof.stream_usage
        caps.metrics = {
            role: found[0] for role, tried in prof.metrics.items() if (found := [n for n in tried if n in names])
        }
    elif rejected == list(LENGTH_FIELDS):
        caps.output_len_enforced = False
    elif acc.finish_reason == "stop" and res.output_tokens < _PROBE_MAX_TOKENS:
        caps.output_len_enforced = False
        caps.notes.append("the probe stopped before max_tokens although ignore_eos was sent: lengths are not enforced")
    elif acc.finish_reason == "length" and res.output_tokens == _PROBE_MAX_TOKENS:
        caps.output_len_enforced = None  # consistent with enforcement, but one short probe proves little
        caps.notes.append("unknown engine: ignore_eos accepted; the probe ran to max_tokens")
    if api == "messages" and caps.output_len_enforced is not False:
        caps.output_len_enforced = False  # (build_typed_body: no length field on this API)
        caps.length_enforcement = "none"
        caps.notes.append(
            "the Messages API has no ignore_eos or min_tokens (vLLM's route takes neither): requests may stop "
            "at EOS before max_tokens; output lengths are the server's usage"
        )
    if rejected:
        caps.output_len_enforced = False if set(rejected) == set(LENGTH_FIELDS) else caps.output_len_enforced
        caps.notes.append(
            f"the server rejected {', '.join(rejected)} (HTTP {caps.probe_status[0]}); requests are sent "
            "without them, so exact output lengths cannot be enforced"
        )
    if not acc.done:
        caps.notes.append("the stream ends without data: [DONE]; end of stream is taken from the connection close")
    if not caps.usage_in_stream:
        caps.notes.append("no usage in the stream: output tokens are counted from chunks")

    caps.tokenize, caps.keeps_alive_after_stream = await asyncio.gather(  # independent: side by side
        _probe_tokenize(session, root, model, engine), _keeps_alive_after_stream(url, body, timeout_s)
    )
    if caps.keeps_alive_after_stream is False:
        caps.notes.append(
            "the server closes the connection after every streamed response (despite "
            "Keep-Alive): streamed requests cannot reuse connections"
        )
    caps.probe_ms = (time.perf_counter() - t0) * 1e3
    return caps
