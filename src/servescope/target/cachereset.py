"""`--reset-cache`: empty the target's prefix cache before a run (each sweep point, each repeat).

Engines that cache prefixes (vLLM V1 and SGLang do by default) serve a prompt seen before from the
cache: a run after another one with the same prompts measures a warm server. Where the engine offers
an endpoint for it (the engine table, engines.py: vLLM's `POST /reset_prefix_cache`, SGLang's
`POST /flush_cache`; the built-in emulator answers vLLM's), it is called before the clock and the
server's reply — status and the head of its body — is kept for the manifest. A 409 (vLLM's and the
emulator's answer while requests still run or wait: the previous run's last requests leaving the engine
after their last token reached the client) is retried every 0.1 s for up to `busy_wait_s`. An engine the probe
did not recognise gets each known endpoint in turn until one answers 2xx; an engine without one gets
a note saying so. `plan_reset` is pure; `reset_prefix_cache` is the I/O.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from servescope.target.engines import CACHE_RESET_PATHS, KNOWN_ENGINES
from servescope.urls import server_root

__all__ = ["EMULATOR_RESET_PATH", "ResetPlan", "plan_reset", "reset_prefix_cache"]

EMULATOR_RESET_PATH = "/reset_prefix_cache"  # the built-in emulator answers vLLM's endpoint
_BODY_HEAD = 300  # characters of the reply kept in the manifest


@dataclass(frozen=True, slots=True)
class ResetPlan:
    """Which paths to POST, in order (the first 2xx ends it), for whom; `note` when there are none."""

    engine: str  # the engine as recognised ("servescope-emulator", a KNOWN_ENGINES key, or "unknown")
    paths: tuple[str, ...]
    hint: str | None = None  # what a failing reply may mean (vLLM: only in dev mode)
    note: str | None = None


def plan_reset(engine: str | None, *, emulated: bool) -> ResetPlan:
    """The reset endpoints to try for `engine` (the probe's KNOWN_ENGINES key; None when unknown)."""
    if emulated:
        return ResetPlan("servescope-emulator", (EMULATOR_RESET_PATH,))
    prof = KNOWN_ENGINES.get(engine or "")
    if prof is None:
        return ResetPlan(
            "unknown",
            CACHE_RESET_PATHS,
            hint="the engine was not recognised (or --no-probe): each known reset endpoint was tried",
        )
    if prof.cache_reset is None:
        return ResetPlan(
            prof.name,
            (),
            note=(
                f"--reset-cache: {prof.name} offers no endpoint that empties its prefix cache; the run started with "
                "whatever the server had cached (each run's own prompts keep it cold unless --same-prompts)"
            ),
        )
    return ResetPlan(prof.name, (prof.cache_reset,), hint=prof.cache_reset_hint)


_BUSY = 409  # the server still has requests (vLLM's reset endpoint, the emulator's)
_BUSY_RETRY_S = 0.1


async def reset_prefix_cache(
    base_url: str, headers: dict[str, str], plan: ResetPlan, timeout_s: float = 30.0, busy_wait_s: float = 10.0
) -> dict[str, Any]:
    """POST the plan's paths in order until one answers 2xx; the manifest's `cache_reset` block:
    `ok`, the engine, each attempt (path, HTTP status or error, head of the body, time, and the 409s
    retried before its last reply as `busy_retries`) and a `note` (for the summary's notes) when the
    cache was not reset."""
    doc: dict[str, Any] = {"ok": False, "engine": plan.engine, "attempts": [], "note": plan.note}
    if not plan.paths:
        return doc
    root = server_root(base_url)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        for path in plan.paths:
            attempt: dict[str, Any] = {"method": "POST", "path": path}
            t0 = time.perf_counter()
            busy = 0
            while True:
                try:
                    async with session.post(root + path, headers=headers) as r:
                        attempt["status"] = r.status
                        attempt["body_head"] = (await r.text(errors="replace"))[:_BODY_HEAD]
                except (aiohttp.ClientError, TimeoutError) as e:
                    attempt["error"] = f"{type(e).__name__}: {e}"[:_BODY_HEAD]
                if attempt.get("status") != _BUSY or time.perf_counter() - t0 + _BUSY_RETRY_S > busy_wait_s:
                    break
                busy += 1
                await asyncio.sleep(_BUSY_RETRY_S)
            if busy:
                attempt["busy_retries"] = busy
            attempt["elapsed_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
            doc["attempts"].append(attempt)
            status = attempt.get("status")
            if isinstance(status, int) and 200 <= status < 300:
                doc["ok"] = True
                doc["path"] = path
                return doc
    tried = "; ".join(
        f"POST {a['path']}: " + (f"HTTP {a['status']}" if "status" in a else a.get("error", ""))
        for a in doc["attempts"]
    )
    doc["note"] = (
        f"--reset-cache: the prefix cache was not reset ({tried})"
        + (f"; {plan.hint}" if plan.hint else "")
        + ": the run may have started with a warm cache"
    )
    return doc
