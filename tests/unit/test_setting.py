"""A corpus point stated to the model (plan/setting.py): what is expressible and why not, the engine
limits by version and launch settings, parallelism, the memory fit, and one answer with the
deployment plan and the emulator run for the same engine."""

from __future__ import annotations

import dataclasses
import math

import pytest

from servescope.deploy.calibration import load_calibration
from servescope.plan.corpus import load_corpus
from servescope.plan.setting import measured_for, setting_for
from servescope.plan.validate import Predictor
from servescope.sim.catalog.gpus import get_gpu
from servescope.sim.catalog.models import get_model
from servescope.sim.defaults import admission_reserve
from servescope.sim.knobs import DEFAULT_KNOBS, arch_class, resolve_knobs
from servescope.sim.steptime import step_time_s
from tests.support.corpus_points import SRC, corpus_point


def test_measured_statistic_preference() -> None:
    p = corpus_point(
        measured={"itl_ms_mean": 12.0, "tpot_ms_mean": 11.0, "ttft_ms_median": 5.0, "ttft_ms_mean": 9.0, "req_s": 2.0}
    )
    m = measured_for(p)
    assert m["itl"] == ("tpot_ms_mean", 11.0)  # a TPOT mean before an ITL mean (ITL means count chunks)
    assert m["ttft"] == ("ttft_ms_median", 5.0)
    assert m["tok_s"] == ("req_s x output_len", 256.0)


def test_unexpressible_points_say_why() -> None:
    pred = Predictor(
        [
            corpus_point(id="a", input_len=None),
            corpus_point(id="b", gpu="tpu-v9"),
            corpus_point(id="c", model="Llama-3.1-405B", gpus=1),
        ]
    )
    assert set(pred.unexpressible) == {"hand/a", "hand/b", "hand/c"}
    assert "length" in pred.unexpressible["hand/a"]
    assert "catalogue" in pred.unexpressible["hand/b"]
    assert "fit" in pred.unexpressible["hand/c"]


def test_multi_node_tp_all_reduce_is_hierarchical() -> None:
    """TP16 over two 8-GPU nodes: each GPU moves 2(8-1)/8 M over NVLink and only 2(2-1)/2 M/8 over its
    NIC (NCCL reduces within the node first), the NIC bytes weighed by NVLink / NIC bandwidth (9x)."""
    p = corpus_point(
        model="DeepSeek-R1",
        gpu="h100",
        gpus=16,
        tp=16,
        engine="sglang",
        engine_version="0.4.9",
        quant="fp8",
        input_len=128,
        output_len=128,
    )
    s = Predictor([p]).settings[p.key]
    model = get_model("DeepSeek-R1")
    m = 2 * model.layers * model.hidden * 2.0
    assert s.base.cost.comm_bytes_per_token == pytest.approx(m * 2 * 7 / 8 + m / 8 * 2 * 1 / 2 * 900e9 / 100e9)
    assert s.comm_intra_bytes_per_s == 900e9


def test_validation_and_deployment_state_one_engine() -> None:
    """One answer: a corpus point of current vLLM and the deployment plan and the emulator run for the
    same model, GPUs and TP resolve to the same engine limits by version (1024 sequences on an H100)
    and the same step costs (TP all-reduce bytes and collectives, per-sequence overhead included)."""
    from servescope.deploy.deployment import Deployment
    from servescope.sim.steptime import StepShape as Shape

    p = corpus_point(model="Llama-3.1-70B", gpus=4, tp=4, engine_version="0.10.0", input_len=1000, output_len=200)
    s = Predictor([p]).settings[p.key]
    dep = Deployment.build(model="Llama-3.1-70B", gpu="h100", gpus=4, max_model_len=s.base.max_model_len)
    assert dep.limits.max_num_seqs == s.base.max_num_seqs == 1024
    assert dep.limits.max_num_batched_tokens == s.base.max_num_batched_tokens == 8192
    table = dict(DEFAULT_KNOBS)
    k = resolve_knobs(table, s.family, s.generation, s.arch)
    assert dep.with_knobs(k).knobs() == k
    mine = dep.engine_config(k).cost
    theirs = _engine_cost(s, k)
    assert mine.comm_bytes_per_token == theirs.comm_bytes_per_token > 0
    assert mine.collectives == theirs.collectives == 2 * 80
    for shape in (
        Shape(decode_seqs=64, decode_ctx_tokens=64 * 1100),
        Shape(prefill_seqs=2, prefill_tokens=2000, prefill_ctx_pairs=2000 * 500),
    ):
        assert step_time_s(mine, shape) == pytest.approx(step_time_s(theirs, shape), rel=1e-6)


