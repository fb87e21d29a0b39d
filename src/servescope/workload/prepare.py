"""`prepare_workload` behind the scenes: parse `--dataset`, pick the counter, build, describe."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from servescope.client.openai import prompt_api
from servescope.errors import ConfigError
from servescope.workload import Workload
from servescope.workload.exact.builder import PromptBuilder, Target
from servescope.workload.spec import parse_dataset

if TYPE_CHECKING:
    from servescope.run.config import RunConfig
    from servescope.target.capabilities import Capabilities

__all__ = ["prepare"]


def _bool(v: str | None, default: bool) -> bool:
    if v is None:
        return default
    return v.strip().lower() not in ("0", "false", "no", "off")


def _output_mode(v: str | None) -> bool:
    """`output=fixed`: --output-len for every request; `output=dataset` (default): the dataset's lengths."""
    if v is None or v == "dataset":
        return False
    if v == "fixed":
        return True
    raise ConfigError(f"--dataset: output={v!r}: use output=dataset (the dataset's reply lengths) or output=fixed")


async def prepare(
    cfg: RunConfig,
    n_total: int,
    *,
    base_url: str,
    model: str,
    headers: dict[str, str],
    caps: Capabilities | None = None,
) -> Workload:
    t_start = time.perf_counter()
    spec = parse_dataset(cfg.dataset)
    # Responses and Messages prompts are chat messages: built and counted as chat (prompt_api)
    api = prompt_api(cfg.api)
    target = Target(base_url=base_url, model=model, headers=headers, api=api, caps=caps, allow_probe=cfg.probe)
    builder = await PromptBuilder.create(target, cfg.tokenizer)
    session_plan = None
    try:
        if spec.kind in ("agent", "sessions"):
            from servescope.workload.agent import agent_items, session_trace_items

            if spec.kind == "agent":
                items, session_plan, extra = await agent_items(spec.options, cfg, n_total, builder)
            else:
                items, session_plan, extra = await session_trace_items(
                    spec.path or "", spec.options, cfg, n_total, builder
                )
        elif spec.kind == "random":
            from servescope.workload.synthetic import random_items

            items, extra = await random_items(spec, cfg, n_total, builder)
        elif spec.kind == "shared-prefix":
            from servescope.workload.synthetic import shared_prefix_items

            items, extra = await shared_prefix_items(spec, cfg, n_total, builder)
        elif spec.kind == "trace":
            from servescope.workload.trace import trace_items

            items, extra = await trace_items(
                spec.path or "",
                cfg,
                n_total,
                builder,
                spec.opt_float("speedup", 1.0) or 1.0,
                block_tokens=spec.opt_int("block", 512) or 512,
                start_s=spec.opt_float("start"),
                end_s=spec.opt_float("end"),
            )
        else:
            from servescope.workload import files
            from servescope.workload.sessions import records_to_items

            if spec.kind == "jsonl":
                records = files.load_jsonl(spec.path or "")
            elif spec.kind == "sharegpt":
                records = files.load_sharegpt(spec.path or "")
            else:
                records = files.load_hf(spec.path or "", spec.options)
            multi = spec.kind == "sharegpt" and _bool(spec.options.get("multi_turn"), True)
            think = spec.opt_float("think", 0.0) or 0.0
            if think < 0:
                raise ConfigError("--dataset: think must be >= 0 seconds")
            items, extra = await records_to_items(
                records,
                cfg,
                n_total,
                builder,
                multi_turn=multi,
                think_s=think,
                max_turns=spec.opt_int("max_turns"),
                shuffle=_bool(spec.options.get("shuffle"), True),
                fixed_output=_output_mode(spec.options.get("output")),
            )
    finally:
        await builder.close()
    lengths = builder.lengths_label
    if spec.kind in ("jsonl", "sharegpt", "hf", "agent", "sessions"):
        how = lengths.removeprefix("exact (").rstrip(")")
        if builder.chat_counts_exact:
            lengths = f"dataset text; counted with {how} (chat template included)"
        elif builder.counter is not None:
            lengths = f"dataset text; counted with {how} (chat template estimated)"
        else:
            lengths = "dataset text; approximate counts (~4 characters per token)"
    info: dict[str, Any] = {
        "dataset": cfg.dataset,
        "kind": spec.kind,
        "lengths": lengths,
        "overhead_source": builder.overhead_source or None,
        "prepare_s": round(time.perf_counter() - t_start, 3),
        **extra,
    }
    if builder.counter is not None and hasattr(builder.counter, "calls"):
        info["tokenize_calls"] = builder.counter.calls
    if builder.probe_requests:  # they show in the server's counters, before the measured window
        info["probe_requests"] = builder.probe_requests
        info["probe_output_tokens"] = builder.probe_output_tokens
    if builder.notes:
        info["notes"] = list(dict.fromkeys(builder.notes))
    return Workload(items=items, info=info, session_plan=session_plan)
