"""Step time: roofline regimes, MoE experts touched, overheads."""

from __future__ import annotations

import dataclasses
import random

import pytest

from servescope.deploy.loader import load_profile
from servescope.sim.catalog.gpus import get_gpu
from servescope.sim.catalog.models import get_model
from servescope.sim.defaults import UNBOUNDED, mla_absorbed_prefix
from servescope.sim.knobs import DEFAULT_KNOBS, resolve_knobs
from servescope.sim.placement import Layout
from servescope.sim.profile import step_cost
from servescope.sim.steptime import StepCost, StepShape, decode_terms, distinct_experts, step_time_s

DENSE = StepCost(
    dense_weight_bytes=16e9,
    kv_bytes_per_token=131072,
    flops_per_token=16e9,
    hbm_bytes_per_s=3.35e12,
    flops_per_s=989.5e12,
    mem_efficiency=1.0,
    compute_efficiency=1.0,
)


def test_empty_step_is_free() -> None:
    assert step_time_s(DENSE, StepShape()) == 0.0


def test_small_decode_is_memory_bound() -> None:
    t = step_time_s(DENSE, StepShape(decode_seqs=1, decode_ctx_tokens=1000))
    assert t == pytest.approx((16e9 + 131072 * 1000) / 3.35e12)


def test_large_prefill_is_compute_bound() -> None:
    t = step_time_s(DENSE, StepShape(prefill_seqs=1, prefill_tokens=8192))
    assert t == pytest.approx(16e9 * 8192 / 989.5e12)
    assert t > (16e9 / 3.35e12)


def test_kv_reads_grow_decode_time() -> None:
    short = step_time_s(DENSE, StepShape(decode_seqs=64, decode_ctx_tokens=64 * 100))
    long = step_time_s(DENSE, StepShape(decode_seqs=64, decode_ctx_tokens=64 * 8000))
    assert long > short * 1.5


def test_distinct_experts_grows_and_saturates() -> None:
    moe = StepCost(
        dense_weight_bytes=1e9,
        kv_bytes_per_token=0,
        flops_per_token=1e9,
        hbm_bytes_per_s=1e12,
        flops_per_s=1e15,
        routed_expert_bytes=1e8,
        n_experts=256,
        experts_per_token=8,
    )
    assert distinct_experts(moe, 1) == pytest.approx(8.0)
    assert distinct_experts(moe, 15) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 15))
    assert 240 < distinct_experts(moe, 100) < 256
    assert distinct_experts(moe, 10_000) == pytest.approx(256)
    assert distinct_experts(DENSE, 100) == 0.0
    t1 = step_time_s(moe, StepShape(decode_seqs=1))
    t100 = step_time_s(moe, StepShape(decode_seqs=100))
    assert t100 > 5 * t1  # more experts hit -> more bytes


def test_overheads_add() -> None:
    c = StepCost(
        dense_weight_bytes=0,
        kv_bytes_per_token=0,
        flops_per_token=0,
        hbm_bytes_per_s=1,
        flops_per_s=1,
        layers=10,
        step_overhead_s=0.001,
        layer_overhead_s=0.0001,
        seq_overhead_s=1e-5,
        token_overhead_s=1e-6,
    )
    t = step_time_s(c, StepShape(decode_seqs=4, prefill_seqs=1, prefill_tokens=100))
    assert t == pytest.approx(0.001 + 10 * 0.0001 + 5 * 1e-5 + 104 * 1e-6)


def test_small_batch_moe_decode_carries_fixed_overhead() -> None:
    """With the knobs fitted to the corpus (deploy/calibration.yaml), a one-stream DeepSeek decode step
    is not weight bandwidth alone: the per-step, per-layer and per-sequence overheads are most of it
    (0.80 at the 246-point fit, 0.36 at the 177-point one; the seed-fitted profile of before said 0.6,
    but the seeds are test-only). A roofline alone would be several times fast here."""
    cost = load_profile("deepseek-v3-awq").engine.cost
    t1 = step_time_s(cost, StepShape(decode_seqs=1, decode_ctx_tokens=1024))
    fixed = cost.step_overhead_s + cost.layers * cost.layer_overhead_s + cost.seq_overhead_s
    assert fixed / t1 > 0.25
    experts = step_time_s(cost, StepShape(decode_seqs=15, decode_ctx_tokens=15 * 1024))
    assert experts > 1.2 * t1  # 15 streams hit ~97 experts per layer instead of 8 (1.27x at this fit)