@pytest.mark.parametrize(
    ("corpus_engine", "version", "engine", "reserve"),
    [("trtllm", "1.0.0", "trtllm", 1.0), ("sglang", "0.5.2", "sglang", 0.7), ("vllm", "0.10.0", "vllm", 0.0)],
)
def test_validation_plan_and_emulator_admit_by_one_rule(
    corpus_engine: str, version: str, engine: str, reserve: float
) -> None:
    """One answer: the KV an engine sets aside when it admits a request (TensorRT-LLM's
    GUARANTEED_NO_EVICT: prompt + max_tokens; SGLang's new_token_ratio 0.7; vLLM none) is one field of
    the engine (`EngineConfig.reserve_output`), stated alike for a corpus point and for the deployment
    plan's what-if and the emulator run, so the batch a KV-bound load holds is the one the validation
    checked, counted in the engine's KV blocks (`sim.memory.accounting.sim_block_tokens`). At 1000/1000 on one H100
    the reserve caps the batch below the sequence limit."""
    from servescope.deploy.deployment import Deployment

    p = corpus_point(
        engine=corpus_engine, engine_version=version, concurrency=512, num_prompts=1024, input_len=1000, output_len=1000
    )
    s = Predictor([p]).settings[p.key]
    dep = Deployment.build(model="Llama-3.1-8B", gpu="h100", gpus=1, engine=engine, max_model_len=s.base.max_model_len)
    assert s.base.reserve_output == dep.engine_config().reserve_output == admission_reserve(s.family) == reserve
    # ...in the same blocks: TensorRT-LLM's tokens_per_block 32, vLLM's 16, SGLang's token pages as 16
    assert s.base.block_size == dep.engine_config().block_size == (32 if engine == "trtllm" else 16)
    if reserve:
        held = s.base.kv_blocks // s.base.reserve_blocks(1000, 1000)
        assert held < 512 <= s.base.max_num_seqs  # the reserve, not the sequence limit, bounds the batch


def _engine_cost(s, k):  # type: ignore[no-untyped-def]
    from servescope.plan.validate import _engine_for

    return _engine_for(s, k).cost


def test_deepseek_classes_by_release() -> None:
    """DeepSeek on SGLang 0.4.1 reads layer.arch.mla-moe-early; SGLang 0.4.3-0.4.x, vLLM 0.8-0.9,
    TensorRT-LLM 0.x and unstated versions mla-moe; SGLang >= 0.5, vLLM >= 0.10 and TensorRT-LLM >= 1.0
    mla-moe-late, which plan's engines (their current releases) read too; GQA and dense models are not
    split by release."""
    from servescope.deploy.deployment import Deployment, load_knob_table

    old = corpus_point(
        model="DeepSeek-V3", gpu="h200", gpus=8, tp=8, engine="sglang", engine_version="0.4.1", quant="fp8"
    )
    mid = dataclasses.replace(old, id="m", engine_version="0.4.5.post1")
    new = dataclasses.replace(old, id="q", engine_version="0.5.7")
    unstated = dataclasses.replace(old, id="u", engine_version="")
    pred = Predictor([old, mid, new, unstated])
    assert pred.settings[old.key].arch == "mla-moe-early"
    assert pred.settings[mid.key].arch == pred.settings[unstated.key].arch == "mla-moe"
    assert pred.settings[new.key].arch == "mla-moe-late"
    assert "layer.arch.mla-moe-early" in pred.settings[old.key].knob_names
    assert "layer.arch.mla-moe-late" in pred.settings[new.key].knob_names
    assert arch_class(True, "mla", "vllm-v1", "0.9.2") == "mla-moe"
    assert arch_class(True, "mla", "vllm-v1", "0.11.0") == "mla-moe-late"
    assert arch_class(True, "mla", "trtllm", "0.21.0rc2") == "mla-moe"
    assert arch_class(True, "mla", "trtllm", "1.3.0rc14") == "mla-moe-late"
    assert arch_class(True, "gqa", "sglang", "0.5.7") == "moe"
    assert arch_class(False, "gqa", "sglang", "0.5.7") == "dense"
    table = {"layer.arch.mla-moe": 2.0, "layer.arch.mla-moe-late": 1.3, "layer.eng.sglang": 1e-5}
    assert resolve_knobs(table, "sglang", "hopper", "mla-moe-late").layer_overhead_s == pytest.approx(1.3e-5)
    del table["layer.arch.mla-moe-late"]  # a table without the class (a user's calibration): mla-moe's factor
    assert resolve_knobs(table, "sglang", "hopper", "mla-moe-late").layer_overhead_s == pytest.approx(2e-5)
    for engine in ("vllm", "sglang", "trtllm"):
        dep = Deployment.build(model="DeepSeek-R1", gpu="h200", gpus=8, engine=engine)
        k = dep.knobs()
        assert k == resolve_knobs(load_knob_table(), dep.family, "hopper", "mla-moe-late"), engine


