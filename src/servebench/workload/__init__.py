"""Workloads: the prompts and lengths of a run, generated before the clock starts (seeded).

A workload is a list of `WorkItem`s. The runner turns each into an encoded request body before
the first request is sent; nothing here runs on the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["WorkItem"]


@dataclass(slots=True)
class WorkItem:
    """One request to send: a prompt (text, or chat messages) and its intended lengths."""

    prompt: str | list[dict[str, Any]]
    input_len: int  # intended prompt tokens (exact when a tokenizer built it, else approximate)
    output_len: int | None  # max_tokens; None = let the server decide
    session: int | None = None
    turn: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