def test_pd_decode_worker_does_not_pay_for_the_prompt() -> None:
    """prefill_work = 0 (a PD decode worker: the KV arrived computed) drops the prompt's FLOPs and KV
    reads but keeps the per-sequence overhead of admitting it."""
    import dataclasses

    dec = dataclasses.replace(DENSE, prefill_work=0.0, seq_overhead_s=1e-4)
    decode_only = StepShape(decode_seqs=32, decode_ctx_tokens=32 * 1000)
    with_prompt = StepShape(
        decode_seqs=32,
        decode_ctx_tokens=32 * 1000,
        prefill_seqs=1,
        prefill_tokens=4096,
        prefill_ctx_pairs=4096 * 2048.0,
        prefill_ctx_reads=0,
    )
    assert step_time_s(dec, with_prompt) == pytest.approx(step_time_s(dec, decode_only) + 1e-4)
    colocated = dataclasses.replace(DENSE, seq_overhead_s=1e-4)
    assert step_time_s(colocated, with_prompt) > 5 * step_time_s(colocated, decode_only)


def test_prompt_tokens_cross_the_link_at_their_own_share() -> None:
    """With comm_prefill_bytes_per_s set, a step's decode tokens move at comm_bytes_per_s and its
    prompt tokens at the prefill share; unset, both at comm_bytes_per_s (the form before)."""
    import dataclasses

    base = dataclasses.replace(DENSE, comm_bytes_per_token=1e6, comm_bytes_per_s=1e11)
    split = dataclasses.replace(base, comm_prefill_bytes_per_s=4e11)
    shape = StepShape(decode_seqs=10, decode_ctx_tokens=10_000, prefill_seqs=1, prefill_tokens=1000)
    no_comm = step_time_s(DENSE, shape)
    assert step_time_s(base, shape) - no_comm == pytest.approx(1010 * 1e6 / 1e11)
    assert step_time_s(split, shape) - no_comm == pytest.approx(10 * 1e6 / 1e11 + 1000 * 1e6 / 4e11)


def test_a_prompt_step_pays_its_layers_launch_cost_once() -> None:
    """prefill_layer_overhead_s x layers is paid by a step that computes prompt tokens, once however
    many prompts or tokens it holds; not by a decode-only step, nor by a PD decode worker (which
    computes none of the prompt)."""
    import dataclasses

    base = dataclasses.replace(DENSE, layers=32)
    c = dataclasses.replace(base, prefill_layer_overhead_s=5e-4)
    decode = StepShape(decode_seqs=8, decode_ctx_tokens=8000)
    one = StepShape(decode_seqs=8, decode_ctx_tokens=8000, prefill_seqs=1, prefill_tokens=64)
    many = StepShape(decode_seqs=8, decode_ctx_tokens=8000, prefill_seqs=4, prefill_tokens=4096)
    assert step_time_s(c, decode) == pytest.approx(step_time_s(base, decode))
    for shape in (one, many):
        assert step_time_s(c, shape) == pytest.approx(step_time_s(base, shape) + 32 * 5e-4)
    dec = dataclasses.replace(c, prefill_work=0.0)
    assert step_time_s(dec, many) == pytest.approx(step_time_s(dataclasses.replace(base, prefill_work=0.0), many))


def test_collectives_that_span_nodes_pay_the_internode_latency() -> None:
    """TP16 over two nodes of 8: every TP all-reduce crosses the network and pays
    `internode_collective_s` (comm.latency_s.internode, prior 22 us) instead of the intra-node
    latency; TP8 in one node has none such, and 0 falls back to the intra-node latency."""
    import dataclasses

    from servescope.sim.catalog.gpus import get_gpu
    from servescope.sim.catalog.models import get_model
    from servescope.sim.knobs import DEFAULT_KNOBS, resolve_knobs
    from servescope.sim.placement import Layout
    from servescope.sim.profile import internode_collectives, step_cost

    r1 = get_model("DeepSeek-R1")
    two = Layout(gpu=get_gpu("h100"), gpus_per_node=8, nodes=2, tp=16, quant="fp8")
    one = Layout(gpu=get_gpu("h200"), gpus_per_node=8, nodes=1, tp=8, quant="fp8")
    assert internode_collectives(r1, two) == 2 * r1.layers
    assert internode_collectives(r1, one) == 0
    knobs = resolve_knobs(DEFAULT_KNOBS, "sglang", "hopper", "mla-moe")
    assert knobs.internode_collective_s == pytest.approx(22e-6)
    cost = step_cost(r1, two, knobs, engine="sglang")
    assert cost.collectives == cost.internode_collectives == 2 * r1.layers
    decode = StepShape(decode_seqs=1, decode_ctx_tokens=200)
    slower = dataclasses.replace(cost, internode_collective_s=cost.internode_collective_s + 50e-6)
    assert step_time_s(slower, decode) - step_time_s(cost, decode) == pytest.approx(2 * r1.layers * 50e-6)
    unset = dataclasses.replace(cost, internode_collective_s=0.0)
    same = dataclasses.replace(cost, internode_collective_s=cost.collective_s)
    assert step_time_s(unset, decode) == pytest.approx(step_time_s(same, decode))
    assert step_cost(r1, one, knobs, engine="sglang").internode_collectives == 0


