"""The shape of `summary.json`, written down once: `Summary` and its blocks, as TypedDicts.

`colsummary.summarize_columns` builds a `Summary` from a run's columns, `run.assemble` and `sweep` add
their blocks to it (the cost and energy blocks' shapes are in `costschema`, the engine view's in
`engineschema`), and the
store, report, repeats and sweep read it through these types, so mypy checks every key. At run time
a TypedDict is a plain dict: nothing here validates or costs anything, and nothing here imports
pydantic. The JSON Schema kept in the repository (docs/summary.schema.json) is generated from these
types by `results/schemagen.py` (pydantic's TypeAdapter, a test-time dependency):

    python -m servescope.results.schemagen --write     # regenerate docs/summary.schema.json
    python -m servescope.results.schemagen --check     # exit 1 when the committed file is stale

Blocks the metrics own are closed (PEP 728 `closed=True`, `additionalProperties: false` in the JSON
Schema): a key added without changing its type here fails the schema tests. Blocks whose keys depend
on the target or the workload stay open: `workload` (workload.info adds per-kind keys) and `server`
(the metrics a server exposes).

Keys that `summarize_columns` alone cannot know (the run's identity, target, load, workload, the
server's metrics, notes) are `NotRequired`: a summary recomputed from records (`servescope report` on
a killed run) has them only as far as the manifest tells, and summaries written before a key existed
still load. Version history: docs/results.md.
"""

# No `from __future__ import annotations`: TypedDict computes __required_keys__ from evaluated
# annotations, and the classes below are defined in dependency order.
from typing import Literal, NotRequired

from typing_extensions import TypedDict  # closed= (PEP 728); pydantic needs this TypedDict before 3.12

from servescope.results.costschema import Cost, Energy, GpuEnergy
from servescope.results.engineschema import EngineComparison, EnginePhase, EngineView

__all__ = [
    "SUMMARY_VERSION",
    "SUMMARY_VERSIONS",
    "LEGACY_SCHEMA_PREFIX",
    "current_schema_id",
    "AggregateCheck",
    "Bias",
    "Client",
    "ClientMeasures",
    "Cost",
    "Distribution",
    "Energy",
    "EngineComparison",
    "EnginePhase",
    "EngineView",
    "ErrorAdjusted",
    "ErrorAdjustedLatency",
    "Goodput",
    "GpuEnergy",
    "GoodputCheck",
    "Interactivity",
    "Latency",
    "LatencyMetric",
    "ApiKind",
    "LoadMode",
    "Load",
    "PerUserRate",
    "PercentileInterval",
    "Precision",
    "Requests",
    "RunInfo",
    "ServerMetrics",
    "Setup",
    "ShardFigures",
    "SloCheck",
    "Summary",
    "Target",
    "Throughput",
    "Tokens",
    "Workers",
    "UserRateDistribution",
    "Workload",
]

#: The version string in `summary["schema"]` that this code writes.
SUMMARY_VERSION: Literal["servescope.summary/1"] = "servescope.summary/1"
#: The prefix of every schema id this project wrote before it was renamed (servebench -> servescope).
LEGACY_SCHEMA_PREFIX = "servebench."
#: Every version the loaders accept (the shape each had is in docs/results.md); the legacy id is read
#: as the current one (the same shape under the old name).
SUMMARY_VERSIONS = (SUMMARY_VERSION, LEGACY_SCHEMA_PREFIX + "summary/1")


def current_schema_id(schema_id: str) -> str:
    """A schema id as this version names it: one written under the old project name (`servebench.*`)
    reads as the same id under `servescope.*`; any other id is returned unchanged."""
    if schema_id.startswith(LEGACY_SCHEMA_PREFIX):
        return "servescope." + schema_id[len(LEGACY_SCHEMA_PREFIX) :]
    return schema_id


#: The per-request latency metrics (keys of `latency_ms`).
LatencyMetric = Literal["ttft", "tpot", "itl", "e2e", "ttfat"]
ApiKind = Literal["chat", "completions", "responses", "messages"]
LoadMode = Literal["concurrency", "rate", "offline", "ramp"]


class Distribution(TypedDict, closed=True):
    """A latency distribution in ms (metrics.distribution): `count` finite values; the rest null
    when there are none. Percentiles interpolate linearly between order statistics."""

    count: int
    mean: float | None
    median: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    min: float | None
    max: float | None
    std: float | None


class ErrorAdjusted(TypedDict, closed=True):
    """Percentiles in ms where each failed request counts as +inf; null means infinite (or no request)."""

    median: float | None
    p90: float | None
    p95: float | None
    p99: float | None


