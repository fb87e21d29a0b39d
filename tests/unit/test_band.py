"""plan's uncertainty band (plan/band.py): where it comes from and how it follows the kind of load."""

from __future__ import annotations

import pytest

from servescope.deploy.calibration import Calibration
from servescope.deploy.deployment import Deployment
from servescope.plan.knobfit import median_abs_error
from servescope.plan.validate import Predictor
from servescope.plan.whatif import whatif
from tests.support.corpus_points import held_out_errors


def test_committed_calibration_publishes_its_held_out_error(validation: tuple[Predictor, Calibration]) -> None:
    """plan's uncertainty band is the committed calibration's held-out median |error| (plan/band.py)."""
    from servescope.plan.band import band_for

    _, cal = validation
    got = held_out_errors(validation)
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
