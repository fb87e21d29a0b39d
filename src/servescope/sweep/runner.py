"""Running a sweep's points into one directory: `Sweep` runs them one after another against one target,
keeps sweep.json up to date and, with --resume, skips the points already complete.

    DIR/sweep.json           what was swept and every point's figures (schema servescope.sweep.command/1)
    DIR/<point>/             one run directory per point (summary.json gains `slo_check`, `cost`)

The schema keeps its historical name (`servescope.sweep.command/1`; `servebench.sweep.command/1` before the
rename) so sweeps written before still load: nothing reads the id back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from servescope.errors import ConfigError
from servescope.results import cost as costmod
from servescope.results import slo as slomod
from servescope.results.schema import Summary
from servescope.results.store import SUMMARY, read_json, write_json
from servescope.run.config import RunConfig
from servescope.sweep.points import Point
from servescope.sweep.table import point_row
from servescope.workload.seeds import derive_seed

__all__ = ["CACHE_NOTE_PREFIXES", "SWEEP_FILE", "SCHEMA", "Sweep", "SweepInterrupted", "point_complete"]

SWEEP_FILE = "sweep.json"
SCHEMA = "servescope.sweep.command/1"
# A point's notes about its prefix cache (run.assemble: a warm cache, a failed reset): shown for every point
# they concern, and listed again at the end of the sweep (sweep.summary); other notes show once.
CACHE_NOTE_PREFIXES = ("prefix cache:", "--reset-cache:")
_SETTINGS_IGNORED = ("out", "quiet", "concurrency", "rate", "input_len", "output_len", "report")


class SweepInterrupted(Exception):
    """A point was interrupted (Ctrl-C): the sweep stops, sweep.json keeps what completed."""


def point_complete(path: Path) -> bool:
    """A point is complete when its summary.json exists and is not marked interrupted."""
    f = path / SUMMARY
    if not f.is_file():
        return False
    try:
        doc = read_json(f)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and not doc.get("interrupted")


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


class Sweep:
    """Runs points one after another against one target and keeps sweep.json up to date."""

    def __init__(
        self,
        out_dir: Path,
        base: dict[str, Any],
        spec: slomod.SloSpec,
        price: costmod.Price | None,
        console: Console,
        *,
        resume: bool,
        quiet: bool,
        mode: str,
        x_key: str,
    ) -> None:
        self.out_dir = out_dir
        self.base = base
        self.spec = spec
        self.price = price
        self.console = console
        self.resume = resume
        self.quiet = quiet
        self.url: str | None = None
        self.emulated = False
        self.entries: dict[str, dict[str, Any]] = {}
        self.notes_shown: set[str] = set()  # a point's notes go to the terminal once each
        self.summaries: dict[str, Summary] = {}
        self.ran: list[str] = []
        self.skipped: list[str] = []
        self.doc: dict[str, Any] = {
            "schema": SCHEMA,
            "created_at": _now(),
            "status": "running",
            "mode": mode,
            "x_key": x_key,
            "settings": _settings_doc(base),
            "slo": spec.to_dict() if spec else None,
            "price": price.to_dict() if price else None,
            "points": [],
        }
        old = out_dir / SWEEP_FILE
        if old.is_file():
            prev = read_json(old)
            if not resume:
                raise ConfigError(f"{out_dir} already holds a sweep; add --resume to finish it, or pick another --out")
            _check_same_settings(prev.get("settings") or {}, self.doc["settings"], out_dir)
            self.doc["created_at"] = prev.get("created_at", self.doc["created_at"])
            for e in prev.get("points") or []:
                if isinstance(e, dict) and e.get("dir"):
                    self.entries[e["dir"]] = e

    def run_point(self, point: Point, loop: asyncio.Runner) -> Summary:
        from servescope.run.bench import run_against

        path = self.out_dir / point.dir_name
        if point.dir_name in self.summaries:
            return self.summaries[point.dir_name]
        if self.resume and point_complete(path):
            summary: Summary = read_json(path / SUMMARY)
            self.skipped.append(point.dir_name)
            status = "skipped (complete)"
        else:
            # report=False: the sweep's report (rendered once at the end) renders every point.
            cfg = RunConfig(
                **{
                    **self.base,
                    **point.run_settings(),
                    "seed": self.point_seed(point),
                    "out": str(path),
                    "quiet": True,
                    "report": False,
                }
            ).validate()
            assert self.url is not None
            outcome = loop.run(run_against(cfg, self.url, self.console, emulated=self.emulated))
            summary = outcome.summary
            self.ran.append(point.dir_name)
            status = "ran"
            if outcome.interrupted:
                self._record(point, summary, "interrupted")
                self.doc["status"] = "interrupted"
                self.save()
                raise SweepInterrupted(point.dir_name)
        if self.spec.has_run_limits:
            summary["slo_check"] = slomod.evaluate(summary, self.spec)
        if self.price is not None:
            price = self.price
            inter = summary.get("interactivity")
            served_by = inter.get("gpus") if inter else None
            if self.base.get("gpus") is None and served_by and served_by != price.gpus:
                # no --gpus: charge the GPUs the target said it runs on (the emulator's deployment),
                # the same count its throughput per GPU uses
                price = dataclasses.replace(price, gpus=int(served_by))
            summary["cost"] = costmod.cost_block(summary.get("throughput") or {}, price)
        write_json(path / SUMMARY, summary)
        self._record(point, summary, "complete")
        self.save()
        if not self.quiet:
            self.console.print(_point_line(point, summary, status), highlight=False)
            for note in summary.get("notes") or ():
                if note.startswith(CACHE_NOTE_PREFIXES) or note not in self.notes_shown:
                    self.notes_shown.add(note)
                    self.console.print(f"    [yellow]note[/yellow]: {note}", highlight=False)
        return summary

    def point_seed(self, point: Point) -> int:
        """The point's own seed, so that no point sends the prompts of another (a prefix cache would
        serve them warm): derived from --seed and the point's name (stable across --resume), or
        --seed itself with --same-prompts."""
        seed = int(self.base.get("seed") or 0)
        return seed if self.base.get("same_prompts") else derive_seed(seed, point.dir_name)

    def _record(self, point: Point, summary: Summary, status: str) -> None:
        entry = {**point.entry(), "load_label": point.load_label, "status": status, "seed": self.point_seed(point)}
        if point.kind in ("synchronous", "throughput"):  # plotted at the request rate they reached
            entry["rate_rps"] = (summary.get("throughput") or {}).get("requests_per_s")
        entry["figures"] = point_row(entry, summary)
        self.entries[point.dir_name] = entry
        self.summaries[point.dir_name] = summary

    def save(self) -> None:
        self.doc["updated_at"] = _now()
        self.doc["points"] = list(self.entries.values())
        write_json(self.out_dir / SWEEP_FILE, self.doc)

    def summary(self, entry: dict[str, Any]) -> Mapping[str, Any]:
        """The summary of a sweep.json entry: from this session, or read from its run directory."""
        if entry["dir"] in self.summaries:
            return self.summaries[entry["dir"]]
        path = self.out_dir / entry["dir"] / SUMMARY
        return read_json(path) if path.is_file() else {}


def _point_line(point: Point, s: Mapping[str, Any], status: str) -> str:
    tp = s.get("throughput") or {}
    lat = s.get("latency_ms") or {}
    itl = (lat.get("itl") or {}).get("p99")
    ttft = (lat.get("ttft") or {}).get("p99")
    slo = (s.get("slo_check") or {}).get("passed")
    tag = "  SLO pass" if slo is True else ("  SLO fail" if slo is False else "")
    return (
        f"  {point.load_label:>14}  in {point.input_len} out {point.output_len}:  "
        f"{tp.get('requests_per_s', 0):.2f} req/s, {tp.get('output_tokens_per_s', 0):,.0f} out tok/s, "
        f"TTFT p99 {ttft if ttft is not None else float('nan'):.1f} ms, "
        f"ITL p99 {itl if itl is not None else float('nan'):.1f} ms{tag}  [{status}]"
    )


def _settings_doc(base: dict[str, Any]) -> dict[str, Any]:
    doc = RunConfig(**base).as_manifest()
    for k in _SETTINGS_IGNORED:
        doc.pop(k, None)
    return doc


def _check_same_settings(old: dict[str, Any], new: dict[str, Any], out_dir: Path) -> None:
    # a setting added since the old sweep was written counts as its default there
    defaults = RunConfig().as_manifest()
    diff = sorted(k for k in set(old) | set(new) if old.get(k, defaults.get(k)) != new.get(k))
    if diff:
        raise ConfigError(
            f"--resume: the sweep in {out_dir} ran with other settings ({', '.join(diff)}); "
            "give the same flags, or pick another --out"
        )
