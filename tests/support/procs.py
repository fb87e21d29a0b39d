"""Start a server process that prints `READY <url>` and stop it again (test support)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTED = ROOT / "tests" / "support" / "scripted_server.py"


class ServerProcess:
    def __init__(self, cmd: list[str], timeout_s: float = 30.0) -> None:
        self.cmd = cmd
        with contextlib.ExitStack() as stack:  # the log closes here if the process does not start
            self.log = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=self.log, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
            self._files = stack.pop_all()  # from here on, stop() closes it
        deadline = time.monotonic() + timeout_s
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("READY "):
                self.url = line.split(None, 1)[1].strip()
                return
            if not line and self.proc.poll() is not None:
                break
        self._end_process()
        self.log.seek(0)
        log = self.log.read()
        self.stop()
        raise RuntimeError(f"server did not start: {' '.join(cmd)}\n{log[-2000:]}")

    def stop(self) -> None:
        self._end_process()
        self._files.close()

    def _end_process(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def scripted(*args: str) -> ServerProcess:
    return ServerProcess([sys.executable, str(SCRIPTED), "--port", "0", *args])


def servescope(*args: str, timeout_s: float = 300, **kw) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "servescope.cli", *args], capture_output=True, text=True, timeout=timeout_s, **kw
    )
