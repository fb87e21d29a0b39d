"""A run's GPU telemetry in its report: power, utilisation, memory used and SM clock over time, one line
per GPU, on the request timeline's axis (seconds from the clock's start), and the energy figures.

Reads `gpu-telemetry.json` (target/telemetry.py) beside the records; a run without it gets nothing, or
one line saying why telemetry was not available when the summary says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servescope.report.charts import line_chart
from servescope.report.layout import card, esc, figures_grid, fmt
from servescope.report.svgplot import RefLine, Series
from servescope.results.schema import Summary
from servescope.results.store import read_json

__all__ = ["gpu_section"]

TELEMETRY_FILE = "gpu-telemetry.json"  # target.telemetry.TELEMETRY_FILE (report/ does not import target/)
_CHARTS = (
    ("power_w", "gpu_power", "GPU power", "W"),
    ("util_pct", "gpu_util", "GPU utilisation", "%"),
    ("mem_used_mib", "gpu_memory", "GPU memory used", "MiB"),
    ("sm_clock_mhz", "gpu_sm_clock", "SM clock", "MHz"),
)


def _series(doc: dict[str, Any], key: str) -> list[Series]:
    by_gpu: dict[str, tuple[list[float], list[float]]] = {}
    for s in doc.get("samples") or []:
        v = s.get(key)
        if isinstance(v, (int, float)) and isinstance(s.get("t_s"), (int, float)):
            xs, ys = by_gpu.setdefault(str(s.get("gpu")), ([], []))
            xs.append(float(s["t_s"]))
            ys.append(float(v))
    info = doc.get("gpus") or {}
    out = []
    for gpu, (xs, ys) in sorted(by_gpu.items()):
        index = (info.get(gpu) or {}).get("gpu")
        out.append(Series(f"GPU {index}" if index is not None else gpu[:16], xs, ys, markers=len(xs) <= 40))
    return out


def gpu_section(run_dir: Path, summary: Summary) -> tuple[str, dict[str, str]]:
    """The report's GPU section (HTML) and its charts; ("", {}) when the run had no telemetry asked."""
    energy = summary.get("energy")
    path = run_dir / TELEMETRY_FILE
    if not path.is_file():
        if energy and not energy.get("available") and energy.get("why", "").startswith(("dcgm", "nvml")):
            return f'<h2>GPU</h2><p class="muted">GPU telemetry was not available: {esc(energy["why"])}</p>', {}
        return "", {}
    doc = read_json(path)
    window = doc.get("window_s") or []
    refs = [RefLine(float(x), axis="x", label=label, color="#9ca3af") for x, label in zip(window, ("start", "end"))]
    figs = {}
    for key, name, title, unit in _CHARTS:
        series = _series(doc, key)
        if series:
            figs[name] = line_chart(
                series,
                title=title,
                x_label="seconds from the start",
                y_label=unit,
                subtitle=f"{doc.get('source')} every {doc.get('interval_s')} s; the measured "
                "window between the dashed lines",
                refs=refs,
            )
    cards = []
    if energy and energy.get("available"):
        cards = [
            card(
                "Energy per output token",
                fmt(energy.get("joules_per_output_token"), "J", 3),
                esc(f"{fmt(energy.get('joules_per_1m_output_tokens'), 'J', 0)} per 1M output tokens"),
            ),
            card(
                "Mean GPU power",
                fmt(energy.get("mean_power_w"), "W", 0),
                esc(f"{energy.get('gpus')} GPUs, {energy.get('method')}"),
            ),
            card(
                "Output tokens/s per kW",
                fmt(energy.get("output_tokens_per_s_per_kw"), digits=0),
                esc(f"{fmt(energy.get('energy_j'), 'J', 0)} over {fmt(energy.get('window_s'), 's', 1)}"),
            ),
        ]
    html = (
        "<h2>GPU</h2>"
        + (f'<div class="cards">{"".join(cards)}</div>' if cards else "")
        + (figures_grid(figs) if figs else '<p class="muted">No GPU sample was read.</p>')
    )
    return html, figs
