"""The engine (sim/engine.py, sim/batch.py): batching, queueing, KV limits, prefix caching, preemption,
the reserve, block accounting and decode_run."""

from __future__ import annotations

import dataclasses
import random
import statistics
from itertools import pairwise

import pytest

from servescope.sim.config import EngineConfig
from servescope.sim.engine import Engine
from servescope.sim.request import SimRequest
from servescope.sim.simulate import SimRun, simulate
from servescope.sim.steptime import StepCost, StepShape, step_time_s

# A small dense model: 3 ms fixed + 50 us per sequence + a roofline that matters for prefill.
COST = StepCost(
    dense_weight_bytes=2e9,
    kv_bytes_per_token=2e5,
    flops_per_token=4e9,
    hbm_bytes_per_s=3e12,
    flops_per_s=1e15,
    attn_flops_per_token_ctx=1e5,
    step_overhead_s=0.003,
    seq_overhead_s=5e-5,
)


def config(**kw: object) -> EngineConfig:
    base: dict[str, object] = {
        "cost": COST,
        "kv_blocks": 100_000,
        "block_size": 16,
        "max_num_seqs": 16,
        "max_num_batched_tokens": 2048,
        "max_model_len": 8192,
    }
    base.update(kw)
    return EngineConfig(**base)  # type: ignore[arg-type]


def closed(cfg: EngineConfig, c: int, n: int = 0, prompt: int = 256, out: int = 64) -> tuple[SimRun, list[SimRequest]]:
    reqs = [SimRequest(i, prompt, out) for i in range(n or 4 * c)]
    return simulate(cfg, reqs, concurrency=c), reqs


def out_tps(run: SimRun, reqs: list[SimRequest]) -> float:
    return sum(r.max_tokens for r in reqs) / run.duration_s


def median_ttft(run: SimRun, reqs: list[SimRequest]) -> float:
    return statistics.median(run.first_token_s(r) - r.arrival_s for r in reqs)


def itls(run: SimRun, reqs: list[SimRequest]) -> list[float]:
    out: list[float] = []
    for r in reqs:
        t = run.token_times_s(r)
        out += [b - a for a, b in pairwise(t)]
    return out


def check_complete(run: SimRun, reqs: list[SimRequest]) -> None:
    for r in reqs:
        t = run.token_times_s(r)
        assert len(t) == r.max_tokens, (r.id, len(t), r.max_tokens)
        assert t == sorted(t)
        assert t[0] == run.first_token_s(r) and t[-1] == run.end_s(r)
        assert run.first_token_s(r) > r.arrival_s


def test_throughput_rises_then_plateaus_at_max_num_seqs() -> None:
    cfg = config(max_num_seqs=16)
    tps = {c: out_tps(*closed(cfg, c, n=96)) for c in (1, 4, 16, 32, 64)}
    assert tps[1] < tps[4] < tps[16]
    assert tps[4] > 2.5 * tps[1]
    # past max_num_seqs the batch cannot grow: flat within 5%
    assert abs(tps[32] - tps[16]) / tps[16] < 0.05
    assert abs(tps[64] - tps[16]) / tps[16] < 0.05


def test_throughput_plateaus_when_kv_is_full() -> None:
    # 320 tokens per request (256 + 64); 40 blocks x 16 = 640 tokens: at most 2 sequences fit.
    cfg = config(max_num_seqs=64, kv_blocks=40)
    t2, t8, t32 = (out_tps(*closed(cfg, c, n=64)) for c in (2, 8, 32))
    assert abs(t8 - t2) / t2 < 0.15 and abs(t32 - t2) / t2 < 0.15
    roomy = out_tps(*closed(config(max_num_seqs=64), 8, n=64))
    assert roomy > 2 * t8


def test_ttft_grows_with_queueing_past_max_num_seqs() -> None:
    cfg = config(max_num_seqs=8)
    at8 = median_ttft(*closed(cfg, 8, n=64))
    at32 = median_ttft(*closed(cfg, 32, n=128))
    assert at32 > 3 * at8


