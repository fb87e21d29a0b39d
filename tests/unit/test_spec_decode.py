"""Speculative decoding's figures (summary `engine_view.speculative`): from two recorded vLLM pages of a GPU
server with EAGLE-3 (tests/fixtures/engines/metrics/vllm_eagle3_*.prom, constructed in vLLM's exact
exposition format; see its README), read by servescope's reader, against a hand computation from the
counters' deltas read by the reference parser (prometheus_client), with vLLM's definitions
(vllm/v1/spec_decode/metrics.py): acceptance rate = accepted / draft tokens, mean acceptance length =
1 + accepted / drafts, per position accepted there / drafts."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from servescope.results.columns import RecordColumns
from servescope.results.engineview import engine_view, speculative_view
from servescope.target.servermetrics import read_page, spec_window
from tests.support import oracle
from tests.support.synth import synth_records, synth_run_info

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "metrics"


def _reference(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_total"):
                key = s.name + (f"[{s.labels['position']}]" if "position" in s.labels else "")
                out[key] = out.get(key, 0.0) + s.value
    return out


def test_acceptance_from_a_recorded_eagle3_page_equals_the_hand_computation() -> None:
    before_text = (PAGES / "vllm_eagle3_before.prom").read_text()
    after_text = (PAGES / "vllm_eagle3_after.prom").read_text()
    ref_b, ref_a = _reference(before_text), _reference(after_text)
    d = {k: ref_a[k] - ref_b[k] for k in ref_a}
    drafts = d["vllm:spec_decode_num_drafts_total"]
    draft_tokens = d["vllm:spec_decode_num_draft_tokens_total"]
    accepted = d["vllm:spec_decode_num_accepted_tokens_total"]
    assert (drafts, draft_tokens, accepted) == (5000, 15000, 9350)  # what the README says the pages hold

    w = spec_window(read_page(before_text), read_page(after_text))
    assert w is not None
    recs = synth_records(40, seed=3)
    view = speculative_view(w, RecordColumns.from_records(recs), streamed=True)
    assert (view["drafts"], view["draft_tokens"], view["accepted_tokens"]) == (drafts, draft_tokens, accepted)
    assert view["acceptance_rate"] == pytest.approx(accepted / draft_tokens, rel=1e-12)  # 0.6233
    assert view["mean_acceptance_length"] == pytest.approx(1 + accepted / drafts, rel=1e-12)  # 2.87
    assert [p["position"] for p in view["per_position"]] == [0, 1, 2]
    for p in view["per_position"]:
        n = d[f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{p['position']}]"]
        assert p["accepted_tokens"] == n and p["acceptance_rate"] == pytest.approx(n / drafts, rel=1e-12)
    assert [p["acceptance_rate"] for p in view["per_position"]] == pytest.approx([0.82, 0.61, 0.44])
    assert view["metrics_used"]["accepted_per_position"] == "vllm:spec_decode_num_accepted_tokens_per_pos"
    # vLLM counts a bonus token per draft: generated = accepted + drafts over the window
    assert d["vllm:generation_tokens_total"] == accepted + drafts
    ok = [r for r in recs if r.status == "ok"]
    assert view["client_tokens_per_chunk"] == pytest.approx(
        sum(r.output_tokens for r in ok) / sum(r.chunks for r in ok), rel=1e-12
    )


def test_no_speculation_no_block_and_a_restart_gives_none() -> None:
    plain = read_page((PAGES / "vllm.prom").read_text())
    assert spec_window(plain, plain) is None  # no drafts counter on the page
    before = read_page((PAGES / "vllm_eagle3_before.prom").read_text())
    after = read_page((PAGES / "vllm_eagle3_after.prom").read_text())
    assert spec_window(after, before) is None  # counters went down: a restart, the deltas mean nothing
    recs = synth_records(20, seed=1)
    s = oracle.summarize(recs, run=synth_run_info("v", recs))
    cols = RecordColumns.from_records(recs)
    w = spec_window(before, after)
    view = engine_view({}, s, cols, w)  # no histograms, but speculation: the block is there
    assert view is not None and view["speculative"] is not None and view["speculative"]["drafts"] == 5000
    empty = spec_window(before, before)
    assert empty is not None
    zero = speculative_view(empty, cols, streamed=False)
    assert zero["acceptance_rate"] is None and zero["mean_acceptance_length"] is None
    assert zero["client_tokens_per_chunk"] is None  # not streamed: one chunk per body says nothing


def test_the_report_shows_the_figures() -> None:
    from servescope.report.engineview import engine_view_section

    before = read_page((PAGES / "vllm_eagle3_before.prom").read_text())
    after = read_page((PAGES / "vllm_eagle3_after.prom").read_text())
    recs = synth_records(20, seed=1)
    s = oracle.summarize(recs, run=synth_run_info("v", recs))
    s["engine_view"] = engine_view({}, s, RecordColumns.from_records(recs), spec_window(before, after))
    html = engine_view_section(s)
    assert "Speculative decoding" in html
    for text in ("5,000", "15,000", "9,350", "62.3%", "2.870", "0: 82.0%, 1: 61.0%, 2: 44.0%"):
        assert text in html, text
    s["engine_view"]["speculative"] = None
    assert "Speculative decoding" not in engine_view_section(s)
