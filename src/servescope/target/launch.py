"""Launch the server under test: a command line started in its own process group on a free loopback
port, waited on until it serves, and stopped so that nothing of it is left behind.

    srv = ServerProcess("llama-server -m tiny.gguf --port {port} --parallel 4", log_path=Path("server.log"))
    srv.start()          # ready: GET /health answers 200 (or 404 and GET /v1/models answers 200)
    ... benchmark srv.url ...
    srv.stop()           # SIGTERM to the whole group, SIGKILL after the grace, the leader reaped

Why a process group: engines fork (vLLM's engine core and workers, SGLang's schedulers, a shell's
children); signalling the group reaches every one of them, and `os.killpg(pgid, 0)` tells whether any
is still there. The command is split like a shell would (`shlex`), with leading `NAME=VALUE` words as
its environment, and executed directly, so the server *is* the group leader and its exit status is ours
to collect; a command with shell syntax (`&&`, `|`, `;`, redirections) runs under `/bin/sh -c`.

Placeholders: `{port}` (the free loopback port servescope picked and then targets), `{host}`
(127.0.0.1) and any `--serve-param` name; other braces (JSON in a flag) are left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from servescope.errors import ConfigError, TargetUnavailable
from servescope.urls import api_base, server_root

__all__ = [
    "LOOPBACK",
    "ServerProcess",
    "ServerStartError",
    "free_port",
    "http_status",
    "placeholders",
    "render",
    "split_command",
]

LOOPBACK = "127.0.0.1"
READY_TIMEOUT_S = 600.0  # a large model loads for minutes
STOP_GRACE_S = 15.0
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_SHELL_PUNCTUATION = set("();<>|&")


class ServerStartError(TargetUnavailable):
    """The server exited before it was ready, or was not ready in time; carries its log's tail."""

    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(message + (f"; its log ends with:\n{log_tail}" if log_tail else ""))
        self.reason = message
        self.log_tail = log_tail


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on now (the OS's pick; the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def placeholders(template: str) -> list[str]:
    """The `{name}` placeholders of a command template, in order of first use."""
    return list(dict.fromkeys(_PLACEHOLDER.findall(template)))


def render(template: str, values: Mapping[str, object]) -> str:
    """The command line with every `{name}` replaced; an unknown name is a ConfigError."""
    missing = [n for n in placeholders(template) if n not in values]
    if missing:
        raise ConfigError(
            f"--serve: no value for {', '.join('{' + n + '}' for n in missing)}; give "
            f"--serve-param {missing[0]}=V1,V2 (known: {', '.join(sorted(values))})"
        )
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)


def split_command(command: str) -> tuple[list[str], dict[str, str]]:
    """argv and environment (leading NAME=VALUE words) of a command line; argv is `/bin/sh -c COMMAND`
    when it holds shell syntax."""
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    try:
        tokens = list(lex)
    except ValueError as e:
        raise ConfigError(f"--serve {command!r}: {e}") from None
    if any(t and set(t) <= _SHELL_PUNCTUATION for t in tokens):
        return ["/bin/sh", "-c", command], {}
    words = shlex.split(command)
    env: dict[str, str] = {}
    while words and _ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words:
        raise ConfigError(f"--serve {command!r}: no command to run")
    return words, env


