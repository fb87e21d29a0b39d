"""servescope plan: layout defaults, the fit table, recipes on disk, what-if, calibration (issue 8)."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
import yaml
from click.testing import CliRunner
from rich.console import Console

from servescope.deploy.deployment import Deployment
from servescope.errors import ConfigError
from servescope.plan.calibrate import MeasuredPoint, calibrate, load_measurements
from servescope.plan.command import plan_command, plan_main
from servescope.plan.memfit import PlanArgs, resolve_layout, to_deployment
from servescope.plan.whatif import knobs_yaml, whatif
from servescope.sim.catalog.gpus import get_gpu
from servescope.sim.catalog.models import get_model


def _console() -> Console:
    return Console(record=True, width=200, color_system=None)


def test_layout_defaults_tp_in_node_pp_across_nodes() -> None:
    m, g = get_model("DeepSeek-R1"), get_gpu("h100")
    lay = resolve_layout(PlanArgs(model="DeepSeek-R1", gpus=8, nodes=2), m, g)
    assert (lay.tp, lay.pp, lay.dp, lay.ep, lay.quant) == (8, 2, 1, 1, "fp8")
    lay = resolve_layout(PlanArgs(model="x", gpus=8, nodes=2, tp=16), m, g)
    assert (lay.tp, lay.pp, lay.dp) == (16, 1, 1)
    lay = resolve_layout(PlanArgs(model="x", gpus=8, nodes=2, tp=1, dp=16, ep=16), m, g)
    assert (lay.tp, lay.pp, lay.dp, lay.ep) == (1, 1, 16, 16)
    lay = resolve_layout(PlanArgs(model="x", gpus=8, dp=2), m, g)
    assert (lay.tp, lay.pp, lay.dp) == (4, 1, 2)
    with pytest.raises(ConfigError):
        resolve_layout(PlanArgs(model="x", gpus=8, tp=3), m, g)


def test_plan_deepseek_fp8_on_8xh100_says_why_and_what_fits() -> None:
    con = _console()
    assert plan_main(PlanArgs(model="DeepSeek-R1", gpu="h100", gpus=8), console=con) == 1
    text = con.export_text()
    assert "Does not fit" in text and "usable" in text
    assert "2x8 H100 TP8 PP2 fp8" in text and "8xH200 TP8 fp8" in text


def test_plan_prints_kv_facts_and_writes_recipes(tmp_path) -> None:
    con = _console()
    out = tmp_path / "r1"
    assert plan_main(PlanArgs(model="DeepSeek-R1", gpu="h200", out=str(out)), console=con) == 0
    text = con.export_text()
    assert "70,272" in text and "replicated on every TP rank" in text
    assert {p.name for p in out.iterdir()} >= {
        "launch-vllm.sh",
        "docker-compose.yaml",
        "k8s-leaderworkerset.yaml",
        "benchmark.sh",
    }
    assert yaml.safe_load((out / "docker-compose.yaml").read_text())["services"]
    con = _console()
    assert plan_main(PlanArgs(model="Llama-3.1-70B", gpus=4), console=con) == 0
    text = con.export_text()
    assert "327,680 whole model" in text and "81,920 per GPU" in text and "vllm serve" in text


def test_plan_command_via_click(tmp_path) -> None:
    res = CliRunner().invoke(
        plan_command,
        ["--model", "Llama-3.1-8B", "--gpu", "h100", "--gpus", "1", "--concurrency", "1,4", "--num-requests", "20"],
    )
    assert res.exit_code == 0, res.output
    assert "what-if" in res.output and "KV capacity" in res.output
    res = CliRunner().invoke(plan_command, ["--model", "Llama-3.1-405B", "--gpu", "a100", "--gpus", "8"])
    assert res.exit_code == 1 and "Does not fit" in res.output
    res = CliRunner().invoke(plan_command, ["--model", "nope"])
    assert res.exit_code == 2 and "unknown model" in res.output
    res = CliRunner().invoke(plan_command, ["--model", "Qwen3-8B", "--concurrency", "1,x"])
    assert res.exit_code == 2


def _awq_deployment() -> tuple[Deployment, object]:
    args = PlanArgs(
        model="DeepSeek-V3-AWQ",
        gpu="h100",
        engine="vllm-0.7",
        max_model_len=8000,
        gpu_memory_utilization=0.95,
        max_num_seqs=128,
    )
    return to_deployment(args), get_model(args.model)


def test_whatif_throughput_rises_and_saturates_while_itl_grows() -> None:
    dep, _m = _awq_deployment()
    pts = whatif(dep, None, input_len=1024, output_len=256, concurrencies=(1, 16, 128), num_requests=64)
    tput = [p.output_tokens_per_s for p in pts]
    itl = [p.itl_ms_p50 for p in pts]
    assert tput[0] < tput[1] < tput[2]
    assert tput[2] / tput[1] < 128 / 16  # sub-linear: the batch costs more per step
    assert itl[0] < itl[2]
    with pytest.raises(ConfigError):
        whatif(dep, None, input_len=8000, output_len=256, concurrencies=(1,))


def test_whatif_ttft_carries_the_first_token_latency_as_the_validation_does() -> None:
    """One answer: the what-if adds the knobs' first-token latency to every TTFT (plan/validate.py's
    `_summary` does the same), and nothing else moves; the engine configuration the emulator serves
    carries the same latency (it holds each stream's first tokens that long)."""
    import dataclasses

    from servescope.deploy.deployment import profile_from_raw

    dep = Deployment.build(model="Llama-3.1-8B", gpu="h100", gpus=1)
    k = dep.knobs()
    assert k.first_token_s > 0.005  # the fitted table's, not zero
    kw = {"input_len": 1024, "output_len": 128, "concurrencies": (1, 32), "num_requests": 64}
    with_it = whatif(dep, k, **kw)
    without = whatif(dep, dataclasses.replace(k, first_token_s=0.0), **kw)
    for a, b in zip(with_it, without):
        assert a.ttft_ms_p50 - b.ttft_ms_p50 == pytest.approx(1e3 * k.first_token_s, rel=1e-9)
        assert (a.output_tokens_per_s, a.itl_ms_p50, a.e2e_ms_p50) == (
            b.output_tokens_per_s,
            b.itl_ms_p50,
            b.e2e_ms_p50,
        )
    prof = profile_from_raw({"name": "x", "model": "Llama-3.1-8B", "gpu": "h100", "gpus": 1})
    assert prof.engine.first_token_s == k.first_token_s


def test_calibration_on_seed_low_concurrency_predicts_c100_within_10pct() -> None:
    # seed 001 (test-only; vLLM 0.7.3, DeepSeek-V3-AWQ, 8xH100, 1024 in / 256 out), concurrency <= 15:
    # c=1 ~33 tok/s, ITL ~30 ms; c=5 ~103 tok/s, ~46 ms; c=15 ~245 tok/s, ~50 ms; "when the concurrency
    # reaches 8, the first token does not appear until after 1 second" (a lower bound). Measured at
    # c=100: ~620 tok/s. The model predicts 650 (+5%) since compute efficiency has a factor per architecture
    # class (comp.arch.mla-moe 0.55 for DeepSeek on the 2025-H1 releases, fitted on the corpus, never on the
    # seeds); 749 (+21%) before it, an xfail from the 580-point refit until then (docs/plan.md).
    dep, _m = _awq_deployment()
    points = [
        MeasuredPoint(1, 1024, 256, 33, 30),
        MeasuredPoint(5, 1024, 256, 103, 46),
        MeasuredPoint(8, 1024, 256, None, ttft_ms_at_least=1000),
        MeasuredPoint(15, 1024, 256, 245, 50),
    ]
    cal, report = calibrate(dep, points)
    assert "calibrated on 4 points" in report and "TTFT" in report
    (c1, c8, c100) = whatif(dep, cal, input_len=1024, output_len=256, concurrencies=(1, 8, 100))
    assert c1.output_tokens_per_s == pytest.approx(33, rel=0.15)
    assert c8.ttft_ms_p50 >= 1000 * 0.97
    assert c100.output_tokens_per_s == pytest.approx(620, rel=0.10)
    assert yaml.safe_load(knobs_yaml(cal))["knobs"]["mem_efficiency"] == pytest.approx(cal.mem_efficiency, rel=1e-3)


def test_a_ttft_lower_bound_pulls_only_from_below() -> None:
    """`MeasuredPoint.ttft_ms_at_least`: a bound the model already meets leaves the knobs where they
    start (it adds nothing to the loss); one above the model's TTFT slows the model until it is met,
    and not much past it (which knobs move is the fit's choice: with one point many can). A point that
    measures nothing is refused."""
    dep, _m = _awq_deployment()
    start = dep.knobs()
    (c8,) = whatif(dep, start, input_len=1024, output_len=256, concurrencies=(8,))
    met = MeasuredPoint(8, 1024, 256, None, ttft_ms_at_least=0.5 * c8.ttft_ms_p50)
    cal, report = calibrate(dep, [met], max_evals=40)
    assert cal == start and "at least" in report
    above = MeasuredPoint(8, 1024, 256, None, ttft_ms_at_least=2.0 * c8.ttft_ms_p50)
    cal, _ = calibrate(dep, [above], max_evals=60)
    (got,) = whatif(dep, cal, input_len=1024, output_len=256, concurrencies=(8,))
    assert cal != start
    assert 0.9 * 2.0 * c8.ttft_ms_p50 <= got.ttft_ms_p50 <= 1.25 * 2.0 * c8.ttft_ms_p50
    with pytest.raises(ConfigError, match="measures nothing"):
        calibrate(dep, [MeasuredPoint(8, 1024, 256, None)])


def test_calibration_simulates_each_point_at_its_measured_length() -> None:
    """The fit simulates a measured point with the requests the run sent (`num_requests`): points the
    engine itself made at 8 requests a user are reproduced exactly at its own knobs, which the default
    4c + 4 requests do not do (a closed loop's waves, and with them the median TTFT, depend on the run's
    length), and a fit from other knobs finds its compute efficiency again."""
    from servescope.plan.calibrate import _loss
    from servescope.plan.whatif import engine_config, simulate_point

    dep = Deployment.build(model="Llama-3.1-8B", gpu="a100", gpus=1, max_model_len=4096)
    truth = dataclasses.replace(dep.knobs(), compute_efficiency=0.3, mem_efficiency=0.5, step_overhead_s=0.006)
    cfg = engine_config(dep, truth)
    pts = []
    for c in (1, 5, 15):
        sim = simulate_point(cfg, concurrency=c, input_len=256, output_len=64, num_requests=8 * c)
        pts.append(
            MeasuredPoint(c, 256, 64, sim.output_tokens_per_s, sim.itl_ms_p50, sim.ttft_ms_p50, num_requests=8 * c)
        )
    assert _loss(dep, truth, pts, truth) == pytest.approx(0.0, abs=1e-12)
    assert _loss(dep, truth, [dataclasses.replace(p, num_requests=None) for p in pts], truth) > 1e-4
    cal, _ = calibrate(dep, pts, start=dataclasses.replace(truth, compute_efficiency=0.5, mem_efficiency=0.3))
    assert cal.compute_efficiency == pytest.approx(0.3, rel=0.05)
    # memory efficiency and the per-step overhead trade against each other at these batch sizes; what they
    # predict together at c=100 is what must come back
    (want,) = whatif(dep, truth, input_len=256, output_len=64, concurrencies=(100,), num_requests=200)
    (got,) = whatif(dep, cal, input_len=256, output_len=64, concurrencies=(100,), num_requests=200)
    assert got.output_tokens_per_s == pytest.approx(want.output_tokens_per_s, rel=0.03)


def test_load_measurements_from_results_and_yaml(tmp_path) -> None:
    run = tmp_path / "runs" / "c5"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(
        json.dumps(
            {
                "schema": "servescope.summary/1",
                "load": {"concurrency": 5},
                "workload": {"input_len": 1024, "output_len": 256},
                "throughput": {"output_tokens_per_s": 103.0},
                "latency_ms": {"itl": {"median": 46.0}, "ttft": {"median": 800}},
                "requests": {"total": 40, "completed": 40, "failed": 0},
            }
        )
    )
    (pt,) = load_measurements(tmp_path / "runs")
    assert (pt.concurrency, pt.output_tokens_per_s, pt.itl_ms, pt.ttft_ms) == (5, 103.0, 46.0, 800.0)
    assert pt.num_requests == 40
    f = tmp_path / "points.yaml"
    f.write_text("points:\n  - {concurrency: 1, input_len: 1024, output_len: 256, output_tokens_per_s: 33}\n")
    (pt,) = load_measurements(f)
    assert pt.itl_ms is None and pt.output_tokens_per_s == 33 and pt.num_requests is None
    f.write_text("points:\n  - {concurrency: 5, input_len: 1024, output_len: 256, itl_ms: 46, num_requests: 20}\n")
    (pt,) = load_measurements(f)
    assert pt.num_requests == 20
    f.write_text("points:\n  - {concurrency: 8, input_len: 1024, output_len: 256, ttft_ms_at_least: 1000}\n")
    (pt,) = load_measurements(f)
    assert pt.output_tokens_per_s is None and pt.ttft_ms_at_least == 1000.0
    f.write_text("points:\n  - {concurrency: 8, input_len: 1024, output_len: 256}\n")
    with pytest.raises(ConfigError, match="measures nothing"):
        load_measurements(f)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError):
        load_measurements(empty)


