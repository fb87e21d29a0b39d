"""`servescope sweep` against the built-in emulator: plateau, capacity search vs brute force, resume, auto.

Profiles are written per test (`extends: tiny`) with a step time of `step + seq × batch` and a small
max_num_seqs, so throughput plateaus within a few points and the ITL at concurrency c is known:
the capacity test's SLO threshold sits halfway between two concurrencies' ITL, far from the noise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from servescope.sweep.command import sweep_command


def profile(tmp_path: Path, name: str, *, max_num_seqs: int, step_s: float, seq_s: float) -> str:
    p = tmp_path / f"{name}.yaml"
    p.write_text(
        f"extends: tiny\nname: {name}\nmax_num_seqs: {max_num_seqs}\n"
        f"cost:\n  step_overhead_s: {step_s}\n  seq_overhead_s: {seq_s}\n"
    )
    return str(p)


def sweep(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(sweep_command, ["--no-report", "--no-probe", *args], catch_exceptions=False)
    return res.exit_code, res.output


def load(path: Path) -> dict[str, Any]:
    return orjson.loads(path.read_bytes())


def by_load(doc: dict[str, Any], key: str = "concurrency") -> dict[float, dict[str, Any]]:
    return {p[key]: p for p in doc["points"]}


def _plateau_problems(doc: dict[str, Any], summaries: dict[int, dict[str, Any]]) -> list[str]:
    """What is wrong with the curve's shape (empty when it rises, then flattens, as modelled)."""
    tput = {c: s["throughput"]["output_tokens_per_s"] for c, s in summaries.items()}
    itl = {c: s["latency_ms"]["itl"]["median"] for c, s in summaries.items()}
    ttft = {c: s["latency_ms"]["ttft"]["median"] for c, s in summaries.items()}
    high = [tput[16], tput[32], tput[64]]
    sat = doc["saturation"][0]
    checks = {
        # rising (model: ×1.8, ×1.67, ×1.5 per doubling; ×3 from 1 to 4)
        "rises 1->2": tput[2] > 1.2 * tput[1],
        "rises 1->4": tput[4] > 2 * tput[1],
        "high loads well above c=1": min(high) > 2.5 * tput[1],
        # flat past max_num_seqs: 4× the load from 16 to 64 adds little (from 1 to 4 it tripled)
        "flat 16..64": max(high) < 1.35 * min(high) and tput[64] < 1.3 * tput[16],
        # ITL rises with the batch (model: 9 ms at c=1, 16 ms at c=8) and stays; requests queue (TTFT)
        "ITL rises": itl[8] > 1.4 * itl[1] and itl[64] > 0.8 * itl[8],
        "TTFT queues": ttft[64] > 2 * ttft[8],
        "knee found at 8 or 16": sat["saturation_load"] in (8, 16),
        "server queues": sat["bottleneck"] == "server",
    }
    return [f"{name}: tput={tput} itl={itl} ttft={ttft} saturation={sat}" for name, ok in checks.items() if not ok]


def test_concurrency_sweep_rises_then_plateaus(tmp_path: Path) -> None:
    # step 8 ms + 1 ms per sequence, at most 8 running: tok/s ∝ c / (8 + c) up to c = 8, then flat.
    # Steady-state closed-loop runs (--duration); long steps keep the request rate (client CPU) low.
    # max_num_seqs 8 comes through --emulator-args (the profile keeps tiny's 256).
    prof = profile(tmp_path, "plateau", max_num_seqs=256, step_s=0.008, seq_s=0.001)
    # A shared 2-core machine can starve the emulator for a whole point (seen: one point at 60% of
    # its usual throughput); the shape must hold in one of two independent sweeps.
    for attempt in range(2):
        out = tmp_path / f"sweep-{attempt}"
        code, text = sweep(
            "--profile",
            prof,
            "--concurrency",
            "1,2,4,8,16,32,64",
            "--input-len",
            "16",
            "--output-len",
            "16",
            "--duration",
            "0.8",
            "--gpu-hour-price",
            "2.5",
            "--gpus",
            "8",
            "--emulator-args",
            "--max-num-seqs 8",
            "--out",
            str(out),
        )
        assert code == 0, text
        doc = load(out / "sweep.json")
        assert doc["schema"] == "servescope.sweep.command/1" and doc["status"] == "complete"
        assert doc["x_key"] == "concurrency"
        pts = by_load(doc)
        assert sorted(pts) == [1, 2, 4, 8, 16, 32, 64]
        summaries = {c: load(out / p["dir"] / "summary.json") for c, p in pts.items()}
        problems = _plateau_problems(doc, summaries)
        if not problems:
            break
    assert not problems, problems
    assert "throughput stops growing" in (out / "sweep-summary.txt").read_text()
    # cost in every point: $20/h over its measured tokens/s
    for s in summaries.values():
        tp = s["throughput"]
        assert s["cost"]["usd_per_1m_output_tokens"] == pytest.approx(20.0 / (tp["output_tokens_per_s"] * 3600) * 1e6)
        assert s["cost"]["usd_per_1m_total_tokens"] == pytest.approx(20.0 / (tp["total_tokens_per_s"] * 3600) * 1e6)
    # the report loader's contract: dir + the load key per point
    assert all((out / p["dir"] / "summary.json").is_file() and "concurrency" in p for p in doc["points"])