def test_shared_prefix_lowers_ttft_once_cached() -> None:
    rng = random.Random(1)
    system = [rng.randrange(1000, 30000) for _ in range(2048)]

    def mk() -> list[SimRequest]:
        return [SimRequest(i, 2048 + 16, 8, arrival_s=i * 1.0, prompt_token_ids=system + [i] * 16) for i in range(3)]

    reqs = mk()
    run = simulate(config(max_num_batched_tokens=512), reqs)
    ttft = [run.first_token_s(r) - r.arrival_s for r in reqs]
    assert ttft[1] < 0.5 * ttft[0] and ttft[2] < 0.5 * ttft[0]
    assert reqs[1].cached_tokens == 2048 and reqs[0].cached_tokens == 0
    assert run.stats.prefix_hits == 2 * 2048
    assert run.stats.prefix_queries == 3 * (2048 + 16)
    # with prefix caching off, no request benefits
    off = mk()
    run_off = simulate(config(max_num_batched_tokens=512, enable_prefix_caching=False), off)
    ttft_off = [run_off.first_token_s(r) - r.arrival_s for r in off]
    assert ttft_off[1] > 0.9 * ttft_off[0]


def test_itl_grows_with_batch_size() -> None:
    cfg = config(max_num_seqs=64)
    small = statistics.median(itls(*closed(cfg, 1, n=4)))
    big = statistics.median(itls(*closed(cfg, 64, n=128)))
    assert big > 1.5 * small


def test_preemption_when_kv_runs_out_and_no_request_lost() -> None:
    # Short prompts admitted together, then decoding grows the KV past capacity.
    cfg = config(max_num_seqs=32, kv_blocks=60)  # 960 tokens
    reqs = [SimRequest(i, 32, 200) for i in range(24)]
    run = simulate(cfg, reqs, concurrency=12)
    assert run.stats.preemptions > 0
    assert any(r.preemptions > 0 for r in reqs)
    check_complete(run, reqs)
    assert run.stats.finished == 24
    assert run.stats.generation_tokens == 24 * 200
    assert run.stats.kv_usage == 0.0  # every block returned


def test_a_full_reserve_runs_what_fits_at_full_length_and_never_preempts() -> None:
    """TensorRT-LLM's GUARANTEED_NO_EVICT (`reserve_output` 1): a request starts only when its prompt
    + max_tokens fit beside the running requests' (15 blocks each of 60 here: 4 at a time), so the load
    that makes a vLLM-style engine preempt (the test above) runs without a preemption, 4 at a time.
    SGLang's 0.7 sets aside 11 blocks a request: 5 start, and their growth past that preempts."""
    for reserve, most in ((1.0, 4), (0.7, 5)):
        cfg = config(max_num_seqs=32, kv_blocks=60, reserve_output=reserve)
        assert cfg.reserve_blocks(32, 200) == (15 if reserve == 1.0 else 11)
        eng = Engine(cfg)
        reqs = [SimRequest(i, 32, 200) for i in range(24)]
        for r in reqs:
            eng.add(r)
        now, running, finished = 0.0, [], 0
        while (res := eng.step(now)) is not None:
            now += res.duration_s
            running.append(eng.stats.running)
            finished += len(res.finished)
        assert finished == 24 and eng.stats.kv_usage == 0.0 and eng._reserved == 0
        assert max(running[:5]) == most  # the first admissions: as many as their reserves allow
        if reserve == 1.0:
            assert eng.stats.preemptions == 0 and max(running) == 4
        else:
            assert eng.stats.preemptions > 0
    with pytest.raises(ValueError, match="reserve_output"):
        config(reserve_output=1.5)


