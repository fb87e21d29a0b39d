"""The report in a real browser, offline: every chart drawn, no errors, server text inert."""

from __future__ import annotations

from pathlib import Path

import pytest

from servebench.report.compare import compare_sides, load_side, write_compare_html
from servebench.report.html import write_report
from tests.browser.conftest import OfflinePage
from tests.support.synth import synth_records, write_synth_run, write_synth_sweep

pytestmark = pytest.mark.browser

SCRIPT_BODY = "<script>window.__pwned = 'script'</script>upstream exploded"
HTML_BODY = ('<html><body><h1>502 Bad Gateway</h1><img src="x" onerror="window.__pwned=\'img\'">'
             '<svg onload="window.__pwned=\'svg\'"></svg></body></html>')


def _charts_ok(page: OfflinePage) -> int:
    charts = page.page.locator("svg.sb-chart")
    n = charts.count()
    assert n > 0
    for i in range(n):
        svg = charts.nth(i)
        box = svg.bounding_box()
        assert box is not None and box["width"] > 100 and box["height"] > 50, i
        drawn = svg.evaluate(
            "s => Array.from(s.querySelectorAll('path,circle,polygon'))"
            ".filter(e => { const b = e.getBBox(); return b.width > 0 || b.height > 0; }).length")
        assert drawn > 0, f"chart {i} ({svg.get_attribute('aria-label')}) drew nothing"
    return n


def _open(page: OfflinePage, html: Path) -> None:
    page.page.goto(html.resolve().as_uri())
    page.page.wait_for_load_state("load")


def _clean(page: OfflinePage) -> None:
    assert page.console_errors == [] and page.page_errors == []
    assert page.blocked == []
    assert all(u.startswith("file://") for u in page.requests)


def test_run_report_renders_offline_and_server_text_is_inert(offline_page: OfflinePage, tmp_path: Path,
                                                             artifacts: Path) -> None:
    recs = synth_records(160, seed=4, concurrency=8, fail_every=16, error_detail=SCRIPT_BODY)
    for r in recs:  # a second, HTML-looking body on the timeouts
        if r.error_kind == "timeout":
            r.error_detail = HTML_BODY
    run = write_synth_run(tmp_path / "run", recs, concurrency=8, model="<b>evil-model</b>",
                          slo={"ttft_ms": 250.0, "tpot_ms": 30.0})
    _open(offline_page, write_report(run))
    page = offline_page.page
    assert _charts_ok(offline_page) == 9
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("script").count() == 0 and page.locator("main img").count() == 0
    assert page.locator("h1").count() == 1  # the error body's <h1> stayed text
    body = page.locator("pre.body").filter(has_text="<script>window.__pwned = 'script'</script>").first
    assert body.is_visible()
    assert page.locator("pre.body").filter(has_text="<h1>502 Bad Gateway</h1>").first.is_visible()
    assert page.get_by_text("<b>evil-model</b>").first.is_visible()
    _clean(offline_page)
    page.screenshot(path=str(artifacts / "report-run.png"), full_page=True)


def test_sweep_and_compare_reports_render(offline_page: OfflinePage, tmp_path: Path, artifacts: Path) -> None:
    a = write_synth_sweep(tmp_path / "a", [1, 2, 4, 8, 16, 32], n=50, seed=1)
    b = write_synth_sweep(tmp_path / "b", [1, 2, 4, 8, 16, 32], n=50, seed=2, time_scale=1.3)
    _open(offline_page, write_report(a))
    assert _charts_ok(offline_page) == 9
    _clean(offline_page)
    offline_page.page.screenshot(path=str(artifacts / "report-sweep.png"), full_page=True)
    sides = [load_side(str(a), "A"), load_side(str(b), "B")]
    html = write_compare_html(sides, compare_sides(sides, resamples=200), tmp_path / "cmp")
    _open(offline_page, html)
    assert _charts_ok(offline_page) == 7
    assert offline_page.page.get_by_text("95% CI").first.is_visible()
    _clean(offline_page)
    offline_page.page.screenshot(path=str(artifacts / "report-compare.png"), full_page=True)
