"""The shape of the summary's `engine_view` block (`EngineView`, `EngineComparison`, `EnginePhase`): the
engine's own view of latency from its request-level histograms, beside the client's (results.engineview).
TypedDicts, re-exported by `results.schema` (where `Summary` names them); see its docstring for what
the types do and do not.
"""

# No `from __future__ import annotations`: TypedDict computes __required_keys__ from evaluated
# annotations (results/schema.py).
from typing import NotRequired  # closed= (PEP 728); pydantic needs this TypedDict before 3.12

from typing_extensions import TypedDict

__all__ = ["EngineComparison", "EnginePhase", "EngineView", "SpecDecodeView", "SpecPosition"]


class EnginePhase(TypedDict, closed=True):
    """One request-level histogram of the engine over the run's window (results.engineview): `metric` the
    engine's name for it, `count` = Δ_count, `mean_ms` = Δ_sum / Δ_count; `median_ms` and `p90_ms`
    estimated from the buckets (linear within the bucket that holds them, null without buckets) and
    that bucket's `[lower, upper]` bounds in ms (upper null: the +Inf bucket, the estimate its lower bound)."""

    metric: str
    count: int
    mean_ms: float
    median_ms: float | None
    median_bucket_ms: list[float | None] | None
    p90_ms: float | None
    p90_bucket_ms: list[float | None] | None


class EngineComparison(TypedDict, closed=True):
    """An `EnginePhase` of a metric the client measures too (TTFT, ITL, E2E), with the client's count and
    mean over the same requests and client − engine, in ms (null: the client has no value)."""

    metric: str
    count: int
    mean_ms: float
    median_ms: float | None
    median_bucket_ms: list[float | None] | None
    p90_ms: float | None
    p90_bucket_ms: list[float | None] | None
    client_count: int
    client_mean_ms: float | None
    client_minus_engine_ms: float | None


class SpecPosition(TypedDict, closed=True):
    """One draft position (0: the first drafted token): Δ accepted tokens there, and its acceptance
    rate = accepted there / drafts (vLLM's per-position rate)."""

    position: int
    accepted_tokens: int
    acceptance_rate: float | None


class SpecDecodeView(TypedDict, closed=True):
    """Speculative decoding over the run's window, from the engine's counters' deltas (results.engineview;
    docs/metrics.md): drafts, draft tokens, accepted tokens; `acceptance_rate` = accepted / draft tokens;
    `mean_acceptance_length` = 1 + accepted / drafts (tokens per verification step, the bonus token
    included, as vLLM defines it); per position. `client_tokens_per_chunk`: the client's output tokens per
    token-carrying chunk over the completed streamed requests between the scrapes (null: not streamed)."""

    metrics_used: dict[str, str]
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position: list[SpecPosition]
    client_tokens_per_chunk: float | None


class EngineView(TypedDict, closed=True):
    """The engine's own view of latency over the run's window, from its request-level histograms
    (results.engineview; docs/metrics.md). `requests_sent` / `requests_completed`: the client's between
    the two scrapes (warm-up included); `engine_requests`: the engine's count of them (Δ_count of the
    histogram named in `engine_requests_metric`: E2E, else TTFT). `metrics`: ttft, itl, e2e beside the
    client's; `phases`: queue, prefill, decode, inference, each where the engine has it; `speculative`:
    the speculative-decoding counters over the window (`SpecDecodeView`), where the engine has them."""

    requests_sent: int
    requests_completed: int
    engine_requests: int | None
    engine_requests_metric: str | None
    metrics: dict[str, EngineComparison]
    phases: dict[str, EnginePhase]
    speculative: NotRequired[SpecDecodeView | None]  # null: the engine ran no speculative decoding
