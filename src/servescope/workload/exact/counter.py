"""Token counts before the clock: the server's own `/tokenize`, a local Hugging Face tokenizer, or none.

A `TokenCounter` answers one question, in batches: how many tokens is each of these texts? Exact
prompt lengths are built from those answers (workload/exact/units.py); nothing here runs on the hot path.

Server dialects (request body -> response), tried in this order unless the capability probe already
found the one that answers:

- vLLM, SGLang, our emulator: POST /tokenize {"model", "prompt"} -> {"count", "tokens", "max_model_len"}
  (SGLang also serves /v1/tokenize)
- llama.cpp llama-server: POST /tokenize {"content"} -> {"tokens": [...]}
- TGI: POST /tokenize {"inputs"} -> [{"id", "text", "start", "stop"}, ...]

Counts of a text include whatever special tokens the endpoint adds (vLLM adds BOS, llama.cpp does not
by default), so callers use differences of counts, never a count alone, to learn a unit's cost, and
learn the chat template and BOS overhead from one real request's `usage.prompt_tokens` (`probe_usage`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
import orjson

from servescope.errors import ConfigError
from servescope.urls import server_root

if TYPE_CHECKING:
    from servescope.target.capabilities import Capabilities

__all__ = ["LocalCounter", "ServerCounter", "TokenCounter", "detect_server_counter", "probe_usage"]

_DIALECTS: tuple[tuple[str, str], ...] = (
    ("/tokenize", "prompt"),
    ("/v1/tokenize", "prompt"),
    ("/tokenize", "content"),
    ("/tokenize", "inputs"),
)


class TokenCounter(Protocol):
    label: str  # for Workload.info["lengths"]

    async def count(self, texts: list[str]) -> list[int]: ...

    async def close(self) -> None: ...


def _count_from(doc: Any) -> int | None:
    if isinstance(doc, dict):
        if isinstance(doc.get("count"), int) and isinstance(doc.get("tokens"), list):
            return int(doc["count"])
        if isinstance(doc.get("tokens"), list):
            return len(doc["tokens"])
        return None
    if isinstance(doc, list):  # TGI
        return len(doc)
    return None


class ServerCounter:
    """Counts with the target's /tokenize; up to `parallel` calls in flight on one keep-alive pool."""

    def __init__(
        self,
        root: str,
        model: str,
        headers: dict[str, str],
        path: str,
        shape: str,
        *,
        parallel: int = 64,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.root, self.model, self.path, self.shape = root, model, path, shape
        self.label = "exact (server /tokenize)"
        self._headers = {k: v for k, v in headers.items() if k.lower() != "accept"}
        self._headers["Content-Type"] = "application/json"
        self._parallel = parallel
        self._session = session
        self.calls = 0

    def _body(self, text: str) -> bytes:
        if self.shape == "prompt":
            return orjson.dumps({"model": self.model, "prompt": text})
        if self.shape == "content":
            return orjson.dumps({"content": text})
        return orjson.dumps({self.shape: text})

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._parallel), timeout=aiohttp.ClientTimeout(total=120)
            )
        return self._session

    async def _request(self, path: str, body: bytes) -> tuple[int, bytes]:
        """POST `body` to `path` on the pool: (status, body). Counting is idempotent, so a pooled
        connection the server had closed while idle (llama-server drops idle keep-alive connections
        after a few seconds; the pool may hold several such) is discarded and the call asked again,
        until a fresh connection answers."""
        tries = self._parallel + 2  # each failure discards one stale pooled connection; then a fresh one
        for attempt in range(tries):
            try:
                async with self._sess().post(self.root + path, data=body, headers=self._headers) as r:
                    return r.status, await r.read()
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                if attempt == tries - 1:
                    raise
        raise AssertionError("unreachable")

    async def _one(self, text: str) -> int:
        self.calls += 1
        status, raw = await self._request(self.path, self._body(text))
        if status != 200:
            raise ConfigError(
                f"{self.root}{self.path} answered HTTP {status} while counting prompt tokens: "
                f"{raw[:200].decode('utf-8', 'replace')}"
            )
        n = _count_from(orjson.loads(raw))
        if n is None:
            raise ConfigError(f"{self.root}{self.path}: unexpected /tokenize response {raw[:200]!r}")
        return n

    async def count(self, texts: list[str]) -> list[int]:
        sem = asyncio.Semaphore(self._parallel)

        async def guarded(t: str) -> int:
            async with sem:
                return await self._one(t)

        return list(await asyncio.gather(*(guarded(t) for t in texts)))

    async def _post(self, path: str, doc: dict[str, Any]) -> Any:
        """A JSON call on the same pool (llama.cpp's /apply-template, /tokenize with options), retried
        on a stale connection like every count; None when it fails or answers other than 200."""
        self.calls += 1
        try:
            status, raw = await self._request(path, orjson.dumps(doc))
            return orjson.loads(raw) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError):
            return None

    async def count_messages(self, messages: list[dict[str, Any]]) -> int | None:
        """Tokens of a chat request as the server will count them (template included), or None.

        vLLM / SGLang / emulator: /tokenize with `messages`. llama.cpp: its own template rendered by
        /apply-template, then /tokenize with special tokens added and parsed, as its chat endpoint does.
        """
        if self.shape == "prompt":
            return _count_from(
                await self._post(self.path, {"model": self.model, "messages": messages, "add_generation_prompt": True})
            )
        if self.shape == "content":
            doc = await self._post("/apply-template", {"messages": messages})
            if not isinstance(doc, dict) or not isinstance(doc.get("prompt"), str):
                return None
            return await self.count_request_text(doc["prompt"])
        return None

    async def message_tokens(self, messages: list[dict[str, Any]]) -> list[int] | None:
        """The token ids of a chat request as the server renders it (template included), where its
        /tokenize returns them (vLLM, SGLang, the emulator); None elsewhere."""
        if self.shape != "prompt":
            return None
        doc = await self._post(self.path, {"model": self.model, "messages": messages, "add_generation_prompt": True})
        ids = doc.get("tokens") if isinstance(doc, dict) else None
        if isinstance(ids, list) and all(isinstance(t, int) for t in ids):
            return ids
        return None

    async def count_request_text(self, text: str) -> int | None:
        """Tokens of a completions prompt as the server will count them (BOS included), or None."""
        if self.shape == "prompt":  # vLLM's /tokenize adds special tokens by default, as completions does
            return (await self.count([text]))[0]
        if self.shape == "content":  # llama.cpp tokenizes completion prompts with add_special + parse_special
            return _count_from(
                await self._post(self.path, {"content": text, "add_special": True, "parse_special": True})
            )
        return None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def detect_server_counter(
    base_url: str, model: str, headers: dict[str, str], caps: Capabilities | None = None
) -> ServerCounter | None:
    """The /tokenize dialect that answers with a plausible count, or None (no exact lengths from the server)."""
    root = server_root(base_url)
    tried: list[tuple[str, str]] = []
    known = caps.tokenize if caps is not None else None
    if known and known.get("path") and known.get("body"):
        tried.append((str(known["path"]), str(known["body"])))
    elif caps is not None:
        return None  # the capability probe already looked and found none
    tried += [d for d in _DIALECTS if d not in tried]
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    probe_a, probe_b = "hello world", "hello world hello world hello world"
    for path, shape in tried:
        c = ServerCounter(root, model, headers, path, shape, session=session)
        try:
            a, b = await c.count([probe_a, probe_b])
        except (aiohttp.ClientError, TimeoutError, ConfigError, orjson.JSONDecodeError, ValueError):
            continue
        if b > a > 0:
            c._session = None
            await session.close()
            return c
    await session.close()
    return None