def test_a_reserve_holds_what_the_client_asked_for_not_what_the_request_will_make() -> None:
    """A request that will stop early (EOS) still has its max_tokens set aside (`limit_tokens`): two
    such requests of 32 + 200 asked, 10 made, run one after the other in 20 blocks where two of their
    real size would fit; a request asking for more than the whole cache runs alone, not never."""
    cfg = config(max_num_seqs=8, kv_blocks=20, reserve_output=1.0)
    for limit, together in ((200, False), (0, True)):
        reqs = [SimRequest(i, 32, 10, limit_tokens=limit) for i in range(2)]
        run = simulate(cfg, reqs)
        check_complete(run, reqs)
        overlap = run.first_token_s(reqs[1]) < run.end_s(reqs[0])
        assert overlap == together, (limit, overlap)
    assert cfg.reserve_blocks(32, 10_000) == cfg.kv_blocks
    lone = [SimRequest(0, 32, 10, limit_tokens=10_000), SimRequest(1, 32, 10)]
    run = simulate(cfg, lone)
    check_complete(run, lone)
    assert run.first_token_s(lone[1]) > run.end_s(lone[0]) - 1e-12


def test_a_preempted_request_finds_its_own_prompt_blocks_again_with_prefix_caching_on() -> None:
    """vLLM V1 frees a preempted request's blocks into the prefix cache and looks its prompt up again on
    re-admission (`get_computed_blocks`); SGLang keeps a retracted prompt in its radix tree. A prompt
    known by its length only gets block names no other prompt shares: with caching on, each preemption's
    re-admission hits the blocks not evicted since, and nothing else ever does (two requests' names never
    meet); with caching off, every preemption recomputes its whole prompt."""
    runs = {}
    for prefix in (False, True):
        cfg = config(max_num_seqs=32, kv_blocks=120, enable_prefix_caching=prefix)  # 1,920 tokens
        reqs = [SimRequest(i, 512, 200) for i in range(6)]
        runs[prefix] = (simulate(cfg, reqs, concurrency=6), reqs)
    (off, off_reqs), (on, on_reqs) = runs[False], runs[True]
    assert off.stats.preemptions > 0 and on.stats.preemptions > 0
    for run, reqs in ((off, off_reqs), (on, on_reqs)):
        check_complete(run, reqs)
        assert run.stats.generation_tokens == 6 * 200 and run.stats.kv_usage == 0.0
    assert off.stats.prefix_hits == 0
    # every hit is a re-admission's own prompt block (first admissions find nothing: names are unshared)
    assert on.stats.prefix_hits > 0 and on.stats.prefix_hits % 16 == 0
    assert all(r.cached_tokens == 0 for r in on_reqs)
    assert on.stats.prefix_hits <= on.stats.preemptions * 512
    # what it saves is prompt recomputation: the run is shorter
    assert on.duration_s < off.duration_s


def test_an_engine_that_does_not_mix_runs_prompts_and_decodes_one_after_the_other() -> None:
    """vLLM V0 without chunked prefill (and TGI) give a prompt batch a step of its own: a step that
    admits a prompt while others decode lasts a prompt-only step plus a decode-only step; a step with
    only one kind is unchanged. Throughput falls by the decodes the prompt steps held up."""
    durations = {}
    for mixed in (True, False):
        eng = Engine(config(max_num_batched_tokens=8192, chunked_prefill=False, mixed_steps=mixed))
        first = SimRequest(0, 100, 50)
        eng.add(first)
        now = 0.0
        for _ in range(5):  # its prefill, then decodes
            res = eng.step(now)
            assert res is not None
            now += res.duration_s
        lone_decode = res.duration_s
        eng.add(SimRequest(1, 2000, 50))
        res = eng.step(now)
        assert res is not None and res.decode_seqs == 1 and res.prefill_tokens == 2000
        durations[mixed] = res.duration_s
        assert lone_decode == pytest.approx(step_time_s(COST, StepShape(decode_seqs=1, decode_ctx_tokens=103)))
    prompt_only = step_time_s(COST, StepShape(prefill_seqs=1, prefill_tokens=2000, prefill_ctx_pairs=2000 * 1000))
    decode_only = step_time_s(COST, StepShape(decode_seqs=1, decode_ctx_tokens=104))
    assert durations[False] == pytest.approx(prompt_only + decode_only)
    assert durations[True] < durations[False]
    runs = {
        m: closed(config(chunked_prefill=False, max_num_batched_tokens=8192, mixed_steps=m), 8, prompt=1024, out=32)
        for m in (True, False)
    }
    for run, reqs in runs.values():
        check_complete(run, reqs)
    assert out_tps(*runs[False]) < out_tps(*runs[True])


