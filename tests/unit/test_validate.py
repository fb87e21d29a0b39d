"""Validation of the what-if model against the corpus: expressibility, a hand-checked point, the error
arithmetic, the fit, and the held-out accuracy of the committed calibration (a regression test)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from servescope.deploy.calibration import Calibration, corpus_digest, dump_calibration, load_calibration
from servescope.errors import ConfigError
from servescope.plan.corpus import CorpusPoint, Source, corpus_files, load_corpus, parse_source
from servescope.plan.knobfit import fit_table, median_abs_error
from servescope.plan.validate import (
    METRICS,
    Predictor,
    _lengths,
    evaluate,
    measured_for,
    predict,
    setting_for,
)
from servescope.sim.catalog.gpus import get_gpu
from servescope.sim.catalog.hfconfig import parse_hf_config
from servescope.sim.catalog.models import get_model
from servescope.sim.config import EngineConfig
from servescope.sim.defaults import admission_reserve
from servescope.sim.disagg import simulate_disagg
from servescope.sim.knobs import DEFAULT_KNOBS, arch_class, resolve_knobs
from servescope.sim.memory.kvsize import kv_bytes_per_token_per_gpu
from servescope.sim.memory.weights import weight_bytes_per_gpu
from servescope.sim.placement import Layout
from servescope.sim.steptime import StepCost, StepShape, step_time_s

SRC = Source(
    id="hand", title="hand-made", url="https://example.org/x", publisher="test", date="2025-01-01", kind="test"
)


def _point(**kw: object) -> CorpusPoint:
    base: dict[str, object] = {
        "source": SRC,
        "id": "p",
        "engine": "vllm",
        "engine_version": "0.10.0",
        "gpu": "h100",
        "gpus": 1,
        "model": "Llama-3.1-8B",
        "quant": "bf16",
        "kv_quant": "",
        "tp": 1,
        "pp": 1,
        "dp": 1,
        "ep": 1,
        "mode": "closed",
        "concurrency": 1,
        "request_rate": None,
        "num_prompts": 8,
        "input_len": 128,
        "output_len": 128,
        "dataset": "random",
        "speculative": "",
        "measured": {"output_tok_s": 100.0, "itl_ms_median": 10.0, "ttft_ms_mean": 20.0},
        "notes": "n",
    }
    base.update(kw)
    return CorpusPoint(**base)  # type: ignore[arg-type]


def test_hand_checked_single_stream_decode() -> None:
    """c=1 Llama-3.1-8B BF16 on one H100: ITL = weights / (HBM x eff) + KV reads + overheads, by hand."""
    p = _point()
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
    p = _point()
    pred = Predictor([p])
    [r] = evaluate(pred, DEFAULT_KNOBS)
    for m, (_stat, val) in r.measured.items():
        assert r.error(m) == pytest.approx(r.predicted[m] / val - 1.0)
    assert median_abs_error([r], "itl")[0] == pytest.approx(abs(r.error("itl")))


def test_measured_statistic_preference() -> None:
    p = _point(
        measured={"itl_ms_mean": 12.0, "tpot_ms_mean": 11.0, "ttft_ms_median": 5.0, "ttft_ms_mean": 9.0, "req_s": 2.0}
    )
    m = measured_for(p)
    assert m["itl"] == ("tpot_ms_mean", 11.0)  # a TPOT mean before an ITL mean (ITL means count chunks)
    assert m["ttft"] == ("ttft_ms_median", 5.0)
    assert m["tok_s"] == ("req_s x output_len", 256.0)


def test_unexpressible_points_say_why() -> None:
    pred = Predictor(
        [_point(id="a", input_len=None), _point(id="b", gpu="tpu-v9"), _point(id="c", model="Llama-3.1-405B", gpus=1)]
    )
    assert set(pred.unexpressible) == {"hand/a", "hand/b", "hand/c"}
    assert "length" in pred.unexpressible["hand/a"]
    assert "catalogue" in pred.unexpressible["hand/b"]
    assert "fit" in pred.unexpressible["hand/c"]


def _predictor_measuring(truth: dict[str, float]) -> Predictor:
    """Two closed-loop points (c=1, c=4) whose measurements are the model's own predictions at `truth`."""
    pts = [_point(id=f"c{c}", concurrency=c, num_prompts=4 * c) for c in (1, 4)]
    gen = Predictor(pts)
    measured = [gen.predicted(p.key, truth) for p in pts]
    return Predictor(
        [
            _point(
                id=f"c{c}",
                concurrency=c,
                num_prompts=4 * c,
                measured={"output_tok_s": m["tok_s"], "itl_ms_median": m["itl"], "ttft_ms_mean": m["ttft"]},
            )
            for c, m in zip((1, 4), measured)
        ]
    )


def test_fit_recovers_a_known_memory_efficiency() -> None:
    """Points generated by the model itself at mem.gpu.hopper = 0.6 are fitted back to ~0.6."""
    pred = _predictor_measuring({**DEFAULT_KNOBS, "mem.gpu.hopper": 0.8})
    fitted = fit_table(pred, sorted(pred.settings), iterations=8)
    got = resolve_knobs(fitted, "vllm-v1", "hopper", "dense").mem_efficiency
    assert got == pytest.approx(0.75 * 0.8, rel=0.08)


