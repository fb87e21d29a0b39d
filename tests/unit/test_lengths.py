"""Request lengths of corpus points (plan/lengths.py): the generated length over the requested one,
ShareGPT's long tail, and the stated length distributions."""

from __future__ import annotations

import dataclasses

import pytest

from servescope.errors import ConfigError
from servescope.plan.corpus import parse_source
from servescope.plan.validate import Predictor, _lengths
from tests.support.corpus_points import SRC, corpus_point, vars_of


def test_generated_length_overrides_the_requested_one() -> None:
    """Measured output tok/s / req/s is what the requests generated: 700 of a requested 2048 (EOS, or a
    random dataset drawing up to 2048) is simulated as lengths uniform around 700."""
    p = corpus_point(output_len=2048, measured={"output_tok_s": 700.0, "req_s": 1.0, "ttft_ms_median": 50.0})
    s = Predictor([p]).settings[p.key]
    assert (s.output_len, s.out_dist, s.in_dist) == (700, "uniform", "fixed")
    outs = [o for _, o in _lengths(s)]
    assert min(outs) >= 1 and max(outs) <= 1399
    same = corpus_point(output_len=2048, measured={"output_tok_s": 2040.0, "req_s": 1.0})
    assert Predictor([same]).settings[same.key].out_dist == "fixed"


def test_sharegpt_lengths_are_long_tailed_with_the_stated_means() -> None:
    p = corpus_point(
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


def test_length_dist_states_how_lengths_varied() -> None:
    """`length_dist: uniform` (SGLang bench_serving's random dataset at range ratio 0) spreads both lengths
    around the stated means; without it a random dataset keeps fixed prompts; a bad value is refused."""
    from servescope.plan import lengths

    row = {
        **{
            k: getattr(corpus_point(), k)
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
