"""The target server: pre-flight checks before the clock, and the embedded emulator process.

`preflight` is the only network I/O before a run besides the capability probe: it lists the
target's models and turns every way of not reaching it into one clear `TargetUnavailable`.
The emulator runs in its own process (`python -m servescope.emulator`), so its pacing never
competes with the client's event loop for the GIL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from servescope.deploy import DEFAULT_PROFILE
from servescope.errors import TargetUnavailable
from servescope.urls import server_root

__all__ = ["EmulatorProcess", "TargetInfo", "preflight", "DEFAULT_PROFILE"]

_READY = "READY "


@dataclass
class TargetInfo:
    base_url: str  # …/v1
    models: list[str]
    model: str
    models_response: Any = None
    version: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


async def preflight(base_url: str, model: str | None, headers: dict[str, str], timeout_s: float = 10.0) -> TargetInfo:
    """GET /v1/models (and /version, best effort); choose or check the model."""
    url = f"{base_url}/models"
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as s:
            async with s.get(url, headers=headers) as r:
                body = await r.read()
                status = r.status
            version = None
            root = server_root(base_url)
            try:
                async with s.get(f"{root}/version", timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        version = orjson.loads(await r.read())
            except (aiohttp.ClientError, TimeoutError, ValueError):
                pass
    except aiohttp.ClientConnectorError as e:
        raise TargetUnavailable(f"cannot reach {url}: {e.os_error or e}. Is the server running? Check --url.") from None
    except TimeoutError:
        raise TargetUnavailable(f"{url} did not answer within {timeout_s:g} s; check --url") from None
    except aiohttp.ClientError as e:
        raise TargetUnavailable(f"cannot reach {url}: {e}") from None
    if status in (401, 403):
        raise TargetUnavailable(f"{url} answered HTTP {status}: the server wants credentials; pass --api-key-env VAR")
    models: list[str] = []
    doc: Any = None
    if status == 200:
        try:
            doc = orjson.loads(body)
            models = [m["id"] for m in doc.get("data", []) if isinstance(m, dict) and "id" in m]
        except (ValueError, AttributeError, TypeError):
            raise TargetUnavailable(
                f"{url} did not return an OpenAI model list; is --url an OpenAI-compatible server?"
            ) from None
    elif model is None:
        raise TargetUnavailable(f"{url} answered HTTP {status} and no --model was given; name the model with --model")
    if model is None:
        if not models:
            raise TargetUnavailable(f"{url} lists no model; name one with --model")
        model = models[0]
    elif models and model not in models:
        raise TargetUnavailable(f"unknown model {model!r}: the server at {base_url} serves {', '.join(models)}")
    return TargetInfo(base_url=base_url, models=models, model=model, models_response=doc, version=version)


class EmulatorProcess:
    """Starts `python -m servescope.emulator` on a free loopback port; stops it on exit."""

    def __init__(
        self, profile: str = DEFAULT_PROFILE, extra_args: list[str] | None = None, start_timeout_s: float = 30.0
    ) -> None:
        self.profile = profile
        self.extra_args = extra_args or []
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[str] | None = None
        self.url: str | None = None

    def start(self) -> str:
        cmd = [
            sys.executable,
            "-m",
            "servescope.emulator.server",
            "--profile",
            self.profile,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            *self.extra_args,
        ]
        # stderr goes to a file: a pipe nobody reads would block the emulator once it fills.
        with contextlib.ExitStack() as stack:  # the file closes here if the process does not start
            self._stderr = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
            self.proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            self._files = stack.pop_all()  # from here on, stop() closes it
        deadline = time.monotonic() + self.start_timeout_s
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(_READY):
                self.url = line[len(_READY) :].strip()
                return self.url
            if not line and self.proc.poll() is not None:
                self._stderr.seek(0)
                err = self._stderr.read()
                raise TargetUnavailable(
                    f"the built-in emulator (profile {self.profile!r}) exited: {err.strip()[-500:]}"
                )
        self.stop()
        raise TargetUnavailable(f"the built-in emulator did not start within {self.start_timeout_s:g} s")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        self._files.close()
        self.proc = None

    def __enter__(self) -> EmulatorProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> EmulatorProcess:
        await asyncio.get_running_loop().run_in_executor(None, self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()