def test_a_point_far_off_hardly_pulls_the_fit() -> None:
    """The Cauchy loss (plan/knobfit.py): four closed loops measured at mem.gpu.hopper = 0.8, one of
    whose throughput reads 10x (a point the model cannot express). The fit still finds 0.8 within 3%
    (seen: 0.810); soft-L1, whose pull stays constant however far off a point is, gave 0.853."""
    truth = {**DEFAULT_KNOBS, "mem.gpu.hopper": 0.8}
    conc = (1, 2, 4, 8)
    pts = [_point(id=f"c{c}", concurrency=c, num_prompts=4 * c) for c in conc]
    gen = Predictor(pts)
    rows = []
    for c, p in zip(conc, pts):
        m = gen.predicted(p.key, truth)
        rows.append(
            _point(
                id=f"c{c}",
                concurrency=c,
                num_prompts=4 * c,
                measured={
                    "output_tok_s": m["tok_s"] * (10 if c == 8 else 1),
                    "itl_ms_median": m["itl"],
                    "ttft_ms_mean": m["ttft"],
                },
            )
        )
    pred = Predictor(rows)
    fitted = fit_table(pred, sorted(pred.settings), iterations=8, start=DEFAULT_KNOBS, only=("mem.gpu.hopper",))
    assert fitted["mem.gpu.hopper"] == pytest.approx(0.8, rel=0.03)


def test_the_fit_stops_on_its_tolerance() -> None:
    """`fit_table(tol=...)` (plan_validate.py --tol): a fit stops after the first iteration that improves
    its loss by less than `tol` of it. With tol 1 no iteration improves that much (the loss stays >= 0),
    so the fit is one step; with the default (1%) it runs on towards the truth and lands nearer it."""
    pred = _predictor_measuring({**DEFAULT_KNOBS, "mem.gpu.hopper": 0.8})
    start = {**DEFAULT_KNOBS, "mem.gpu.hopper": 0.3}
    steps: list[str] = []
    one = fit_table(
        pred, sorted(pred.settings), iterations=8, start=start, only=("mem.gpu.hopper",), tol=1.0, progress=steps.append
    )
    assert len(steps) == 1
    steps.clear()
    more = fit_table(
        pred, sorted(pred.settings), iterations=8, start=start, only=("mem.gpu.hopper",), progress=steps.append
    )
    assert len(steps) > 1
    assert abs(more["mem.gpu.hopper"] - 0.8) < abs(one["mem.gpu.hopper"] - 0.8)


def test_the_held_out_median_carries_its_interval_over_resampled_folds() -> None:
    """`fold_interval`: two folds whose points are 10% and 30% off. Resampling two folds with
    replacement gives medians 10% (A, A), 20% (A, B) and 30% (B, B), so the 90% interval is
    10%-30%; one fold alone has no spread; it is seeded (the same interval every run)."""
    from servescope.plan.corpus import Source
    from servescope.plan.knobfit import fold_interval
    from servescope.plan.validate import PointResult

    def results(src: Source, err: float, n: int) -> list[PointResult]:
        return [
            PointResult(
                _point(source=src, id=f"{src.id}{i}"), {"tok_s": ("output_tok_s", 100.0)}, {"tok_s": 100.0 * (1 + err)}
            )
            for i in range(n)
        ]

    a = Source(id="a", title="a", url="https://example.org/a", publisher="p", date="2025", kind="test")
    b = Source(id="b", title="b", url="https://example.org/b", publisher="q", date="2025", kind="test")
    both = results(a, 0.1, 5) + results(b, -0.3, 5)
    lo, hi = fold_interval(both, "tok_s")
    assert (lo, hi) == (pytest.approx(0.1), pytest.approx(0.3))
    assert fold_interval(both, "tok_s") == (lo, hi)
    assert fold_interval(results(a, 0.1, 5), "tok_s") == (pytest.approx(0.1), pytest.approx(0.1))
    assert fold_interval(both, "itl") is None
    # a group is one fold: the two documents of one publisher's group resample together
    grouped = results(a, 0.1, 5) + results(
        Source(id="c", title="c", url="https://example.org/c", publisher="p", date="2025", kind="test", group="a"),
        -0.3,
        5,
    )
    assert fold_interval(grouped, "tok_s") == (pytest.approx(0.2), pytest.approx(0.2))


def test_a_partial_fit_moves_only_the_knobs_asked_for() -> None:
    """`fit_table(only=...)` (benchmarks/plan_validate.py --refit --only): the knobs with those prefixes
    move from their start, every other knob keeps its start value, whatever the points would say."""
    pred = _predictor_measuring({**DEFAULT_KNOBS, "mem.gpu.hopper": 0.8, "ttft.base": 0.05})
    start = {**DEFAULT_KNOBS, "mem.gpu.hopper": 0.5, "ttft.base": 0.01}
    fitted = fit_table(pred, sorted(pred.settings), iterations=4, start=start, only=("ttft.",))
    assert fitted["mem.gpu.hopper"] == 0.5  # held, though the points say 0.8
    assert fitted["ttft.base"] != 0.01
    assert {k for k, v in fitted.items() if v != start.get(k)} <= {k for k in fitted if k.startswith("ttft.")}


def test_generated_length_overrides_the_requested_one() -> None:
    """Measured output tok/s / req/s is what the requests generated: 700 of a requested 2048 (EOS, or a
    random dataset drawing up to 2048) is simulated as lengths uniform around 700."""
    p = _point(output_len=2048, measured={"output_tok_s": 700.0, "req_s": 1.0, "ttft_ms_median": 50.0})
    s = Predictor([p]).settings[p.key]
    assert (s.output_len, s.out_dist, s.in_dist) == (700, "uniform", "fixed")
    outs = [o for _, o in _lengths(s)]
    assert min(outs) >= 1 and max(outs) <= 1399
    same = _point(output_len=2048, measured={"output_tok_s": 2040.0, "req_s": 1.0})
    assert Predictor([same]).settings[same.key].out_dist == "fixed"


