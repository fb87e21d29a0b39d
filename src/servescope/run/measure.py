"""The measured window of one run: the shard that sends the schedule, and what runs beside it.

`measure` installs the Ctrl-C handler (the first stops sending, a second leaves at once), opens the
records file, picks the shard (`client.shard.Shard` in this process, `run.workers.ProcessShards`
over worker processes, `run.ray_run.RayShards` over Ray actors), starts the progress line and the
GPU telemetry, awaits the shard, and takes all of it down again. Everything before it is prepared
(run.bench); everything after it reads the records on disk (run.assemble).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console

from servescope.client.shard import Shard, StopCheck
from servescope.report.console import LiveProgress
from servescope.results import precision
from servescope.results.records import RequestRecord
from servescope.results.store import MANIFEST, RECORDS, RecordWriter, warm_up, write_json
from servescope.target.telemetry import Telemetry
from servescope.target.telemetry import start as start_gpu_telemetry

if TYPE_CHECKING:
    from servescope.client.face import ShardFace
    from servescope.client.spec import ShardResult, ShardSpec
    from servescope.run.bench import RunStart
    from servescope.run.config import RunConfig

__all__ = ["Window", "choose_shard", "measure"]


@dataclass
class Window:
    """What the measured window left besides the records on disk."""

    result: ShardResult
    interrupted: bool  # by Ctrl-C, here or in a shard
    stopped_by: str | None  # the --target-precision verdict that stopped sending, if one did
    gpu: Telemetry  # stopped, its samples not yet written (run.assemble)


async def measure(cfg: RunConfig, spec: ShardSpec, start: RunStart, console: Console) -> Window:
    """Send the schedule `spec` once, records streaming to `start.out_dir`."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    interrupts = [0]

    def on_sigint() -> None:
        interrupts[0] += 1
        if interrupts[0] > 1:  # a second Ctrl-C: leave now, records already on disk
            os._exit(130)
        stop.set()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    writer = RecordWriter(start.out_dir / RECORDS)
    warm_up()  # Arrow's first conversion, before the clock (results.store)
    target_pct = cfg.target_precision
    enough = None if target_pct is None else precision.StopRule(target_pct)

    def on_ready(doc: dict[str, Any]) -> None:  # shards elsewhere: their PIDs (and nodes) go in the manifest
        start.manifest["workers"] = doc
        write_json(start.out_dir / MANIFEST, start.manifest)

    shard = choose_shard(cfg, spec, on_record=writer.write, stop=stop, enough=enough, on_ready=on_ready)
    progress = None
    if not cfg.quiet and console.is_terminal:
        progress = LiveProgress(console, shard, spec.num_requests)
        progress.start()
    gpu = start_gpu_telemetry(cfg.gpu_metrics_url)  # samples in a thread of its own, off the hot path
    try:
        result = await shard.run()
    finally:
        gpu.stop()
        if progress is not None:
            progress.stop()
        writer.close()
        loop.remove_signal_handler(signal.SIGINT)
    return Window(
        result=result,
        interrupted=result.interrupted or interrupts[0] > 0,
        stopped_by=shard.stopped_by,
        gpu=gpu,
    )


def choose_shard(
    cfg: RunConfig,
    spec: ShardSpec,
    *,
    on_record: Callable[[RequestRecord], None],
    stop: asyncio.Event,
    enough: StopCheck | None,
    on_ready: Callable[[dict[str, Any]], None],
) -> ShardFace:
    """What sends the schedule: Ray actors (--ray), worker processes (--workers N), else one shard here."""
    if cfg.ray is not None:  # Ray actors, one per node (run/ray_run.py)
        from servescope.run.ray_run import RayShards

        return RayShards(
            spec,
            address=cfg.ray,
            resource=cfg.ray_resource,
            shards=cfg.workers if cfg.workers > 1 else None,
            on_record=on_record,
            stop=stop,
            enough=enough,
            on_ready=on_ready,
        )
    if cfg.workers > 1:  # worker processes on this host (run/workers.py)
        from servescope.run.workers import ProcessShards

        return ProcessShards(
            spec, workers=cfg.workers, on_record=on_record, stop=stop, enough=enough, on_ready=on_ready
        )
    return Shard(spec, on_record=on_record, stop=stop, enough=enough)
