"""plan's uncertainty band (plan/band.py): where it comes from and how it follows the kind of load."""

from __future__ import annotations

import pytest

from servescope.deploy.calibration import Calibration
from servescope.plan.knobfit import median_abs_error
from servescope.plan.validate import Predictor
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
