"""The memory fit's layout defaults (plan/memfit.py): TP within a node, PP across nodes."""

from __future__ import annotations

import pytest

from servescope.errors import ConfigError
from servescope.plan.memfit import PlanArgs, resolve_layout
from servescope.sim.catalog.gpus import get_gpu
from servescope.sim.catalog.models import get_model


def test_layout_defaults_tp_in_node_pp_across_nodes() -> None:
    m, g = get_model("DeepSeek-R1"), get_gpu("h100")
    lay = resolve_layout(PlanArgs(model="DeepSeek-R1", gpus=8, nodes=2), m, g)
    assert (lay.tp, lay.pp, lay.dp, lay.ep, lay.quant) == (8, 2, 1, 1, "fp8")
    lay = resolve_layout(PlanArgs(model="x", gpus=8, nodes=2, tp=16), m, g)
    assert (lay.tp, lay.pp, lay.dp) == (16, 1, 1)
    lay = resolve_layout(PlanArgs(model="x", gpus=8, nodes=2, tp=1, dp=16, ep=16), m, g)
    assert (lay.tp, lay.pp, lay.dp, lay.ep) == (1, 1, 16, 16)
    lay = resolve_layout(PlanArgs(model="x", gpus=8, dp=2), m, g)
    assert (lay.tp, lay.pp, lay.dp) == (4, 1, 2)
    with pytest.raises(ConfigError):
        resolve_layout(PlanArgs(model="x", gpus=8, tp=3), m, g)