def test_a_rack_scale_nvlink_fabric_keeps_tp_across_its_trays_off_the_network() -> None:
    """GB200 NVL72 joins 72 GPUs on trays (hosts) of four with one NVLink fabric: TP8 over two trays
    prices its all-reduces as TP8 inside one HGX node does (NVLink bandwidth, intra-node latency),
    where two 4-GPU B200 nodes send them over the network. Past the 72 GPUs it is the network again."""
    from servescope.sim.catalog.gpus import get_gpu
    from servescope.sim.catalog.models import get_model
    from servescope.sim.knobs import DEFAULT_KNOBS, resolve_knobs
    from servescope.sim.placement import Layout
    from servescope.sim.profile import comm_terms, internode_collectives, nvlink_domain, step_cost

    r1 = get_model("DeepSeek-R1")
    gb, b = get_gpu("gb200"), get_gpu("b200")
    trays = Layout(gpu=gb, gpus_per_node=4, nodes=2, tp=8, quant="nvfp4")
    board = Layout(gpu=gb, gpus_per_node=8, nodes=1, tp=8, quant="nvfp4")
    hosts = Layout(gpu=b, gpus_per_node=4, nodes=2, tp=8, quant="nvfp4")
    assert (nvlink_domain(trays), nvlink_domain(hosts)) == (72, 4)
    assert comm_terms(r1, trays) == comm_terms(r1, board)
    assert internode_collectives(r1, trays) == 0 and internode_collectives(r1, hosts) == 2 * r1.layers
    assert comm_terms(r1, hosts)[0] > comm_terms(r1, trays)[0]  # the NIC's share, priced at NVLink time
    knobs = resolve_knobs(DEFAULT_KNOBS, "sglang", "blackwell", "mla-moe")
    assert step_cost(r1, trays, knobs, engine="sglang") == step_cost(r1, board, knobs, engine="sglang")
    racks = Layout(gpu=gb, gpus_per_node=4, nodes=36, tp=144, quant="nvfp4")
    assert internode_collectives(r1, racks) == 2 * r1.layers


def _random_cost(rng: random.Random) -> StepCost:
    moe = rng.random() < 0.5
    comm = rng.random() < 0.6
    return StepCost(
        dense_weight_bytes=rng.uniform(1e8, 8e10),
        kv_bytes_per_token=rng.choice([0.0, rng.uniform(1e3, 4e5)]),
        flops_per_token=rng.uniform(1e9, 1e11),
        hbm_bytes_per_s=rng.uniform(1e12, 8e12),
        flops_per_s=rng.uniform(1e14, 5e15),
        attn_flops_per_token_ctx=rng.uniform(0, 3e6),
        attn_flops_per_s=rng.choice([0.0, rng.uniform(1e14, 5e15)]),
        prefill_attn_flops_per_pair=rng.choice([0.0, rng.uniform(0, 3e6)]),
        routed_expert_bytes=rng.uniform(1e6, 4e8) if moe else 0.0,
        n_experts=rng.choice([8, 128, 256]) if moe else 0,
        experts_per_token=rng.choice([2, 4, 8]) if moe else 0,
        layers=rng.randint(1, 126),
        mem_efficiency=rng.uniform(0.05, 0.95),
        compute_efficiency=rng.uniform(0.02, 0.95),
        step_overhead_s=rng.uniform(0, 5e-3),
        layer_overhead_s=rng.uniform(0, 1e-4),
        seq_overhead_s=rng.uniform(0, 1e-4),
        token_overhead_s=rng.uniform(0, 1e-6),
        prefill_layer_overhead_s=rng.uniform(0, 1e-3),
        comm_bytes_per_token=rng.uniform(1e4, 5e6) if comm else 0.0,
        comm_bytes_per_s=rng.uniform(1e10, 9e11) if comm else 0.0,
        comm_prefill_bytes_per_s=rng.choice([0.0, rng.uniform(1e10, 9e11)]),
        collectives=rng.randint(0, 250),
        collective_s=rng.uniform(0, 2e-5),
        internode_collectives=rng.choice([0, 10]),
        internode_collective_s=rng.choice([0.0, 1e-4]),
        moe_token_multiplier=rng.choice([1.0, 8.0]),
        decode_tokens_per_seq=rng.choice([1.0, 2.4]),
        prefill_work=rng.choice([1.0, 0.0]),
        graph_max_seqs=rng.choice([0, 160, 512]),
    )


