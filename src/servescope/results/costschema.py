"""The shapes of the summary's cost and energy blocks (`Cost`, `Energy`, `GpuEnergy`): what a run's
figures cost in dollars and joules, added by results.cost and results.energy. TypedDicts, re-exported
by `results.schema` (where `Summary` names them); see its docstring for what the types do and do not.
"""

# No `from __future__ import annotations`: TypedDict computes __required_keys__ from evaluated
# annotations (results/schema.py).
from typing import Literal, NotRequired

from typing_extensions import TypedDict  # closed= (PEP 728); pydantic needs this TypedDict before 3.12

__all__ = ["Cost", "Energy", "GpuEnergy"]


class Cost(TypedDict, closed=True):
    """Dollars per million tokens at the measured throughput (results.cost.cost_block)."""

    usd_per_gpu_hour: float
    gpus: int
    usd_per_hour: float
    source: str
    usd_per_1m_input_tokens: float | None
    usd_per_1m_output_tokens: float | None
    usd_per_1m_total_tokens: float | None


class GpuEnergy(TypedDict, closed=True):
    """One GPU's share of the run's energy (results.energy): how it was measured, over how much of the window."""

    gpu: str
    method: Literal["energy counter", "power integral"]
    coverage: float
    energy_j: float
    mean_power_w: float
    util_pct_mean: float | None
    sm_clock_mhz_mean: float | None
    mem_used_mib_max: float | None


class Energy(TypedDict, closed=True):
    """GPU energy over the measured window (results.energy; --gpu-metrics-url). Without telemetry only
    `available: false` and `why`."""

    available: bool
    why: NotRequired[str]
    source: NotRequired[str]
    method: NotRequired[Literal["energy counter", "power integral", "mixed"]]
    gpus: NotRequired[int]
    samples: NotRequired[int]
    window_s: NotRequired[float]
    energy_j: NotRequired[float]
    mean_power_w: NotRequired[float]
    output_tokens: NotRequired[int]
    joules_per_output_token: NotRequired[float | None]
    joules_per_1m_output_tokens: NotRequired[float | None]
    kwh_per_1m_output_tokens: NotRequired[float | None]
    output_tokens_per_s_per_kw: NotRequired[float | None]
    gpu_util_pct_mean: NotRequired[float | None]
    sm_clock_mhz_mean: NotRequired[float | None]
    mem_used_mib_max: NotRequired[float | None]
    coverage: NotRequired[float]
    per_gpu: NotRequired[list[GpuEnergy]]
