"""The report in a real browser, offline: every chart drawn, no errors, server text inert."""

from __future__ import annotations

from pathlib import Path

import pytest

from servescope.report.compare import compare_sides, load_side, write_compare_html
from servescope.report.data import SweepResult, load_results
from servescope.report.html import write_report
from servescope.report.pareto import frontiers, interactivity_rows
from servescope.results.interactivity import DEFAULT_LEVELS
from tests.browser.conftest import OfflinePage
from tests.support.synth import synth_records, write_synth_run, write_synth_sweep

pytestmark = pytest.mark.browser

SCRIPT_BODY = "<script>window.__pwned = 'script'</script>upstream exploded"
HTML_BODY = (
    '<html><body><h1>502 Bad Gateway</h1><img src="x" onerror="window.__pwned=\'img\'">'
    "<svg onload=\"window.__pwned='svg'\"></svg></body></html>"
)


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
            ".filter(e => { const b = e.getBBox(); return b.width > 0 || b.height > 0; }).length"
        )
        assert drawn > 0, f"chart {i} ({svg.get_attribute('aria-label')}) drew nothing"
    return n


def _open(page: OfflinePage, html: Path) -> None:
    page.page.goto(html.resolve().as_uri())
    page.page.wait_for_load_state("load")


def _clean(page: OfflinePage) -> None:
    assert page.console_errors == [] and page.page_errors == []
    assert page.blocked == []
    assert all(u.startswith("file://") for u in page.requests)


def test_run_report_renders_offline_and_server_text_is_inert(
    offline_page: OfflinePage, tmp_path: Path, artifacts: Path
) -> None:
    recs = synth_records(160, seed=4, concurrency=8, fail_every=16, error_detail=SCRIPT_BODY)
    for r in recs:  # a second, HTML-looking body on the timeouts
        if r.error_kind == "timeout":
            r.error_detail = HTML_BODY
    run = write_synth_run(
        tmp_path / "run", recs, concurrency=8, model="<b>evil-model</b>", slo={"ttft_ms": 250.0, "tpot_ms": 30.0}
    )
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


def _expected_readings(sweeps: list[tuple[str, Path]]) -> list[str]:
    """The interactivity table's throughput cells, computed from the summaries on disk by the pure
    core (results.interactivity), formatted as the report formats them."""
    sides = []
    for name, path in sweeps:
        sw = load_results(path)
        assert isinstance(sw, SweepResult)
        sides.append((name, [(p.label, p.run.summary) for p in sw.points]))
    fronts, per_gpu = frontiers(sides)
    assert per_gpu
    cells = []
    for _side, r in interactivity_rows(fronts, DEFAULT_LEVELS):
        cells.append("—" if r.y is None else ("≥ " if r.status == "below_range" else "") + f"{r.y:,.1f}")
    return cells


def _pareto_ok(page: OfflinePage, expected: list[str], col: int) -> None:
    """The Pareto chart is drawn (front line, faint dominated points or not) and the table's numbers show."""
    fig = page.page.locator("#fig-pareto svg.sb-chart")
    assert fig.count() == 1 and fig.is_visible()
    box = fig.bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 200
    assert fig.get_attribute("aria-label") is not None and "interactivity" in (fig.get_attribute("aria-label") or "")
    assert fig.locator("path[stroke-linejoin]").count() >= 1  # the front as a line
    tbl = page.page.locator("table.interactivity")
    assert tbl.count() == 1 and tbl.is_visible()
    cells = [c.strip() for c in tbl.locator(f"tbody tr td:nth-child({col + 1})").all_inner_texts()]
    assert cells == expected
    for text in {c for c in expected if c != "—"}:
        assert tbl.get_by_text(text, exact=True).first.is_visible()
    assert tbl.get_by_text("extrapolated", exact=False).count() >= 1


