"""Wire pieces of the emulator: OpenAI bodies, pre-encoded SSE chunk templates, Prometheus text.

Pure (no sockets, no clocks): `emulator.app` and `emulator.pacing` own the I/O and call these. Shapes follow vLLM's
OpenAI-compatible server (chat.completion(.chunk), text_completion, /tokenize, /detokenize, /metrics).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "BadRequest",
    "Histogram",
    "ChunkTemplates",
    "chunked",
    "chat_body",
    "completion_body",
    "usage_dict",
    "error_body",
    "render_metrics",
    "TTFT_BUCKETS_S",
    "ITL_BUCKETS_S",
    "E2E_BUCKETS_S",
    "ITERATION_TOKENS_BUCKETS",
]

# vLLM's bucket bounds (vllm/v1/metrics/loggers.py) for the same-named histograms.
TTFT_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS_S = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS_S = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


@dataclass(slots=True)
class Histogram:
    """A Prometheus histogram: per-bucket counts (non-cumulative here), sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += times
        self.total += value * times
        self.n += times


def chunked(data: bytes) -> bytes:
    """One HTTP/1.1 chunk (transfer-encoding: chunked)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _j(value: Any) -> bytes:
    return orjson.dumps(value)


class ChunkTemplates:
    """Pre-encoded SSE event bytes for one streaming response; a token costs one concatenation."""

    __slots__ = ("content_pre", "reasoning_pre", "post", "last_post_stop", "last_post_length", "head", "role_chunk")

    def __init__(self, *, chat: bool, rid: str, created: int, model: str) -> None:
        m = _j(model)
        if chat:
            head = b'data: {"id":"chatcmpl-%s","object":"chat.completion.chunk","created":%d,"model":%s,' % (
                rid.encode(),
                created,
                m,
            )
            self.content_pre = head + b'"choices":[{"index":0,"delta":{"content":'
            self.reasoning_pre = head + b'"choices":[{"index":0,"delta":{"reasoning_content":'
            self.post = b'},"logprobs":null,"finish_reason":null}]}\n\n'
            self.last_post_stop = b'},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}\n\n'
            self.last_post_length = b'},"logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n'
            self.role_chunk = (
                head + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
                b'"logprobs":null,"finish_reason":null}]}\n\n'
            )
        else:
            head = b'data: {"id":"cmpl-%s","object":"text_completion","created":%d,"model":%s,' % (
                rid.encode(),
                created,
                m,
            )
            self.content_pre = head + b'"choices":[{"index":0,"text":'
            self.reasoning_pre = self.content_pre
            self.post = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
            self.last_post_stop = b',"logprobs":null,"finish_reason":"stop","stop_reason":null}]}\n\n'
            self.last_post_length = b',"logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n'
            self.role_chunk = b""
        self.head = head

    def usage_chunk(self, usage: dict[str, Any]) -> bytes:
        return self.head + b'"choices":[],"usage":' + _j(usage) + b"}\n\n"


def usage_dict(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int | None) -> dict[str, Any]:
    u: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }
    if reasoning_tokens is not None:
        u["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return u


def chat_body(
    *,
    rid: str,
    created: int,
    model: str,
    content: str,
    reasoning: str | None,
    finish_reason: str,
    usage: dict[str, Any],
) -> bytes:
    msg: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": []}
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    return _j(
        {
            "id": f"chatcmpl-{rid}",
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {"index": 0, "message": msg, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
            ],
            "usage": usage,
            "prompt_logprobs": None,
        }
    )


def completion_body(
    *, rid: str, created: int, model: str, text: str, finish_reason: str, usage: dict[str, Any]
) -> bytes:
    return _j(
        {
            "id": f"cmpl-{rid}",
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": finish_reason,
                    "stop_reason": None,
                    "prompt_logprobs": None,
                }
            ],
            "usage": usage,
        }
    )


def error_body(message: str, kind: str, code: int) -> bytes:
    return _j({"object": "error", "message": message, "type": kind, "param": None, "code": code})


class BadRequest(Exception):
    """A request the emulator refuses: answered with `status` and an `error_body` of type `kind`."""

    def __init__(self, message: str, status: int = 400, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


def _fmt(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    return repr(float(v))


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def render_metrics(
    *,
    model: str,
    gauges: dict[str, tuple[str, float]],
    counters: dict[str, tuple[str, float | dict[str, float]]],
    histograms: dict[str, tuple[str, Histogram]],
    info: dict[str, tuple[str, dict[str, str]]] | None = None,
) -> bytes:
    """Prometheus text exposition (version 0.0.4), vLLM names, `model_name` label on every sample.

    `counters` maps a family name (no `_total`) to (help, value) or (help, {finished_reason: value}).
    `info` maps a family name to (help, labels): a gauge of value 1 carrying the labels (as vLLM's
    `vllm:cache_config_info`).
    """
    base = {"model_name": model, "engine": "0"}
    out: list[str] = []
    for name, (help_, labels) in (info or {}).items():
        out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name}{_labels({**base, **labels})} 1.0"]
    for name, (help_, value) in gauges.items():
        out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name}{_labels(base)} {_fmt(value)}"]
    for name, (help_, count) in counters.items():
        out += [f"# HELP {name} {help_}", f"# TYPE {name} counter"]
        if isinstance(count, dict):
            for reason, v in count.items():
                out.append(f"{name}_total{_labels({**base, 'finished_reason': reason})} {_fmt(v)}")
        else:
            out.append(f"{name}_total{_labels(base)} {_fmt(count)}")
    for name, (help_, h) in histograms.items():
        out += [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
        cum = 0
        for bound, c in zip(h.bounds, h.counts):
            cum += c
            out.append(f"{name}_bucket{_labels({**base, 'le': _fmt(bound)})} {float(cum)}")
        out.append(f"{name}_bucket{_labels({**base, 'le': '+Inf'})} {float(h.n)}")
        out.append(f"{name}_sum{_labels(base)} {_fmt(h.total)}")
        out.append(f"{name}_count{_labels(base)} {float(h.n)}")
    return ("\n".join(out) + "\n").encode()