@pytest.mark.parametrize(("kv_blocks", "concurrency"), [(None, 1), (None, 7), (300, 7), (300, 100)])
def test_median_itl_equals_brute_force_token_gaps(kv_blocks, concurrency) -> None:
    import dataclasses
    import statistics

    from servescope.plan.whatif import _median_itl_s, engine_config
    from servescope.sim.request import SimRequest
    from servescope.sim.simulate import simulate

    dep, _m = _awq_deployment()
    cfg = engine_config(dep)
    if kv_blocks:
        cfg = dataclasses.replace(cfg, kv_blocks=kv_blocks)  # a tiny cache forces preemptions
    reqs = [SimRequest(id=i, prompt_len=1024, max_tokens=256) for i in range(3 * concurrency + 5)]
    run = simulate(cfg, reqs, concurrency=concurrency)
    gaps = []
    for r in reqs:
        t = run.token_times_s(r)
        gaps.extend(b - a for a, b in itertools.pairwise(t))
    assert _median_itl_s(run, reqs) == pytest.approx(statistics.median(gaps), rel=1e-12)
    if kv_blocks:
        assert run.stats.preemptions > 0


def test_whatif_with_data_parallel_scales_replicas() -> None:
    dep2 = to_deployment(PlanArgs(model="Llama-3.1-8B", gpu="h100", gpus=2, tp=1, dp=2))
    dep1 = to_deployment(PlanArgs(model="Llama-3.1-8B", gpu="h100", gpus=1))
    # one API server in front of both ranks: each replica's requests pass a front end twice as busy
    fe1 = dep1.engine_config().frontend_s
    assert fe1 > 0 and dep2.engine_config().frontend_s == pytest.approx(2 * fe1)
    cal = dataclasses.replace(dep1.knobs(), frontend_s=0.0)  # without it, replicas scale exactly
    (p2,) = whatif(dep2, cal, input_len=512, output_len=64, concurrencies=(16,), num_requests=64)
    (p1,) = whatif(dep1, cal, input_len=512, output_len=64, concurrencies=(8,), num_requests=32)
    assert p2.concurrency == 16
    assert p2.output_tokens_per_s == pytest.approx(2 * p1.output_tokens_per_s, rel=1e-6)


