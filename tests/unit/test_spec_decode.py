"""Speculative decoding's figures (summary `engine_view.speculative`): from two vLLM pages recorded around a
servescope run with EAGLE-3 on (tests/fixtures/engines/metrics/vllm_eagle3_cpu_*.prom: vLLM 0.32.0's CPU
build, the tiny Llama with tests/support/tiny_eagle.py's draft, 3 speculative tokens; made by
tests/support/record_eagle_pages.py, see the folder's README), read by servescope's reader, against a hand
computation from the counters' deltas read by the reference parser (prometheus_client), with vLLM's
definitions (vllm/v1/spec_decode/metrics.py): acceptance rate = accepted / draft tokens, mean acceptance
length = 1 + accepted / drafts, per position accepted there / drafts."""

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
BEFORE, AFTER = "vllm_eagle3_cpu_before.prom", "vllm_eagle3_cpu_after.prom"
RUN_REQUESTS, RUN_OUTPUT_LEN = 16, 48  # the recorded run (record_eagle_pages.RUN_ARGS), ignore_eos


def _reference(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_total"):
                key = s.name + (f"[{s.labels['position']}]" if "position" in s.labels else "")
                out[key] = out.get(key, 0.0) + s.value
    return out


def test_acceptance_from_recorded_eagle3_pages_equals_the_hand_computation() -> None:
    before_text = (PAGES / BEFORE).read_text()
    after_text = (PAGES / AFTER).read_text()
    ref_b, ref_a = _reference(before_text), _reference(after_text)
    d = {k: ref_a[k] - ref_b[k] for k in ref_a}
    drafts = d["vllm:spec_decode_num_drafts_total"]
    draft_tokens = d["vllm:spec_decode_num_draft_tokens_total"]
    accepted = d["vllm:spec_decode_num_accepted_tokens_total"]
    assert ref_b["vllm:spec_decode_num_drafts_total"] > 0  # the server had served before the window
    assert (drafts, draft_tokens, accepted) == (196, 588, 572)  # what the README says the pages hold
    assert draft_tokens == 3 * drafts  # num_speculative_tokens 3: every draft proposes 3

    w = spec_window(read_page(before_text), read_page(after_text))
    assert w is not None
    recs = synth_records(40, seed=3)
    view = speculative_view(w, RecordColumns.from_records(recs), streamed=True)
    assert (view["drafts"], view["draft_tokens"], view["accepted_tokens"]) == (drafts, draft_tokens, accepted)
    assert view["acceptance_rate"] == pytest.approx(accepted / draft_tokens, rel=1e-12)  # 0.9728
    assert view["mean_acceptance_length"] == pytest.approx(1 + accepted / drafts, rel=1e-12)  # 3.918
    assert [p["position"] for p in view["per_position"]] == [0, 1, 2]
    for p in view["per_position"]:
        n = d[f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{p['position']}]"]
        assert p["accepted_tokens"] == n and p["acceptance_rate"] == pytest.approx(n / drafts, rel=1e-12)
    assert sum(p["accepted_tokens"] for p in view["per_position"]) == accepted
    rates = [p["acceptance_rate"] for p in view["per_position"]]
    assert rates == sorted(rates, reverse=True)  # a later position is accepted only after the earlier ones
    assert view["metrics_used"]["accepted_per_position"] == "vllm:spec_decode_num_accepted_tokens_per_pos"
    # the window holds the recorded run only (16 requests of exactly 48 tokens): each request's first token
    # from its prefill, then per draft the accepted tokens and the target's bonus one, less those past
    # max_tokens in a request's last step (here 16 + 572 + 196 = 784: one per request)
    generated = d["vllm:generation_tokens_total"]
    assert generated == RUN_REQUESTS * RUN_OUTPUT_LEN
    assert generated <= RUN_REQUESTS + accepted + drafts <= generated + RUN_REQUESTS * 3
    ok = [r for r in recs if r.status == "ok"]
    assert view["client_tokens_per_chunk"] == pytest.approx(
        sum(r.output_tokens for r in ok) / sum(r.chunks for r in ok), rel=1e-12
    )


def test_no_speculation_no_block_and_a_restart_gives_none() -> None:
    plain = read_page((PAGES / "vllm.prom").read_text())
    assert spec_window(plain, plain) is None  # no drafts counter on the page
    before = read_page((PAGES / BEFORE).read_text())
    after = read_page((PAGES / AFTER).read_text())
    assert spec_window(after, before) is None  # counters went down: a restart, the deltas mean nothing
    recs = synth_records(20, seed=1)
    s = oracle.summarize(recs, run=synth_run_info("v", recs))
    cols = RecordColumns.from_records(recs)
    w = spec_window(before, after)
    view = engine_view({}, s, cols, w)  # no histograms, but speculation: the block is there
    assert view is not None and view["speculative"] is not None and view["speculative"]["drafts"] == 196
    empty = spec_window(before, before)
    assert empty is not None
    zero = speculative_view(empty, cols, streamed=False)
    assert zero["acceptance_rate"] is None and zero["mean_acceptance_length"] is None
    assert zero["client_tokens_per_chunk"] is None  # not streamed: one chunk per body says nothing


def test_the_report_shows_the_figures() -> None:
    from servescope.report.engineview import engine_view_section

    before = read_page((PAGES / BEFORE).read_text())
    after = read_page((PAGES / AFTER).read_text())
    recs = synth_records(20, seed=1)
    s = oracle.summarize(recs, run=synth_run_info("v", recs))
    s["engine_view"] = engine_view({}, s, RecordColumns.from_records(recs), spec_window(before, after))
    html = engine_view_section(s)
    assert "Speculative decoding" in html
    for text in ("196", "588", "572", "97.3%", "3.918", "0: 98.0%, 1: 97.4%, 2: 96.4%"):
        assert text in html, text
    s["engine_view"]["speculative"] = None
    assert "Speculative decoding" not in engine_view_section(s)
