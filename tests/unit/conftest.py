"""Unit-test fixtures shared by the plan validation's test modules."""

from __future__ import annotations

import pytest

from servescope.deploy.calibration import Calibration, load_calibration
from servescope.plan.corpus import load_corpus
from servescope.plan.validate import Predictor


@pytest.fixture(scope="session")
def validation() -> tuple[Predictor, Calibration]:
    """The committed corpus as the model states it, and the committed calibration: one Predictor for
    the session, so its memo of simulated points serves every module that predicts the corpus."""
    points = load_corpus()
    return Predictor(points), load_calibration()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`--dist loadgroup`, scripts/test-unit), every test of the corpus-wide
    Predictor runs on one worker, which simulates the corpus once instead of once per worker."""
    for item in items:
        if "validation" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("validation"))