def test_sweep_and_compare_reports_render(offline_page: OfflinePage, tmp_path: Path, artifacts: Path) -> None:
    a = write_synth_sweep(tmp_path / "a", [1, 2, 4, 8, 16, 32], n=50, seed=1, gpus=2, usd_per_hour=5.0)
    b = write_synth_sweep(tmp_path / "b", [1, 2, 4, 8, 16, 32], n=50, seed=2, time_scale=1.3, gpus=2, usd_per_hour=5.0)
    _open(offline_page, write_report(a))
    assert _charts_ok(offline_page) == 11  # the sweep's 9, the cost chart, and the Pareto chart
    _pareto_ok(offline_page, _expected_readings([("a", a)]), col=1)  # tok/s per user, then the value
    _clean(offline_page)
    offline_page.page.screenshot(path=str(artifacts / "report-sweep.png"), full_page=True)
    offline_page.page.locator("#interactivity").scroll_into_view_if_needed()
    offline_page.page.locator("#fig-pareto").screenshot(path=str(artifacts / "report-sweep-pareto.png"))
    offline_page.page.locator("table.interactivity").screenshot(path=str(artifacts / "report-sweep-pareto-table.png"))
    sides = [load_side(str(a), "A"), load_side(str(b), "B")]
    html = write_compare_html(sides, compare_sides(sides, resamples=200), tmp_path / "cmp")
    _open(offline_page, html)
    assert _charts_ok(offline_page) == 9  # 7 overlaid, the cost chart, and the Pareto chart
    _pareto_ok(offline_page, _expected_readings([("A", a), ("B", b)]), col=2)  # side first
    assert offline_page.page.get_by_text("95% CI").first.is_visible()
    _clean(offline_page)
    offline_page.page.screenshot(path=str(artifacts / "report-compare.png"), full_page=True)
    offline_page.page.locator("#fig-pareto").screenshot(path=str(artifacts / "report-compare-pareto.png"))


def test_sessions_sweep_report_renders(offline_page: OfflinePage, tmp_path: Path, artifacts: Path) -> None:
    """A capacity search over concurrent agent sessions against the emulator: the sweep's report gives
    the answer in sessions, and a point's report draws its sessions timeline and TTFT by turn and context."""
    from tests.support.procs import servescope  # its own process: the page's event loop runs in this one

    out = tmp_path / "sessions"
    dataset = "agent:turns=3,fanout=2,fanout_at=0,sub_turns=1,system=64,tools=32,task=16,tool_result=16,answer=8"
    proc = servescope(
        "sweep", "--no-report", "--profile", "tiny", "--dataset", f"{dataset},tool_wait=0.05", "--num-requests", "12",
        "--slo", "ttft_p90_ms=60000", "--find-max", "concurrency", "--max-load", "4", "--out", str(out),
    )  # fmt: skip
    text = proc.stdout
    assert proc.returncode == 0, f"{text[-2000:]}\n{proc.stderr[-2000:]}"
    assert "max concurrent sessions meeting TTFT P90 ≤ 60000 ms: ≥ 4" in text
    _open(offline_page, write_report(out))
    page = offline_page.page
    assert _charts_ok(offline_page) >= 9
    assert page.get_by_text("max concurrent sessions meeting TTFT P90").first.is_visible()
    _clean(offline_page)
    page.screenshot(path=str(artifacts / "report-sessions-sweep.png"), full_page=True)
    point = sorted(p for p in out.iterdir() if (p / "report.html").is_file())[-1]
    _open(offline_page, point / "report.html")
    assert page.locator("h2", has_text="Agent sessions").is_visible()
    for fig in ("sessions_gantt", "ttft_by_turn", "ttft_by_context"):
        svg = page.locator(f"#fig-{fig} svg")
        assert svg.count() == 1, fig
        drawn = svg.evaluate("s => Array.from(s.querySelectorAll('path')).filter(e => e.getBBox().width > 0).length")
        assert drawn > 0, fig
    _charts_ok(offline_page)
    _clean(offline_page)
    page.locator("#fig-sessions_gantt").screenshot(path=str(artifacts / "report-sessions-gantt.png"))
