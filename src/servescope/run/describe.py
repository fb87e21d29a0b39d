"""What a run says about itself: its manifest (the configuration, this host, the target as found
before the clock) and the notes that qualify its figures (repeated prompts, output lengths not
enforced, every request failed, approximate input tokens, the prefix cache). Called by run.bench
before and after the clock; nothing here is on the hot path."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import sys
from typing import TYPE_CHECKING, Any

import aiohttp

from servescope import __version__
from servescope.results.schema import Summary
from servescope.run.config import RunConfig
from servescope.target import servermetrics
from servescope.target.preflight import DEFAULT_PROFILE, TargetInfo

if TYPE_CHECKING:
    from servescope.target.capabilities import Capabilities

__all__ = ["run_manifest", "run_notes"]


def run_notes(cfg: RunConfig, summary: Summary, caps: Capabilities | None, n_items: int = 0) -> list[str]:
    notes = []
    sent = summary["requests"]["total"] + summary["requests"].get("warmup", 0)
    if n_items and sent > n_items:
        notes.append(
            f"{sent} requests were sent from a workload of {n_items} prompts: prompts repeated, so a "
            "prefix cache may have served repeats faster; give --num-requests to size the workload"
        )
    if summary["workload"].get("output_len_enforced") is False and cfg.output_len:
        notes.append(
            "exact output lengths were not enforced on this target (ignore_eos/min_tokens "
            "rejected or off): requests may stop early, so TPOT and throughput describe the "
            "lengths the server chose; see tokens.output_total"
        )
    req = summary["requests"]
    if req["total"] and not req["completed"]:
        kinds = ", ".join(f"{k} {v}" for k, v in req["errors"].items())
        notes.append(
            f"every request failed ({kinds}): these are not performance figures; the "
            "records' error_detail holds what the server said"
        )
    if summary["tokens"]["input_source"] != "usage" and summary["requests"]["completed"]:
        notes.append("the server sent no usage.prompt_tokens: input tokens are the requested (approximate) lengths")
    notes.extend(summary["workload"].get("notes") or [])  # workload: how lengths were made, if not exact
    wl = summary["workload"]
    prefix = servermetrics.prefix_cache_note(
        wl.get("intended_prefix_hit_rate"),
        summary.get("server"),
        at_most=wl.get("intended_prefix_hit_rate_basis") == "template",
    )
    if prefix:
        notes.append(prefix)
    return notes


def run_manifest(
    cfg: RunConfig, info: TargetInfo, caps: Capabilities | None, run_id: str, started: _dt.datetime, emulated: bool
) -> dict[str, Any]:
    caps_doc = caps.to_dict() if caps is not None else None
    return {
        "run_id": run_id,
        "tool": {"name": "servescope", "version": __version__},
        "started_at": started.isoformat(timespec="seconds"),
        "config": cfg.as_manifest(),
        "host": {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "aiohttp": aiohttp.__version__,
        },
        "target": {
            "base_url": info.base_url,
            "model": info.model,
            "models": info.models,
            "models_response": info.models_response,
            "version": info.version,
            "emulated": emulated,
            "profile": (cfg.profile or DEFAULT_PROFILE) if emulated else None,
            "capabilities": caps_doc,
        },
    }
