"""Layout (sim/placement.py): the GPU count, the parallel split and the precisions it accepts."""

from __future__ import annotations

import pytest

from servescope.errors import ConfigError
from servescope.sim.catalog.gpus import get_gpu
from servescope.sim.placement import Layout

H100, H200 = get_gpu("h100"), get_gpu("h200")


def test_layout_rejects_a_gpu_count_a_quant_and_an_ep_it_cannot_hold() -> None:
    with pytest.raises(ConfigError):
        Layout(gpu=H100, gpus_per_node=8, tp=4)  # 4 != 8 GPUs
    with pytest.raises(ConfigError):
        Layout(gpu=H100, gpus_per_node=1, tp=1, quant="fp4")
    with pytest.raises(ConfigError):
        Layout(gpu=H200, tp=8, ep=3, quant="fp8")  # 3 does not divide 8