def test_request_that_cannot_fit_is_rejected() -> None:
    eng = Engine(config(kv_blocks=4))
    with pytest.raises(ValueError):
        eng.add(SimRequest("big", 60, 10))
    with pytest.raises(ValueError):
        Engine(config()).add(SimRequest("long", 8000, 500))


def test_chunked_prefill_interleaves_with_decode() -> None:
    cfg = config(max_num_batched_tokens=256)
    a = SimRequest("a", 64, 100, arrival_s=0.0)
    b = SimRequest("b", 4096, 4, arrival_s=0.05)
    run = simulate(cfg, [a, b])
    # b's prefill needs 16 steps of 256 tokens; a keeps decoding in every one of them
    ta = run.token_times_s(a)
    gaps = [y - x for x, y in pairwise(ta)]
    assert max(gaps) < 0.02
    assert run.first_token_s(b) - b.arrival_s > 15 * 0.003
    # without chunking, the whole prompt goes in one step and a's ITL spikes
    cfg2 = config(max_num_batched_tokens=8192, chunked_prefill=False)
    a2, b2 = SimRequest("a", 64, 100), SimRequest("b", 4096, 4, arrival_s=0.05)
    run2 = simulate(cfg2, [a2, b2])
    t2 = run2.token_times_s(a2)
    assert max(y - x for x, y in pairwise(t2)) > max(gaps)


def test_step_tokens_match_fast_path() -> None:
    """The emulator's path (with_tokens=True) and simulate's lazy path agree token for token."""
    cfg = config(max_num_seqs=8, kv_blocks=50)
    mk = lambda: [SimRequest(i, 40 + 7 * i, 30 + 5 * (i % 4)) for i in range(20)]
    reqs = mk()
    run = simulate(cfg, reqs, concurrency=10)
    eng = Engine(cfg)
    reqs2 = mk()
    times: dict[int, list[float]] = {r.id: [] for r in reqs2}
    pending = list(reqs2)
    # simulate's closed loop: a request sent as a step ends joins the step after the next one, and
    # an idle engine starts a step with the first request alone
    now, sent = 0.0, [0.0] * 10
    for _ in range(100_000):
        late = [t for t in sent if t >= now]
        early = [t for t in sent if t < now]
        if not eng.has_work() and not early:
            early, late = late[:1], late[1:]
        for t in early:
            if pending:
                r = pending.pop(0)
                r.arrival_s = t
                eng.add(r)
        sent = late
        res = eng.step(now)
        if res is None:
            break
        now += res.duration_s
        assert res.tokens is not None
        for r in res.tokens:
            times[r.id].append(now)
        sent.extend([now] * min(len(res.finished), len(pending) - len(sent)))
    for r1, r2 in zip(reqs, reqs2):
        assert run.token_times_s(r1) == pytest.approx(times[r2.id])
        assert eng.emitted(r2) == r2.max_tokens


def test_abort_frees_blocks() -> None:
    eng = Engine(config())
    a, b = SimRequest("a", 100, 50), SimRequest("b", 100, 50)
    eng.add(a)
    eng.add(b)
    now = 0.0
    for _ in range(5):
        res = eng.step(now)
        assert res is not None
        now += res.duration_s
    assert eng.stats.kv_usage > 0 and eng.stats.running == 2
    eng.abort(a)
    eng.abort(b)
    assert eng.stats.running == 0 and eng.stats.kv_usage == 0.0
    assert eng.step(now) is None


def test_lru_evicts_old_prefixes() -> None:
    # 64 blocks; each prompt has 30 full blocks: the cache holds about two prompts.
    cfg = config(kv_blocks=64, max_num_seqs=1)
    prompts = [[p * 10_000 + k for k in range(480)] for p in range(4)]
    order = [0, 1, 2, 3, 3, 0]
    reqs = [SimRequest(i, 480, 2, arrival_s=float(i), prompt_token_ids=prompts[p]) for i, p in enumerate(order)]
    simulate(cfg, reqs)
    assert reqs[4].cached_tokens > 0  # 3 again, just after 3: still cached
    assert reqs[5].cached_tokens == 0  # 0 was evicted by 1, 2 and 3


