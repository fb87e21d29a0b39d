"""Validation of the what-if model against the corpus (plan/validate.py): a hand-checked point, the error
arithmetic, predictions under moved knobs, the fit's memo, and the held-out accuracy of the committed
calibration (a regression test)."""

from __future__ import annotations

import dataclasses

import pytest

from servescope.deploy.calibration import Calibration, corpus_digest, load_calibration
from servescope.errors import ConfigError
from servescope.plan.corpus import CorpusPoint, corpus_files, parse_source
from servescope.plan.knobfit import median_abs_error
from servescope.plan.validate import METRICS, Predictor, evaluate, predict
from servescope.sim.catalog.gpus import get_gpu
from servescope.sim.catalog.models import get_model
from servescope.sim.disagg import simulate_disagg
from servescope.sim.knobs import DEFAULT_KNOBS, resolve_knobs
from servescope.sim.memory.kvsize import kv_bytes_per_token_per_gpu
from servescope.sim.memory.weights import weight_bytes_per_gpu
from servescope.sim.placement import Layout
from tests.support.corpus_points import SRC, corpus_point, held_out_errors


def test_hand_checked_single_stream_decode() -> None:
    """c=1 Llama-3.1-8B BF16 on one H100: ITL = weights / (HBM x eff) + KV reads + overheads, by hand."""
    p = corpus_point()
    pred = Predictor([p])
    s = pred.settings[p.key]
    k = resolve_knobs(DEFAULT_KNOBS, s.family, s.generation, s.arch)
    model = get_model("Llama-3.1-8B")
    layout = Layout(gpu=get_gpu("h100"), gpus_per_node=1, tp=1)
    weights = weight_bytes_per_gpu(model, layout)
    kv_tok = kv_bytes_per_token_per_gpu(model, layout)
    ctx = 128 + 64  # mean context over the decode
    by_hand = (weights + kv_tok * ctx) / (3.35e12 * k.mem_efficiency) + k.step_overhead_s + 32 * k.layer_overhead_s
    got = pred.predicted(p.key, DEFAULT_KNOBS)
    assert got["itl"] == pytest.approx(1e3 * by_hand, rel=0.02)
    # throughput of one stream: 128 tokens over TTFT + 127 gaps
    assert got["tok_s"] == pytest.approx(128 / (got["ttft"] / 1e3 + 127 * got["itl"] / 1e3), rel=0.03)


def test_errors_are_relative_to_the_measurement() -> None:
    p = corpus_point()
    pred = Predictor([p])
    [r] = evaluate(pred, DEFAULT_KNOBS)
    for m, (_stat, val) in r.measured.items():
        assert r.error(m) == pytest.approx(r.predicted[m] / val - 1.0)
    assert median_abs_error([r], "itl")[0] == pytest.approx(abs(r.error("itl")))


def test_fewer_prefill_workers_queue_longer() -> None:
    """Prefill-heavy closed loop (2048 in, 64 out, 64 users) on 8xH200 gpt-oss TP2 workers: one
    prefill worker queues the prompts (TTFT up), three decode workers share the batch (ITL down)."""

    def pt(pre: int) -> CorpusPoint:
        return corpus_point(
            id=f"p{pre}",
            model="openai/gpt-oss-120b",
            gpu="h200",
            gpus=8,
            tp=2,
            engine="sglang",
            engine_version="0.5",
            quant="mxfp4",
            concurrency=64,
            num_prompts=256,
            input_len=2048,
            output_len=64,
            disaggregated=(2 * pre, 8 - 2 * pre),
            measured={"output_tok_s": 1.0, "itl_ms_median": 1.0, "ttft_ms_median": 1.0},
        )

    pred = Predictor([pt(1), pt(3)])
    one, three = pred.predicted("hand/p1", DEFAULT_KNOBS), pred.predicted("hand/p3", DEFAULT_KNOBS)
    assert one["ttft"] > 2 * three["ttft"]
    assert one["itl"] < three["itl"]


# --- regression: the committed calibration on the committed corpus ----------------------------------
# The accuracy the what-if aims at: held-out median |error| of at most 20% on output tok/s and 25% on
# ITL and TTFT.
BOUNDS = {"tok_s": 0.20, "itl": 0.25, "ttft": 0.25}


