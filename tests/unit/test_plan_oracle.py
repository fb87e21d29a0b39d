"""benchmarks/plan_oracle.py: the per-source oracle corrects a source's level and nothing else."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "plan_oracle.py"


@pytest.fixture(scope="module")
def plan_oracle() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plan_oracle", _PATH)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_source_off_by_one_factor_is_corrected_and_a_spread_within_a_source_is_not(plan_oracle: ModuleType) -> None:
    pairs = {
        # every prediction 3x its measurement: a level error, which one factor removes
        "level": [(3.0 * m, m) for m in (10.0, 20.0, 40.0, 80.0)],
        # half 2x over, half 2x under: a shape error, which no single factor can remove
        "shape": [(20.0, 10.0), (40.0, 20.0), (5.0, 10.0), (10.0, 20.0)],
    }
    got = plan_oracle.oracle(pairs, 0.25)
    med, within = got["as held out"]
    # |error| 2 (x4) for 'level', 1 and 0.5 (x2 each) for 'shape': the median of eight is (1 + 2) / 2
    assert within == 0 and med == pytest.approx(1.5)
    _, within_best = got["factor per source, most within"]
    # 'level' fully corrected (4 points); one factor brings at most half of 'shape' within 25%
    # (the over-predicted pair needs 0.375-0.625x, the under-predicted pair 1.5-2.5x)
    assert within_best == 4 + 2
    # alone, the shape source's least median under its best factor (0.5x: 0, 0, 0.75, 0.75) stays off
    med_shape, _ = plan_oracle.oracle({"shape": pairs["shape"]}, 0.25)["factor per source, least median"]
    assert med_shape == pytest.approx(0.375, rel=0.02)
