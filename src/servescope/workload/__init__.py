"""Workloads: the prompts and lengths of a run, generated before the clock starts (seeded).

A workload is a list of `WorkItem`s. The runner turns each into an encoded request body before
the first request is sent; nothing here runs on the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servescope.run.config import RunConfig
    from servescope.target.capabilities import Capabilities

__all__ = ["WorkItem", "Workload", "prepare_workload"]


@dataclass(slots=True)
class WorkItem:
    """One request to send: a prompt (text, or chat messages) and its intended lengths."""

    prompt: str | list[dict[str, Any]]
    input_len: int  # intended prompt tokens (exact when a tokenizer built it, else approximate)
    output_len: int | None  # max_tokens; None = let the server decide
    session: int | None = None
    turn: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Workload:
    """The items of a run plus what the summary and manifest should say about how they were made."""

    items: list[WorkItem]
    info: dict[str, Any] = field(default_factory=dict)  # e.g. tokenizer used, intended prefix hit rate
    # agent sessions: one row per request (agentplan.PlanRow + counted input_len, designed_cached), the
    # run's sessions.jsonl
    session_plan: list[dict[str, Any]] | None = None


async def prepare_workload(
    cfg: RunConfig,
    n_total: int,
    *,
    base_url: str,
    model: str,
    headers: dict[str, str],
    caps: Capabilities | None = None,
) -> Workload:
    """Every prompt of the run, before the clock.

    This is the one entry point `bench` calls. `cfg.dataset` says what to build (workload/spec.py);
    exact token lengths come from `cfg.tokenizer` (a local Hugging Face tokenizer) or the server's own
    /tokenize, else lengths are approximate; `info` says which, for the manifest and the summary.
    """
    from servescope.workload.prepare import prepare

    return await prepare(cfg, n_total, base_url=base_url, model=model, headers=headers, caps=caps)
