"""The face of whatever runs a run's schedule, as the run and its progress line use it.

Three things have it: `shard.Shard` (one event loop in this process), `run.workers.ProcessShards`
(worker processes on this host) and `run.ray_run.RayShards` (Ray actors). `run.measure` picks one and
awaits `run()`; `report.console.LiveProgress` reads the counters while it runs; the summary
(`run.assemble`) reads `stopped_by` after it. Pure typing: nothing here runs.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Protocol

from servescope.client.spec import ShardResult

__all__ = ["ShardFace"]


class ShardFace(Protocol):
    """Runs the schedule once (`run`), counting as it goes; read-only to its callers."""

    @property
    def done(self) -> int:
        """Requests finished so far, failed ones included."""
        ...

    @property
    def failed(self) -> int:
        """Of those, the ones that did not end ok."""
        ...

    @property
    def output_tokens(self) -> int:
        """Output tokens of the ok ones so far."""
        ...

    @property
    def in_flight(self) -> Sized:
        """Requests sent and not finished (only its size is read)."""
        ...

    @property
    def stopped_by(self) -> str | None:
        """The --target-precision verdict that stopped sending, or None."""
        ...

    async def run(self) -> ShardResult:
        """Send the schedule, wait for the last answer, and say what happened."""
        ...
