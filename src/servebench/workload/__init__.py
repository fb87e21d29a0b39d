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


@dataclass(slots=True)
class Workload:
    """The items of a run plus what the summary and manifest should say about how they were made."""

    items: list[WorkItem]
    info: dict[str, Any] = field(default_factory=dict)  # e.g. tokenizer used, intended prefix hit rate


async def prepare_workload(
    cfg: Any, n_total: int, *, base_url: str, model: str, headers: dict[str, str], caps: Any = None
) -> Workload:
    """Every prompt of the run, before the clock (`cfg` is a RunConfig).

    This is the one entry point `bench` calls; datasets, exact token lengths (the server's
    /tokenize or a local tokenizer) and multi-turn sessions plug in behind it.
    """
    from servebench.workload.random import random_workload  # noqa: PLC0415

    if cfg.dataset != "random":
        from servebench.errors import ConfigError  # noqa: PLC0415

        raise ConfigError(f"--dataset {cfg.dataset!r} is not supported yet (random is)")
    items = random_workload(n_total, input_len=cfg.input_len, output_len=cfg.output_len,
                            range_ratio=cfg.range_ratio, seed=cfg.seed)
    return Workload(items=items, info={"dataset": "random", "lengths": "approximate"})
