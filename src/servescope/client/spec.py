"""What a shard is given and what it gives back: prepared requests, the shard's settings, its result.

Pure data; the shard that runs them is `shard.Shard`. All of it pickles (slotted dataclasses of plain
values), which is how a spec reaches a worker process and a result comes back (`host`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servescope.results.records import RequestRecord

__all__ = ["Prepared", "ShardResult", "ShardSpec"]


@dataclass(slots=True)
class Prepared:
    """A request ready to go: encoded body and, for open loops, its send offset from t0."""

    id: int
    body: bytes
    input_len: int
    output_len: int
    warmup: bool = False
    offset_ns: int | None = None  # None: closed loop (sent when a slot frees)
    session: int | None = None
    turn: int | None = None
    think_ns: int = 0  # multi-turn: pause after the previous turn's answer, before this one
    branch: int = 0  # agent sessions: 0 the main agent; b >= 1 sub-agent b (a fan-out's agents run at once)


@dataclass(slots=True)
class ShardSpec:
    url: str  # the full endpoint URL (…/v1/chat/completions)
    api: str  # "chat" | "completions" | "responses" | "messages"
    headers: dict[str, str]
    items: list[Prepared]
    stream: bool = True
    concurrency: int | None = None  # closed loop: N workers; open loop: a cap (None = no cap)
    open_loop: bool = False
    duration_s: float | None = None  # stop sending after this long (items are reused cyclically)
    num_requests: int | None = None  # total to send (default: len(items))
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    preconnect: int = 0  # connections to open (and keep alive) before the clock starts
    preconnect_budget_s: float | None = None  # how long opening them may take (None: twice connect_timeout_s)
    reuse_connections: bool = True  # False: the server closes after each stream (probe finding)
    kernel_timestamps: bool = True  # stamp reads with the kernel's receive time where possible
    coalesce_reads: bool = True  # with kernel stamps: pause briefly when reads come very fast (coalesce.ReadCoalescer)


@dataclass(slots=True)
class ShardResult:
    records: list[RequestRecord]
    t0_ns: int  # the run origin, in this process's perf_counter_ns
    elapsed_s: float
    rx_timestamps: str  # "kernel" (receive timestamps) or "read" (taken when the read ran)
    cpu_s: float  # this process's user+system CPU over the run
    cpu_busy_peak: float  # highest 1-second CPU share (1.0 = one core fully busy)
    loop_lag_ms: list[float] = field(default_factory=list)  # event-loop oversleep samples
    read_pauses: int = 0  # read coalescing: pauses taken (coalesce.ReadCoalescer)
    read_pause_ms: float = 0.0  # and their total length
    interrupted: bool = False
    preconnected: int = 0  # connections opened before the clock (of `ShardSpec.preconnect` asked for)
    # kernel-stamped reads by how late they ran after their newest bytes came (client.transport: buckets of
    # 2**LATENESS_SHIFT ns, the last one open-ended); merged: summed. Empty: no stamps
    read_lateness: list[int] = field(default_factory=list)
    failure: str | None = None  # why the shard stopped sending early on a client-side error (`shard.Shard`)
    # A shard among several (`host`, run.workers): the process that ran it and how late it woke for the
    # common start instant. A merged result of several: each shard's own result (records left empty,
    # `index` its place) and the requests lost in flight with a shard whose process died.
    index: int = 0
    pid: int | None = None
    start_late_ms: float | None = None
    parts: list[ShardResult] = field(default_factory=list)
    lost: int = 0
    # of a shard whose host died (merged: summed): its slice's requests it never sent, or sent in its last
    # moments unheard of; None where the slice had no count (--duration)
    not_sent: int | None = None
    # a shard on another host (run.ray_run): the node, and its perf_counter_ns minus the run's as measured
    # before the clock, with the bound on that offset's error (half the best round trip)
    host: str | None = None
    clock_offset_ns: int | None = None
    clock_error_ns: int | None = None
    parent_cpu_s: float = 0.0  # merged: the run's own process over the run (it reads and writes every record)
