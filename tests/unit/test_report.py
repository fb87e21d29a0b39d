"""The HTML report: content, self-containment, escaping, byte-stable re-rendering."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.errors import ConfigError
from servescope.report.commands import report_command
from servescope.report.data import inflight_series, load_results, tokens_per_s_series
from servescope.report.html import write_overlay_report, write_report
from servescope.results.store import SUMMARY
from tests.support.synth import synth_records, write_synth_run, write_synth_sweep

PAYLOAD = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned=2"><h1>Bad Gateway</h1>'


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    recs = synth_records(120, seed=3, concurrency=6, fail_every=20, error_detail=PAYLOAD, warmup=3)
    return write_synth_run(
        tmp_path / "run",
        recs,
        concurrency=6,
        model="<i>model</i>",
        slo={"ttft_ms": 200.0, "tpot_ms": 25.0},
        extra_summary={
            "cost": {"usd_per_million_output_tokens": 1.25},
            "server": {"metrics_used": {"preemptions": "vllm:num_preemptions"}, "preemptions": 3.0, "kv_usage": 0.42},
        },
    )


def _tags(html: str) -> set[str]:
    return {m.lower() for m in re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)", html)}


def test_run_report_has_every_section(run_dir: Path) -> None:
    html = write_report(run_dir).read_text()
    for text in (
        "Output throughput",
        "TTFT median",
        "ITL median",
        "SLO",
        "goodput",
        "Latency distributions",
        "Timeline",
        "Client self-check",
        "schedule lag",
        "Failures",
        "http_5xx",
        "timeout",
        "usd per million output tokens",
        "1.25",
        "Server metrics",
        "vllm:num_preemptions",
    ):
        assert text in html, text
    charts = sorted(p.stem for p in (run_dir / "charts").glob("*.svg"))
    assert charts == sorted(
        [
            "ttft_hist",
            "itl_hist",
            "e2e_hist",
            "latency_cdf",
            "requests_gantt",
            "inflight",
            "tokens_per_s",
            "ttft_over_time",
            "schedule_lag",
        ]
    )
    for name in charts:  # the standalone file is exactly the inline chart
        assert (run_dir / "charts" / f"{name}.svg").read_text() in html


def test_report_is_self_contained(run_dir: Path) -> None:
    html = write_report(run_dir).read_text()
    assert "script" not in _tags(html)
    assert not re.search(r'(?:src|href)\s*=\s*"(?:https?:)?//', html)
    assert "<link" not in html and "@import" not in html and "url(" not in html


def test_server_text_is_escaped(run_dir: Path) -> None:
    html = write_report(run_dir).read_text()
    assert PAYLOAD not in html
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html
    assert "&lt;i&gt;model&lt;/i&gt;" in html and "<i>model</i>" not in html
    assert "<img" not in html and 'onerror="' not in html


def test_rerender_is_byte_identical(run_dir: Path, tmp_path: Path) -> None:
    first = write_report(run_dir).read_bytes()
    svgs = {p.name: p.read_bytes() for p in (run_dir / "charts").glob("*.svg")}
    second = write_report(run_dir).read_bytes()
    assert first == second
    assert svgs == {p.name: p.read_bytes() for p in (run_dir / "charts").glob("*.svg")}
    # A copy of the results elsewhere renders to the same bytes: nothing depends on the path or time.
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("summary.json", "requests.parquet", "manifest.json"):
        (copy / name).write_bytes((run_dir / name).read_bytes())
    assert write_report(copy).read_bytes() == first


def test_sweep_report(tmp_path: Path) -> None:
    sweep = write_synth_sweep(tmp_path / "sweep", [1, 4, 16, 64], n=40)
    html = write_report(sweep).read_text()
    for name in (
        "sweep_throughput",
        "sweep_itl",
        "sweep_ttft",
        "sweep_e2e",
        "sweep_request_rate",
        "sweep_throughput_vs_latency",
        "sweep_per_user",
    ):
        assert (sweep / "charts" / f"{name}.svg").is_file(), name
        assert f'id="fig-{name}"' in html
    assert "Peak output throughput" in html
    assert re.search(r"at concurrency (1|4|16|64)<", html)
    for sub in ("c0001", "c0004", "c0016", "c0064"):  # each load level gets its own report, linked
        assert (sweep / sub / "report.html").is_file()
        assert f'href="{sub}/report.html"' in html


def test_sweep_without_sweep_json_and_run_without_summary(tmp_path: Path) -> None:
    sweep = write_synth_sweep(tmp_path / "sweep", [2, 8], n=20)
    (sweep / "sweep.json").unlink()
    (sweep / "c0008" / SUMMARY).unlink()  # interrupted: the summary is recomputed from records
    res = load_results(sweep)
    assert [p.x for p in res.points] == [2.0, 8.0]
    assert res.points[1].run.summary["requests"]["total"] == 20
    assert write_report(sweep).is_file()


def test_not_a_result_dir(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_results(tmp_path)


def test_timeline_series_from_records() -> None:
    recs = synth_records(30, seed=1, concurrency=3)
    xs, ys = inflight_series(recs)
    assert max(ys) == 3 and ys[-1] == 0 and xs == sorted(xs)
    tx, ty = tokens_per_s_series(recs)
    width = tx[1] - tx[0]
    total = sum(y * width for y in ty)
    assert total == pytest.approx(sum(r.output_tokens or 0 for r in recs), rel=1e-9)


def test_report_command_single_and_overlay(run_dir: Path, tmp_path: Path) -> None:
    other = write_synth_run(tmp_path / "other", synth_records(60, seed=9, concurrency=6), concurrency=6)
    out = tmp_path / "ov" / "report.html"
    res = CliRunner().invoke(report_command, [str(run_dir), str(other), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (run_dir / "report.html").is_file() and (other / "report.html").is_file()
    html = out.read_text()
    assert "overlay_ttft_cdf" in html and "run" in html and "other" in html
    assert write_overlay_report([run_dir, other], out).read_text() == html
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = CliRunner().invoke(report_command, [str(empty)])
    assert bad.exit_code == 2 and "holds no servescope results" in " ".join(bad.output.split())


def test_sweep_with_length_pairs_slo_and_cost(tmp_path: Path) -> None:
    """sweep.json as `servescope sweep` writes it: x_key, several length pairs, SLO, cost."""
    import json

    sweep = write_synth_sweep(
        tmp_path / "sweep", [1, 4, 16], n=30, lengths=[(128, 32), (1024, 32)], itl_p99_limit_ms=25.0, usd_per_hour=2.5
    )
    doc = json.loads((sweep / "sweep.json").read_text())
    # A point still running is listed with its status and must not be drawn.
    doc["points"].append(
        {"dir": "c0064-in128-out32", "concurrency": 64, "input_len": 128, "output_len": 32, "status": "interrupted"}
    )
    (sweep / "sweep.json").write_text(json.dumps(doc))
    write_synth_run(sweep / "c0064-in128-out32", synth_records(10, seed=1, concurrency=64), concurrency=64)
    res = load_results(sweep)
    assert len(res.points) == 6 and {p.group for p in res.points} == {"in 128 · out 32", "in 1024 · out 32"}
    html = write_report(sweep).read_text()
    assert "SLO capacity (in 128, out 32)" in html and "SLO P99 ITL 25 ms" in html
    assert (sweep / "charts" / "sweep_cost.svg").is_file() and "$/1M out" in html
    assert html.count('class="better">pass<') + html.count('class="worse">fail<') == 6
    svg = (sweep / "charts" / "sweep_throughput.svg").read_text()
    assert "in 128 · out 32 · output tok/s" in svg and "in 1024 · out 32 · output tok/s" in svg
    assert ">64<" not in svg  # the interrupted point is not on the x axis data


def test_repeats_directory(tmp_path: Path) -> None:
    """`--repeat N` writes DIR/repeat-k and repeats.json: the report shows the spread and overlays."""
    import json

    from servescope.report.data import RepeatsResult

    root = tmp_path / "rep"
    root.mkdir()
    for k in (1, 2, 3):
        write_synth_run(root / f"repeat-{k}", synth_records(40, seed=k), concurrency=8)
    spread = {"output tok/s": {"values": [1.0, 2.0, 3.0], "mean": 2.0, "std": 1.0, "min": 1.0, "max": 3.0, "cv": 0.5}}
    (root / "repeats.json").write_text(
        json.dumps(
            {
                "schema": "servescope.results.repeats/1",
                "repeats": ["repeat-1", "repeat-2", "repeat-3"],
                "spread": spread,
            }
        )
    )
    res = load_results(root)
    assert isinstance(res, RepeatsResult) and [r.path.name for r in res.runs] == ["repeat-1", "repeat-2", "repeat-3"]
    html = write_report(root).read_text()
    assert "Run-to-run spread (3 repeats)" in html and "50.0 %" in html
    assert 'href="repeat-2/report.html"' in html and (root / "repeat-2" / "report.html").is_file()
    assert "overlay_ttft_cdf" in html


def test_engine_view_beside_the_clients(tmp_path: Path) -> None:
    """The engine's own latency (summary `engine_view`) in the server section: client and engine means
    and their difference, the bucket estimates with their bounds, the phases; byte-stable."""
    from servescope.results.columns import RecordColumns
    from servescope.results.engineview import HistogramWindow, engine_view
    from tests.support.oracle import summarize
    from tests.support.synth import synth_run_info

    recs = synth_records(60, seed=4, concurrency=4)
    s = summarize(recs, run=synth_run_info("r", recs))
    ttft_ms = s["latency_ms"]["ttft"]["mean"] or 0.0
    buckets = ((0.1, 20.0), (0.25, 55.0), (float("inf"), 60.0))
    hists = {
        "ttft": HistogramWindow("vllm:time_to_first_token_seconds", 60.0, 60 * (ttft_ms - 3.0) / 1e3, buckets),
        "queue": HistogramWindow("vllm:request_queue_time_seconds", 60.0, 0.06, buckets),
    }
    view = engine_view(hists, s, RecordColumns.from_records(recs))
    run = write_synth_run(tmp_path / "run", recs, concurrency=4, extra_summary={"engine_view": view})
    html = write_report(run).read_text()
    section = html.split("Engine's view of latency", 1)[1].split("<h2>", 1)[0]
    assert "vllm:time_to_first_token_seconds" in section and "vllm:request_queue_time_seconds" in section
    assert "client − engine" in section and '<td class="">3.00</td>' in section  # 3 ms outside the engine
    # the median: rank 30 of 60, 10 of the 35 in (100, 250] ms: 100 + 150 * 10/35, with its bucket
    assert '142.86 <span class="muted">(100–250)</span>' in section
    assert "60 / 60" in section and "The engine counted 60 requests" in section
    assert write_report(run).read_text() == html
    plain = write_synth_run(tmp_path / "plain", recs, concurrency=4)
    assert "Engine's view" not in write_report(plain).read_text()
