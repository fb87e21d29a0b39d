"""SVG charts: ticks, formatting, escaping, determinism, degenerate data."""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET

from servescope.report.charts import cdf_chart, histogram_chart, line_chart
from servescope.report.svgplot import RefLine, Series
from servescope.report.ticks import format_number, log_ticks, nice_ticks

SVG_NS = "{http://www.w3.org/2000/svg}"


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed XML or this raises


def test_nice_ticks_cover_range_on_round_steps() -> None:
    t = nice_ticks(3.0, 137.0)
    assert t[0] <= 3.0 and t[-1] >= 137.0
    steps = {round(b - a, 9) for a, b in itertools.pairwise(t)}
    assert len(steps) == 1 and steps.pop() in (10, 20, 25, 50)
    assert nice_ticks(0.013, 0.97) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(5.0, 5.0)[0] < 5.0 < nice_ticks(5.0, 5.0)[-1]  # degenerate range widened


def test_log_ticks_are_1_2_5_per_decade() -> None:
    assert log_ticks(1, 200) == [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0]
    t = log_ticks(0.3, 70000)
    assert t[0] <= 0.3 and t[-1] >= 70000 and len(t) <= 9


def test_format_number() -> None:
    assert format_number(25000, 5000) == "25k"
    assert format_number(1_500_000, 500_000) == "1.5M"
    assert format_number(0.1234) == "0.123"
    assert format_number(7.0) == "7"
    assert format_number(2.5, 2.5) == "2.5"
    assert format_number(math.inf) == "∞"


def test_line_chart_draws_each_series_and_escapes_names() -> None:
    svg = line_chart(
        [Series("<b>a&b</b>", [1, 2, 4], [1, 3, 2]), Series("two", [1, 2, 4], [2, 2, 2], dashed=True)],
        title="T <script>",
        x_label="x",
        y_label="y",
        refs=[RefLine(2.5, "SLO")],
    )
    root = _parse(svg)
    paths = root.findall(f"{SVG_NS}path")
    assert len(paths) == 2  # one line per series
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "&lt;b&gt;a&amp;b&lt;/b&gt;" in svg
    assert len(root.findall(f"{SVG_NS}circle")) == 6  # markers with tooltips
    assert "SLO" in svg and 'stroke-dasharray="6 4"' in svg


def test_charts_are_deterministic_and_id_free() -> None:
    def make() -> str:
        return line_chart(
            [Series("s", [0.1 * i for i in range(50)], [math.sin(i) for i in range(50)])], title="t"
        ) + cdf_chart([("a", [1, 5, 2, 8, 3])], title="c", x_log=True)

    a, b = make(), make()
    assert a == b
    assert " id=" not in a  # several charts inline in one page must not collide
    assert not re.search(r'="-0\.0"', a)


def test_non_finite_points_are_dropped_and_empty_data_says_so() -> None:
    svg = line_chart([Series("s", [1, 2, 3, 4], [1, float("nan"), float("inf"), 2])], title="t")
    d = _parse(svg).find(f"{SVG_NS}path").get("d")
    assert d.count("L") == 1  # two finite points left: one segment
    empty = line_chart([Series("s", [], [])], title="t")
    assert "no data" in empty
    _parse(empty)


def test_histogram_shares_sum_to_100_and_note_overflow() -> None:
    values = [10.0] * 50 + [20.0] * 49 + [10_000.0]
    svg = histogram_chart([("v", values)], title="h", bins=10)
    assert "above" in svg  # the outlier beyond P99.5 is said, not silently dropped
    path = _parse(svg).find(f"{SVG_NS}path").get("d")
    assert path.startswith("M")


def test_coordinates_use_fixed_one_decimal_format() -> None:
    svg = line_chart([Series("s", [0, 1 / 3, 2 / 3], [1 / 7, 2 / 7, 3 / 7])], title="t")
    nums = re.findall(r'(?:cx|cy|x1|y1|x2|y2)="([^"]+)"', svg)
    assert nums and all(re.fullmatch(r"-?\d+\.\d", n) for n in nums)


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