def _used_blocks_from_requests(eng: Engine) -> int:
    """Blocks the running requests should hold, recomputed from their state (white-box invariant)."""
    bs = eng.config.block_size
    s = eng.stats.steps  # index of the next step
    private = 0
    for r in eng._running:
        held = -(-(r.pos0 + s) // bs) + eng.config.seq_overhead_blocks if r in eng._decoding.values() else r.blocks
        private += held - len(r.hashed)
    shared = sum(1 for rc in eng.pool.table.values() if rc > 0)
    return private + shared


@pytest.mark.parametrize(("extra", "reserve"), [(0, 0.0), (3, 0.0), (0, 1.0), (3, 0.7)])
@pytest.mark.parametrize("seed", range(6))
def test_block_accounting_invariant_under_random_load(seed: int, extra: int, reserve: float) -> None:
    rng = random.Random(seed)
    cfg = config(
        max_num_seqs=12,
        kv_blocks=rng.choice([40, 80, 200]),
        max_num_batched_tokens=rng.choice([64, 256]),
        seq_overhead_blocks=extra,
        reserve_output=reserve,
    )
    eng = Engine(cfg)
    prefixes = [[rng.randrange(50_000) for _ in range(96)] for _ in range(3)]
    live: list[SimRequest] = []
    now = 0.0
    added = 0
    for _step in range(3000):
        if added < 60 and rng.random() < 0.3:
            p = rng.choice(prefixes) + [rng.randrange(50_000) for _ in range(rng.randrange(1, 60))]
            r = SimRequest(added, len(p), rng.randrange(1, 120), arrival_s=now, prompt_token_ids=p)
            eng.add(r)
            live.append(r)
            added += 1
        if live and rng.random() < 0.01:
            eng.abort(live.pop(rng.randrange(len(live))))
        res = eng.step(now)
        if res is None:
            if added >= 60:
                break
            continue
        now += res.duration_s
        for r in res.finished:
            live.remove(r)
        st = eng.stats
        used = round(st.kv_usage * cfg.kv_blocks)
        assert used == _used_blocks_from_requests(eng)
        assert eng.pool.free >= 0 and used <= cfg.kv_blocks
        assert st.running <= cfg.max_num_seqs
        # what the running requests set aside is the sum of their reserves, within the cache
        assert eng._reserved == sum(r.reserved for r in eng._running) <= cfg.kv_blocks
        assert all(r.reserved > 0 for r in eng._running) == (reserve > 0) or not eng._running
        for r in live:  # the cached blocks of a chain are a prefix of it (what the bisection relies on)
            names = r.prefix_hashes or ()
            cached = [h in eng.pool.table for h in names]
            assert cached == sorted(cached, reverse=True), (r.id, cached)
            assert eng.pool.cached_prefix(names, len(names)) == sum(cached)
    assert not live and eng.stats.running == 0 and eng.stats.kv_usage == 0.0


@pytest.mark.parametrize(
    "cost",
    [
        COST,
        dataclasses.replace(
            COST,
            routed_expert_bytes=3e7,
            n_experts=128,
            experts_per_token=8,
            layers=48,
            layer_overhead_s=2e-5,
            comm_bytes_per_token=5e5,
            comm_bytes_per_s=2e11,
            collectives=96,
            collective_s=5e-6,
            internode_collectives=4,
            internode_collective_s=3e-5,
        ),
        dataclasses.replace(
            COST,
            decode_tokens_per_seq=2.4,
            token_overhead_s=1e-7,
            mem_efficiency=0.6,
            compute_efficiency=0.05,
            comm_bytes_per_token=1e5,
            comm_bytes_per_s=1e11,
        ),
    ],
)
def test_decode_run_prices_each_step_as_step_does(cost: StepCost) -> None:
    """`decode_run` writes the step cost out for a fixed batch (`steptime.DecodeTerms`): each step's
    duration is the very float `step` gives the same decode-only step, not an approximation."""
    engines = [Engine(config(cost=cost)) for _ in range(2)]
    for eng in engines:
        for i in range(5):
            eng.add(SimRequest(i, 40 + 30 * i, 400))
    now = 0.0
    for _ in range(12):  # the prompts, then decode-only steps
        results = [eng.step(now) for eng in engines]
        assert results[0] is not None and results[1] is not None
        assert results[0].duration_s == results[1].duration_s
        now += results[0].duration_s
    fast = engines[0].decode_run(now, float("inf"), 50)
    assert len(fast) == 50
    slow = []
    for _ in fast:
        res = engines[1].step(now)
        assert res is not None and res.prefill_tokens == 0 and res.decode_seqs == 5
        slow.append(res.duration_s)
    assert fast == slow


def test_sequence_overhead_blocks_limit_how_many_run() -> None:
    """vLLM's sliding-window pages: every running sequence holds `seq_overhead_blocks` besides its
    context, so a pool that holds 8 sequences of 64 tokens (4 blocks each) holds 4 when each also
    keeps 4 window blocks; blocks all come back at the end."""

    def peak_running(extra: int) -> int:
        eng = Engine(config(kv_blocks=40, max_num_seqs=16, seq_overhead_blocks=extra))
        for i in range(12):
            eng.add(SimRequest(i, 48, 8))
        peak, now = 0, 0.0
        while (res := eng.step(now)) is not None:
            now += res.duration_s
            peak = max(peak, eng.stats.running)
        assert eng.stats.finished == 12 and eng.pool.available() == 40
        return peak

    assert peak_running(0) > peak_running(4)
    assert peak_running(4) <= 40 // (4 + 4) + 1  # +1: a sequence admitted on its first chunk only
    with pytest.raises(ValueError, match="needs"):
        Engine(config(kv_blocks=40, seq_overhead_blocks=38)).add(SimRequest(0, 48, 8))


def test_a_prompt_cap_bounds_the_prompt_tokens_of_a_step_and_not_its_decodes() -> None:
    """`max_prefill_tokens` (SGLang DP attention's per-rank chunk) caps the prompt tokens a step
    carries: a 4,096-token prompt under a 1,024 cap takes 4 steps where the 8,192 budget took one, and
    the 8 decoding sequences still advance in every step."""

    def steps_to_first_token(cap: int) -> tuple[int, list[int]]:
        eng = Engine(config(max_num_batched_tokens=8192, max_prefill_tokens=cap))
        decoders = [SimRequest(f"d{i}", 16, 1000) for i in range(8)]
        for r in decoders:
            eng.add(r)
        res = eng.step(0.0)  # the decoders' prompts (8 x 16 tokens) in one step
        assert res is not None and res.prefill_tokens == 8 * 16
        big = SimRequest("big", 4096, 4)
        eng.add(big)
        n, t, prompt_tokens = 0, 0.0, []
        while True:
            res = eng.step(t)
            assert res is not None
            t += res.duration_s
            n += 1
            prompt_tokens.append(res.prefill_tokens)
            assert res.decode_seqs == 8  # every decoder gets its token in every step
            if big in res.first_token:
                return n, prompt_tokens

    assert steps_to_first_token(0) == (1, [4096])
    assert steps_to_first_token(1024) == (4, [1024] * 4)
    with pytest.raises(ValueError, match="max_prefill_tokens"):
        config(max_prefill_tokens=-1)


def test_admission_cost_is_paid_once_per_request_however_many_chunks() -> None:
    """`admit_overhead_s` prices the step that schedules a prompt's first chunk, not its later chunks."""
    cost = StepCost(0.0, 0.0, 0.0, 1.0, 1.0, step_overhead_s=0.01, admit_overhead_s=0.5)
    cfg = EngineConfig(cost=cost, kv_blocks=64, block_size=16, max_num_seqs=4, max_num_batched_tokens=64)
    eng = Engine(cfg)
    eng.add(SimRequest(id=0, prompt_len=100, max_tokens=2))
    durations = []
    for _ in range(3):
        res = eng.step(0.0)
        assert res is not None
        durations.append(res.duration_s)
    assert durations == pytest.approx([0.51, 0.01, 0.01])  # chunk 64 (admitted), chunk 36, one decode
