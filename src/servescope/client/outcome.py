"""What a request amounted to: its record marked ok or failed (by kind), with its token counts.

Called once per request, after its response ended or failed (never per token). Failure kinds are
`records.ERROR_KINDS`; an exception is classified by `exception_kind`: the network's, the
server's bytes (`malformed_sse`) or the client's own (`client_error`).
"""

from __future__ import annotations

import traceback
from pathlib import PurePath

import orjson

from servescope.client.conn import HttpError
from servescope.client.openai import MalformedResponse, StreamAccumulator, interpret_response
from servescope.results.records import RequestRecord

__all__ = ["classify_status", "exception_kind", "fail", "finish_stream", "finish_unary"]

_ERROR_DETAIL_CHARS = 2048


def classify_status(status: int) -> str:
    if status == 429:
        return "http_429"
    if 400 <= status < 500:
        return "http_4xx"
    return "http_5xx"


def exception_kind(exc: Exception, *, got_tokens: bool) -> tuple[str, str]:
    """(error kind, detail) for an exception a request ended on (`got_tokens`: a token chunk
    came before it). Timeouts and cancellation are the caller's (they are not failures of the request's
    bytes). Only the server's bytes failing to parse are `malformed_sse`; any other exception is
    the client's own (`client_error`), with where it was raised."""
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, HttpError):
        return "reset", str(exc)
    if isinstance(exc, (MalformedResponse, orjson.JSONDecodeError)):
        return "malformed_sse", detail
    if isinstance(exc, OSError):
        return ("reset" if got_tokens else "connect"), detail
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        detail += f" (at {PurePath(last.filename).name}:{last.lineno} in {last.name})"
    return "client_error", detail


def fail(rec: RequestRecord, kind: str, detail: str) -> None:
    """Mark a record failed; the first failure of a request is the one it keeps."""
    if rec.status == "error":
        return
    rec.status = "error"
    rec.error_kind = kind
    rec.error_detail = detail[:_ERROR_DETAIL_CHARS]


def finish_stream(rec: RequestRecord, acc: StreamAccumulator) -> None:
    """After the stream ended without an exception: decide ok or failed, fill token counts."""
    res = acc.finish()
    rec.chunk_ns = acc.chunk_ns
    rec.chunks = len(acc.chunk_ns)
    rec.chunk_tokens = res.chunk_tokens
    rec.output_tokens = res.output_tokens
    rec.output_tokens_source = res.output_tokens_source
    rec.reasoning_tokens = res.reasoning_tokens
    rec.input_tokens = res.input_tokens
    if acc.chunk_ns:
        rec.t_first_ns = acc.chunk_ns[0]
        rec.t_last_ns = acc.chunk_ns[-1]
        rec.t_first_answer_ns = acc.t_first_answer_ns
    if rec.status != "pending":
        return
    if res.error is not None:
        fail(rec, "stream_error", res.error)
    elif not acc.done and acc.finish_reason is None:
        fail(rec, "no_done", "the stream ended without data: [DONE] or a finish_reason")
    elif not acc.chunk_ns:
        fail(rec, "empty", "the response carried no generated token")
    else:
        rec.status = "ok"


def finish_unary(rec: RequestRecord, body: bytes, t_ns: int, api: str) -> None:
    res, has_text, has_answer = interpret_response(body, api)
    rec.t_end_ns = t_ns
    rec.output_tokens = res.output_tokens
    rec.output_tokens_source = res.output_tokens_source
    rec.reasoning_tokens = res.reasoning_tokens
    rec.input_tokens = res.input_tokens
    if res.error is not None:
        fail(rec, "stream_error", res.error)
        return
    if not has_text:
        fail(rec, "empty", "the response carried no generated token")
        return
    # Without streaming, every token arrives with the body: TTFT = E2E, ITL undefined.
    rec.t_first_ns = rec.t_last_ns = t_ns
    rec.t_first_answer_ns = t_ns if has_answer else None
    rec.chunk_ns = [t_ns]
    rec.chunk_tokens = [res.output_tokens]
    rec.chunks = 1
    rec.status = "ok"