def test_committed_calibration_matches_the_corpus(validation: tuple[Predictor, Calibration]) -> None:
    _, cal = validation
    assert cal.corpus_digest == corpus_digest(corpus_files()), "corpus changed: run benchmarks/plan_validate.py --refit"
    assert set(cal.held_out) == {s.source for s in validation[0].settings.values()}


# Held-out figures of the committed calibration (benchmarks/plan_validate.py, 643 points from 35
# documents in 23 folds -- a fold is a document or a `group:` of one publisher's documents run with one
# harness --, 594 expressible): output tok/s 19.6%, ITL 25.8%, TTFT 35.1% (2026-11-28, the prompt launch knobs
# refitted (pfl.* only, one warm iteration), with SGLang's MLA prompt
# steps in the absorbed form where its code runs them so, its default chunked prefill size by release and GPU
# memory and its 48 running requests under speculative decoding, InferenceX's launch settings from its scripts,
# each client's count of a multi-token chunk, and attention-DP ranks of a MoE in lock-step; 19.6 / 27.0 /
# 36.3% before them. Earlier: one warm
# iteration of every table with two corrections of fact, each kept by a rule written before its refit:
# W4A16 dense GEMMs and attention at the knob's efficiency gave 19.8 / 25.9 / 35.7% against the same
# iteration without it, 20.5 / 26.5 / 36.6%; attention priced at the KV dtype's peak and MLA prompts in
# their multi-head form then gave 19.7 / 26.9 / 36.4% as refitted, 19.6 / 27.0 / 36.3% as written).
# Before: 20.5% / 26.1% / 36.7% (a preempted request finding its prompt blocks again, a correction of
# fact), 19.6% / 27.4% / 37.8% until vLLM 0.8's batch budget on H100/H200 was corrected, and 18.4% /
# 23.4% / 32.7% on the 594 points before simon-mo/R1-Benchmark's 49 DeepSeek-R1 rate points joined the
# corpus, which the model predicts worst of all: the ceilings rose with the data and with corrections of
# fact, not with a fitted change. A refit or a change to the model must not make them worse than these
# ceilings (each the figure + ~0.4-0.5 point). DeepSeek's releases from 2025-H2 as an architecture class of
# their own (mla-moe-late, 2026-11-28) took them to 19.1 / 23.8 / 35.1% (its control refit: 19.6 / 26.5 / 36.0%);
# compute efficiency per architecture class (comp.arch.<class>, 2026-11-28) to 18.5 / 23.3 / 33.6% (its control
# refit: 19.1 / 23.8 / 36.5%), and two warm iterations of every table from those to 18.0 / 23.5 / 32.2% and
# 17.7 / 23.2 / 31.7%. The vLLM blog's stated +/-15% length spread (a correction of fact, pm-0.15; the
# first-token knobs refitted) took TTFT to 31.3%; prompt tokens' all-reduce at the measured NCCL bus
# bandwidth on Hopper and Ampere (`sim.knobs.PINNED`, 2026-11-28) to 17.8 / 23.0 / 29.7% (its control, the
# same warm iteration without it: 17.6 / 23.5 / 31.4%), and a second warm iteration to 17.2 / 23.0 / 29.4%.
# The NIM page's other 70 rows of version 1.8.0 (2026-11-29, a corpus addition and one warm iteration of
# every table) took them to 16.7 / 20.4 / 32.9% on 664 of 713 points: NIM's TTFTs are held out at +124%
# (fixed-length closed loops that stay in lock-step waves in the simulation; docs/plan.md).
# The early-2025 sources and TensorRT-LLM's 0.17 and 0.20 perf overviews (2026-12-02, corpus additions, 1,028
# points) joined without a fit iteration (benchmarks/plan_validate.py --refit --warm --iterations 0, for want
# of CPU time): each new source is predicted by the table fitted without it, so held out by construction,
# 15.4 / 21.6 / 33.6% on 979 points.
NO_REGRESSION = {"tok_s": 0.172, "itl": 0.220, "ttft": 0.340}


def test_coverage_at_least_90_percent(validation: tuple[Predictor, Calibration]) -> None:
    pred, _ = validation
    assert len(pred.settings) / len(pred.points) >= 0.90


