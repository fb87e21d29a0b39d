"""Suite-wide fixtures: the scripted ground-truth server (tests/support/scripted_server.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.procs import ServerProcess, scripted


@pytest.fixture
def scripted_server() -> Iterator[Callable[..., ServerProcess]]:
    """Factory: `scripted_server("--ttft-ms", "100")` starts one; all are stopped at teardown."""
    started: list[ServerProcess] = []

    def start(*args: str) -> ServerProcess:
        s = scripted(*args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
