"""SVG charts (report/charts.py on report/svgplot.py): series, escaping, determinism, coordinates,
degenerate data."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

from servescope.report.charts import cdf_chart, histogram_chart, line_chart
from servescope.report.svgplot import RefLine, Series

SVG_NS = "{http://www.w3.org/2000/svg}"


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed XML or this raises


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