def test_held_out_error_does_not_regress(validation: tuple[Predictor, Calibration]) -> None:
    """Leave-one-source-out: each point predicted with knobs fitted without its source."""
    got = held_out_errors(validation)
    for m in METRICS:
        assert got[m] <= NO_REGRESSION[m], f"{m}: held-out median |error| {got[m]:.1%} > {NO_REGRESSION[m]:.0%}"


@pytest.mark.xfail(
    strict=True,
    reason="target bounds (held-out median |error| <= 20% output tok/s, 25% ITL, 25% TTFT) not met "
    "(held-out 15.4% / 21.6% / 33.6% on 979 of 1,028 "
    "points: output tok/s and ITL within their bounds, TTFT over); docs/plan.md",
)
def test_held_out_error_within_the_target_bounds(validation: tuple[Predictor, Calibration]) -> None:
    got = held_out_errors(validation)
    for m in METRICS:
        assert got[m] <= BOUNDS[m], f"{m}: held-out median |error| {got[m]:.1%} > {BOUNDS[m]:.0%}"


def test_deterministic(validation: tuple[Predictor, Calibration]) -> None:
    pred, cal = validation
    key = sorted(pred.settings)[0]
    fresh = Predictor([p for p in pred.points if p.key == key])
    assert fresh.predicted(key, cal.knobs) == pred.predicted(key, cal.knobs)


def test_first_token_latency_adds_to_ttft_only() -> None:
    """ttft.base x ttft.eng.<family> is added to every request's TTFT; ITL and throughput do not move."""
    p = corpus_point()
    pred = Predictor([p])
    base = pred.predicted(p.key, DEFAULT_KNOBS)
    assert DEFAULT_KNOBS["ttft.base"] * DEFAULT_KNOBS["ttft.eng.vllm-v1"] == pytest.approx(0.02)
    more = pred.predicted(p.key, {**DEFAULT_KNOBS, "ttft.eng.vllm-v1": 6.0})  # 20 ms -> 120 ms
    assert more["ttft"] - base["ttft"] == pytest.approx(100.0, rel=1e-6)
    assert more["itl"] == base["itl"] and more["tok_s"] == base["tok_s"]


def test_memo_key_drops_only_knobs_the_simulation_cannot_feel(validation: tuple[Predictor, Calibration]) -> None:
    """The fit's memo simulates a point once per `_sim_knobs` (first-token latency added afterwards;
    MTP acceptance, link shares, collective latency and admission cost fixed where the point has no
    drafts, no link traffic, no collectives, no API server). Moving every such knob must give what a
    direct simulation gives, for points with and without drafts, TP, DP+EP, disaggregation and an
    API server."""
    from servescope.plan.validate import _compare, predict
    from servescope.sim.knobs import FAMILIES

    pred, cal = validation
    kinds = {
        "spec": lambda s: s.draft_tokens > 0,
        "disagg": lambda s: s.disagg is not None,
        "tp1": lambda s: not s.base.cost.collectives,
        "tp": lambda s: s.base.cost.collectives > 0,
        "in-process": lambda s: not s.served,
        "served-tp": lambda s: s.served and s.base.cost.collectives > 0,
    }
    keys = [next(k for k, s in sorted(pred.settings.items()) if f(s)) for f in kinds.values()]
    moved = {
        **cal.knobs,
        "spec.accept": 0.6,
        "comm.eff": cal.knobs["comm.eff"] * 0.5,
        "comm.latency_s": 3e-5,
        "ttft.base": cal.knobs["ttft.base"] * 2,
        "comm.prefill.gpu.cdna3": 0.2,
        **{f"admit.eng.{f}": 0.02 for f in FAMILIES},
    }
    for key in keys:
        s = pred.settings[key]
        for table in (cal.knobs, moved):
            k = pred.knobs(key, table)
            assert pred.predicted(key, table) == pytest.approx(
                _compare(predict(s, k), pred.measured[key]), rel=1e-12
            ), key
        if s.draft_tokens:  # the knob that is kept matters: acceptance moves a speculative point
            assert pred.predicted(key, moved)["tok_s"] != pred.predicted(key, cal.knobs)["tok_s"]
        if not s.served:  # an in-process point has no API server: the admission cost is not felt
            assert pred.knobs(key, moved).frontend_s == 0.02
            assert pred.predicted(key, {**moved, **{f"admit.eng.{f}": 0.001 for f in FAMILIES}}) == pred.predicted(
                key, moved
            )