def test_sharegpt_lengths_are_long_tailed_with_the_stated_means() -> None:
    p = _point(
        dataset="sharegpt",
        input_len=215.2,
        output_len=120.7,
        num_prompts=1000,
        mode="rate",
        request_rate=8.0,
        concurrency=None,
    )
    s = Predictor([p]).settings[p.key]
    lengths = _lengths(s)
    ins, outs = [a for a, _ in lengths], [b for _, b in lengths]
    assert sum(ins) / len(ins) == pytest.approx(215, rel=0.03)
    assert sum(outs) / len(outs) == pytest.approx(121, rel=0.03)
    assert max(ins) <= 1024 and max(a + b for a, b in lengths) <= 2048 and min(ins + outs) >= 4
    assert sorted(ins)[len(ins) // 2] < 0.8 * 215  # median well under the mean: a long tail
    assert _lengths(s) == lengths  # seeded


def test_disaggregated_field_is_checked() -> None:
    row = vars_of(_point())
    row.update(gpus=8, tp=2, disaggregated={"prefill_gpus": 2, "decode_gpus": 6})
    _, [pt] = parse_source({"source": vars_of(SRC), "points": [row]})
    assert pt.disaggregated == (2, 6)
    row["disaggregated"] = {"prefill_gpus": 2, "decode_gpus": 2}
    with pytest.raises(ConfigError, match="8 GPUs"):
        parse_source({"source": vars_of(SRC), "points": [row]})


def vars_of(obj: CorpusPoint | Source) -> dict[str, object]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.name != "source"}


def test_pd_single_request_by_hand() -> None:
    """One request through one prefill and one decode worker: TTFT = the prefill step + the KV transfer
    + the decode worker's admitting step; then one decode step per further token."""
    cost = StepCost(
        dense_weight_bytes=16e9,
        kv_bytes_per_token=131072,
        flops_per_token=16e9,
        hbm_bytes_per_s=3.35e12,
        flops_per_s=989.5e12,
        step_overhead_s=1e-3,
    )
    pre = EngineConfig(cost=cost, kv_blocks=4096, enable_prefix_caching=False)
    dec = EngineConfig(cost=dataclasses.replace(cost, prefill_work=0.0), kv_blocks=4096, enable_prefix_caching=False)
    run = simulate_disagg(pre, dec, 1, 1, [(2000, 4)], concurrency=1, transfer_s_per_token=1e-6)
    t_pre = step_time_s(cost, StepShape(prefill_seqs=1, prefill_tokens=2000, prefill_ctx_pairs=2000 * 1000.0))
    t_adm = step_time_s(dec.cost, StepShape(prefill_seqs=1, prefill_tokens=2000, prefill_ctx_pairs=2000 * 1000.0))
    assert run.first_token_s[0] == pytest.approx(t_pre + 2000e-6 + t_adm)
    t_dec = [step_time_s(dec.cost, StepShape(decode_seqs=1, decode_ctx_tokens=2000 + i)) for i in range(3)]
    assert run.end_s[0] == pytest.approx(run.first_token_s[0] + sum(t_dec))
    assert run.median_itl_s() == pytest.approx(sorted(t_dec)[1])


def test_pd_closed_loop_first_wave_arrives_after_the_first_step_starts() -> None:
    """As in `simulate`'s closed loop: of four requests sent at 0 to one prefill worker, the first
    starts a prompt step alone and the other three arrive after it began, so they share the next."""
    cost = StepCost(
        dense_weight_bytes=16e9,
        kv_bytes_per_token=131072,
        flops_per_token=16e9,
        hbm_bytes_per_s=3.35e12,
        flops_per_s=989.5e12,
        step_overhead_s=1e-3,
    )
    pre = EngineConfig(cost=cost, kv_blocks=4096, enable_prefix_caching=False)
    dec = EngineConfig(cost=dataclasses.replace(cost, prefill_work=0.0), kv_blocks=4096, enable_prefix_caching=False)
    run = simulate_disagg(pre, dec, 1, 1, [(2000, 4)] * 4, concurrency=4)
    t_one = step_time_s(cost, StepShape(prefill_seqs=1, prefill_tokens=2000, prefill_ctx_pairs=2000 * 1000.0))
    t_three = step_time_s(cost, StepShape(prefill_seqs=3, prefill_tokens=6000, prefill_ctx_pairs=3 * 2000 * 1000.0))
    assert run.arrival_s == [0.0] * 4
    first = run.first_token_s
    assert first[1] == first[2] == first[3] > first[0]
    assert first[1] >= t_one + t_three  # the three prompts were computed in the second prompt step