class Latency(TypedDict, closed=True):
    """Per-request latency distributions of completed requests (ITL is per token)."""

    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2e: Distribution
    ttfat: Distribution


class ErrorAdjustedLatency(TypedDict, closed=True):
    ttft: ErrorAdjusted
    e2e: ErrorAdjusted


class Requests(TypedDict, closed=True):
    """Measured requests (warm-up excluded, counted apart); `errors` counts failures by kind."""

    total: int
    completed: int
    failed: int
    errors: dict[str, int]
    warmup: int


class Throughput(TypedDict, closed=True):
    """Rates over the measured window (first send to last end); offered: the schedule's send rate (open loop)
    or requests sent over the window (closed loop), docs/metrics.md."""

    requests_per_s: float
    offered_requests_per_s: float
    input_tokens_per_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float


class Tokens(TypedDict, closed=True):
    """Token totals of completed requests and where the counts came from."""

    input_total: int
    output_total: int
    reasoning_total: int
    answer_total: int
    input_source: Literal["usage", "requested", "mixed", "none"]
    output_source: Literal["usage", "counted", "mixed", "none"]


class PerUserRate(TypedDict, closed=True):
    """Per request output tokens / E2E seconds: median, 10th percentile, mean (null: no request)."""

    median: float | None
    p10: float | None
    mean: float | None


class UserRateDistribution(TypedDict, closed=True):
    """Per request 1000 / TPOT (tokens/s per user) of completed requests with a TPOT: the low
    percentiles are the slow users (p10: 90% of requests streamed at least this fast)."""

    count: int
    mean: float | None
    median: float | None
    p90: float | None
    p10: float | None
    p1: float | None


class Interactivity(TypedDict, closed=True):
    """What one user sees against what each GPU delivers (results.interactivity): tokens/s per
    user = 1000 / median TPOT; per-GPU throughputs null when the GPU count is unknown. `gpus_source`:
    "--gpus" or "emulator" (the built-in emulator's deployment)."""

    tokens_per_s_per_user: float | None
    per_request_tokens_per_s_per_user: UserRateDistribution
    gpus: int | None
    gpus_source: str | None
    output_tokens_per_s_per_gpu: float | None
    total_tokens_per_s_per_gpu: float | None


class Goodput(TypedDict, closed=True):
    """Requests meeting every per-request limit in `slo` (`ttft_ms`, `tpot_ms`, ...)."""

    slo: dict[str, float]
    requests_meeting_slo: int
    fraction: float
    requests_per_s: float


class ClientMeasures(TypedDict, total=False, closed=True):
    """What the client measured about itself during the run (run.assemble, from the shard)."""

    cpu_s: float
    cpu_us_per_token: float | None
    cpu_busy_peak: float
    loop_lag_ms_p99: float
    read_pauses: int
    read_pause_ms: float
    elapsed_s: float


class ShardFigures(TypedDict, closed=True):
    """One shard of a `--workers N` run (run.workers) or a `--ray` run (run.ray_run, an actor): its slice
    (`concurrency`: its share of a closed loop's, or of an open loop's cap), its requests (`lost`: in
    flight when its process died, `died`), its CPU (`cpu_share` = cpu_s / its elapsed time, 1.0 = one
    core), event-loop lag, send lag against the schedule, how late it woke for the common start, and
    `assess_client`'s verdict on it."""

    index: int
    pid: int | None
    concurrency: int | None
    requests: int
    completed: int
    lost: int
    died: bool
    cpu_s: float | None
    cpu_share: float | None
    cpu_busy_peak: float | None
    loop_lag_ms_p99: float | None
    schedule_lag_ms_p50: float | None
    schedule_lag_ms_p99: float | None
    start_late_ms: float | None
    preconnected: int
    saturated: bool
    reasons: list[str]
    not_sent: NotRequired[int | None]  # died: its slice's requests never sent (or sent unheard); null: --duration
    host: NotRequired[str]  # on another host (--ray, run.ray_run): the node's address
    clock_offset_ms: NotRequired[float | None]  # and that host's perf_counter minus the run's (docs/metrics.md)
    clock_error_ms: NotRequired[float | None]  # the bound on the offset's error: half the best round trip


class Workers(TypedDict, closed=True):
    """A run over worker processes on this host (`--workers N`, run.workers) or Ray actors (`--ray`): how
    many, the run's own process's CPU over the run (it reads and writes every record), each shard's
    figures, the index of the saturated shard (the highest CPU share among those judged saturated; null: none), and the
    requests lost in flight with a worker process that died (records of kind `worker_lost`)."""

    count: int
    parent_cpu_s: float
    shards: list[ShardFigures]
    saturated_shard: int | None
    lost_in_flight: int
    not_sent: NotRequired[int | None]  # a shard died: the requests of its slice it never sent (null: --duration)