def test_w4a16_prompts_track_the_same_tables_bf16_runs(validation: tuple[Predictor, Calibration]) -> None:
    """The Qwen2.5 speed table (vLLM 0.6.3, A100, one request of 1 to 129,024 prompt tokens then 2,048
    generated; speed = 2,048 / wall time, prompt included): the AWQ and GPTQ-int4 runs on two GPUs against
    the BF16 runs on four at the same prompt length. The predicted ratio follows the measured one within
    20% at every length; with W4A16 computing at a fifth of the efficiency it fell to 0.4 of it at 63,488
    tokens."""
    pred, cal = validation
    by_key = {p.key: p for p in pred.points}
    src = "qwen-speed-benchmark-qwen25-a100-2024-11/qwen25-72b-a100-"
    checked = 0
    for n in (6144, 14336, 30720, 63488, 129024):
        bf16 = by_key[f"{src}tp4-bf16-in{n}-out2048"]
        ref = pred.result(bf16, cal.knobs)
        for q in ("awq", "gptqint4"):
            (w4,) = (p for key, p in by_key.items() if key.startswith(f"{src}tp2-{q}-in{n}-out2048"))
            got = pred.result(w4, cal.knobs)
            measured = w4.measured["output_tok_s"] / bf16.measured["output_tok_s"]
            predicted = got.predicted["tok_s"] / ref.predicted["tok_s"]
            assert predicted == pytest.approx(measured, rel=0.20), (n, q, predicted, measured)
            checked += 1
    assert checked == 10


def test_a_disaggregated_request_passes_one_front_end(validation: tuple[Predictor, Calibration]) -> None:
    """A PD request passes the API server's front end once, on its way to its prefill worker: the decode
    worker's engine computes none of the prompt and has no front end; a request's first token is
    later by the front end's time, and a burst of five shares it: none reaches its prefill worker
    before five service times after the send."""
    from servescope.plan.validate import _engine_for, decode_worker

    pred, cal = validation
    key = next(k for k, s in sorted(pred.settings.items()) if s.disagg is not None)
    s = pred.settings[key]
    prefill = _engine_for(s, dataclasses.replace(pred.knobs(key, cal.knobs), frontend_s=0.05))
    decode = decode_worker(prefill)
    assert prefill.frontend_s == 0.05 * s.replicas and decode.frontend_s == 0.0
    assert decode.cost.prefill_work == 0.0
    free = dataclasses.replace(prefill, frontend_s=0.0)
    one = [simulate_disagg(p, decode, 1, 1, [(1000, 4)], arrivals_s=[0.0]) for p in (free, prefill)]
    assert one[1].first_token_s[0] == pytest.approx(one[0].first_token_s[0] + prefill.frontend_s)
    burst = simulate_disagg(prefill, decode, 1, 1, [(100, 4)] * 5, arrivals_s=[0.0] * 5)
    assert burst.arrival_s == [0.0] * 5
    assert all(burst.first_token_s[k] >= 5 * prefill.frontend_s for k in range(5))
    assert min(burst.first_token_s) < 5 * prefill.frontend_s + 1.0  # and then they go on at once


def test_a_stated_stream_interval_makes_itl_the_gap_between_chunks() -> None:
    """SGLang `--stream-interval k` (engine_args stream_interval): the server sends the first token
    alone, then every k-th, so benchmark_serving's ITL is the gap between chunks. The engine runs the
    same steps: TPOT and throughput do not move; the mean ITL is the time after the first token over
    ceil((tokens - 1) / k) gaps (128 tokens, k = 10: 127 / 13 of a token's gap); the median is k step
    gaps."""
    stats = {"output_tok_s": 100.0, "itl_ms_mean": 10.0, "itl_ms_median": 10.0, "tpot_ms_mean": 10.0}
    one = corpus_point(id="one", engine="sglang", engine_version="0.5.6", measured=stats)
    ten = corpus_point(
        id="ten", engine="sglang", engine_version="0.5.6", measured=stats, engine_args={"stream_interval": 10}
    )
    pred = Predictor([one, ten])
    assert [pred.settings[p.key].stream_interval for p in (one, ten)] == [1, 10]
    knobs = load_calibration().knobs
    a, b = (predict(pred.settings[p.key], pred.knobs(p.key, knobs)) for p in (one, ten))
    assert b.tok_s == a.tok_s and b.itl_ms["tpot_ms_mean"] == a.itl_ms["tpot_ms_mean"]
    assert b.itl_ms["itl_ms_mean"] == pytest.approx(a.itl_ms["itl_ms_mean"] * 127 / 13, rel=1e-9)
    assert b.itl_ms["itl_ms_median"] == pytest.approx(10 * a.itl_ms["itl_ms_median"], rel=1e-9)
    assert a.itl_ms["itl_ms_mean"] == pytest.approx(a.itl_ms["tpot_ms_mean"], rel=1e-9)  # one request a time


