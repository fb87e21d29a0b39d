"""One shard hosted on a thread of its own, its messages pulled by whoever drives it: a Ray actor.

`RemoteShard` runs `client.host.host_shard` — the same loop a `--workers` process runs, with the same
messages (`ready`, `batch`, `done`, `error` out; `start`, `stop`, `enough` in) — on an event loop in a
background thread. Nothing here knows Ray: `run.ray_run` wraps the class as an actor (threaded, so a
`pull` that waits does not hold up `deliver` or `clock`), and any other host that can call methods
could do the same.

- `pull(wait_s)`: the messages put since the last pull, in order; waits up to `wait_s` for the first.
  A driver that pulls every ~0.1 s gets the shard's records in batches during the run, so what a
  dead host had finished and sent is already with the driver.
- `clock()`: this host's `perf_counter_ns` now, for the driver to measure its offset with a few round
  trips before the clock (docs/metrics.md, "Clocks across shards"). The start instant the driver
  delivers is already in this host's clock: no conversion here.
- `deliver(msg)`: a message from the run (`("start", start_ns)`, `("stop",)`, `("enough", why)`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from servescope.client.host import host_shard

__all__ = ["RemoteShard"]


class _Queue:
    """`client.host.Outbox` over a queue that `RemoteShard.pull` drains."""

    def __init__(self) -> None:
        self.q: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()

    def put(self, msg: tuple[Any, ...]) -> None:
        self.q.put(msg)

    def close(self) -> None:
        pass


class RemoteShard:
    """Host the shard `spec_bytes` (`client.host.dumps`) as shard `index` of a run, on a thread of its own."""

    def __init__(self, spec_bytes: bytes, index: int) -> None:
        spec = pickle.loads(spec_bytes)  # our own bytes (`client.host.dumps`), from the run that planned them
        self.index = index
        self._out = _Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_message: Callable[[tuple[Any, ...]], None] | None = None
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._main, args=(spec,), name=f"servescope-remote-{index}", daemon=True)
        self._thread.start()

    def _main(self, spec: Any) -> None:
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux and macOS
            loop_factory = None
        try:
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                runner.run(host_shard(self._out, self._listen, self.index, spec))
        except Exception as e:  # host_shard put ("error", …) first where it could; say it once more
            self._out.put(("error", f"{type(e).__name__}: {e}"))

    def _listen(
        self, loop: asyncio.AbstractEventLoop, on_message: Callable[[tuple[Any, ...]], None], on_eof: Callable[[], None]
    ) -> None:
        self._loop, self._on_message = loop, on_message
        self._listening.set()

    # ------------------------------------------------------------- the driver's calls
    def where(self) -> dict[str, Any]:
        """Who hosts the shard: its process, host name and scheduling priority (nice)."""
        import socket

        return {"pid": os.getpid(), "hostname": socket.gethostname(), "nice": os.getpriority(os.PRIO_PROCESS, 0)}

    def clock(self) -> int:
        """This host's perf_counter_ns (CLOCK_MONOTONIC on Linux) now."""
        return time.perf_counter_ns()

    def deliver(self, msg: tuple[Any, ...]) -> None:
        """A message from the run, handed to the shard's loop."""
        if not self._listening.wait(60.0) or self._loop is None or self._on_message is None:
            raise RuntimeError(f"shard {self.index} is not listening")
        with contextlib.suppress(RuntimeError):  # (its loop closed: the shard is over)
            self._loop.call_soon_threadsafe(self._on_message, msg)

    def pull(self, wait_s: float = 0.1) -> list[tuple[Any, ...]]:
        """The messages since the last pull, in order; waits up to `wait_s` for the first one."""
        out: list[tuple[Any, ...]] = []
        try:
            out.append(self._out.q.get(timeout=wait_s))
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self._out.q.get_nowait())
            except queue.Empty:
                return out