class Setup(TypedDict, closed=True):
    """Requests that waited for a connection opened inside the window (records' `setup_ns`), how long, and
    its share of their set-up + TTFT (TTFT is from the send: docs/metrics.md, "Connection set-up")."""

    requests: int
    ms: Distribution
    share_of_time_to_first_token: float | None


class Bias(TypedDict, closed=True):
    """A cause that can move a reported percentile (results.trust): share touched, worst figure, bound, tolerance."""

    cause: str
    affected_share: float
    figure: str
    bound_ms: float | None
    tolerance_ms: float
    over: NotRequired[list[str]]  # every figure whose bound is over its tolerance, the worst above among them


class Client(TypedDict, closed=True):
    """The client's self-measurements and its verdict: is the client the bottleneck?

    `schedule_lag_ms` (send time - scheduled time) comes from the records; the rest from the run:
    `preconnect_shortfall` counts connections asked for before the clock but opened inside it,
    `failure` says why the client stopped sending early on an error of its own (null: it did not),
    `concurrency_held` the closed loop's mean in flight between the first wave and the last send as
    a share of --concurrency (null: open loop, or no refill to judge), `load_deficit` the share of the
    closed loop's slot time the client left empty over the run (what the verdict judges), `setup` the
    requests that waited for a connection opened inside the window, `biases` each cause's worst bound
    on a reported TTFT or ITL percentile against its tolerance (results.trust; docs/metrics.md, "Client
    self-check"). Absent in summaries written before them: `read_pauses`, `read_pause_ms`,
    `preconnect_shortfall`, `failure`, `concurrency_held`, `tokens_read_together` (null: a run too
    large to hold its gaps), `setup`, `loop_stall_share`, `biases`, `load_deficit`, `unvouched`."""

    cpu_s: NotRequired[float]
    cpu_us_per_token: NotRequired[float | None]
    cpu_busy_peak: NotRequired[float]
    loop_lag_ms_p99: NotRequired[float]
    read_pauses: NotRequired[int]
    read_pause_ms: NotRequired[float]
    elapsed_s: NotRequired[float]
    schedule_lag_ms: Distribution
    saturated: NotRequired[bool]
    reasons: NotRequired[list[str]]
    advice: NotRequired[str]
    preconnect_shortfall: NotRequired[int]
    failure: NotRequired[str | None]
    concurrency_held: NotRequired[float | None]
    tokens_read_together: NotRequired[float | None]  # share of token gaps of 0 (one read: a stall's or a burst)
    workers: NotRequired[Workers]  # --workers N > 1 only; cpu_s above then sums every process
    setup: NotRequired[Setup]  # connections opened inside the window (absent in summaries before it)
    loop_stall_share: NotRequired[float | None]  # arrivals a loop stall longer than the gap may merge
    biases: NotRequired[list[Bias]]  # each cause's worst bound on a reported percentile
    unvouched: NotRequired[list[str]]  # figures an uncounted bias bound could move past their tolerance
    load_deficit: NotRequired[float | None]  # closed loop: share of slot time the client left empty


class Target(TypedDict, closed=True):
    """What was measured; `profile` only for the built-in emulator."""

    url: str
    model: str
    api: ApiKind
    emulated: bool
    profile: NotRequired[str]


class Load(TypedDict, closed=True):
    """How load was applied; `rate_rps` is "inf" for an offline (all at once) run."""

    mode: NotRequired[LoadMode]  # absent: recomputed from a manifest
    concurrency: int | None
    rate_rps: float | Literal["inf"] | None
    burstiness: float | None
    ramp_up_strategy: NotRequired[str | None]
    ramp_up_start_rps: NotRequired[float | None]
    ramp_up_end_rps: NotRequired[float | None]
    warmup: NotRequired[int]


class Workload(TypedDict):
    """The workload as asked for, then workload.info (docs/workloads.md): open, since each kind of
    workload adds its own keys (mix, shared_prefix, sessions, trace, ...)."""

    dataset: str | None
    input_len: int | None
    output_len: int | None
    range_ratio: NotRequired[float]
    ignore_eos: NotRequired[bool]
    stream: NotRequired[bool]
    seed: NotRequired[int]
    output_len_enforced: NotRequired[bool | None]
    kind: NotRequired[str]
    lengths: NotRequired[str]
    overhead_source: NotRequired[str]
    overhead_tokens: NotRequired[int]
    prepare_s: NotRequired[float]
    tokenize_calls: NotRequired[int]
    notes: NotRequired[list[str]]
    intended_prefix_hit_rate: NotRequired[float]
    # "template": a random workload shares only the chat template, so the rate is a ceiling
    intended_prefix_hit_rate_basis: NotRequired[str]


