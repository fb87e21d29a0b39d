"""Cold caches by default: every sweep point and repeat sends its own prompts, warm points
are flagged, `--reset-cache` empties the server's prefix cache before each point (the built-in emulator,
and vLLM's and SGLang's endpoints on the scripted server over real HTTP), and a closed loop's offered
rate is requests sent over the window.

The sweeps are a typical capacity sweep's (`--concurrency 1,4,16,64 --input-len 1024`) on the default emulator profile,
with short outputs and 64 requests per point so a 2-core machine runs each in seconds.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner

from servescope.report.html import write_report
from servescope.sweep.command import sweep_command
from tests.support.procs import servescope

CONC = (1, 4, 16, 64)


def sweep(out: Path, *args: str, conc: tuple[int, ...] = CONC) -> tuple[dict[str, Any], dict[int, Path], str]:
    res = CliRunner().invoke(
        sweep_command,
        [
            "--no-report",
            "--no-probe",
            "--concurrency",
            ",".join(map(str, conc)),
            "--input-len",
            "1024",
            "--output-len",
            "8",
            "--num-requests",
            "64",
            "--out",
            str(out),
            *args,
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    doc = orjson.loads((out / "sweep.json").read_bytes())
    dirs = {p["concurrency"]: out / p["dir"] for p in doc["points"]}
    assert sorted(dirs) == sorted(conc)
    return doc, dirs, res.output


def load(path: Path) -> dict[str, Any]:
    return orjson.loads(path.read_bytes())


def hit_rate(d: Path) -> float:
    rate = load(d / "summary.json")["server"]["prefix_cache_hit_rate"]
    assert rate is not None
    return float(rate)


def test_sweep_points_get_their_own_prompts_and_stay_cold(tmp_path: Path) -> None:
    doc, dirs, _ = sweep(tmp_path / "cold")
    sums = {c: load(d / "summary.json") for c, d in dirs.items()}
    rates = {c: hit_rate(d) for c, d in dirs.items()}
    assert all(r < 0.05 for r in rates.values()), rates
    ttft = [sums[c]["latency_ms"]["ttft"]["median"] for c in CONC]
    assert ttft == sorted(ttft) and ttft[-1] > 2 * ttft[0], ttft  # queueing shows, no warm cache hides it
    # each point's own seed, derived from --seed 0, recorded in its manifest and in sweep.json
    seeds = {p["concurrency"]: p["seed"] for p in doc["points"]}
    assert len(set(seeds.values())) == len(CONC) and 0 not in seeds.values()
    for c, d in dirs.items():
        assert load(d / "manifest.json")["config"]["seed"] == seeds[c] == sums[c]["workload"]["seed"]
        # the designed rate of a random workload: the template's share, a ceiling; nothing to flag here
        assert 0 < sums[c]["workload"]["intended_prefix_hit_rate"] < 0.05
        assert not any(n.startswith("prefix cache:") for n in sums[c]["notes"])
        # closed loop, 64 requests at c=64 among them: offered = sent over the window, never 1000s/s
        tp = sums[c]["throughput"]
        assert tp["offered_requests_per_s"] <= 2 * tp["requests_per_s"], tp
    assert doc["notes"] == []


def test_same_prompts_warm_points_are_flagged(tmp_path: Path) -> None:
    doc, dirs, text = sweep(tmp_path / "warm", "--same-prompts")
    assert {p["seed"] for p in doc["points"]} == {0}
    rates = {c: hit_rate(d) for c, d in dirs.items()}
    assert rates[1] < 0.05 and all(rates[c] > 0.5 for c in CONC[1:]), rates
    for c in CONC[1:]:
        notes = [n for n in load(dirs[c] / "summary.json")["notes"] if n.startswith("prefix cache:")]
        assert len(notes) == 1 and "warmed by an earlier run or sweep point" in notes[0], notes
    assert not any(n.startswith("prefix cache:") for n in load(dirs[1] / "summary.json")["notes"])
    # in sweep.json, the terminal and sweep-summary.txt: one line per warm point
    assert [n.split(" ", 1)[0] for n in doc["notes"]] == [f"c={c}" for c in CONC[1:]]
    assert text.count("note: prefix cache:") >= 3
    assert (tmp_path / "warm" / "sweep-summary.txt").read_text().count("note: c=") == 3
    # and in the report: the sweep's page lists them, each point's page has its own note
    html = write_report(tmp_path / "warm").read_text()
    assert html.count("prefix cache: intended hit rate") == 3
    assert "prefix cache: intended hit rate" in (dirs[64] / "report.html").read_text()


def test_same_prompts_with_reset_cache_is_cold_again(tmp_path: Path) -> None:
    _, dirs, _ = sweep(tmp_path / "reset", "--same-prompts", "--reset-cache", conc=(1, 4, 16))
    for c, d in dirs.items():
        assert hit_rate(d) < 0.05, c
        reset = load(d / "manifest.json")["cache_reset"]
        assert reset["ok"] is True and reset["engine"] == "servescope-emulator", reset
        assert reset["attempts"] == [
            {
                "method": "POST",
                "path": "/reset_prefix_cache",
                "status": 200,
                "body_head": "",
                "elapsed_ms": reset["attempts"][0]["elapsed_ms"],
            }
        ]


def _stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/stats", timeout=5) as r:
        return json.loads(r.read())


def test_reset_cache_on_vllm_and_sglang_endpoints_per_sweep_point(scripted_server, tmp_path: Path) -> None:
    replies = {"vllm": ("/reset_prefix_cache", ""), "sglang": ("/flush_cache", "Cache flushed.\nPlease check")}
    for engine, (path, body) in replies.items():
        srv = scripted_server("--ttft-ms", "5", "--itl-ms", "1", "--cache-reset", engine)
        out = tmp_path / engine
        res = CliRunner().invoke(
            sweep_command,
            [
                "--url",
                srv.url,
                "--model",
                "m",
                "--api",
                "completions",
                "--no-report",
                "--concurrency",
                "1,2",
                "--num-requests",
                "4",
                "--input-len",
                "16",
                "--output-len",
                "4",
                "--reset-cache",
                "--out",
                str(out),
            ],
            catch_exceptions=False,
        )
        assert res.exit_code == 0, res.output
        points = orjson.loads((out / "sweep.json").read_bytes())["points"]
        for p in points:
            manifest = load(out / p["dir"] / "manifest.json")
            reset = manifest["cache_reset"]
            assert manifest["target"]["capabilities"]["engine"] == engine
            assert reset["ok"] is True and reset["engine"] == engine and reset["path"] == path, reset
            assert [a["status"] for a in reset["attempts"]] == [200]
            assert reset["attempts"][0]["body_head"].startswith(body)
        assert _stats(srv.url)["cache_resets"] == len(points) == 2


def test_repeats_get_their_own_prompts_and_resets(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", "5", "--itl-ms", "1", "--cache-reset", "sglang")
    proc = servescope(
        "run",
        "--url",
        srv.url,
        "--model",
        "m",
        "--api",
        "completions",
        "--quiet",
        "--no-report",
        "--concurrency",
        "2",
        "--num-requests",
        "4",
        "--input-len",
        "16",
        "--output-len",
        "4",
        "--repeat",
        "2",
        "--reset-cache",
        "--seed",
        "7",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    seeds = [load(tmp_path / f"repeat-{k}" / "manifest.json")["config"]["seed"] for k in (1, 2)]
    assert seeds[0] == 7 and seeds[1] not in (0, 7)
    for k in (1, 2):
        assert load(tmp_path / f"repeat-{k}" / "manifest.json")["cache_reset"]["ok"] is True
    assert _stats(srv.url)["cache_resets"] == 2


def test_reset_cache_on_a_server_without_an_endpoint_says_so(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", "5", "--itl-ms", "1")
    proc = servescope(
        "run",
        "--url",
        srv.url,
        "--model",
        "m",
        "--api",
        "completions",
        "--quiet",
        "--no-report",
        "--concurrency",
        "2",
        "--num-requests",
        "4",
        "--input-len",
        "16",
        "--output-len",
        "4",
        "--reset-cache",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    reset = load(tmp_path / "manifest.json")["cache_reset"]
    assert reset["ok"] is False and [a["status"] for a in reset["attempts"]] == [404, 404]
    notes = load(tmp_path / "summary.json")["notes"]
    assert any(n.startswith("--reset-cache: the prefix cache was not reset") for n in notes), notes


def test_closed_loop_offered_rate_with_one_wave(scripted_server, tmp_path: Path) -> None:
    # num-requests = concurrency: the whole run is one wave sent within a few ms
    srv = scripted_server("--ttft-ms", "50", "--itl-ms", "5")
    proc = servescope(
        "run",
        "--url",
        srv.url,
        "--model",
        "m",
        "--api",
        "completions",
        "--quiet",
        "--no-report",
        "--concurrency",
        "32",
        "--num-requests",
        "32",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    tp = load(tmp_path / "summary.json")["throughput"]
    assert tp["requests_per_s"] > 0
    assert 0.5 * tp["requests_per_s"] <= tp["offered_requests_per_s"] <= 2 * tp["requests_per_s"], tp