def test_plan_with_a_local_config_json(tmp_path) -> None:
    ckpt = tmp_path / "my-llama"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "num_hidden_layers": 32,
                "intermediate_size": 14336,
                "vocab_size": 128256,
            }
        )
    )
    con = _console()
    args = PlanArgs(model=str(ckpt / "config.json"), gpus=1, concurrency=(1,), num_requests=4)
    assert plan_main(args, console=con) == 0
    text = con.export_text()
    assert f"vllm serve {ckpt}" in text and "131,072 whole model" in text and "what-if" in text


# ---- issue 13: each bug command gives a correct answer or a clear refusal; plan --json


def _plan_json(*flags: str) -> tuple[int, dict]:
    res = CliRunner().invoke(plan_command, [*flags, "--json", "-"])
    return res.exit_code, json.loads(res.stdout)


def test_vllm_07_raises_the_batch_budget_to_max_model_len() -> None:
    code, doc = _plan_json(
        "--model",
        "Llama-3.1-8B",
        "--gpu",
        "h100",
        "--gpus",
        "1",
        "--engine",
        "vllm-0.7",
        "--max-model-len",
        "16384",
        "--concurrency",
        "1",
        "--num-requests",
        "4",
    )
    assert code == 0, doc
    assert doc["recipe"]["parameters"]["max_num_batched_tokens"] == 16384
    assert doc["recipe"]["parameters"]["chunked_prefill"] is False
    assert doc["whatif"]["points"][0]["output_tokens_per_s"] > 0
    # an explicit budget below max_model_len without chunked prefill is refused, clearly
    res = CliRunner().invoke(
        plan_command,
        [
            "--model",
            "Llama-3.1-8B",
            "--gpus",
            "1",
            "--engine",
            "vllm-0.7",
            "--max-model-len",
            "16384",
            "--max-num-batched-tokens",
            "8192",
        ],
    )
    assert res.exit_code == 2 and "smaller than max_model_len" in res.output