def http_status(url: str, timeout_s: float = 2.0) -> int:
    """HTTP status of GET url; 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (urllib.error.URLError, OSError):
        return 0


def _get_json(url: str, timeout_s: float = 2.0) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return json.loads(r.read()) if r.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


class ServerProcess:
    """One server command: started in its own process group, ready when it serves, stopped by group."""

    def __init__(
        self,
        command: str,
        *,
        log_path: Path,
        port: int | None = None,
        url: str | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
        grace_s: float = STOP_GRACE_S,
    ) -> None:
        """`port`: the loopback port the command listens on; or `url`, where it serves (a command that
        chooses its own port)."""
        self.command = command
        self.argv, self.env = split_command(command)
        if url is None:
            if port is None:
                raise ConfigError("--serve: the command needs {port}, or give --url where it serves")
            url = f"http://{LOOPBACK}:{port}"
        self.port = port
        self.root = server_root(url)
        self.url = api_base(url)
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.grace_s = grace_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        self.ready_s: float | None = None
        self.stopped: dict[str, Any] | None = None
        self._log: IO[bytes] | None = None

    # ------------------------------------------------------------------ start
    def start(self) -> str:
        """Start the command and wait until it serves; returns the API base URL. On a failed start
        (it exited, or the timeout passed) the group is stopped and ServerStartError says why."""
        self.spawn()
        self.wait_ready()
        return self.url

    def spawn(self) -> int:
        """Start the command in a new session (its own process group); returns the group id."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # the server writes its own log for its whole life: a pipe nobody reads would block it
        self._log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        except OSError as e:
            self._close_log()
            raise ServerStartError(f"cannot start {self.argv[0]!r}: {e.strerror or e}", "") from None
        self.pgid = self.proc.pid  # a new session: the leader's pid is the group id
        return self.pgid

    def wait_ready(self) -> None:
        """Poll until the server serves; on its exit, the timeout or Ctrl-C, stop the group and raise."""
        try:
            self._poll_ready()
        except BaseException:  # nothing is left behind
            self.stop()
            raise

    def _poll_ready(self) -> None:
        assert self.proc is not None
        t0 = time.monotonic()
        deadline = t0 + self.ready_timeout_s
        pause = 0.05
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerStartError(f"the server exited with status {code} before it was ready", self.log_tail())
            if self.ready():
                self.ready_s = time.monotonic() - t0
                return
            if time.monotonic() >= deadline:
                raise ServerStartError(
                    f"the server was not ready within {self.ready_timeout_s:g} s "
                    f"(GET {self.root}/health and /v1/models)",
                    self.log_tail(),
                )
            time.sleep(pause)
            pause = min(pause * 1.5, 0.5)

    def ready(self) -> bool:
        """GET /health answers 200; or there is no /health (404) and GET /v1/models answers 200."""
        health = http_status(self.root + "/health")
        return health == 200 or (health == 404 and http_status(self.url + "/models") == 200)

    def version(self) -> Any:
        """What the server says its version is, best effort: `/version` (vLLM, SGLang, the emulator),
        `/info` (TGI), llama.cpp's `/props` `build_info`; None when none answers."""
        doc = _get_json(self.root + "/version")
        if isinstance(doc, dict) and doc:
            return doc.get("version", doc)
        doc = _get_json(self.root + "/info")
        if isinstance(doc, dict) and doc.get("version"):
            return doc["version"]
        doc = _get_json(self.root + "/props")
        if isinstance(doc, dict) and doc.get("build_info"):
            return doc["build_info"]
        return None

    # ------------------------------------------------------------------- stop
    def group_alive(self) -> bool:
        """Whether any process of the group still exists (a zombie no one reaped counts as gone)."""
        if self.pgid is None:
            return False
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # pragma: no cover - a member changed user: still there
            return True
        return _live_members(self.pgid) != 0

    def stop(self) -> dict[str, Any]:
        """SIGTERM to the whole group, SIGKILL after `grace_s` when any member is left, the leader
        reaped. Idempotent; returns how it ended (signal sent last, exit status, seconds taken)."""
        if self.stopped is not None:
            return self.stopped
        t0 = time.monotonic()
        sent = None
        if self.proc is not None and self.pgid is not None:
            if self.group_alive():
                sent = "SIGTERM"
                self._signal(signal.SIGTERM)
                deadline = t0 + self.grace_s
                while time.monotonic() < deadline:
                    self.proc.poll()  # reap the leader as soon as it exits
                    if not self.group_alive():
                        break
                    time.sleep(0.05)
                else:
                    sent = "SIGKILL"
                    self._signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
            end = time.monotonic() + 5
            while self.group_alive() and time.monotonic() < end:  # SIGKILLed members on their way out
                time.sleep(0.02)
        self._close_log()
        code = self.proc.returncode if self.proc is not None else None
        self.stopped = {
            "signal": sent,
            "exit_code": code,
            "stop_s": round(time.monotonic() - t0, 3),
            "left_behind": self.group_alive(),
        }
        return self.stopped

    def _signal(self, sig: signal.Signals) -> None:
        assert self.pgid is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, sig)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, n_lines: int = 40) -> str:
        """The last lines of the server's log."""
        if self._log is not None:
            self._log.flush()
        try:
            with self.log_path.open("rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip("\n").splitlines()[-n_lines:])

    def describe(self) -> dict[str, Any]:
        """The record of this server for server.json: command, port, pid/pgid, readiness, version."""
        return {
            "command": self.command,
            "argv": self.argv,
            "env": sorted(self.env),
            "port": self.port,
            "url": self.url,
            "pid": self.proc.pid if self.proc else None,
            "pgid": self.pgid,
            "ready_s": self.ready_s,
            "log": self.log_path.name,
        }

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _live_members(pgid: int) -> int:
    """Processes of group `pgid` that are not zombies (Linux /proc); -1 where /proc cannot tell."""
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - not Linux: killpg's answer stands
        return -1
    n = 0
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            n += 1
    return n
