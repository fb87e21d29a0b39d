"""`--ray [ADDRESS]`: the run's shards as Ray actors, one per node of a Ray cluster, merged into one result.

Ray is the engine: it places the actors, ships each its slice and carries the calls; what is ours is
the same driver as `--workers` (`run.workers.ProcessShards`, subclassed: its message dispatch, its
worker_lost accounting and its merge) over another transport. In order:

1. `ray.init(address)` (`--ray` alone: the cluster Ray finds — RAY_ADDRESS, the latest `ray start` on
   this machine — else a new local one). The alive nodes (with `--ray-resource NAME`, those offering
   that custom resource) are listed; `client.split.split_spec` deals the schedule over one shard per
   node (`--workers N` > 1: N shards, dealt over the nodes in turn).
2. Each shard is a `client.remote.RemoteShard` actor pinned to its node (NodeAffinitySchedulingStrategy,
   `num_cpus=0`, threaded so a waiting `pull` does not hold up other calls, at nice 0 where Ray would
   start it at 15: `RUNTIME_ENV`), created with its slice's bytes: the schedule and every body reach the
   node before the clock. It opens its connections and
   says `ready`.
3. Clocks (docs/metrics.md, "Clocks across shards"): each actor's `perf_counter_ns` is read in
   `_OFFSET_TRIES` round trips; offset = remote reading - midpoint of the local send and receive, kept
   from the shortest round trip, whose half bounds the error. One start instant, `LEAD_S` ahead on
   this process's clock, goes to each actor converted to its clock; every latency is still measured
   inside one process, and only the window and throughput depend on the offsets.
4. One thread per actor pulls its messages (`pull`, waiting up to `PULL_WAIT_S`): the same `ready`,
   `batch`, `done`, `error` tuples a worker process sends over its pipe. Records get run-wide ids and
   go to disk as they arrive.
5. An actor whose call fails (its process or node died: a `RayError`) or that answers no pull for
   `SILENT_S` (then it is killed, so it cannot go on sending unheard): what it had sent and not
   finished becomes records of kind `worker_lost`, its finished records are already on disk, the rest
   of its slice is counted as not sent; the other shards run to the end, the run says what was lost
   and exits 1 — as `--workers` does.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from servescope.client.host import clock_offset_ns, dumps
from servescope.client.remote import RemoteShard
from servescope.client.spec import ShardResult, ShardSpec
from servescope.errors import ConfigError, ServescopeError
from servescope.run.workers import ProcessShards, _Worker

__all__ = ["LEAD_S", "PULL_WAIT_S", "RUNTIME_ENV", "SILENT_S", "RayShards", "check_reachable", "import_ray"]

#: The common start instant is this far ahead of now once every actor is ready (a call to each).
LEAD_S = 1.0
#: How long one pull waits on the actor for a message (records come back about this often).
PULL_WAIT_S = 0.1
#: An actor that answers no pull for this long during the run is taken for lost.
SILENT_S = 10.0
_READY_TIMEOUT_S = 120.0  # actor placement, its process start and imports, its connections
_OFFSET_TRIES = 9
#: Ray starts its worker processes at nice 15 (its `worker_niceness`: measured here, Ray 2.60, an actor's
#: /proc/PID/stat); a shard's stalls are its timing error, so its actor runs at a --workers process's
#: priority, 0, through the variable Ray reads at a worker's start (as Ray's own job supervisor sets it).
#: At nice 15, 2,048 streams over two nodes on a busy 2-core host stalled 180-590 ms (loop lag p99)
#: where --workers 2 stalled 15-30 ms (benchmarks/streams.py).
RUNTIME_ENV = {"env_vars": {"RAY_worker_niceness": "0"}}
INSTALL_HINT = "--ray needs Ray: pip install 'servescope[ray]'"


def import_ray() -> Any:
    """The `ray` module, or a ConfigError that says what to install."""
    try:
        import ray
    except ImportError as e:
        raise ConfigError(f"{INSTALL_HINT} ({e})") from e
    return ray


@dataclass
class _RayWorker(_Worker):
    actor: Any = None  # the actor's handle
    node_id: str = ""
    host: str = ""  # the node's address
    offset_ns: int = 0  # its perf_counter_ns minus ours
    error_ns: int | None = None  # the bound on that offset's error
    death: str | None = None  # how its calls ended, when they failed
    heard_ns: int = 0  # when a pull last came back (perf_counter_ns)
    pump: threading.Thread | None = None


class RayShards(ProcessShards):
    """The run's shard as Ray actors (module docstring), with the face `client.face.ShardFace`."""

    lead_s = LEAD_S

    def __init__(
        self,
        spec: ShardSpec,
        *,
        address: str | None,
        resource: str | None = None,
        shards: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(spec, workers=shards or 1, **kwargs)
        self.address = address
        self.resource = resource
        self.shards = shards
        self.nodes: list[dict[str, Any]] = []
        self._ray: Any = None
        self._ours = False  # this run called ray.init (and shuts it down)
        self._closing = False

    # ------------------------------------------------------------------ public
    async def run(self) -> ShardResult:
        self._ray = import_ray()
        try:
            self._connect()
            return await super().run()
        finally:
            self._closing = True
            if self._ours:
                self._ray.shutdown()

    def _connect(self) -> None:
        """Join the cluster and choose the nodes (before the clock)."""
        ray = self._ray
        if not ray.is_initialized():
            address = None if self.address in (None, "", "local") else self.address
            if address is not None:
                check_reachable(address)
            try:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise ServescopeError(f"--ray {self.address}: cannot join the Ray cluster: {e}") from e
            self._ours = True
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if self.resource:
            nodes = [n for n in nodes if n.get("Resources", {}).get(self.resource)]
        if not nodes:
            raise ServescopeError(
                "--ray: no alive node"
                + (f" offers the resource {self.resource!r}" if self.resource else " in the cluster")
            )
        self.nodes = sorted(nodes, key=lambda n: (n["NodeManagerAddress"], n["NodeID"]))
        self.n = self.shards or len(self.nodes)

    # ---------------------------------------------------------- the transport
    async def _launch(self, specs: list[ShardSpec], loop: asyncio.AbstractEventLoop) -> None:
        """One actor per slice, pinned to its node, created with its slice; a pulling thread for each."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor_class = self._ray.remote(RemoteShard)
        for i, sub in enumerate(specs):
            node = self.nodes[i % len(self.nodes)]
            strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            actor = actor_class.options(
                num_cpus=0,
                max_concurrency=4,
                scheduling_strategy=strategy,
                name=f"servescope-shard-{i}-{id(self):x}",
                runtime_env=RUNTIME_ENV,
            ).remote(dumps(sub), i)
            w = _RayWorker(index=i, spec=sub, actor=actor, node_id=node["NodeID"], host=node["NodeManagerAddress"])
            self._workers.append(w)
            w.pump = threading.Thread(target=self._pump, args=(w, loop), name=f"servescope-ray-{i}", daemon=True)
            w.pump.start()

    def _pump(self, w: _RayWorker, loop: asyncio.AbstractEventLoop) -> None:
        """Pull an actor's messages until its `done`, its death, or the run's end (a thread of its own).

        A call that fails for good (the actor died: `RayActorError`) ends it at once. An actor Ray calls
        "temporarily unavailable" (its connection reset: a node that died, or a passing fault) is tried
        again until it has been silent for `SILENT_S`; then, as when a pull gets no answer at all for
        that long, it is killed (so that it cannot go on sending unheard) and taken for lost."""
        ray = self._ray
        unavailable = getattr(ray.exceptions, "ActorUnavailableError", ())
        last = time.monotonic()
        while not self._closing:
            limit = SILENT_S if w.ready else _READY_TIMEOUT_S
            try:
                msgs = ray.get(w.actor.pull.remote(PULL_WAIT_S), timeout=limit)
            except unavailable as e:
                if time.monotonic() - last < limit:
                    time.sleep(PULL_WAIT_S)
                    continue
                w.death = f"{_error_text(e)}; silent for {limit:g} s, killed"
                self._kill(w)
            except ray.exceptions.GetTimeoutError:
                w.death = f"no answer from it for {limit:g} s; killed"
                self._kill(w)
            except ray.exceptions.RayError as e:
                w.death = _error_text(e)
            else:
                last = time.monotonic()
                w.heard_ns = time.perf_counter_ns()
                if msgs:
                    loop.call_soon_threadsafe(self._on_messages, w, msgs)
                if any(m[0] == "done" for m in msgs):
                    return
                continue
            try:
                loop.call_soon_threadsafe(self._on_eof, w)
            except RuntimeError:  # (the loop closed first: the run is over)
                pass
            return

    def _on_messages(self, w: _Worker, msgs: list[tuple[Any, ...]]) -> None:
        for msg in msgs:
            self._on_message(w, msg)

    async def _wait_ready(self) -> None:
        await super()._wait_ready()
        for w in self._workers:
            assert isinstance(w, _RayWorker)
            w.offset_ns, w.error_ns = self._offset(w)

    def _offset(self, w: _RayWorker) -> tuple[int, int]:
        """The actor's perf_counter_ns minus ours, and the bound on its error, from the shortest of a few
        round trips (the remote reading against the midpoint of our send and receive)."""
        return clock_offset_ns(
            lambda: int(self._ray.get(w.actor.clock.remote(), timeout=_READY_TIMEOUT_S)), _OFFSET_TRIES
        )

    def _start_for(self, w: _Worker) -> int:
        assert isinstance(w, _RayWorker)
        return self.t0_ns + w.offset_ns

    def _send(self, w: _Worker, msg: tuple[Any, ...]) -> None:
        assert isinstance(w, _RayWorker)
        if w.over:
            return
        w.actor.deliver.remote(msg)  # a failed call surfaces in the pulls

    def _close(self, w: _Worker) -> None:
        assert isinstance(w, _RayWorker)
        self._closing = True
        if w.pump is not None:
            w.pump.join(2 * PULL_WAIT_S + 1.0)
        self._kill(w)

    def _kill(self, w: _RayWorker) -> None:
        try:
            self._ray.kill(w.actor, no_restart=True)
        except Exception:  # (already gone with its node)
            pass

    def _alive(self, w: _Worker) -> bool:
        return True  # a death reaches the run through the pulls (`_pump`)

    def _gone_at(self, w: _Worker) -> int:
        """The last time a pull came back: it died at or after that (not when the run gave up on it)."""
        assert isinstance(w, _RayWorker)
        return w.heard_ns or time.perf_counter_ns()

    def _gone_text(self, w: _Worker) -> str:
        assert isinstance(w, _RayWorker)
        return w.death or "its calls ended"

    def _label(self, w: _Worker) -> str:
        assert isinstance(w, _RayWorker)
        return f"ray shard {w.index} on {w.host}" + (f" (pid {w.pid})" if w.pid is not None else "")

    def _ready_doc(self) -> dict[str, Any]:
        """What the manifest records before the clock: the cluster's nodes used and one entry per actor."""
        shards = []
        for w in self._workers:
            assert isinstance(w, _RayWorker)
            shards.append(
                {
                    "index": w.index,
                    "host": w.host,
                    "node_id": w.node_id,
                    "pid": w.pid,
                    "concurrency": w.spec.concurrency,
                    "items": len(w.spec.items),
                    "preconnected": w.preconnected,
                    "clock_offset_ns": w.offset_ns,
                    "clock_error_ns": w.error_ns,
                }
            )
        return {
            "count": len(self._workers),
            "engine": "ray",
            "address": self.address,
            "resource": self.resource,
            "nodes": [n["NodeManagerAddress"] for n in self.nodes],
            "start": "perf_counter_ns of the run's process, converted to each actor's by its measured offset",
            "lead_s": self.lead_s,
            "shards": shards,
        }

    def _merge(self, parent_cpu_s: float) -> ShardResult:
        result = super()._merge(parent_cpu_s)
        for part in result.parts:
            w = self._workers[part.index]
            assert isinstance(w, _RayWorker)
            part.host, part.clock_offset_ns, part.clock_error_ns = w.host, w.offset_ns, w.error_ns
        return result


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A HOST:PORT address that nothing answers at fails now, in words (ray.init would retry for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return  # ray://…, auto: Ray's to resolve
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout_s).close()
    except OSError as e:
        raise ServescopeError(
            f"--ray {address}: nothing answers there ({e}); is `ray start --head` running at "
            "that address, and reachable from here?"
        ) from e


def _error_text(e: BaseException) -> str:
    """A Ray error in one line (their messages run to many)."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"[:300]
