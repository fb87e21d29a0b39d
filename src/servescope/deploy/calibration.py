"""I/O edge: the fitted calibration knobs (`deploy/calibration.yaml`) that `plan` and the emulator use.

The file holds the knob table fitted on the whole measurement corpus (`knobs:`, the default for every
deployment), the tables fitted with each source held out (`held_out:`, used only to report held-out
error), and a digest of the corpus they were fitted to. `plan/validate.py` fits them;
`benchmarks/plan_validate.py --refit` rewrites the file. See `sim/knobs.py` for what each knob is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from servescope.errors import ConfigError

__all__ = ["Calibration", "load_calibration", "dump_calibration", "corpus_digest", "CALIBRATION_FILE"]

CALIBRATION_FILE = "calibration.yaml"


@dataclass(frozen=True, slots=True)
class Calibration:
    knobs: dict[str, float]
    held_out: dict[str, dict[str, float]] = field(default_factory=dict)
    corpus_digest: str = ""
    notes: str = ""
    # the validation's held-out median |error| by metric (output_tokens_per_s, itl_ms, ttft_ms; fractions):
    # plan's what-if shows it as its uncertainty band
    heldout_median_abs_error: dict[str, float] = field(default_factory=dict)
    heldout_source: str = ""
    # the same by workload mode (closed, rate, offline: how the corpus point loaded the server), where a
    # mode has enough points (plan/knobfit.py `published_bands`): the band of a what-if point of that mode
    heldout_by_mode: dict[str, dict[str, float]] = field(default_factory=dict)
    # plan's 80% and 95% intervals (plan/intervals.py): the stratified quantile table of held-out log
    # residuals, the stretch per metric and level, the sources per class (a deployment's reach), the
    # engine releases the corpus ran and the coverage measured on held-out sources
    intervals: dict[str, Any] = field(default_factory=dict)


def _table(raw: Any, where: str) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"calibration: {where} must be a mapping of knob -> value")
    try:
        out = {str(k): float(v) for k, v in raw.items()}
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"calibration: {where}: {exc}") from exc
    if any(v <= 0 for v in out.values()):
        raise ConfigError(f"calibration: {where}: knob values must be > 0")
    return out


def load_calibration(path: str | Path | None = None) -> Calibration:
    """The packaged calibration (or one at `path`)."""
    import yaml

    if path is None:
        res = resources.files("servescope.deploy") / CALIBRATION_FILE
        text = res.read_text(encoding="utf-8") if res.is_file() else ""
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read calibration {path}: {exc}") from exc
    if not text:
        return Calibration(knobs={})
    data = yaml.safe_load(text)
    if not isinstance(data, Mapping):
        raise ConfigError("calibration: not a mapping")
    held = data.get("held_out") or {}
    if not isinstance(held, Mapping):
        raise ConfigError("calibration: held_out must map source ids to knob tables")
    band = data.get("heldout_median_abs_error") or {}
    by_mode = data.get("heldout_median_abs_error_by_mode") or {}
    if not isinstance(by_mode, Mapping):
        raise ConfigError("calibration: heldout_median_abs_error_by_mode must map modes to {metric: fraction}")
    return Calibration(
        knobs=_table(data.get("knobs") or {}, "knobs"),
        held_out={str(k): _table(v, f"held_out.{k}") for k, v in held.items()},
        corpus_digest=str(data.get("corpus_digest", "")),
        notes=str(data.get("notes", "")),
        heldout_median_abs_error=_table(band, "heldout_median_abs_error") if band else {},
        heldout_source=str(data.get("heldout_source", "")),
        heldout_by_mode={str(k): _table(v, f"heldout_median_abs_error_by_mode.{k}") for k, v in by_mode.items()},
        intervals=_intervals(data.get("intervals")),
    )


def _intervals(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not isinstance(raw.get("quantiles", {}), Mapping):
        raise ConfigError("calibration: intervals must be a mapping with a quantiles table")
    return dict(raw)


def dump_calibration(cal: Calibration) -> str:
    """YAML text of a calibration (4 significant digits)."""
    import yaml

    def r(t: Mapping[str, float]) -> dict[str, float]:
        return {k: float(f"{v:.4g}") for k, v in sorted(t.items())}

    head = (
        "# Calibration knobs of the step-time model (sim/knobs.py), fitted to the measurement corpus\n"
        "# (plan/corpus/) by plan/validate.py. Written by benchmarks/plan_validate.py --refit; do not edit.\n"
        "# knobs: fitted on every source (plan and the emulator use these).\n"
        "# held_out: one table per source, fitted with that source left out (held-out error only).\n"
    )
    body: dict[str, Any] = {"corpus_digest": cal.corpus_digest, "notes": cal.notes}
    if cal.heldout_median_abs_error:
        body["heldout_median_abs_error"] = r(cal.heldout_median_abs_error)
        body["heldout_source"] = cal.heldout_source
    if cal.heldout_by_mode:
        body["heldout_median_abs_error_by_mode"] = {k: r(v) for k, v in sorted(cal.heldout_by_mode.items())}
    if cal.intervals:
        body["intervals"] = _rounded(cal.intervals)
    body["knobs"] = r(cal.knobs)
    body["held_out"] = {k: r(v) for k, v in sorted(cal.held_out.items())}
    return head + yaml.safe_dump(body, sort_keys=False, width=100)


def _rounded(x: Any) -> Any:
    """Floats to 4 significant digits, tuples to lists, all the way down (YAML-safe)."""
    if isinstance(x, float):
        return float(f"{x:.4g}")
    if isinstance(x, Mapping):
        return {str(k): _rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_rounded(v) for v in x]
    return x


def corpus_digest(texts: Iterable[tuple[str, str]]) -> str:
    """sha256 over (file name, text) pairs in name order: says which corpus a calibration was fitted to."""
    h = hashlib.sha256()
    for name, text in sorted(texts):
        h.update(name.encode())
        h.update(b"\0")
        h.update(text.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]
