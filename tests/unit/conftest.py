"""Unit-test fixtures shared by the plan validation's test modules."""

from __future__ import annotations

import pytest

from servescope.deploy.calibration import Calibration, load_calibration
from servescope.plan.corpus import load_corpus
from servescope.plan.validate import Predictor


@pytest.fixture(scope="module")
def validation() -> tuple[Predictor, Calibration]:
    """The committed corpus as the model states it, and the committed calibration."""
    points = load_corpus()
    return Predictor(points), load_calibration()