def test_deepseek_r1_vllm_07_at_its_default_163840_fits_8xh200() -> None:
    code, doc = _plan_json(
        "--model", "DeepSeek-R1", "--gpu", "h200", "--gpus", "8", "--engine", "vllm-0.7", "--max-model-len", "163840"
    )
    fit = doc["fit"]
    assert code == 0 and fit["fits"], fit["reason"]
    assert fit["reserve_per_gpu_gib"] < 40  # bounded by the batch budget's chunks, not 271 GiB
    assert fit["kv_tokens_per_replica"] >= 163840


def test_trtllm_tp8_ep4_splits_experts_over_all_8_gpus() -> None:
    code, doc = _plan_json(
        "--model", "DeepSeek-R1", "--gpu", "h200", "--gpus", "8", "--engine", "trtllm", "--tp", "8", "--ep", "4"
    )
    assert code == 0 and doc["fit"]["fits"]
    tp8 = _plan_json("--model", "DeepSeek-R1", "--gpu", "h200", "--gpus", "8", "--engine", "trtllm")[1]
    assert doc["fit"]["weights_breakdown_gib"]["routed_experts"] == pytest.approx(
        tp8["fit"]["weights_breakdown_gib"]["routed_experts"], rel=1e-6
    )
    assert "EP4 (MoE TP2)" in doc["deployment"]["describe"]