def test_an_mtp_points_itl_follows_how_its_client_counts_a_multi_token_chunk() -> None:
    """MTP emits `accept` tokens a step in one chunk: a client that counts a gap a chunk (vLLM's
    benchmark_serving; a source without `itl:`) sees the step's gap, SGLang's bench_serving on its native
    backend (`itl: token`) splits it over the chunk's tokens. TPOT and throughput are the same either way."""
    stats = {"output_tok_s": 100.0, "itl_ms_mean": 10.0, "itl_ms_median": 10.0, "tpot_ms_mean": 10.0}
    token_src = dataclasses.replace(SRC, id="tok", itl="token")
    kw: dict[str, object] = {
        "engine": "sglang",
        "engine_version": "0.5.6",
        "gpu": "h200",
        "gpus": 8,
        "model": "DeepSeek-R1",
        "quant": "fp8",
        "tp": 8,
        "speculative": "mtp-3",
        "measured": stats,
    }
    chunk = corpus_point(id="chunk", **kw)
    token = corpus_point(source=token_src, id="token", **kw)
    pred = Predictor([chunk, token])
    assert [pred.settings[p.key].itl_per_token for p in (chunk, token)] == [False, True]
    knobs = load_calibration().knobs
    a, b = (predict(pred.settings[p.key], pred.knobs(p.key, knobs)) for p in (chunk, token))
    assert a.tok_s == pytest.approx(b.tok_s)
    assert a.itl_ms["tpot_ms_mean"] == pytest.approx(b.itl_ms["tpot_ms_mean"])
    accept = a.itl_ms["itl_ms_median"] / b.itl_ms["itl_ms_median"]
    assert 1.2 < accept < 4.0  # 1 + up to 3 accepted drafts
    # a token's gap is what TPOT averages at concurrency 1; a chunk's is `accept` of them
    assert b.itl_ms["itl_ms_mean"] == pytest.approx(b.itl_ms["tpot_ms_mean"], rel=1e-9)
    assert a.itl_ms["itl_ms_mean"] == pytest.approx(a.itl_ms["tpot_ms_mean"] * accept, rel=0.05)
    with pytest.raises(ConfigError, match="itl must be chunk or token"):
        parse_source(
            {
                "source": {
                    "id": "x",
                    "title": "t",
                    "url": "https://x",
                    "publisher": "p",
                    "date": "d",
                    "kind": "k",
                    "itl": "both",
                },
                "points": [],
            },
            origin="x.yaml",
        )


def test_intervals_cover_what_they_say_on_held_out_sources(validation: tuple[Predictor, Calibration]) -> None:
    """Issue 51, must hold 2: each source's held-out points against the 80% and 95% intervals built without
    any of its residuals (plan.intervals.honest_coverage): the 80% holds 75-85% of the points and the 95% at
    least 90%, per metric; and the installed table says the same (benchmarks/plan_validate.py wrote it)."""
    from servescope.plan import intervals

    pred, cal = validation
    by_key = {p.key: p for p in pred.points}
    held = [pred.result(by_key[k], cal.held_out[s.source]) for k, s in sorted(pred.settings.items())]
    rows = intervals.coverage_rows(intervals.honest_coverage(intervals.residuals_from(held, pred.settings)))
    overall = {r["metric"]: r for r in rows if r["group"] == "all"}
    assert set(overall) == set(METRICS)
    for m, r in overall.items():
        assert 0.75 <= r["p80"] <= 0.85, f"{m}: the 80% interval holds {r['p80']:.0%} of {r['n']} held-out points"
        assert r["p95"] >= 0.90, f"{m}: the 95% interval holds {r['p95']:.0%} of {r['n']} held-out points"
        assert cal.intervals["coverage"][m]["p80"] == pytest.approx(r["p80"], abs=1e-3)
