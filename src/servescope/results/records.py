"""The per-request record: what the client (`client.shard`) measured for one request, and its on-disk form.

Times are integer nanoseconds from `time.perf_counter_ns()`, stored relative to the run's
origin `t0_ns` (the instant the schedule starts), so records of one run compare directly and
no wall clock ever enters a measurement. Pure: no I/O here (see `store.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["RequestRecord", "ERROR_KINDS", "record_from_dict"]

#: Failure kinds a record may carry in `error_kind`.
ERROR_KINDS = (
    "http_4xx",  # any 4xx except 429
    "http_429",  # rate limited
    "http_5xx",
    "connect",  # could not connect / connection refused
    "reset",  # connection closed or reset mid-stream
    "timeout",  # no completion within --timeout
    "malformed_sse",  # the server's bytes do not parse: a data line that is not JSON, or JSON of the wrong shape
    "no_done",  # stream ended without `data: [DONE]` on a target that sends it
    "empty",  # the stream ended with no generated token at all
    "stream_error",  # the server sent an error object or `event: error` inside a 200 response
    "cancelled",  # still in flight when the run stopped (SIGINT, --duration)
    "client_error",  # an unexpected exception in the client's own code (a bug): error_detail names it
    "worker_lost",  # in flight on a worker process (--workers) that died: its outcome is unknown
)


@dataclass(slots=True)
class RequestRecord:
    """One request. `*_ns` are perf_counter ns relative to the run origin; None = never happened."""

    id: int
    warmup: bool = False
    t_sched_ns: int = 0
    t_send_ns: int | None = None
    t_first_ns: int | None = None  # first chunk carrying generated text on ANY channel
    t_first_answer_ns: int | None = None  # first chunk carrying answer `content`/`text`
    t_last_ns: int | None = None  # last chunk carrying a token
    t_end_ns: int | None = None  # response fully read (or failure observed)
    # connection set-up inside the measured window before this request could be sent: TCP connect and,
    # over https, the TLS handshake (ns; the time between t_sched and t_send it took). None: sent on a
    # connection opened before (before the clock, or by an earlier request)
    setup_ns: int | None = None
    status: str = "pending"  # "ok" | "error"
    error_kind: str | None = None
    error_detail: str | None = None
    http_status: int | None = None
    input_len: int = 0  # requested input length (tokens) from the workload
    output_len: int = 0  # requested output length (max_tokens)
    input_tokens: int | None = None  # server usage.prompt_tokens
    output_tokens: int | None = None  # server usage.completion_tokens, else counted
    output_tokens_source: str = "counted"  # "usage" | "counted"
    reasoning_tokens: int = 0
    chunks: int = 0  # token-carrying chunks received
    # Arrival time of every token-carrying chunk (run-relative ns) and tokens it carried (empty: one
    # each). Once written to disk a record kept in memory holds its times packed (an int64 array).
    chunk_ns: Sequence[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    response_id: str | None = None  # the server's x-request-id header, to match server-side logs
    session: int | None = None  # multi-turn: session id
    turn: int | None = None  # multi-turn: turn index within its session

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_FIELDS = frozenset(RequestRecord.__dataclass_fields__)


def record_from_dict(data: dict[str, Any]) -> RequestRecord:
    """Inverse of `RequestRecord.to_dict`; unknown keys (from newer versions) are ignored."""
    return RequestRecord(**{k: v for k, v in data.items() if k in _FIELDS})