def test_does_not_fit_message_adds_up() -> None:
    import re

    # vLLM: usable = util x memory, and the message says so with numbers that multiply out
    code, doc = _plan_json("--model", "DeepSeek-R1", "--gpu", "h100", "--gpus", "8")
    assert code == 1
    m = re.search(r"only ([\d.]+) GiB per GPU is usable \(([\d.]+) x ([\d.]+) GiB\)", doc["fit"]["reason"])
    assert m and float(m[1]) == pytest.approx(float(m[2]) * float(m[3]), abs=0.1)
    # TensorRT-LLM's fraction applies after weights: the message says that instead of a false product
    code, doc = _plan_json(
        "--model", "Llama-3.1-405B", "--quant", "bf16", "--gpu", "h100", "--gpus", "8", "--engine", "trtllm"
    )
    assert code == 1
    reason = doc["fit"]["reason"]
    assert "is usable (0.90 x" not in reason and "applies to what is left after weights" in reason, reason


def test_dp_without_ep_splits_experts_over_the_dp_ranks() -> None:
    code, doc = _plan_json("--model", "DeepSeek-R1", "--gpu", "h200", "--gpus", "8", "--tp", "1", "--dp", "8")
    assert code == 0 and doc["fit"]["fits"], doc["fit"]["reason"]
    assert doc["deployment"]["ep"] == 8
    assert doc["fit"]["weights_per_gpu_gib"] < 100  # not 627 GiB: experts are not replicated per DP rank
    assert any("EP8" in n for n in doc["notes"])


def test_fit_and_whatif_hold_one_kv_figure() -> None:
    from servescope.plan.whatif import engine_config

    dep, _ = _awq_deployment()
    fit_tokens = dep.fit().kv_tokens
    assert engine_config(dep).kv_tokens == fit_tokens
    _code, doc = _plan_json(
        "--model",
        "DeepSeek-V3-AWQ",
        "--gpu",
        "h100",
        "--gpus",
        "8",
        "--engine",
        "vllm-0.7",
        "--max-model-len",
        "8000",
        "--gpu-memory-utilization",
        "0.95",
        "--max-num-seqs",
        "128",
    )
    assert doc["fit"]["kv_tokens_per_replica"] == fit_tokens


def test_plan_json_holds_fit_recipe_and_whatif_with_a_band(tmp_path) -> None:
    out = tmp_path / "deploy"
    res = CliRunner().invoke(
        plan_command,
        [
            "--model",
            "Llama-3.1-70B",
            "--gpu",
            "h100",
            "--gpus",
            "4",
            "--concurrency",
            "1,8",
            "--num-requests",
            "16",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "plan.json").read_text())
    assert doc["schema"] == "servescope.plan/1"
    assert doc["deployment"]["tp"] == 4 and doc["fit"]["fits"]
    assert doc["recipe"]["parameters"]["tp"] == 4 and "launch-vllm.sh" in doc["recipe"]["files"]
    pts = doc["whatif"]["points"]
    assert [p["concurrency"] for p in pts] == [1, 8]
    for p in pts:
        u = p["uncertainty"]["output_tokens_per_s"]
        assert u["low"] < p["output_tokens_per_s"] < u["high"]
    assert doc["whatif"]["band_source"]
    code, nofit = _plan_json("--model", "Llama-3.1-405B", "--gpu", "a100", "--gpus", "8")
    assert code == 1 and nofit["fit"]["fits"] is False and nofit["fit"]["suggestions"]


