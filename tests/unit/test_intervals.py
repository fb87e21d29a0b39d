"""plan's 80% and 95% intervals (plan/intervals.py): conformal ranks, reach, nesting, coverage."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from servescope.plan import intervals as iv


def _res(
    source: str, r: float, *, metric: str = "tok_s", mode: str = "closed", arch: str = "dense", key: str = ""
) -> iv.Residual:
    cls = iv.classes_of(arch, "vllm-v1", "0.10.1", "fp8", "hopper")
    return iv.Residual(key or f"{source}/{r}", source, metric, mode, cls, r)


def test_conformal_ranks_of_equal_weights() -> None:
    """n = 9 equal weights at level 0.8: the upper end is the ceil(10 x 0.9) = 9th smallest, the lower
    the 1st; at level 0.5 the 8th and the 2nd."""
    vals = np.arange(1.0, 10.0)
    w = np.ones(9)
    assert iv._q(vals, w, 0.8) == (1.0, 9.0)
    assert iv._q(vals, w, 0.5) == (2.0, 8.0)


def test_reach_counts_sources_without_the_deployments_own() -> None:
    rs = [_res("a", 0.1), _res("b", 0.2), _res("c", 0.0, arch="moe")]
    srcs = iv.class_sources(rs)
    dense = rs[0].classes
    assert iv.reach_of(dense, srcs)[0] == "in"
    assert iv.reach_of(dense, srcs, without="a")[0] == "thin"  # b alone ran dense once a is held out
    status, why = iv.reach_of(rs[2].classes, srcs, without="c")
    assert status == "outside" and any("arch moe: 0 sources" in w for w in why)


def test_a_residual_never_sets_its_own_interval() -> None:
    """A source far off the others falls outside the interval built without it, though the table over
    all sources (its own residuals included) would hold it."""
    rs = [_res(f"s{i}", 0.05 * (i % 5 - 2), key=f"k{i}") for i in range(20)] + [_res("far", 2.0, key="far")]
    (far,) = [c for c in iv.nested_coverage(rs) if c.residual.source == "far"]
    assert far.inside[0.80] is False and far.inside[0.95] is False
    table = iv.quantile_table(rs, iv.residual_reach(rs))
    _lo, hi = iv.interval(table, "tok_s", "in", "closed", "dense", 0.95)  # type: ignore[misc]
    assert hi == pytest.approx(2.0)  # the table over all sources holds it at its top rank


def test_thin_classes_get_wider_intervals() -> None:
    """Points whose class few sources ran miss by more; their stratum's interval is wider."""
    rng = random.Random(3)
    rs = [_res(f"in{i}", rng.gauss(0, 0.1), key=f"i{i}") for i in range(40)]
    rs += [_res(f"moe{i}", rng.gauss(0, 0.6), arch="moe", key=f"m{i}") for i in range(12)]
    reach = iv.residual_reach(rs)
    assert reach[("m0", "moe0")] == "in"  # twelve sources ran moe: in reach
    thin = [_res(f"t{i}", rng.gauss(0, 0.6), arch="mla-moe", key=f"t{i}") for i in range(12)]
    table = iv.quantile_table(rs + thin, iv.residual_reach(rs + thin))
    assert iv.interval(table, "tok_s", "thin", "closed", "mla-moe", 0.8) is not None
    w_in = np.diff(iv.interval(table, "tok_s", "in", "closed", "dense", 0.8))[0]  # type: ignore[arg-type]
    w_thin = np.diff(iv.interval(table, "tok_s", "thin", "closed", "mla-moe", 0.8))[0]  # type: ignore[arg-type]
    assert w_thin > 2 * w_in


def test_honest_coverage_is_near_nominal_on_exchangeable_sources() -> None:
    """Sources with a shared offset each (the error a source's deployment shares), 30 of them: the
    doubly nested coverage lands near 80% and 95%."""
    rng = random.Random(11)
    rs = []
    for s in range(30):
        off = rng.gauss(0, 0.3)
        rs += [_res(f"s{s}", off + rng.gauss(0, 0.1), key=f"s{s}-{j}") for j in range(rng.randint(2, 15))]
    cov = iv.honest_coverage(rs)
    (row,) = [r for r in iv.coverage_rows(cov) if r["group"] == "all"]
    assert 0.70 <= row["p80"] <= 0.90
    assert row["p95"] >= 0.88


def test_stretch_puts_the_share_back() -> None:
    """The stretch is the conformal rank of the scale each point needed: with it, the nested intervals
    hold at least that share of the points they were found on."""
    rng = random.Random(5)
    rs = [_res(f"s{s}", rng.gauss(0, 0.3) + rng.gauss(0, 0.1), key=f"{s}-{j}") for s in range(12) for j in range(8)]
    st = iv.stretch(iv.nested_coverage(rs))
    again = iv.nested_coverage(rs, dict.fromkeys({r.source for r in rs}, st))
    assert sum(c.inside[0.8] for c in again) / len(again) >= 0.8


def test_figure_interval_from_a_published_table() -> None:
    rs = [_res(f"s{i}", 0.1 * (i % 7 - 3), key=f"k{i}") for i in range(30)]
    pub = iv.published(rs, iv.honest_coverage(rs))
    lo80, hi80 = iv.figure_interval(pub, "tok_s", "in", "closed", "dense", 0.8)  # type: ignore[misc]
    lo95, hi95 = iv.figure_interval(pub, "tok_s", "in", "closed", "dense", 0.95)  # type: ignore[misc]
    assert lo95 <= lo80 < 1.0 < hi80 <= hi95
    assert iv.figure_interval(pub, "itl", "in", "closed", "dense", 0.8) is None
    assert set(pub["coverage"]) == {"tok_s"} and pub["class_sources"]["arch"]["dense"] == 30


def test_version_classes_follow_the_release_lines() -> None:
    assert iv.version_class("vllm-v0", "0.7.3") == "vllm<0.8"
    assert iv.version_class("vllm-v1", "0.8.5") == "vllm-0.8-0.9"
    assert iv.version_class("vllm-v1", "0.11.0") == "vllm>=0.10"
    assert iv.version_class("sglang", "0.4.1.post4") == "sglang<0.4.3"
    assert iv.version_class("sglang", "0.4.3.post2") == "sglang-0.4"
    assert iv.version_class("sglang", "", "2025-02-01") == "sglang-0.4"
    assert iv.version_class("trtllm", "0.17.0") == "trtllm<1.0"
    assert iv.version_class("trtllm", "1.0.0rc4") == "trtllm>=1.0"


def test_release_note_names_the_fitted_or_nearest_line() -> None:
    rel = {"vllm": {"0.6": 50, "0.9": 20}, "trtllm": {"0.19": 4, "1.0": 30}}
    assert "the corpus holds 20 points of the 0.9 line" in iv.release_note("vllm", "0.9.2", True, rel)
    assert "nearest line in the corpus is 0.6" in iv.release_note("vllm", "0.7.3", True, rel)
    assert "nearest line in the corpus is 0.19" in iv.release_note("trtllm", "0.17", True, rel)
    assert "no corpus point ran sglang" in iv.release_note("sglang", "0.4", True, rel)


def test_scaled_keeps_the_centre() -> None:
    lo, hi = iv.scaled((-0.2, 0.4), 1.5)
    assert math.isclose((lo + hi) / 2, 0.1) and math.isclose(hi - lo, 0.9)
