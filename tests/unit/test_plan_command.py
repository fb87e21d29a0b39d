"""`servescope plan` (plan/command.py): the fit table and its refusals, recipes on disk, plan --json, the
what-if's band on the console and in JSON."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import yaml
from click.testing import CliRunner
from rich.console import Console

from servescope.deploy.deployment import Deployment
from servescope.plan.command import plan_command, plan_main
from servescope.plan.memfit import PlanArgs, to_deployment
from tests.support.plan_deployments import awq_deployment, measured_by


def _console() -> Console:
    return Console(record=True, width=200, color_system=None)


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


# ---- each of these commands gives a correct answer or a clear refusal; plan --json


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

    dep, _ = awq_deployment()
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


def test_calibrated_whatif_band_covers_the_leave_one_out_spread(tmp_path) -> None:
    """After --calibrate with three or more points, each what-if point says how far it moves when one
    calibration point is left out, and its band is at least that move."""
    dep = Deployment.build(model="Llama-3.1-8B", gpu="a100")
    truth = dataclasses.replace(
        dep.knobs(), mem_efficiency=0.5 * dep.knobs().mem_efficiency, step_overhead_s=4 * dep.knobs().step_overhead_s
    )
    pts = measured_by(dep, truth, (1, 4, 16))
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


def test_plan_command_rates_burst_and_prefix(tmp_path) -> None:
    res = CliRunner().invoke(
        plan_command,
        [
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
            "--prefix-len",
            "256",
            "--input-len",
            "256",
            "--output-len",
            "32",
            "--num-requests",
            "40",
            "--json",
            "-",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    w = doc["whatif"]
    assert w["closed_loop"] and w["open_loop"] and "Poisson" in w["arrivals"]
    pts = w["points"]
    assert [(p["concurrency"], p["request_rate"]) for p in pts] == [(4, None), (None, 2.0), (None, "inf")]
    assert all(p["prefix_len"] == 256 for p in pts)
    # one at a time, every request after the first finds the prefix (39 x 256 of 40 x 512 tokens); all at
    # once, the first step's 16 prompts (8,192 batched tokens / 512) compute it together, none cached yet
    assert pts[0]["prefix_cache_hit_rate"] == pts[1]["prefix_cache_hit_rate"] == pytest.approx(39 / 80, rel=1e-12)
    assert pts[2]["prefix_cache_hit_rate"] == pytest.approx(24 / 80, rel=1e-12)
    assert all(p["uncertainty"]["ttft_ms"]["low"] < p["ttft_ms_p50"] for p in pts)
    # the tables
    con = Console(record=True, width=200, color_system=None)
    assert plan_main(PlanArgs(model="Llama-3.1-8B", gpus=1, request_rate=(2.0, math.inf), num_requests=20), con) == 0
    text = con.export_text()
    assert "2 req/s" in text and "all at once" in text and "prefix hits" not in text
    # caching off: a note says the prefix is recomputed, and the table shows no hits
    con = Console(record=True, width=200, color_system=None)
    assert (
        plan_main(
            PlanArgs(
                model="Llama-3.1-8B", gpus=1, engine="vllm-0.7", request_rate=(1.0,), prefix_len=64, num_requests=10
            ),
            con,
        )
        == 0
    )
    text = con.export_text()
    assert "prefix caching is off for vllm-0.7" in text and "prefix hits" in text and "64+1024/256" in text
    # `--rate`, as `servescope run` spells it, is the same flag
    res = CliRunner().invoke(
        plan_command, ["--model", "Llama-3.1-8B", "--gpus", "1", "--rate", "inf", "--num-requests", "8", "--json", "-"]
    )
    assert res.exit_code == 0 and json.loads(res.stdout)["whatif"]["points"][0]["request_rate"] == "inf"
    for bad in ("0", "1,x", "-2"):
        res = CliRunner().invoke(plan_command, ["--model", "Llama-3.1-8B", "--request-rate", bad])
        assert res.exit_code == 2 and "--request-rate" in res.output


def test_whatif_points_carry_80_and_95_percent_intervals_and_the_reach() -> None:
    """plan --json: every what-if figure has uncertainty.<metric>.p80 and .p95, each {low, high}, the 95%
    holding the 80% and both the prediction; the deployment's reach and engine release are stated, and a
    release no corpus point ran says which fitted line it falls back to."""
    code, doc = _plan_json(
        "--model", "DeepSeek-V3-AWQ", "--gpu", "h100", "--engine", "vllm-0.7", "--max-model-len", "8000",
        "--concurrency", "1,16", "--num-requests", "16",
    )  # fmt: skip
    assert code == 0
    for p in doc["whatif"]["points"]:
        for m, attr in (
            ("output_tokens_per_s", "output_tokens_per_s"),
            ("itl_ms", "itl_ms_p50"),
            ("ttft_ms", "ttft_ms_p50"),
        ):
            a, b = p["uncertainty"][m]["p80"], p["uncertainty"][m]["p95"]
            assert b["low"] <= a["low"] <= p[attr] <= a["high"] <= b["high"]
    reach = doc["whatif"]["reach"]
    assert reach["classes"]["engine"] == "vllm<0.8" and reach["classes"]["quant"] == "int4"
    # the status follows the installed table's sources per class: none outside, one thin
    from servescope.deploy.calibration import load_calibration

    counts = load_calibration().intervals["class_sources"]
    fewest = min(int(counts[d].get(c, 0)) for d, c in reach["classes"].items())
    assert reach["status"] == ("outside" if fewest == 0 else "thin" if fewest < 2 else "in")
    assert bool(reach["why"]) == (fewest < 2)
    assert doc["deployment"]["engine_version"] == "0.7.3" and "0.7" in doc["deployment"]["engine_release"]
    code, llama = _plan_json("--model", "Llama-3.1-8B", "--gpus", "1", "--engine", "trtllm-0.12", "--concurrency", "4")
    assert code == 0 and "no corpus point ran the 0.12 line" in llama["deployment"]["engine_release"]


def test_an_engine_name_plan_does_not_take_is_refused_with_the_forms_it_does() -> None:
    res = CliRunner().invoke(plan_command, ["--model", "Llama-3.1-8B", "--engine", "vllm-latest"])
    assert res.exit_code == 2 and "MAJOR.MINOR" in res.output