def test_whatif_band_follows_the_kind_of_load() -> None:
    """Each what-if point carries the held-out error of the validation's points loaded the same way
    (closed loop, Poisson rate, all at once; deploy/calibration.yaml), and the terminal says which."""
    from servescope.deploy.calibration import load_calibration

    by_mode = load_calibration().heldout_by_mode
    assert set(by_mode) == {"closed", "rate", "offline"}
    code, doc = _plan_json(
        "--model",
        "Llama-3.1-8B",
        "--gpu",
        "h100",
        "--gpus",
        "1",
        "--concurrency",
        "4",
        "--request-rate",
        "2,inf",
        "--num-requests",
        "16",
    )
    assert code == 0
    got = {
        p["concurrency"] or p["request_rate"]: {m: u["rel"] for m, u in p["uncertainty"].items()}
        for p in doc["whatif"]["points"]
    }
    assert got[4] == pytest.approx(by_mode["closed"])
    assert got[2] == pytest.approx(by_mode["rate"])
    assert got["inf"] == pytest.approx(by_mode["offline"])
    assert got[4]["ttft_ms"] != got["inf"]["ttft_ms"]
    assert doc["whatif"]["bands"]["closed"] == pytest.approx(by_mode["closed"])
    res = CliRunner().invoke(
        plan_command,
        ["--model", "Llama-3.1-8B", "--gpu", "h100", "--gpus", "1", "--concurrency", "4", "--num-requests", "16"],
    )
    closed = by_mode["closed"]
    assert (
        f"closed loop: ±{closed['output_tokens_per_s']:.0%} output tok/s, ±{closed['itl_ms']:.0%} ITL, "
        f"±{closed['ttft_ms']:.0%} TTFT"
    ) in res.output
    assert "knobs fitted to published measurements" in res.output and "default efficiency" not in res.output


def test_band_of_a_kind_of_load_with_too_few_points_is_the_overall_one() -> None:
    from servescope.plan.band import Band
    from servescope.plan.knobfit import MODE_BAND_MIN_POINTS, published_bands

    def stats(err: float, n: int) -> dict[str, object]:
        return {"median_abs_error": err, "n": n}

    summary = {
        "held_out": {m: stats(0.2, 100) for m in ("tok_s", "itl", "ttft")},
        "held_out_by_mode": {
            "closed": {m: stats(0.1, MODE_BAND_MIN_POINTS) for m in ("tok_s", "itl", "ttft")},
            "rate": {"tok_s": stats(0.4, 50), "itl": stats(0.5, MODE_BAND_MIN_POINTS - 1), "ttft": stats(None, 0)},
        },
    }
    overall, by_mode = published_bands(summary)
    assert overall == {"output_tokens_per_s": 0.2, "itl_ms": 0.2, "ttft_ms": 0.2}
    assert by_mode == {
        "closed": {"output_tokens_per_s": 0.1, "itl_ms": 0.1, "ttft_ms": 0.1},
        "rate": {"output_tokens_per_s": 0.4},
    }
    band = Band(overall, "test", by_mode)
    (rate,) = whatif(
        Deployment.build(model="Llama-3.1-8B", gpu="h100"),
        None,
        input_len=128,
        output_len=16,
        concurrencies=(),
        request_rates=(1.0,),
        num_requests=8,
    )
    assert band.for_point(rate) == {"output_tokens_per_s": 0.4, "itl_ms": 0.2, "ttft_ms": 0.2}
    lines = band.lines([rate])
    assert lines[0] == "uncertainty by kind of load (test):"
    assert lines[1].startswith("  Poisson rate: ±40% output tok/s")


def test_deployment_limits_follow_the_engine_version() -> None:
    """`vllm` is current vLLM: 1024 sequences on a GPU of >= 70 GiB other than an A100 (vLLM >= 0.9
    EngineArgs defaults by device), 256 on an A100; `vllm-0.7` (V0) 256 without chunked prefill."""
    from servescope.deploy.deployment import Deployment

    assert Deployment.build(model="Llama-3.1-8B", gpu="h100").limits.max_num_seqs == 1024
    assert Deployment.build(model="Llama-3.1-8B", gpu="a100").limits.max_num_seqs == 256
    v0 = Deployment.build(model="Llama-3.1-8B", gpu="h100", engine="vllm-0.7").limits
    assert v0.max_num_seqs == 256 and not v0.chunked_prefill