def test_decode_terms_price_a_decode_step_exactly_as_step_time() -> None:
    """`Engine.decode_run` prices its steps from `DecodeTerms`: the same float, not an approximation, so
    the fast path and the step-by-step path of the simulation agree to the last bit."""
    rng = random.Random(7)
    for _ in range(400):
        cost = _random_cost(rng)
        n = rng.randint(1, 2048)
        terms = decode_terms(cost, n)
        for ctx in (n, n * rng.randint(1, 40_000), rng.randint(n, 10**9)):
            assert terms.time_s(ctx) == step_time_s(cost, StepShape(decode_seqs=n, decode_ctx_tokens=ctx))


def test_a_decode_batch_beyond_the_captured_graphs_pays_the_eager_launch_cost() -> None:
    """SGLang before 0.5.3 replays CUDA graphs for decode batches of up to 160 sequences: the 161st runs
    the step eager, at the per-layer launch cost a prompt step pays; 0 means every batch is captured."""
    cost = StepCost(
        dense_weight_bytes=1e10,
        kv_bytes_per_token=1e5,
        flops_per_token=1e10,
        hbm_bytes_per_s=4e12,
        flops_per_s=1e15,
        layers=61,
        layer_overhead_s=2e-5,
        prefill_layer_overhead_s=1.8e-3,
        graph_max_seqs=160,
    )
    uncapped = dataclasses.replace(cost, graph_max_seqs=0)
    for n in (1, 160):
        shape = StepShape(decode_seqs=n, decode_ctx_tokens=1000 * n)
        assert step_time_s(cost, shape) == step_time_s(uncapped, shape)
    shape = StepShape(decode_seqs=161, decode_ctx_tokens=161_000)
    assert step_time_s(cost, shape) - step_time_s(uncapped, shape) == pytest.approx(61 * 1.8e-3, rel=1e-9)
    # a step with prompt tokens pays it once, whatever its decode batch
    mixed = StepShape(
        decode_seqs=161, decode_ctx_tokens=161_000, prefill_seqs=1, prefill_tokens=512, prefill_ctx_pairs=512 * 256
    )
    assert step_time_s(cost, mixed) == step_time_s(uncapped, mixed)


def test_graph_limits_by_engine_and_release() -> None:
    from servescope.sim.defaults import graph_max_seqs

    assert graph_max_seqs("sglang", version="0.4.5", gpu_memory_gib=140.4, tp=8) == 160
    assert graph_max_seqs("sglang", version="0.5.2", gpu_memory_gib=79.6, tp=1) == 160
    assert graph_max_seqs("sglang", version="0.5.3", gpu_memory_gib=79.6, tp=1) == 256
    assert graph_max_seqs("sglang", version="0.5.6.post1", gpu_memory_gib=178.4, tp=8) == 512
    assert graph_max_seqs("sglang", version="0.5.7", gpu_memory_gib=140.4, tp=8) == 512
    assert graph_max_seqs("sglang", gpu_memory_gib=79.6, tp=2) == 256  # no version: the current tiers
    assert graph_max_seqs("vllm-v1", version="0.8.4") == 512
    assert graph_max_seqs("vllm-v0", version="0.6.3") == 0 and graph_max_seqs("trtllm") == 0


