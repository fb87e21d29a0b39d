"""The knob table's file (deploy/calibration.py): a calibration and its held-out figures round-trip."""

from __future__ import annotations

import dataclasses

import pytest

from servescope.deploy.calibration import Calibration, dump_calibration, load_calibration
from servescope.errors import ConfigError


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