class LocalCounter:
    """A local Hugging Face tokenizer (`tokenizer.json`, or a folder holding one); `servescope[tokenizers]`."""

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ConfigError(
                "--tokenizer needs the `tokenizers` package: pip install 'servescope[tokenizers]'"
            ) from None
        p = Path(path).expanduser()
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise ConfigError(f"--tokenizer {path}: no tokenizer.json there (a local file or model folder)")
        try:
            self._tok = Tokenizer.from_file(str(p))
        except Exception as e:  # the library raises a bare Exception on a bad file
            raise ConfigError(f"--tokenizer {p}: cannot load: {e}") from None
        self.label = f"exact (local tokenizer {p})"

    async def count(self, texts: list[str]) -> list[int]:
        encs = self._tok.encode_batch(texts, add_special_tokens=False)
        return [len(e.ids) for e in encs]

    async def close(self) -> None:
        return None


async def probe_usage(
    base_url: str, model: str, headers: dict[str, str], api: str, prompt: str | list[dict[str, Any]]
) -> tuple[int, int] | None:
    """One real request (max_tokens 1, not streamed): the server's `usage` (prompt_tokens,
    completion_tokens), or None."""
    body: dict[str, Any] = {"model": model, "max_tokens": 1, "stream": False, "temperature": 0}
    if api == "chat":
        body["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        path = "/chat/completions"
    else:
        body["prompt"] = prompt
        path = "/completions"
    h = {k: v for k, v in headers.items() if k.lower() != "accept"}
    h["Content-Type"] = "application/json"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s,
            s.post(base_url.rstrip("/") + path, data=orjson.dumps(body), headers=h) as r,
        ):
            if r.status != 200:
                return None
            doc = orjson.loads(await r.read())
    except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError):
        return None
    usage = doc.get("usage") if isinstance(doc, dict) else None
    n = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not isinstance(n, int) or n <= 0:
        return None
    c = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return int(n), int(c) if isinstance(c, int) else 0
