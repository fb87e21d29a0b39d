"""The vLLM tier's one server: shared by every module of this package, stopped when the package ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.real_servers import RealServer, start_vllm
from tests.support.tiny_model import TinyModel

#: the tier's engines run eager: no torch.compile (a warm start ~31 s against ~48 s here; cold, no compile at all)
EAGER = ["--enforce-eager"]


@pytest.fixture(scope="package")
def vllm_server(vllm_python: Path, tiny_model_vllm: TinyModel) -> Iterator[RealServer]:
    """vLLM's OpenAI server (CPU build, V1 engine, prefix caching and chunked prefill on as by default) on
    CPU 0, a 1 GiB KV cache, `/reset_prefix_cache` served (dev mode). Started once for this package's
    modules and stopped after its last test: an engine left running for the rest of the session holds a
    core's worth of threads and memory beside the timing-accuracy tests that follow. Tests read counters
    as deltas around their own runs and reset the prefix cache where they need it cold."""
    srv = start_vllm(vllm_python, tiny_model_vllm.hf_dir, extra=EAGER)
    try:
        yield srv
    finally:
        srv.stop()
