"""The requests' Gantt chart (report/gantt.py): its three kinds of bar, subsampling, and the columnar
path drawing what the tuples draw."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

SVG_NS = "{http://www.w3.org/2000/svg}"


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed XML or this raises


def test_gantt_draws_three_kinds_and_subsamples() -> None:
    from servescope.report.gantt import gantt_chart

    bars = [(0.0, 0.1, 1.0, False), (0.2, None, 0.3, True), (0.5, 0.9, 2.0, False)]
    root = _parse(gantt_chart(bars, title="g"))
    paths = root.findall(f"{SVG_NS}path")
    assert len(paths) == 3  # waiting, generating, failed
    assert paths[0].get("d").count("M") == 2 and paths[2].get("d").count("M") == 1
    many = [(i * 0.01, i * 0.01 + 0.005, i * 0.01 + 0.02, False) for i in range(5000)]
    svg = gantt_chart(many, title="g", max_rows=1000)
    assert "1000 of 5000 requests shown" in svg
    assert _parse(svg).findall(f"{SVG_NS}path")[1].get("d").count("M") == 1000


def test_gantt_from_columns_draws_the_same_subset_as_from_tuples() -> None:
    """A million requests reach the Gantt chart as columns: only the evenly spaced rows drawn become
    Python objects, and the chart is the one the tuples give, byte for byte."""
    import numpy as np

    from servescope.report.gantt import gantt_chart, gantt_columns

    rng = np.random.default_rng(2)
    send = np.sort(rng.uniform(0, 60, 5000))
    first = np.where(rng.random(5000) < 0.1, np.nan, send + rng.uniform(0.05, 0.3, 5000))
    end = send + rng.uniform(0.5, 4, 5000)
    failed = rng.random(5000) < 0.05
    bars = [(s, None if math.isnan(f) else f, e, bool(x)) for s, f, e, x in zip(send, first, end, failed)]
    svg = gantt_columns(send, first, end, failed, title="g")
    assert svg == gantt_chart(bars, title="g", presorted=True)
    assert "2000 of 5000 requests shown" in svg


def test_session_gantt_draws_each_turn_on_its_lane() -> None:
    from servescope.report.gantt import session_gantt

    lanes = ["s0", "s0.1", "s0.2", "s1"]
    bars = [(0, 0.0, 0.1, 1.0, False), (1, 1.0, 1.2, 2.0, False), (2, 1.0, None, 3.0, True), (3, 0.0, 0.2, 0.5, False)]
    svg = session_gantt(lanes, bars, title="Sessions")
    assert svg == session_gantt(lanes, bars, title="Sessions")  # deterministic
    red = [p for p in _parse(svg).iter(f"{SVG_NS}path") if p.get("stroke") == "#dc2626" and p.get("fill") == "none"]
    assert len(red) == 1 and red[0].get("d", "").count("M") == 1  # the one failed turn
    few = session_gantt(lanes, bars, title="Sessions", max_lanes=2)
    assert "the first 2 of 4 lanes shown" in few
    assert "no data" in session_gantt(lanes, [], title="Sessions").lower()