def test_prompt_steps_of_their_own_where_the_engine_does_not_mix() -> None:
    """vLLM V0 without chunked prefill and TGI run prompts in steps of their own; V0 with it, V1, SGLang
    and TensorRT-LLM mix; the validation and plan's deployment state it alike."""
    from servescope.deploy.deployment import Deployment
    from servescope.sim.defaults import mixes_steps

    assert not mixes_steps("vllm-v0", False) and not mixes_steps("tgi", False) and not mixes_steps("tgi", True)
    assert mixes_steps("vllm-v0", True) and mixes_steps("vllm-v1", True) and mixes_steps("sglang", True)
    assert mixes_steps("trtllm", True)

    def mixed(**kw: object) -> bool:
        p = corpus_point(**kw)
        return Predictor([p]).settings[p.key].base.mixed_steps

    assert mixed() and not mixed(engine_version="0.6.3") and not mixed(engine="tgi", engine_version="2.3.0")
    assert mixed(engine_version="0.6.3", engine_args={"max_model_len": 65536})  # V0 chunks over 32K
    dep = Deployment.build(model="DeepSeek-V3-AWQ", gpu="h100", gpus=8, engine="vllm-0.7", max_model_len=8000)
    assert not dep.limits.chunked_prefill and not dep.engine_config().mixed_steps
    assert Deployment.build(model="Llama-3.1-8B", gpu="h100", gpus=1).engine_config().mixed_steps


def test_stated_max_model_len_sets_vllm_v0_chunked_prefill() -> None:
    """vLLM 0.6 with --max-model-len over 32K switches chunked prefill on with its 512-token budget;
    a point that states --enable-chunked-prefill=False runs whole prompts under a max_model_len budget."""
    p = corpus_point(
        model="Llama-3.1-405B",
        gpu="h100",
        gpus=8,
        tp=8,
        quant="fp8",
        engine_version="0.6.3",
        mode="offline",
        concurrency=None,
        num_prompts=16,
        engine_args={"max_model_len": 91680},
    )
    s = Predictor([p]).settings[p.key]
    assert s.base.chunked_prefill and s.base.max_num_batched_tokens == 512 and s.base.max_model_len == 91680
    q = dataclasses.replace(
        p, id="q", gpu="mi300x", engine_args={"max_model_len": 91680, "chunked_prefill": False, "max_num_seqs": 1024}
    )
    t = Predictor([q]).settings[q.key]
    assert not t.base.chunked_prefill and t.base.max_num_batched_tokens == 91680 and t.base.max_num_seqs == 1024


