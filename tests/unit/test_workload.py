"""Workload building: the --dataset grammar, length mixtures and the intended prefix hit rate."""

from __future__ import annotations

import numpy as np
import pytest

from servescope.errors import ConfigError
from servescope.workload.random import mixture_lengths
from servescope.workload.spec import SHARED_PREFIX_PRESET, parse_dataset
from servescope.workload.synthetic import intended_hit_rate


# ------------------------------------------------------------------ --dataset grammar
def test_parse_random_forms() -> None:
    assert parse_dataset("random").mix == []
    one = parse_dataset("random:1024:256").mix
    assert [(m.input_len, m.output_len, m.weight) for m in one] == [(1024, 256, 1.0)]
    mix = parse_dataset("random:128:64@25%,512:128@75%").mix
    assert [(m.input_len, m.output_len) for m in mix] == [(128, 64), (512, 128)]
    assert [m.weight for m in mix] == pytest.approx([0.25, 0.75])
    # an unweighted part takes what is left
    rest = parse_dataset("random:100:10@10%,200:20").mix
    assert [m.weight for m in rest] == pytest.approx([0.1, 0.9])


@pytest.mark.parametrize(
    "bad",
    [
        "random:abc",
        "random:10:10@60%,20:20@50%",
        "random:0:5",
        "random:5:5@-1%",
        "nosuch",
        "jsonl",
        "shared-prefix:groups=0",
        "shared-prefix:users=3",
        "shared-prefix:groups=x",
    ],
)
def test_parse_rejects(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_dataset(bad)


def test_parse_paths_and_options() -> None:
    s = parse_dataset("hf:/data/aime.parquet:prompt=problem,split=train")
    assert (s.kind, s.path, s.options) == ("hf", "/data/aime.parquet", {"prompt": "problem", "split": "train"})
    s = parse_dataset("sharegpt:/x/chats.json")
    assert (s.path, s.options) == ("/x/chats.json", {})
    s = parse_dataset("trace:t.jsonl:speedup=2")
    assert s.opt_float("speedup") == 2.0
    sp = parse_dataset("shared-prefix")
    assert sp.kind == "shared-prefix" and sp.options == {}
    assert SHARED_PREFIX_PRESET == {"groups": 10, "prompts": 50, "system": 2000, "question": 1200}
    assert parse_dataset("shared-prefix:groups=2,prompts=3").opt_int("groups") == 2


# ------------------------------------------------------------------ mixtures and intent
def test_mixture_lengths_exact_shares() -> None:
    ins, outs = mixture_lengths(1000, [(128, 64, 0.25), (512, 128, 0.75)], 0.0, np.random.default_rng(0))
    assert (ins == 128).sum() == 250 and (ins == 512).sum() == 750
    assert all((o == 64) == (i == 128) for i, o in zip(ins.tolist(), outs))
    # shuffled, not blocks
    assert len(set(ins[:100].tolist())) == 2
    spread, _ = mixture_lengths(400, [(100, None, 1.0)], 0.5, np.random.default_rng(0))
    assert spread.min() >= 50 and spread.max() <= 150 and len(set(spread.tolist())) > 20


def test_intended_hit_rate_counts_first_of_group_as_miss() -> None:
    # 10 groups x 50 prompts, 2000 shared of 3200: (490 * 2000) / (500 * 3200)
    groups = [k // 50 for k in range(500)]
    assert intended_hit_rate(groups, 2000, [3200] * 500) == pytest.approx(490 * 2000 / (500 * 3200))
    assert intended_hit_rate([0, 1, 2], 10, [20, 20, 20]) == 0.0
