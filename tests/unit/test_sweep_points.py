"""Sweep points, list parsing, auto rates and the capacity search (pure)."""

from __future__ import annotations

import math

import pytest

from servescope.errors import ConfigError
from servescope.sweep.points import (
    Point,
    auto_rates,
    build_grid,
    find_max,
    parse_int_list,
    parse_lengths,
    parse_rate_list,
)


def test_parse_lists() -> None:
    assert parse_int_list("1,2, 4,8,4", "--concurrency") == [1, 2, 4, 8]
    assert parse_int_list(16, "--concurrency") == [16]
    assert parse_int_list(None, "--concurrency") is None
    assert parse_int_list([1, 2], "--concurrency") == [1, 2]  # a scenario-file list
    assert parse_rate_list([0.5, "inf"]) == [0.5, math.inf]
    assert parse_rate_list("0.5,2,inf") == [0.5, 2.0, math.inf]
    assert parse_rate_list("auto") == "auto"
    assert parse_lengths("1024:256, 4096:256") == [(1024, 256), (4096, 256)]
    for bad in ("0", "a", ""):
        with pytest.raises(ConfigError):
            parse_int_list(bad, "--concurrency")
    for bad in ("-1", "x", "auto,2"):
        with pytest.raises(ConfigError):
            parse_rate_list(bad)
    for bad in ("1024", "1024:0", "a:b"):
        with pytest.raises(ConfigError):
            parse_lengths(bad)


def test_grid_is_loads_times_lengths() -> None:
    pts = build_grid([4, 1], None, [(1024, 256), (4096, 256)])
    assert [(p.concurrency, p.input_len) for p in pts] == [(1, 1024), (4, 1024), (1, 4096), (4, 4096)]
    assert pts[0].dir_name == "c0001-in1024-out256"
    rate_pts = build_grid([32], [2.5, 1.0], [(128, 64)])
    assert [(p.rate, p.concurrency) for p in rate_pts] == [(1.0, 32), (2.5, 32)]
    assert rate_pts[1].dir_name == "r2p5-c32-in128-out64"
    assert Point(None, math.inf, 1, 2).dir_name == "rinf-in1-out2"
    assert rate_pts[1].entry()["rate_rps"] == 2.5 and pts[0].entry()["concurrency"] == 1
    with pytest.raises(ConfigError):
        build_grid([1, 2], [1.0], [(1, 1)])


def test_auto_rates_between_synchronous_and_saturation() -> None:
    assert auto_rates(1.0, 10.0, 8) == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    rates = auto_rates(0.37, 5.0, 3)
    assert all(0.37 < r < 5.0 for r in rates) and rates == sorted(rates)
    assert auto_rates(1.0, 0.0, 4) == []


def _table(limit: float):
    calls: list[float] = []

    def measure(x: float) -> bool:
        calls.append(x)
        return x <= limit

    return measure, calls


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 7, 14, 64, 100])
def test_find_max_concurrency_equals_brute_force(limit: int) -> None:
    measure, calls = _table(limit)
    res = find_max(measure, integer=True, max_load=128)
    brute = max(c for c in range(1, 129) if c <= limit)
    assert res.best == brute and res.fail == brute + 1
    assert len(calls) == len(set(calls))  # each load measured once
    assert len(calls) <= 2 * math.ceil(math.log2(128)) + 1


def test_find_max_edges() -> None:
    res = find_max(lambda x: False, integer=True, max_load=64)
    assert res.best is None and res.fail == 1
    res = find_max(lambda x: True, integer=True, max_load=100)
    assert res.best == 100 and res.fail is None and not res.bounded
    assert [x for x, _ in res.probes] == [1, 2, 4, 8, 16, 32, 64, 100]


@pytest.mark.parametrize("limit", [0.3, 1.0, 3.7, 12.5, 77.0])
def test_find_max_rate_within_relative_tolerance(limit: float) -> None:
    measure, _ = _table(limit)
    res = find_max(measure, integer=False, start=1.0, max_load=1000, rel_tol=0.05)
    assert res.best is not None and res.fail is not None
    assert res.best <= limit < res.fail
    assert (res.fail - res.best) <= 0.05 * res.fail + 1e-9