def test_attention_runs_at_the_kv_dtype_and_mla_prompts_in_their_mha_form() -> None:
    """Attention is priced apart from the linear layers: at the KV cache dtype's tensor-core peak (BF16
    unless the KV cache is FP8 on an FP8-capable GPU), not the weight format's; and DeepSeek's MLA
    computes a prompt in its multi-head form (QK over 128 + 64 dims, PV over 128: 640 FLOPs per head per
    pair) where decode runs the absorbed form (QK over 512 + 64, PV over 512: 2,176)."""
    from servescope.deploy.deployment import Deployment
    from servescope.sim.catalog.gpus import get_gpu
    from servescope.sim.catalog.models import get_model
    from servescope.sim.knobs import DEFAULT_KNOBS, resolve_knobs
    from servescope.sim.placement import Layout
    from servescope.sim.profile import step_cost

    h200 = get_gpu("h200")
    k = resolve_knobs(dict(DEFAULT_KNOBS), "vllm-v1", "hopper", "mla-moe")
    r1 = get_model("DeepSeek-R1")
    bf16_kv = step_cost(r1, Layout(gpu=h200, tp=8, quant="fp8"), k)
    fp8_kv = step_cost(r1, Layout(gpu=h200, tp=8, quant="fp8", kv_dtype="fp8"), k)
    assert bf16_kv.flops_per_s == fp8_kv.flops_per_s == h200.fp8_flops
    assert bf16_kv.attn_flops_per_s == h200.bf16_flops and fp8_kv.attn_flops_per_s == h200.fp8_flops
    per_pair = r1.heads * r1.layers / 8
    assert bf16_kv.attn_flops_per_token_ctx == 2176 * per_pair
    assert bf16_kv.prefill_attn_flops_per_pair == 640 * per_pair
    # a long prompt's compute: linear FLOPs at the FP8 peak plus its pairs' FLOPs at the BF16 peak
    n = 32768
    shape = StepShape(prefill_seqs=1, prefill_tokens=n, prefill_ctx_pairs=n * n / 2)
    free = dataclasses.replace(
        bf16_kv,
        step_overhead_s=0.0,
        layer_overhead_s=0.0,
        seq_overhead_s=0.0,
        prefill_layer_overhead_s=0.0,
        comm_bytes_per_s=0.0,
        collectives=0,
    )
    linear, attn = free.flops_per_token * n / h200.fp8_flops, 640 * per_pair * n * n / 2 / h200.bf16_flops
    want = (linear + attn) / k.compute_efficiency
    assert step_time_s(free, shape) == pytest.approx(want, rel=1e-12)
    # a GQA model's prompt pairs cost what its decode pairs do; an FP8 Llama attends at the BF16 peak
    llama = Deployment.build(model="Llama-3.1-70B", gpu="h100", gpus=4, quant="fp8").engine_config(k).cost
    assert llama.prefill_attn_flops_per_pair == llama.attn_flops_per_token_ctx
    assert llama.attn_flops_per_s == get_gpu("h100").bf16_flops < llama.flops_per_s