def test_sglang_dp_attention_divides_the_prompt_chunk_among_its_ranks() -> None:
    """SGLang's ServerArgs divides --chunked-prefill-size among the DP-attention ranks (0.4.4 on:
    `// dp_size`; 0.4.0-0.4.3: halved); plan's DeepSeek-R1 on 8 x H200 with SGLang DP8 runs each rank
    with 8,192 / 8 prompt tokens a step, its decode budget untouched; TP8, vLLM and a dense model's
    plain DP are not divided."""
    from servescope.sim.defaults import sglang_dp_prefill_chunk

    assert sglang_dp_prefill_chunk(8192, 8, "0.5.3") == 1024
    assert sglang_dp_prefill_chunk(8192, 8, "") == 1024
    assert sglang_dp_prefill_chunk(8192, 8, "0.4.1") == 4096
    assert sglang_dp_prefill_chunk(65536, 8, "0.5.7") == 8192
    assert sglang_dp_prefill_chunk(8192, 1, "0.5.3") == 8192
    dp8 = Deployment.build(model="DeepSeek-R1", gpu="h200", gpus=8, engine="sglang", tp=1, dp=8)
    assert dp8.limits.max_prefill_tokens == 1024
    cfg = dp8.engine_config()
    assert cfg.max_prefill_tokens == 1024 and cfg.max_num_batched_tokens >= 8192
    # the emulator serves the same engine (a saved deployment resolves to it)
    from servescope.deploy.deployment import profile_from_raw

    prof = profile_from_raw(
        {"name": "r1-dp8", "model": "DeepSeek-R1", "gpu": "h200", "gpus": 8, "engine": "sglang", "tp": 1, "dp": 8}
    )
    assert prof.engine.max_prefill_tokens == 1024
    code, doc = _plan_json(
        "--model",
        "DeepSeek-R1",
        "--gpu",
        "h200",
        "--gpus",
        "8",
        "--engine",
        "sglang",
        "--tp",
        "1",
        "--dp",
        "8",
        "--concurrency",
        "8",
        "--num-requests",
        "16",
    )
    assert code == 0, doc
    assert any("prefills 1,024 prompt tokens a step" in n for n in doc["notes"]), doc["notes"]
    assert Deployment.build(model="DeepSeek-R1", gpu="h200", gpus=8, engine="sglang").limits.max_prefill_tokens == 0
    assert Deployment.build(model="DeepSeek-R1", gpu="h200", gpus=8, tp=1, dp=8).limits.max_prefill_tokens == 0
    assert (
        Deployment.build(
            model="Llama-3.1-8B", gpu="h100", gpus=2, engine="sglang", tp=1, dp=2
        ).limits.max_prefill_tokens
        == 0
    )


def test_gpt_oss_on_one_h100_plan_json_states_the_window_pages() -> None:
    """plan for gpt-oss-120b on one H100 (vLLM): the repacked MXFP4 experts in the breakdown, the
    sliding-window pages per request in plan.json, and the concurrency figures net of them; the
    what-if engine holds the same KV figure and 9 window blocks per running sequence."""
    code, doc = _plan_json("--model", "gpt-oss-120b", "--gpu", "h100", "--gpus", "1", "--max-model-len", "32768")
    fit = doc["fit"]
    assert code == 0 and fit["fits"]
    assert fit["weights_breakdown_gib"]["mxfp4_repack"] > 5.0
    assert fit["kv_seq_overhead_tokens"] == 144
    assert fit["concurrent_seqs"]["1280"] == fit["kv_tokens_per_replica"] // (1280 + 144)
    from servescope.plan.whatif import engine_config

    dep = to_deployment(PlanArgs(model="gpt-oss-120b", gpu="h100", gpus=1, max_model_len=32768))
    cfg = engine_config(dep)
    assert cfg.kv_tokens == fit["kv_tokens_per_replica"] and cfg.seq_overhead_blocks == 9


def test_inferencex_lengths_span_the_top_fifth_of_the_nominal_length() -> None:
    """`range-0.8` (InferenceX's --random-range-ratio 0.8): uniform integers in [0.8 L, L], mean 0.9 L,
    and the longest is L (the engine's max_model_len follows it)."""
    import numpy as np

    from servescope.plan import lengths

    x = lengths.draw(np.random.default_rng(1), "range-0.8", 1024, 20_000, 0)
    assert x.min() == int(0.8 * 1024) and x.max() == 1024
    assert x.mean() == pytest.approx(0.9 * 1024, rel=0.01)
    assert lengths.max_len("range-0.8", 1024, 0) == 1024


def test_a_stated_fifteen_percent_spread_draws_lengths_around_the_stated_mean() -> None:
    """`pm-0.15` (a source's "+/-15% variance", vllm bench serve --random-range-ratio 0.15): uniform
    integers in [0.85 L, 1.15 L] with mean L, the longest 1.15 L; and identical 20k-token prompts at
    concurrency 8, which the simulation keeps in lock-step waves, are no longer identical."""
    import numpy as np

    from servescope.plan import lengths

    x = lengths.draw(np.random.default_rng(1), "pm-0.15", 20_000, 20_000, 0)
    assert x.min() == 17_000 and x.max() == 23_000
    assert x.mean() == pytest.approx(20_000, rel=0.01)
    assert lengths.max_len("pm-0.15", 20_000, 0) == 23_000
    pairs = lengths.draw_pairs("pm-0.15", "pm-0.15", 20_000, 2_000, 8)
    assert len({p for p, _ in pairs}) == 8 and len({o for _, o in pairs}) == 8