def test_fewer_prefill_workers_queue_longer() -> None:
    """Prefill-heavy closed loop (2048 in, 64 out, 64 users) on 8xH200 gpt-oss TP2 workers: one
    prefill worker queues the prompts (TTFT up), three decode workers share the batch (ITL down)."""

    def pt(pre: int) -> CorpusPoint:
        return _point(
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


def test_calibration_round_trips(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cal = Calibration(knobs={"mem.base": 0.7}, held_out={"s": {"mem.base": 0.6}}, corpus_digest="abc")
    f = tmp_path / "c.yaml"
    f.write_text(dump_calibration(cal))
    back = load_calibration(f)
    assert back.knobs == {"mem.base": 0.7} and back.held_out == {"s": {"mem.base": 0.6}}
    assert back.heldout_median_abs_error == {}
    band = dataclasses.replace(
        cal,
        heldout_median_abs_error={"output_tokens_per_s": 0.2, "itl_ms": 0.3, "ttft_ms": 0.4},
        heldout_source="held out",
    )
    f.write_text(dump_calibration(band))
    back = load_calibration(f)
    assert back.heldout_median_abs_error == band.heldout_median_abs_error and back.heldout_source == "held out"
    assert back.heldout_by_mode == {}
    modes = dataclasses.replace(band, heldout_by_mode={"closed": {"ttft_ms": 0.3}, "offline": {"itl_ms": 0.35}})
    f.write_text(dump_calibration(modes))
    assert load_calibration(f).heldout_by_mode == modes.heldout_by_mode
    f.write_text(
        dump_calibration(modes).replace("heldout_median_abs_error_by_mode:", "heldout_median_abs_error_by_mode: 3\nx:")
    )
    with pytest.raises(ConfigError, match="by_mode"):
        load_calibration(f)


def test_committed_calibration_publishes_its_held_out_error(validation: tuple[Predictor, Calibration]) -> None:
    """plan's uncertainty band is the committed calibration's held-out median |error| (plan/band.py)."""
    from servescope.plan.band import band_for

    _, cal = validation
    got = _held_out(validation)
    pub = cal.heldout_median_abs_error
    assert pub["output_tokens_per_s"] == pytest.approx(got["tok_s"], abs=1e-3)
    assert pub["itl_ms"] == pytest.approx(got["itl"], abs=1e-3)
    assert pub["ttft_ms"] == pytest.approx(got["ttft"], abs=1e-3)
    band = band_for(None)
    assert band.overall == pytest.approx(pub, abs=1e-3) and "held-out" in band.source
    pred, _ = validation
    by_key = {p.key: p for p in pred.points}
    results = [pred.result(by_key[k], cal.held_out[s.source]) for k, s in sorted(pred.settings.items())]
    names = {"tok_s": "output_tokens_per_s", "itl": "itl_ms", "ttft": "ttft_ms"}
    for mode, published in cal.heldout_by_mode.items():
        for m, name in names.items():
            med, n = median_abs_error([r for r in results if r.point.mode == mode], m)
            assert n >= 20 and published[name] == pytest.approx(med, abs=1e-3), (mode, m)
    assert band.by_mode == cal.heldout_by_mode and set(band.by_mode) == {"closed", "rate", "offline"}


# --- regression: the committed calibration on the committed corpus ----------------------------------
BOUNDS = {"tok_s": 0.20, "itl": 0.25, "ttft": 0.25}


@pytest.fixture(scope="module")
def validation() -> tuple[Predictor, Calibration]:
    points = load_corpus()
    return Predictor(points), load_calibration()


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
NO_REGRESSION = {"tok_s": 0.172, "itl": 0.209, "ttft": 0.334}


def _held_out(validation: tuple[Predictor, Calibration]) -> dict[str, float]:
    pred, cal = validation
    by_key = {p.key: p for p in pred.points}
    results = [pred.result(by_key[k], cal.held_out[s.source]) for k, s in sorted(pred.settings.items())]
    out = {}
    for m in METRICS:
        med, n = median_abs_error(results, m)
        assert n > 20 and med is not None, m
        out[m] = med
    return out


def test_coverage_at_least_90_percent(validation: tuple[Predictor, Calibration]) -> None:
    pred, _ = validation
    assert len(pred.settings) / len(pred.points) >= 0.90


def test_held_out_error_does_not_regress(validation: tuple[Predictor, Calibration]) -> None:
    """Leave-one-source-out: each point predicted with knobs fitted without its source."""
    got = _held_out(validation)
    for m in METRICS:
        assert got[m] <= NO_REGRESSION[m], f"{m}: held-out median |error| {got[m]:.1%} > {NO_REGRESSION[m]:.0%}"


@pytest.mark.xfail(
    strict=True,
    reason="issue 13 bounds not met (held-out 16.7% / 20.4% / 32.9% on 664 of 713 "
    "points: output tok/s and ITL within their bounds, TTFT over); docs/plan.md",
)
def test_held_out_error_within_the_issue_bounds(validation: tuple[Predictor, Calibration]) -> None:
    got = _held_out(validation)
    for m in METRICS:
        assert got[m] <= BOUNDS[m], f"{m}: held-out median |error| {got[m]:.1%} > {BOUNDS[m]:.0%}"


def test_deterministic(validation: tuple[Predictor, Calibration]) -> None:
    pred, cal = validation
    key = sorted(pred.settings)[0]
    fresh = Predictor([p for p in pred.points if p.key == key])
    assert fresh.predicted(key, cal.knobs) == pred.predicted(key, cal.knobs)


def test_multi_node_tp_all_reduce_is_hierarchical() -> None:
    """TP16 over two 8-GPU nodes: each GPU moves 2(8-1)/8 M over NVLink and only 2(2-1)/2 M/8 over its
    NIC (NCCL reduces within the node first), the NIC bytes weighed by NVLink / NIC bandwidth (9x)."""
    p = _point(
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

    p = _point(model="Llama-3.1-70B", gpus=4, tp=4, engine_version="0.10.0", input_len=1000, output_len=200)
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
    checked, counted in the engine's KV blocks (`sim.memory.sim_block_tokens`). At 1000/1000 on one H100
    the reserve caps the batch below the sequence limit."""
    from servescope.deploy.deployment import Deployment

    p = _point(
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

    old = _point(model="DeepSeek-V3", gpu="h200", gpus=8, tp=8, engine="sglang", engine_version="0.4.1", quant="fp8")
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


def test_prompt_steps_launch_cost_is_per_family_times_class() -> None:
    """prefill_layer_overhead_s = pfl.eng.<family> x pfl.arch.<class> (dense: the family's alone); the
    prompt tokens' share of the link is the fitted factor of a generation without a published bus
    bandwidth and the measured one (`PINNED`, whatever a table says) of Hopper and Ampere; an unseen
    mla-moe-early class takes the fitted mla-moe factor, as for layer.arch."""
    from servescope.plan.knobfit import _with_unseen_families

    t = {
        "pfl.eng.sglang": 2e-4,
        "pfl.arch.mla-moe": 5.0,
        "pfl.arch.moe": 2.0,
        "comm.prefill": 0.3,
        "comm.prefill.gpu.cdna3": 0.6,
        "comm.prefill.gpu.hopper": 0.1,
    }
    assert resolve_knobs(t, "sglang", "hopper", "dense").prefill_layer_overhead_s == pytest.approx(2e-4)
    assert resolve_knobs(t, "sglang", "hopper", "moe").prefill_layer_overhead_s == pytest.approx(4e-4)
    assert resolve_knobs(t, "sglang", "hopper", "mla-moe").prefill_layer_overhead_s == pytest.approx(1e-3)
    assert resolve_knobs(t, "sglang", "cdna3", "dense").comm_prefill_efficiency == pytest.approx(0.6)
    assert resolve_knobs(t, "sglang", "hopper", "dense").comm_prefill_efficiency == pytest.approx(470 / 900)
    assert resolve_knobs(t, "sglang", "ampere", "dense").comm_prefill_efficiency == pytest.approx(240 / 600)
    assert resolve_knobs({}, "sglang", "blackwell", "dense").comm_prefill_efficiency == pytest.approx(0.45)
    assert _with_unseen_families(t)["pfl.arch.mla-moe-early"] == 5.0
    assert _with_unseen_families(t)["pfl.arch.mla-moe-late"] == 5.0


def test_pinned_knobs_are_never_fitted(validation: tuple[Predictor, Calibration]) -> None:
    """A knob set by a published measurement (`PINNED`: the prompt all-reduce share of Hopper and Ampere)
    is not among the knobs any fit moves, and the committed tables do not carry it."""
    from servescope.plan.knobfit import _fit_names
    from servescope.sim.knobs import PINNED

    pred, cal = validation
    names = _fit_names(pred, sorted(pred.settings))
    assert "comm.prefill.gpu.blackwell" in names and not set(PINNED) & set(names)
    assert not set(PINNED) & set(cal.knobs)
    assert all(not set(PINNED) & set(t) for t in cal.held_out.values())


def test_by_source_rows_are_each_documents_medians() -> None:
    """`fitting.by_source`: one row per source and measured metric, with its point count, the median
    |error| in the fit and held out, and the held-out median signed error; a metric a source did not
    measure has no row."""
    from servescope.plan.knobfit import by_source
    from servescope.plan.validate import PointResult

    other = dataclasses.replace(SRC, id="other")
    pts = [_point(id=f"p{i}") for i in range(3)] + [_point(source=other, id="q")]
    meas = {"tok_s": ("output_tok_s", 100.0), "ttft": ("ttft_ms_mean", 20.0)}
    train = [PointResult(p, meas, {"tok_s": 100.0 + 10 * i, "ttft": 20.0}) for i, p in enumerate(pts)]
    held = [PointResult(p, meas, {"tok_s": v, "ttft": 10.0}) for p, v in zip(pts, (80.0, 130.0, 90.0, 150.0))]
    rows = {(r["source"], r["metric"]): r for r in by_source(train, held)}
    assert set(rows) == {("hand", "tok_s"), ("hand", "ttft"), ("other", "tok_s"), ("other", "ttft")}
    hand = rows[("hand", "tok_s")]
    assert hand["n"] == 3 and hand["train"] == pytest.approx(0.10) and hand["held_out"] == pytest.approx(0.20)
    assert hand["held_out_signed"] == pytest.approx(-0.10)
    assert rows[("other", "tok_s")]["held_out_signed"] == pytest.approx(0.5)
    assert rows[("hand", "ttft")]["held_out"] == pytest.approx(0.5) and rows[("hand", "ttft")]["train"] == 0.0


def test_compute_efficiency_is_per_family_generation_and_class() -> None:
    """compute_efficiency = comp.base x comp.gpu.<gen> x comp.eng.<family> [x comp.arch.<class> for an MoE
    class]; the DeepSeek release classes read mla-moe's factor where a table lacks theirs (resolve and
    the fit alike); the product stays clipped to 0.02..0.95; a MoE deployment's knob names carry it."""
    from servescope.plan.knobfit import _with_unseen_families
    from servescope.sim.knobs import knob_names_for

    t = {
        "comp.base": 0.5,
        "comp.gpu.hopper": 1.2,
        "comp.eng.vllm-v1": 0.8,
        "comp.arch.mla-moe": 0.5,
        "comp.arch.moe": 0.9,
        "comp.arch.mla-moe-late": 0.75,
    }
    assert resolve_knobs(t, "vllm-v1", "hopper", "dense").compute_efficiency == pytest.approx(0.48)
    assert resolve_knobs(t, "vllm-v1", "hopper", "moe").compute_efficiency == pytest.approx(0.432)
    assert resolve_knobs(t, "vllm-v1", "hopper", "mla-moe").compute_efficiency == pytest.approx(0.24)
    assert resolve_knobs(t, "vllm-v1", "hopper", "mla-moe-late").compute_efficiency == pytest.approx(0.36)
    assert resolve_knobs(t, "vllm-v1", "hopper", "mla-moe-early").compute_efficiency == pytest.approx(0.24)
    assert _with_unseen_families(t)["comp.arch.mla-moe-early"] == 0.5
    assert _with_unseen_families(t)["comp.arch.mla-moe-late"] == 0.75
    assert resolve_knobs({**t, "comp.arch.moe": 10.0}, "vllm-v1", "hopper", "moe").compute_efficiency == 0.95
    assert "comp.arch.moe" in knob_names_for("vllm-v1", "hopper", "moe")
    assert not any(n.startswith("comp.arch.") for n in knob_names_for("vllm-v1", "hopper", "dense"))


def test_prompt_steps_of_their_own_where_the_engine_does_not_mix() -> None:
    """vLLM V0 without chunked prefill and TGI run prompts in steps of their own; V0 with it, V1, SGLang
    and TensorRT-LLM mix; the validation and plan's deployment state it alike."""
    from servescope.deploy.deployment import Deployment
    from servescope.sim.defaults import mixes_steps

    assert not mixes_steps("vllm-v0", False) and not mixes_steps("tgi", False) and not mixes_steps("tgi", True)
    assert mixes_steps("vllm-v0", True) and mixes_steps("vllm-v1", True) and mixes_steps("sglang", True)
    assert mixes_steps("trtllm", True)

    def mixed(**kw: object) -> bool:
        p = _point(**kw)
        return Predictor([p]).settings[p.key].base.mixed_steps

    assert mixed() and not mixed(engine_version="0.6.3") and not mixed(engine="tgi", engine_version="2.3.0")
    assert mixed(engine_version="0.6.3", engine_args={"max_model_len": 65536})  # V0 chunks over 32K
    dep = Deployment.build(model="DeepSeek-V3-AWQ", gpu="h100", gpus=8, engine="vllm-0.7", max_model_len=8000)
    assert not dep.limits.chunked_prefill and not dep.engine_config().mixed_steps
    assert Deployment.build(model="Llama-3.1-8B", gpu="h100", gpus=1).engine_config().mixed_steps


def test_stated_max_model_len_sets_vllm_v0_chunked_prefill() -> None:
    """vLLM 0.6 with --max-model-len over 32K switches chunked prefill on with its 512-token budget;
    a point that states --enable-chunked-prefill=False runs whole prompts under a max_model_len budget."""
    p = _point(
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


def test_first_token_latency_adds_to_ttft_only() -> None:
    """ttft.base x ttft.eng.<family> is added to every request's TTFT; ITL and throughput do not move."""
    p = _point()
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


def test_sglang_request_pool_follows_its_kv_pool() -> None:
    """SGLang's default max running requests is min(max(kv_tokens / context_len x 512, 2048), 4096):
    a validation point and a plan deployment of SGLang both use it."""
    from servescope.deploy.deployment import Deployment
    from servescope.sim.defaults import sglang_max_running

    assert sglang_max_running(100_000, 131_072) == 2048
    assert sglang_max_running(676_303, 163_840) == 2113
    assert sglang_max_running(5_000_000, 131_072) == 4096
    p = _point(
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


def test_context_length_comes_from_the_config() -> None:
    """The engines' default max_model_len is the checkpoint's max_position_embeddings."""
    cfg = {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "vocab_size": 128_256,
        "intermediate_size": 14_336,
        "max_position_embeddings": 32_768,
    }
    assert parse_hf_config(cfg).context_len == 32_768
    assert get_model("DeepSeek-R1").context_len == 163_840
    assert get_model("Llama-3.1-405B").context_len == 131_072


def test_sglang_dp_attention_stays_on_the_stated_gpus() -> None:
    """SGLang `--tp 8 --enable-dp-attention --dp 8` on 8 GPUs: 8 attention ranks of one GPU each inside the
    TP group, the MoE over all 8 (stated as EP 8), never 8 replicas of TP 8 (64 GPUs); PP is refused."""
    p = _point(
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
    one, eight, hundred = (_point(id=f"c{c}", concurrency=c, **kw) for c in (1, 8, 100))
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
    v1 = _point(id="v1")
    off = _point(id="off", engine_args={"prefix_caching": False})
    v0 = _point(id="v0", engine_version="0.6.3")
    sgl = _point(id="sgl", engine="sglang", engine_version="0.5.6")
    pred = Predictor([v1, off, v0, sgl])
    assert [pred.settings[p.key].base.enable_prefix_caching for p in (v1, off, v0, sgl)] == [True, False, False, True]


def test_length_dist_states_how_lengths_varied() -> None:
    """`length_dist: uniform` (SGLang bench_serving's random dataset at range ratio 0) spreads both lengths
    around the stated means; without it a random dataset keeps fixed prompts; a bad value is refused."""
    from servescope.plan import lengths

    row = {
        **{
            k: getattr(_point(), k)
            for k in (
                "engine",
                "engine_version",
                "gpu",
                "gpus",
                "model",
                "quant",
                "mode",
                "concurrency",
                "input_len",
                "output_len",
                "dataset",
                "notes",
            )
        },
        "id": "u",
        "measured": {"output_tok_s": 10.0},
        "length_dist": "uniform",
    }
    _, [pt] = parse_source({"source": vars_of(SRC), "points": [row]})
    assert lengths.distributions(pt) == ("uniform", "uniform")
    assert lengths.distributions(dataclasses.replace(pt, length_dist="")) == ("fixed", "fixed")
    pairs = lengths.draw_pairs("uniform", "uniform", 512, 256, 4000)
    assert abs(sum(a for a, _ in pairs) / 4000 - 512) < 15 and max(a for a, _ in pairs) > 900
    with pytest.raises(ConfigError, match="length_dist"):
        parse_source({"source": vars_of(SRC), "points": [{**row, "length_dist": "zipf"}]})


def test_an_offline_burst_over_http_runs_with_the_server_defaults() -> None:
    """vLLM >= 0.9 on an H100 batches 16,384 tokens in process (LLM class) but 8,192 behind its OpenAI
    server: an offline burst sent over HTTP (`harness: server`, GPUStack's `vllm bench serve` at
    request rate inf) gets the server's budget, an in-process one the LLM class's."""
    inproc = _point(mode="offline", concurrency=None, num_prompts=100)
    served = _point(
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
    v = _point(**kw)
    s = _point(id="s", engine="sglang", engine_version="0.5.3", **kw)
    pred = Predictor([v, s])
    assert pred.settings[v.key].base.seq_overhead_blocks == 9
    assert pred.settings[s.key].base.seq_overhead_blocks == 0


def test_an_unseen_engine_family_gets_the_fitted_families_typical_knobs() -> None:
    """Fitted on vLLM and SGLang points only, the table gives TGI and TensorRT-LLM (no point ran them)
    the geometric mean of the fitted families' values for each engine knob, not the uncalibrated
    defaults; the fitted families keep their own."""
    pts = [_point(), _point(id="s", engine="sglang", engine_version="0.5.3", concurrency=8)]
    pred = Predictor(pts)
    table = fit_table(pred, sorted(pred.settings), iterations=1)
    for prefix in ("step.eng.", "layer.eng.", "seq.eng.", "ttft.eng.", "mem.eng.", "comp.eng.", "pfl.eng."):
        v, s = table[prefix + "vllm-v1"], table[prefix + "sglang"]
        assert table[prefix + "tgi"] == pytest.approx((v * s) ** 0.5)
        assert table[prefix + "trtllm"] == table[prefix + "tgi"]
    assert table["step.eng.vllm-v1"] != table["step.eng.sglang"]


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
    p = _point(model=hf, quant=quant, gpu=gpu, gpus=gpus, tp=gpus, input_len=1000, output_len=200)
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


def test_w4a16_dense_computes_at_the_knobs_efficiency_and_moe_experts_count_more() -> None:
    """AWQ / GPTQ int4: a dense model's prompt runs at the BF16 peak and the knob's efficiency, as BF16
    does (vLLM dequantizes to an FP16 matmul from 256 tokens, or runs Marlin), attention FLOPs included;
    with fewer weight bytes its prompt step is no slower than BF16's. A W4A16 MoE's routed experts count
    1 / 0.2 times their FLOPs (fused MoE kernels dequantize per token block), its other layers do not."""
    from servescope.sim.catalog.models import get_model
    from servescope.sim.placement import Layout
    from servescope.sim.profile import linear_flops_per_token, step_cost

    k = resolve_knobs(dict(DEFAULT_KNOBS), "vllm-v0", "ampere", "dense")
    a100 = get_gpu("a100")
    qwen = get_model("Qwen2.5-72B")
    cost = {q: step_cost(qwen, Layout(gpu=a100, gpus_per_node=2, tp=2, quant=q), k) for q in ("bf16", "awq", "int4")}
    for q in ("awq", "int4"):
        assert cost[q].flops_per_s == cost["bf16"].flops_per_s == a100.bf16_flops
        assert cost[q].compute_efficiency == cost["bf16"].compute_efficiency == k.compute_efficiency
        assert cost[q].flops_per_token == cost["bf16"].flops_per_token
        assert cost[q].attn_flops_per_token_ctx == cost["bf16"].attn_flops_per_token_ctx
        prompt = StepShape(prefill_seqs=1, prefill_tokens=8192, prefill_ctx_pairs=8192 * 8192 / 2)
        assert step_time_s(cost[q], prompt) <= step_time_s(cost["bf16"], prompt)
    v3 = get_model("DeepSeek-V3")
    routed = v3.experts_per_token * v3.expert_params() * v3.moe_layers
    assert linear_flops_per_token(v3, "awq") == pytest.approx(2.0 * v3.params_active + 2.0 * routed * 4.0)
    assert linear_flops_per_token(v3, "fp8") == linear_flops_per_token(v3, "bf16") == 2.0 * v3.params_active


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


def test_vllm_v1_batch_budget_by_device_and_harness() -> None:
    """vLLM V1's EngineArgs defaults: behind the OpenAI server 2048 batched tokens and 256 sequences,
    8192 for the LLM class, but 8192 / 16384 on an H100 or H200 already in 0.8 (vllm PR #12369); from
    0.9 a >= 70 GiB GPU other than an A100 gets 1024 sequences and 8192 / 16384. An A100 keeps the
    small budget whatever the version."""
    from servescope.sim.defaults import engine_defaults

    def d(version: str, gpu: str, gib: float, offline: bool) -> tuple[int, int]:
        e = engine_defaults(
            "vllm-v1", max_model_len=8192, version=version, gpu=gpu, gpu_memory_gib=gib, offline=offline
        )
        return e.max_num_seqs, e.max_num_batched_tokens

    assert d("0.10.2", "h100", 79.6, False) == (1024, 8192)
    assert d("0.10.2", "h100", 79.6, True) == (1024, 16384)
    assert d("0.10.2", "a100", 80.0, False) == (256, 2048)
    assert d("0.10.2", "a100", 80.0, True) == (256, 8192)
    assert d("0.8.4", "h200", 140.4, False) == (256, 8192)
    assert d("0.8.5", "h100", 79.6, False) == (256, 8192)
    assert d("0.8.5", "h100", 79.6, True) == (256, 16384)
    assert d("0.8.5", "mi300x", 192.0, False) == (256, 2048)  # 0.8 chose by device name, not memory
    assert d("0.8.5", "a100", 80.0, False) == (256, 2048)


def test_vllm_v0_chunked_budget_for_long_contexts_by_release() -> None:
    """vLLM V0 switches chunked prefill on for contexts over 32K, with 512 batched tokens before 0.6.5
    and 2048 from 0.6.5 (vllm PR #10544); up to 32K it stays off and the budget covers a whole prompt."""
    from servescope.sim.defaults import engine_defaults

    def d(version: str, max_len: int) -> tuple[bool, int]:
        e = engine_defaults("vllm-v0", max_model_len=max_len, version=version, gpu="h100", gpu_memory_gib=79.6)
        return e.chunked_prefill, e.max_num_batched_tokens

    assert d("0.6.3.post2.dev308", 91680) == (True, 512)
    assert d("0.6.4.post1", 131072) == (True, 512)
    assert d("0.6.5", 131072) == (True, 2048)
    assert d("0.7.3", 131072) == (True, 2048)
    assert d("", 131072) == (True, 512)
    assert d("0.7.3", 16384) == (False, 16384)


def test_a_stated_max_model_len_is_the_engines_even_below_the_default() -> None:
    """A source's `--max-model-len` (engine_args) is what the engine ran with, 4,096 included (the Qwen2.5
    speed benchmark, inference-bench); unstated, the validation assumes at least 8,192; either way never
    less than the point's own prompt + output."""
    stated = _point(id="a", engine_args={"max_model_len": 4096})
    unstated = _point(id="b")
    too_short = _point(id="c", input_len=6000, output_len=2048, engine_args={"max_model_len": 4096})
    pred = Predictor([stated, unstated, too_short])
    assert pred.settings[stated.key].base.max_model_len == 4096
    assert pred.settings[unstated.key].base.max_model_len == 8192
    assert pred.settings[too_short.key].base.max_model_len >= 6000 + 2048


def test_speculative_decoding_other_than_mtp_is_refused_not_run_plain() -> None:
    """MTP points (`speculative: mtp-N`) are modelled (draft tokens, fitted acceptance); a draft model
    (EAGLE3, GPUStack's and the SGLang attention-backend doc's runs) is not, and run as plain decoding it
    would be off by its speedup: such a point says why it is not expressible."""
    mtp = _point(id="m", speculative="mtp-3")
    eagle = _point(id="e", speculative="eagle3 draft=x steps=3 topk=1 draft_tokens=4")
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
    inside = _point(id="a", concurrency=2, engine_args={"cuda_graph_max_bs": 2})
    beyond = _point(id="b", concurrency=16, engine_args={"cuda_graph_max_bs": 2})
    graphed = _point(id="g", concurrency=16)
    rate = _point(id="c", mode="rate", concurrency=None, request_rate=16.0, engine_args={"cuda_graph_max_bs": 2})
    pred = Predictor([inside, beyond, graphed, rate])
    assert not pred.unexpressible
    assert [pred.settings[p.key].base.cost.graph_max_seqs for p in (inside, beyond, graphed, rate)] == [2, 2, 512, 2]
    knobs = load_calibration().knobs
    eager, fast = (pred.predicted(p.key, knobs)["itl"] for p in (beyond, graphed))
    assert eager > fast * 1.05  # 16 sequences a step, every step eager


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


def test_only_points_whose_tp_spans_nodes_inform_the_internode_latency() -> None:
    """comm.latency_s.internode is fitted from points whose TP group is wider than a node (and moves
    their prediction); a one-node TP8 point neither reads it nor re-simulates when it moves."""
    from servescope.plan.knobfit import _fit_names

    wide = _point(id="w", model="DeepSeek-R1", quant="fp8", gpus=16, tp=16, engine="sglang", engine_version="0.4.6")
    narrow = _point(
        id="n", model="DeepSeek-R1", quant="fp8", gpu="h200", gpus=8, tp=8, engine="sglang", engine_version="0.4.6"
    )
    pred = Predictor([wide, narrow])
    assert "comm.latency_s.internode" in _fit_names(pred, [wide.key])
    assert "comm.latency_s.internode" not in _fit_names(pred, [narrow.key])
    t = dict(DEFAULT_KNOBS)
    up = {**t, "comm.latency_s.internode": 10 * t["comm.latency_s.internode"]}
    assert pred.predicted(wide.key, up)["itl"] > pred.predicted(wide.key, t)["itl"] * 1.05
    assert pred.predicted(narrow.key, up) == pred.predicted(narrow.key, t)


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


def test_source_weights_balance_a_large_source(validation: tuple[Predictor, Calibration]) -> None:
    """A fold's residuals weigh min(1, sqrt(60 / its residual count)) in a fit, counted over that fit's keys."""
    from servescope.plan.knobfit import _source_weights

    pred, _ = validation
    keys = sorted(pred.settings)
    w = _source_weights(pred, keys)
    assert set(w) == {s.source for s in pred.settings.values()}
    n = sum(
        1
        for k in keys
        if pred.settings[k].source == "gpustack-performance-lab-2025"
        for m in METRICS
        if m in pred.measured[k]
    )
    assert n > 60 and w["gpustack-performance-lab-2025"] == pytest.approx((60 / n) ** 0.5)
    assert w["vllm-pr-23151-qwen3-30b-a3b-h100"] == 1.0  # a small source keeps its full weight
    # counted over the fit's own keys: a fit of one small source's points weighs them 1
    small = [k for k in keys if pred.settings[k].source == "tjtanaa-inprocess"]
    assert _source_weights(pred, small) == {"tjtanaa-inprocess": 1.0}


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


def test_a_stated_stream_interval_makes_itl_the_gap_between_chunks() -> None:
    """SGLang `--stream-interval k` (engine_args stream_interval): the server sends the first token
    alone, then every k-th, so benchmark_serving's ITL is the gap between chunks. The engine runs the
    same steps: TPOT and throughput do not move; the mean ITL is the time after the first token over
    ceil((tokens - 1) / k) gaps (128 tokens, k = 10: 127 / 13 of a token's gap); the median is k step
    gaps."""
    stats = {"output_tok_s": 100.0, "itl_ms_mean": 10.0, "itl_ms_median": 10.0, "tpot_ms_mean": 10.0}
    one = _point(id="one", engine="sglang", engine_version="0.5.6", measured=stats)
    ten = _point(id="ten", engine="sglang", engine_version="0.5.6", measured=stats, engine_args={"stream_interval": 10})
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
    chunk = _point(id="chunk", **kw)
    token = _point(source=token_src, id="token", **kw)
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

    p = _point(
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