def test_an_mla_prompt_step_with_a_prefix_in_the_absorbed_range_pays_the_absorbed_pair_cost() -> None:
    """SGLang runs a prompt batch's MLA attention absorbed (2,176 FLOPs a pair per head against the MHA
    form's 640) where its summed cached prefix is in [lo, hi) (sim.defaults.mla_absorbed_prefix)."""
    model = get_model("DeepSeek-R1")
    layout = Layout(gpu=get_gpu("h200"), tp=8, quant="fp8")
    base = step_cost(model, layout, resolve_knobs(DEFAULT_KNOBS, "sglang", "hopper", "mla-moe"), engine="sglang")
    assert base.attn_flops_per_token_ctx / base.prefill_attn_flops_per_pair == pytest.approx(2176 / 640)
    # an 8,192-token prompt chunk (compute-bound) with 4,096 tokens already cached, with 8,192, and the first chunk
    n = 8192
    mid = StepShape(prefill_seqs=1, prefill_tokens=n, prefill_ctx_pairs=n * (4096 + n / 2), prefill_ctx_reads=4096)
    far = StepShape(prefill_seqs=1, prefill_tokens=n, prefill_ctx_pairs=n * (8192 + n / 2), prefill_ctx_reads=8192)
    first = StepShape(prefill_seqs=1, prefill_tokens=n, prefill_ctx_pairs=n * n / 2, prefill_ctx_reads=0)
    current = dataclasses.replace(base, absorbed_prefix=mla_absorbed_prefix("sglang", version="0.5.3"))
    old = dataclasses.replace(base, absorbed_prefix=mla_absorbed_prefix("sglang", version="0.4.5"))
    post1 = dataclasses.replace(base, absorbed_prefix=mla_absorbed_prefix("sglang", version="0.4.5.post1"))
    assert old.absorbed_prefix == (1, UNBOUNDED) and post1.absorbed_prefix == (0, 8192)
    assert current.absorbed_prefix == (1, 8192)

    def attn_s(cost: StepCost, shape: StepShape) -> float:  # attention's share: less the same step at 0 pairs
        return step_time_s(cost, shape) - step_time_s(cost, dataclasses.replace(shape, prefill_ctx_pairs=0.0))

    mha = attn_s(base, mid)
    assert mha > 0
    assert attn_s(current, mid) == pytest.approx(mha * 2176 / 640)  # 0 < 4,096 < 8,192: absorbed
    assert attn_s(current, far) == pytest.approx(attn_s(base, far))  # from the threshold: the MHA form again
    assert attn_s(current, first) == pytest.approx(attn_s(base, first))  # no prefix: MHA
    assert attn_s(old, far) == pytest.approx(attn_s(base, far) * 2176 / 640)  # 0.4.5: any prefix, absorbed
    assert attn_s(post1, first) == pytest.approx(attn_s(base, first) * 2176 / 640)  # post1's FA3: absorbed below 8,192
    # a decode-only step is untouched, and other engines and GQA models never absorb
    dec = StepShape(decode_seqs=64, decode_ctx_tokens=64 * 4096)
    assert step_time_s(old, dec) == step_time_s(base, dec)
    assert mla_absorbed_prefix("vllm-v1", version="0.8.4") is None
    assert mla_absorbed_prefix("sglang", version="0.5.3", attention="gqa") is None
    assert mla_absorbed_prefix("sglang", version="0.5.3", generation="ampere") == (1, UNBOUNDED)  # Triton's rule


def test_sglang_default_chunked_prefill_size_follows_release_and_gpu_memory() -> None:
    """SGLang's ServerArgs: 8192 on an H100/H200/A100-80 in every release, 16384 on a B200 or MI300X from
    0.4.7 (0.4.7 by > 180,000 MiB, later by >= 160 GiB), 4096 on an A100-40 from 0.5.3; and the validation,
    plan and the emulator take it from `engine_defaults`."""
    from servescope.sim.defaults import engine_defaults, sglang_chunked_prefill_size

    def gib(name: str) -> float:
        return get_gpu(name).memory_bytes / 2**30

    assert sglang_chunked_prefill_size("0.4.5", gib("h200")) == 8192
    assert sglang_chunked_prefill_size("0.4.6", gib("b200")) == 8192
    assert sglang_chunked_prefill_size("0.4.7", gib("b200")) == 16384
    assert sglang_chunked_prefill_size("0.5.6", gib("mi300x")) == 16384
    assert sglang_chunked_prefill_size("", gib("b200")) == 16384
    assert sglang_chunked_prefill_size("", gib("h100")) == 8192
    assert sglang_chunked_prefill_size("0.5.3", 40.0) == 4096 and sglang_chunked_prefill_size("0.5.2", 40.0) == 8192
    assert sglang_chunked_prefill_size("0.4.1", 20.0) == 2048 and sglang_chunked_prefill_size("0.5.0", 24.0) == 2048
    d = engine_defaults("sglang", max_model_len=8192, version="0.5.6", gpu="b200", gpu_memory_gib=gib("b200"))
    assert d.max_num_batched_tokens == 16384


def test_prefill_seq_overhead_is_paid_per_prompt_chunk() -> None:
    """`prefill_seq_overhead_s`: each prompt chunk in a step pays it; a decode-only step does not."""
    cost = StepCost(
        dense_weight_bytes=0.0,
        kv_bytes_per_token=0.0,
        flops_per_token=0.0,
        hbm_bytes_per_s=1.0,
        flops_per_s=1.0,
        step_overhead_s=0.001,
        prefill_seq_overhead_s=0.01,
    )
    two = StepShape(decode_seqs=3, prefill_seqs=2, prefill_tokens=64)
    assert step_time_s(cost, two) == pytest.approx(0.001 + 2 * 0.01)
    assert step_time_s(cost, StepShape(decode_seqs=3)) == pytest.approx(0.001)
    assert decode_terms(cost, 3).time_s(0) == step_time_s(cost, StepShape(decode_seqs=3))