def _measured_by(dep: Deployment, knobs: object, concurrencies: tuple[int, ...]) -> list[MeasuredPoint]:
    """Points a deployment with other knobs than plan's 'measured' (the simulator's own answer, off by
    15% either way)."""
    from servescope.plan.whatif import engine_config, simulate_point

    cfg = engine_config(dep, knobs)  # type: ignore[arg-type]
    out = []
    for i, c in enumerate(concurrencies):
        p = simulate_point(cfg, concurrency=c, input_len=256, output_len=64, num_requests=4 * c + 4)
        # measurement noise, so that no one knob set fits every point exactly: +-15%, alternating
        f = 1.15 if i % 2 else 0.85
        out.append(MeasuredPoint(c, 256, 64, f * p.output_tokens_per_s, p.itl_ms_p50 / f))
    return out


def test_leave_one_out_refits_without_each_point_and_needs_three() -> None:
    from servescope.plan.calibrate import leave_one_out

    dep = Deployment.build(model="Llama-3.1-8B", gpu="a100")
    truth = dataclasses.replace(
        dep.knobs(), mem_efficiency=0.5 * dep.knobs().mem_efficiency, step_overhead_s=4 * dep.knobs().step_overhead_s
    )
    points = _measured_by(dep, truth, (1, 4, 16))
    assert leave_one_out(dep, points[:2], max_evals=40) == []
    loo = leave_one_out(dep, points, max_evals=60)
    assert [left.concurrency for left, _ in loo] == [1, 4, 16]
    full, _ = calibrate(dep, points, max_evals=60)
    for left, knobs in loo:
        rest = [p for p in points if p is not left]
        assert knobs == calibrate(dep, rest, max_evals=60)[0]  # the same fit, one point fewer
    assert any(k != full for _, k in loo)
    # a point set whose only other points are latency bounds leaves that fit out
    bound = MeasuredPoint(8, 256, 64, None, ttft_ms_at_least=1.0)
    assert [left.concurrency for left, _ in leave_one_out(dep, [points[0], bound, bound], max_evals=20)] == [8, 8]


def test_calibrated_whatif_band_covers_the_leave_one_out_spread(tmp_path) -> None:
    """After --calibrate with three or more points, each what-if point says how far it moves when one
    calibration point is left out, and its band is at least that move."""
    dep = Deployment.build(model="Llama-3.1-8B", gpu="a100")
    truth = dataclasses.replace(
        dep.knobs(), mem_efficiency=0.5 * dep.knobs().mem_efficiency, step_overhead_s=4 * dep.knobs().step_overhead_s
    )
    pts = _measured_by(dep, truth, (1, 4, 16))
    f = tmp_path / "points.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "points": [
                    {
                        "concurrency": p.concurrency,
                        "input_len": p.input_len,
                        "output_len": p.output_len,
                        "output_tokens_per_s": p.output_tokens_per_s,
                        "itl_ms": p.itl_ms,
                    }
                    for p in pts
                ]
            }
        )
    )
    flags = [
        "--model",
        "Llama-3.1-8B",
        "--gpu",
        "a100",
        "--gpus",
        "1",
        "--calibrate",
        str(f),
        "--input-len",
        "256",
        "--output-len",
        "64",
        "--concurrency",
        "1,64",
        "--num-requests",
        "64",
    ]
    code, doc = _plan_json(*flags)
    assert code == 0
    assert "left out" in doc["whatif"]["band_source"]
    for p in doc["whatif"]["points"]:
        loo = p["leave_one_out"]
        assert set(loo) == {"output_tokens_per_s", "itl_ms", "ttft_ms"}
        tps = loo["output_tokens_per_s"]
        assert tps["low"] <= p["output_tokens_per_s"] <= tps["high"]
        assert tps["lowest_without"] in ("c=1", "c=4", "c=16")
        for m in ("output_tokens_per_s", "itl_ms"):
            assert p["uncertainty"][m]["rel"] >= loo[m]["max_rel"] - 1e-12
    c64 = doc["whatif"]["points"][1]["leave_one_out"]["output_tokens_per_s"]
    assert c64["high"] > c64["low"]  # an extrapolation to c=64 moves with the points it rests on
    res = CliRunner().invoke(plan_command, flags)
    assert res.exit_code == 0 and "is left out of the fit" in res.output and "c=64: ±" in res.output
    # two points: no leave-one-out (one point alone says nothing the prior does not)
    f.write_text(
        yaml.safe_dump(
            {
                "points": [
                    {
                        "concurrency": p.concurrency,
                        "input_len": 256,
                        "output_len": 64,
                        "output_tokens_per_s": p.output_tokens_per_s,
                    }
                    for p in pts[:2]
                ]
            }
        )
    )
    code, doc = _plan_json(*flags)
    assert code == 0 and "leave_one_out" not in doc["whatif"]["points"][0]