def test_find_max_matches_brute_force(tmp_path: Path) -> None:
    # ITL at concurrency c ≈ 1 + 3c ms (c = 5: 16 ms, c = 6: 19 ms); the limit 17.5 ms sits between.
    prof = profile(tmp_path, "search", max_num_seqs=16, step_s=0.001, seq_s=0.003)
    common = [
        "--profile",
        prof,
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--duration",
        "0.4",
        "--slo",
        "itl_median_ms=17.5",
        "--gpu-hour-price",
        "3",
        "--gpus",
        "2",
    ]
    for attempt in range(2):  # one retry: a shared machine can disturb a point (see the plateau test)
        out = tmp_path / f"search-{attempt}"
        code, text = sweep(*common, "--find-max", "concurrency", "--max-load", "8", "--out", str(out))
        assert code == 0, text
        found = load(out / "sweep.json")["find_max"][0]
        brute_dir = tmp_path / f"brute-{attempt}"
        code, text2 = sweep(*common, "--concurrency", ",".join(str(c) for c in range(1, 9)), "--out", str(brute_dir))
        assert code == 0, text2
        brute = load(brute_dir / "sweep.json")
        passing = [p["concurrency"] for p in brute["points"] if p["figures"]["slo_passed"]]
        itl = {p["concurrency"]: round(p["figures"]["itl_median_ms"], 2) for p in brute["points"]}
        print("brute force ITL median by concurrency:", itl, "probes:", found["probes"])
        # the same answer as the brute force, ±1 (the stated tolerance); the model's answer is 5
        if passing and abs(found["best"] - max(passing)) <= 1 and found["best"] in (4, 5, 6):
            break
    assert passing, brute["points"]
    assert abs(found["best"] - max(passing)) <= 1, (found, passing, itl)
    assert found["best"] in (4, 5, 6) and found["fail"] == found["best"] + 1, found
    assert len(found["probes"]) < 8  # fewer runs than the brute force
    assert f"max concurrency meeting ITL median ≤ 17.5 ms (in 16, out 8): {found['best']:g} " in text
    assert found["cost_at_best"]["usd_per_hour"] == 6.0
    cap = brute["slo_capacity"][0]
    assert cap["load"] == max(passing) or "passed again" in cap["note"], cap


def test_resume_runs_only_missing_points(tmp_path: Path) -> None:
    out = tmp_path / "resume"
    args = [
        "--profile",
        "tiny",
        "--concurrency",
        "1,2,4",
        "--input-len",
        "16",
        "--output-len",
        "4",
        "--num-requests",
        "8",
        "--out",
        str(out),
    ]
    code, text = sweep(*args)
    assert code == 0, text
    pts = by_load(load(out / "sweep.json"))
    run_ids = {c: load(out / p["dir"] / "manifest.json")["run_id"] for c, p in pts.items()}
    (out / pts[2]["dir"] / "summary.json").unlink()  # never finished
    s4 = out / pts[4]["dir"] / "summary.json"
    doc4 = load(s4)
    doc4["interrupted"] = True  # interrupted
    s4.write_bytes(orjson.dumps(doc4))

    code, text = sweep(*args)
    assert code == 2 and "--resume" in text  # refuses to overwrite a sweep without --resume
    code, text = sweep(*args, "--resume")
    assert code == 0, text
    after = {c: load(out / p["dir"] / "manifest.json")["run_id"] for c, p in pts.items()}
    assert after[1] == run_ids[1]  # complete: skipped
    assert after[2] != run_ids[2] and after[4] != run_ids[4]  # missing and interrupted: ran again
    assert "ran 2, skipped 1 complete" in text
    doc = load(out / "sweep.json")
    assert [p["status"] for p in doc["points"]] == ["complete"] * 3
    code, text = sweep(*[a if a != "8" else "9" for a in args], "--resume")
    assert code == 2 and "other settings" in text  # a resumed sweep must keep its settings


def test_rate_auto_spreads_rates_below_saturation(tmp_path: Path) -> None:
    out = tmp_path / "auto"
    code, text = sweep(
        "--profile",
        "tiny",
        "--rate",
        "auto",
        "--auto-points",
        "3",
        "--input-len",
        "16",
        "--output-len",
        "4",
        "--num-requests",
        "16",
        "--seed",
        "1",
        "--out",
        str(out),
    )
    assert code == 0, text
    doc = load(out / "sweep.json")
    kinds = [p["kind"] for p in doc["points"]]
    assert kinds == ["synchronous", "throughput", "auto", "auto", "auto"]
    auto = doc["auto"][0]
    assert all(auto["synchronous_rps"] < r < auto["saturation_rps"] for r in auto["rates"])
    assert doc["x_key"] == "rate_rps" and all(isinstance(p["rate_rps"], float) for p in doc["points"])
    for p in doc["points"]:
        f = p["figures"]
        assert f["offered_requests_per_s"] > 0 and f["completed_requests_per_s"] > 0


def test_cost_without_gpus_charges_the_emulated_deployment(tmp_path: Path) -> None:
    """No --gpus: the cost charges the GPUs the emulator says it serves on (llama-3.1-70b: 4xH100),
    the same count as the throughput per GPU, not one."""
    out = tmp_path / "sweep"
    code, text = sweep(
        "--profile",
        "llama-3.1-70b",
        "--concurrency",
        "2",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--num-requests",
        "4",
        "--gpu-hour-price",
        "2.5",
        "--out",
        str(out),
    )
    assert code == 0, text
    doc = load(out / "sweep.json")
    (point,) = doc["points"]
    s = load(out / point["dir"] / "summary.json")
    assert s["interactivity"]["gpus"] == 4
    assert s["cost"]["gpus"] == 4 and s["cost"]["usd_per_hour"] == pytest.approx(10.0)
    tp = s["throughput"]["output_tokens_per_s"]
    assert s["cost"]["usd_per_1m_output_tokens"] == pytest.approx(10.0 / (tp * 3600) * 1e6)