class ServerMetrics(TypedDict):
    """The server's Prometheus metrics over the window (target.servermetrics.server_summary), in
    common keys; open, since engines expose different metrics. `metrics_used`: common key -> the
    engine's metric name."""

    metrics_used: dict[str, str]
    prefix_cache_hit_rate: float | None
    running: NotRequired[float]
    waiting: NotRequired[float]
    kv_usage: NotRequired[float]
    prompt_tokens: NotRequired[float]
    generation_tokens: NotRequired[float]
    prefix_queries: NotRequired[float]
    prefix_hits: NotRequired[float]
    preemptions: NotRequired[float]
    latency_ms: NotRequired[dict[str, float]]


class AggregateCheck(TypedDict, closed=True):
    """One `<metric>_<stat>_ms` limit: `value_ms` null when missing or infinite (`infinite`)."""

    name: str
    metric: LatencyMetric
    stat: str
    limit_ms: float
    value_ms: float | None
    infinite: bool
    passed: bool
    source: NotRequired[str]


class GoodputCheck(TypedDict, closed=True):
    """`goodput_fraction=LIMIT`: at least that fraction of measured requests met the per-request SLO."""

    name: str
    metric: Literal["goodput"]
    stat: Literal["fraction"]
    limit: float
    value: float | None
    passed: bool


class SloCheck(TypedDict, closed=True):
    """Pass/fail against the run-level limits of `--slo` (results.slo.evaluate); `passed` null
    when there was no limit to check."""

    passed: bool | None
    checks: list[AggregateCheck | GoodputCheck]
    goodput_requests_per_s: float | None
    goodput_fraction: float | None


class ValidationCheck(TypedDict, closed=True):
    """One self-check of the run's figures (results.selfcheck): what it compared (`figures`), the
    outcome, and why (the tolerance it used, or what was missing when skipped)."""

    name: str
    status: Literal["pass", "fail", "marked", "skipped"]  # marked: shown with a caveat, not a failure
    figures: dict[str, float | int | str | None]
    why: str


class PercentileInterval(TypedDict, closed=True):
    """A percentile (ms) and its 95% confidence interval from this run alone (results.precision);
    `low`/`high` null: the data do not bound it on that side; `half_width_pct`: the larger side as %
    of the estimate (null when a side is open)."""

    estimate: float
    low: float | None
    high: float | None
    half_width_pct: float | None


class Precision(TypedDict, closed=True):
    """How well this run knows its headline percentiles (docs/metrics.md, "Precision"): per metric
    (ttft, tpot, itl, e2e), `median` and `p99` intervals (null: too few values). With
    --target-precision: the target (± %), whether it was met, and why the run stopped."""

    method: str
    confidence: float
    metrics: dict[str, dict[str, PercentileInterval | None]]
    target_pct: NotRequired[float]
    met: NotRequired[bool]
    stop_reason: NotRequired[str]


class RunInfo(TypedDict, total=False, closed=True):
    """What the records cannot know, given to colsummary.summarize_columns by the run (or from a manifest)."""

    run_id: str
    started_at: str
    target: Target
    load: Load
    workload: Workload
    interrupted: bool


class Summary(TypedDict, closed=True):
    """summary.json: one run's figures (servescope.summary/1). Key order as written: schema, the
    run's identity, the metrics, then client, server, engine_view, slo_check, notes (and cost in a sweep)."""

    schema: Literal["servescope.summary/1"]
    run_id: NotRequired[str]
    started_at: NotRequired[str]
    target: NotRequired[Target]
    load: NotRequired[Load]
    workload: NotRequired[Workload]
    interrupted: NotRequired[bool]
    duration_s: float
    requests: Requests
    throughput: Throughput
    latency_ms: Latency
    latency_ms_error_adjusted: ErrorAdjustedLatency
    tokens: Tokens
    per_user_output_tokens_per_s: PerUserRate
    interactivity: NotRequired[Interactivity]  # absent in summaries written before it
    goodput: Goodput | None
    client: Client
    server: NotRequired[ServerMetrics | None]
    engine_view: NotRequired[EngineView | None]  # absent in summaries written before it
    slo_check: NotRequired[SloCheck]
    validation: NotRequired[list[ValidationCheck]]
    precision: NotRequired[Precision]
    notes: NotRequired[list[str]]
    cost: NotRequired[Cost]
    energy: NotRequired[Energy]  # absent in summaries written before it