def test_sglang_request_pool_follows_its_kv_pool() -> None:
    """SGLang's default max running requests is min(max(kv_tokens / context_len x 512, 2048), 4096):
    a validation point and a plan deployment of SGLang both use it."""
    from servescope.deploy.deployment import Deployment
    from servescope.sim.defaults import sglang_max_running

    assert sglang_max_running(100_000, 131_072) == 2048
    assert sglang_max_running(676_303, 163_840) == 2113
    assert sglang_max_running(5_000_000, 131_072) == 4096
    p = corpus_point(
        model="Llama-3.3-70B",
        gpu="h200",
        gpus=4,
        tp=4,
        engine="sglang",
        engine_version="0.4.0",
        mode="offline",
        concurrency=None,
        num_prompts=5000,
        input_len=130,
        output_len=255,
    )
    s = Predictor([p]).settings[p.key]
    dep = Deployment.build(model="Llama-3.3-70B", gpu="h200", gpus=4, engine="sglang")
    assert dep.limits.max_num_seqs == 4096
    assert s.base.max_num_seqs == 4096
    # the batch is bounded further by SGLang's reservation of 0.7 x max_new_tokens per request, on the
    # engine's admission (EngineConfig.reserve_output), for the point and the deployment alike
    assert s.base.reserve_output == dep.engine_config().reserve_output == 0.7
    assert s.base.reserve_blocks(130, 255) == -(-(130 + math.ceil(0.7 * 255)) // 16)


def test_sglang_dp_attention_stays_on_the_stated_gpus() -> None:
    """SGLang `--tp 8 --enable-dp-attention --dp 8` on 8 GPUs: 8 attention ranks of one GPU each inside the
    TP group, the MoE over all 8 (stated as EP 8), never 8 replicas of TP 8 (64 GPUs); PP is refused."""
    p = corpus_point(
        model="DeepSeek-V3",
        gpu="h200",
        gpus=8,
        tp=8,
        dp=8,
        ep=1,
        engine="sglang",
        engine_version="0.4.1",
        quant="fp8",
        concurrency=16,
    )
    wide = dataclasses.replace(p, id="tp8", dp=1)
    piped = dataclasses.replace(p, id="pp", model="Llama-3.1-8B", quant="bf16", gpus=2, tp=1, dp=1, pp=2)
    pred = Predictor([p, wide, piped])
    s, w = pred.settings[p.key], pred.settings[wide.key]
    assert s.replicas == 8 and " tp1 dp8 ep8 " in s.label
    assert s.base.cost.dense_weight_bytes > w.base.cost.dense_weight_bytes  # attention on one GPU per rank, not 1/8
    assert "pipeline parallelism" in pred.unexpressible[piped.key]


def test_a_closed_loop_of_fewer_users_than_dp_ranks_keeps_only_theirs_busy() -> None:
    """SGLang's cookbook ran DeepSeek-V3 with DP attention 8 at --max-concurrency 1: one request in flight,
    so one rank works. It was predicted as 8 ranks of one user each (392 output tok/s against 34
    measured); now as one (`plan.whatif.dp_share`), and 100 users as 7.7 ranks of 13, not 8."""
    kw: dict[str, object] = {
        "model": "DeepSeek-V3",
        "gpu": "h200",
        "gpus": 8,
        "tp": 8,
        "dp": 8,
        "ep": 1,
        "engine": "sglang",
        "engine_version": "0.5.7",
        "quant": "fp8",
        "num_prompts": 64,
    }
    one, eight, hundred = (corpus_point(id=f"c{c}", concurrency=c, **kw) for c in (1, 8, 100))
    pred = Predictor([one, eight, hundred])
    assert [pred.settings[p.key].replicas for p in (one, eight)] == [1.0, 8.0]
    assert pred.settings[hundred.key].replicas == pytest.approx(100 / 13)
    assert [pred.settings[p.key].concurrency for p in (one, eight, hundred)] == [1, 1, 13]
    knobs = load_calibration().knobs
    t1, t8 = (pred.predicted(p.key, knobs)["tok_s"] for p in (one, eight))
    # eight users are one per rank: up to eight times one user's pace, less the steps in which one rank's
    # prompt holds back the others' decodes (the ranks step together, sim.lockstep: 7.5x on 2026-11-28)
    assert 0.85 * 8 * t1 < t8 < 8 * t1


def test_prefix_caching_follows_the_engine_default_unless_the_launch_switched_it_off() -> None:
    """vLLM V1, SGLang and TensorRT-LLM keep prefix caching on by default, vLLM V0 off; a point whose launch
    switched it off says so (`engine_args: {prefix_caching: false}`: R1-Benchmark's --no-enable-prefix-caching
    and --disable-radix-cache). It matters where requests are preempted (sim.engine: a preempted request
    finds its own prompt blocks again)."""
    v1 = corpus_point(id="v1")
    off = corpus_point(id="off", engine_args={"prefix_caching": False})
    v0 = corpus_point(id="v0", engine_version="0.6.3")
    sgl = corpus_point(id="sgl", engine="sglang", engine_version="0.5.6")
    pred = Predictor([v1, off, v0, sgl])
    assert [pred.settings[p.key].base.enable_prefix_caching for p in (v1, off, v0, sgl)] == [True, False, False, True]


def test_an_offline_burst_over_http_runs_with_the_server_defaults() -> None:
    """vLLM >= 0.9 on an H100 batches 16,384 tokens in process (LLM class) but 8,192 behind its OpenAI
    server: an offline burst sent over HTTP (`harness: server`, GPUStack's `vllm bench serve` at
    request rate inf) gets the server's budget, an in-process one the LLM class's."""
    inproc = corpus_point(mode="offline", concurrency=None, num_prompts=100)
    served = corpus_point(
        mode="offline",
        concurrency=None,
        num_prompts=100,
        id="q",
        source=dataclasses.replace(SRC, id="s2", harness="server"),
    )
    pred = Predictor([inproc, served])
    assert pred.settings[inproc.key].base.max_num_batched_tokens == 16384
    assert pred.settings[served.key].base.max_num_batched_tokens == 8192


def test_gpt_oss_settings_hold_vllm_window_pages() -> None:
    """A vLLM gpt-oss point's engine holds 9 blocks of sliding-window pages per running sequence; an
    SGLang one none (its sliding layers have their own pool)."""
    kw = {"model": "openai/gpt-oss-120b", "quant": "mxfp4", "gpu": "h200"}
    v = corpus_point(**kw)
    s = corpus_point(id="s", engine="sglang", engine_version="0.5.3", **kw)
    pred = Predictor([v, s])
    assert pred.settings[v.key].base.seq_overhead_blocks == 9
    assert pred.settings[s.key].base.seq_overhead_blocks == 0


@pytest.mark.parametrize(
    ("model", "quant", "gpu", "gpus"),
    [
        ("gpt-oss-120b", "mxfp4", "h100", 1),  # Marlin-era vLLM: repacked experts, BF16 peak
        ("gpt-oss-120b", "mxfp4", "b200", 1),  # FP4 tensor cores
        ("DeepSeek-R1", "fp4", "b200", 8),  # NVIDIA's NVFP4 checkpoint
    ],
)
def test_fp4_formats_cost_the_same_in_plan_and_validation(model: str, quant: str, gpu: str, gpus: int) -> None:
    """One answer for FP4 weights: a corpus point and the deployment plan runs for it price the weights
    (memory quant nvfp4 / mxfp4), the compute peak and its efficiency (`sim.profile.compute_peak`) alike."""
    from servescope.deploy.deployment import Deployment
    from servescope.sim.steptime import StepShape as Shape

    hf = {"gpt-oss-120b": "openai/gpt-oss-120b"}.get(model, model)
    p = corpus_point(model=hf, quant=quant, gpu=gpu, gpus=gpus, tp=gpus, input_len=1000, output_len=200)
    s = Predictor([p]).settings[p.key]
    dep = Deployment.build(
        model=model, gpu=gpu, gpus=gpus, quant="nvfp4" if quant == "fp4" else quant, max_model_len=s.base.max_model_len
    )
    k = resolve_knobs(dict(DEFAULT_KNOBS), s.family, s.generation, s.arch)
    mine, theirs = dep.engine_config(k).cost, _engine_cost(s, k)
    assert mine.flops_per_s == theirs.flops_per_s
    assert mine.compute_efficiency == pytest.approx(theirs.compute_efficiency)
    assert mine.dense_weight_bytes == theirs.dense_weight_bytes
    assert mine.routed_expert_bytes == pytest.approx(theirs.routed_expert_bytes)
    want_peak = get_gpu(gpu).fp4_flops or get_gpu(gpu).bf16_flops
    assert mine.flops_per_s == want_peak
    shape = Shape(prefill_seqs=2, prefill_tokens=4000, prefill_ctx_pairs=4000 * 1000)
    assert step_time_s(mine, shape) == pytest.approx(step_time_s(theirs, shape), rel=1e-6)


def test_a_stated_max_model_len_is_the_engines_even_below_the_default() -> None:
    """A source's `--max-model-len` (engine_args) is what the engine ran with, 4,096 included (the Qwen2.5
    speed benchmark, inference-bench); unstated, the validation assumes at least 8,192; either way never
    less than the point's own prompt + output."""
    stated = corpus_point(id="a", engine_args={"max_model_len": 4096})
    unstated = corpus_point(id="b")
    too_short = corpus_point(id="c", input_len=6000, output_len=2048, engine_args={"max_model_len": 4096})
    pred = Predictor([stated, unstated, too_short])
    assert pred.settings[stated.key].base.max_model_len == 4096
    assert pred.settings[unstated.key].base.max_model_len == 8192
    assert pred.settings[too_short.key].base.max_model_len >= 6000 + 2048


def test_speculative_decoding_other_than_mtp_is_refused_not_run_plain() -> None:
    """MTP points (`speculative: mtp-N`) are modelled (draft tokens, fitted acceptance); a draft model
    (EAGLE3, GPUStack's and the SGLang attention-backend doc's runs) is not, and run as plain decoding it
    would be off by its speedup: such a point says why it is not expressible."""
    mtp = corpus_point(id="m", speculative="mtp-3")
    eagle = corpus_point(id="e", speculative="eagle3 draft=x steps=3 topk=1 draft_tokens=4")
    pred = Predictor([mtp, eagle])
    assert mtp.key in pred.settings and pred.settings[mtp.key].draft_tokens == 3
    assert eagle.key not in pred.settings
    assert "other than MTP" in pred.unexpressible[eagle.key] and "eagle3" in pred.unexpressible[eagle.key]


def test_a_stated_cuda_graph_limit_prices_larger_batches_eager() -> None:
    """SGLang's `--cuda-graph-max-bs N` (engine_args cuda_graph_max_bs): decode batches above N run eager
    and pay a prompt step's per-layer launch cost (`StepCost.graph_max_seqs`). A stated limit replaces the
    engine's default (the SGLang attention-backend doc's NextN runs at 16 req/s were launched with graphs
    up to batch 2 and measured a third of the same runs without speculation); a point without one keeps
    the default (vLLM V1: 512, its largest capture)."""
    inside = corpus_point(id="a", concurrency=2, engine_args={"cuda_graph_max_bs": 2})
    beyond = corpus_point(id="b", concurrency=16, engine_args={"cuda_graph_max_bs": 2})
    graphed = corpus_point(id="g", concurrency=16)
    rate = corpus_point(id="c", mode="rate", concurrency=None, request_rate=16.0, engine_args={"cuda_graph_max_bs": 2})
    pred = Predictor([inside, beyond, graphed, rate])
    assert not pred.unexpressible
    assert [pred.settings[p.key].base.cost.graph_max_seqs for p in (inside, beyond, graphed, rate)] == [2, 2, 512, 2]
    knobs = load_calibration().knobs
    eager, fast = (pred.predicted(p.key, knobs)["itl"] for p in (beyond, graphed))
    assert eager > fast * 1.05  # 16 sequences a step, every step eager


def test_sglang_dp_attention_points_run_each_rank_with_its_share_of_the_prompt_chunk() -> None:
    """GPUStack's DeepSeek-R1 on SGLang 0.5.3 with `--tp 8 --dp 8 --enable-dp-attention` runs each rank
    with 8,192 // 8 prompt tokens a step; DataCrunch's DeepSeek-V3 on SGLang 0.4.1 (the first DP
    attention, which halved the chunk) with 4,096; the same source's TP8 run keeps the whole budget."""
    points = {p.key: p for p in load_corpus()}
    gs = "gpustack-performance-lab-2025/"
    dp8 = points[gs + "dsr1-h200-sglang-sother-fp8-tp8-dp8-random-4k-input"]
    assert setting_for(dp8).base.max_prefill_tokens == 1024
    assert setting_for(points[gs + "dsr1-h200-sglang-s1-fp8-tp8-sglang"]).base.max_prefill_tokens == 0
    dc = points["datacrunch-deepseek-v3-h200-sglang-2025-01/dsv3-8xh200-fp8-dpattn-rate4"]
    assert setting_for(dc).base.max_prefill_tokens == 4096


def test_sglang_speculative_points_run_48_requests_a_dp_rank_its_share() -> None:
    """SGLang under EAGLE / NextN speculative decoding runs 48 requests unless --max-running-requests says
    otherwise, each DP-attention rank 48 // dp (sim.defaults.sglang_speculative_max_running): GPUStack's
    DeepSeek-R1 MTP run on 8 DP ranks runs 6 a rank; its run without MTP sizes the pool from the KV cache; a
    closed loop of more users than that keeps its concurrency (the validation's closed-loop floor)."""
    points = {p.key: p for p in load_corpus()}
    gs = "gpustack-performance-lab-2025/"
    assert setting_for(points[gs + "dsr1-h200-sglang-s4-fp8-tp8-dp8-compile"]).base.max_num_seqs == 6
    assert setting_for(points[gs + "dsr1-h200-sglang-s3-fp8-tp8-dp8-compile"]).base.max_num_seqs > 48
    spec = points["sglang-attention-backend-h200-2025/dsv3-h200-tp8-fa3-in1024-out1024-spec"]
    assert setting_for(spec).base.max_num_seqs == 48
    many = dataclasses.replace(
        points[gs + "dsr1-h200-sglang-s4-fp8-tp8-dp8-compile"], mode="closed", concurrency=256, num_prompts=1024
    )
    assert setting_for(many).base.max_num_seqs == 32


@pytest.mark.parametrize(
    ("engine", "corpus_engine", "version", "chunked", "max_len", "budget"),
    [
        ("trtllm", "trtllm", "1.3", False, 4096, 8192),  # TensorRT-LLM keeps max_num_tokens 8192
        ("trtllm", "trtllm", "1.3", False, 16384, 16384),  # ...raised to a whole prompt
        ("vllm-0.7", "vllm", "0.7.3", True, 4096, 2048),  # V0's own budget when switched on
        ("vllm-0.7", "vllm", "0.7.3", False, 4096, 4096),  # V0's default below 32K: off, max(len, 2048)
    ],
)
def test_validation_and_deployment_state_one_batch_budget(
    engine: str, corpus_engine: str, version: str, chunked: bool, max_len: int, budget: int
) -> None:
    """One answer: with chunked prefill switched by a flag, a corpus point that states it and the
    deployment plan runs resolve the same batch budget (`sim.defaults.batch_budget`)."""
    from servescope.deploy.deployment import Deployment
    from servescope.sim.defaults import batch_budget, engine_defaults

    p = corpus_point(
        engine=corpus_engine,
        engine_version=version,
        concurrency=4,
        num_prompts=16,
        input_len=1000,
        output_len=200,
        engine_args={"chunked_prefill": chunked, "max_model_len": max_len},
    )
    s = Predictor([p]).settings[p.key]
    dep = Deployment.build(
        model="Llama-3.1-8B", gpu="h100", gpus=1, engine=engine, chunked_prefill=chunked, max_model_len=max_len
    )
    d = engine_defaults(s.family, max_model_len=max_len, version=version, gpu="h100", gpu_memory_gib=80)
    assert batch_budget(d, s.family, version, chunked=chunked, max_model_len=max_len) == budget
    assert s.base.chunked_prefill == dep.limits.chunked_prefill == chunked
    assert s.base.max_num_batched_tokens == dep.limits.max_num_batched_tokens == budget
