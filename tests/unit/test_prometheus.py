"""The one Prometheus reader against the reference one (prometheus_client's text parser) on every
engine's page in tests/fixtures/engines/metrics, and the one engine table that names what is on them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from servescope.target.engines import (
    ENGINE_VIEW_ROLES,
    HISTOGRAMS,
    KNOWN_ENGINES,
    METRIC_PREFIXES,
    METRICS,
    METRICS_PATHS,
    ROLES,
)
from servescope.target.prometheus import family_names, parse_prometheus
from servescope.target.servermetrics import server_summary

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "metrics"
NAMES = sorted(p.stem for p in PAGES.glob("*.prom"))


def _oracle(text: str) -> dict[str, float]:
    """What parse_prometheus promises, computed from prometheus_client's samples."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith(("_bucket", "_created")) or math.isnan(s.value):
                continue
            name = s.name.removesuffix("_total")
            out[name] = out.get(name, 0.0) + s.value
    return out


def test_there_are_pages() -> None:
    assert {"vllm", "sglang", "trtllm", "llamacpp"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_same_values_as_prometheus_client(name: str) -> None:
    text = (PAGES / f"{name}.prom").read_text()
    ours = parse_prometheus(text)
    assert ours == pytest.approx(_oracle(text), rel=1e-12)
    assert len(ours) > 5


@pytest.mark.parametrize("name", NAMES)
def test_family_names_as_prometheus_client(name: str) -> None:
    text = (PAGES / f"{name}.prom").read_text()
    # prometheus_client names a counter's family without _total, and keeps `_created` as its own gauge family
    want = {f.name.removesuffix("_created") for f in text_string_to_metric_families(text)}
    assert family_names(text) == want


def test_awkward_lines() -> None:
    text = (
        '# HELP x a "quoted" } help\n'
        'x{path="/a}b",q="say \\"hi\\"",z=""} 1.5 1700000000000\n'  # `}` and escaped quotes in values
        "x 2\n"
        "y_total 3e2\n"
        'y_total{a="b"} +Inf\n'
        "z NaN\n"
        "\n"
        'w{a="1"} -0.5\n'
    )
    got = parse_prometheus(text)
    assert got == _oracle(text) == {"x": 3.5, "y": math.inf, "w": -0.5}
    assert family_names(text) == {"x", "y", "z", "w"}
    # what the reference reader refuses, ours skips (a page is best effort outside the clock)
    assert parse_prometheus(text + "not a sample line\nv notanumber\n") == got


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "llamacpp"])
def test_the_table_names_what_is_on_each_page(engine: str) -> None:
    prof = KNOWN_ENGINES[engine]
    names = family_names((PAGES / f"{engine}.prom").read_text())
    assert prof.metric_prefix is not None and any(n.startswith(prof.metric_prefix) for n in names)
    for role, tried in prof.metrics.items():
        assert role in ROLES
        if role == "prefix_hits" and engine == "llamacpp":
            continue  # newer builds only; the recorded page is of an older one
        assert tried[0] in names, (engine, role, tried)
    for role, tried in prof.histograms.items():
        assert role in ENGINE_VIEW_ROLES
        if role == "inference":
            continue  # the recorded page was written before the emulator served vLLM's inference histogram
        assert tried[0] in names, (engine, role, tried)


def test_table_wide_views_keep_the_table_order() -> None:
    assert METRICS_PATHS == ("/metrics", "/prometheus/metrics")
    assert KNOWN_ENGINES["trtllm"].metrics_path == "/prometheus/metrics"
    assert [p for p, _ in METRIC_PREFIXES] == ["vllm:", "sglang:", "trtllm_", "tgi_", "llamacpp:"]
    assert METRICS["kv_usage"] == (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
        "trtllm_kv_cache_utilization",
    )
    assert HISTOGRAMS["itl"][:2] == ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")


def test_trtllm_window_from_two_pages() -> None:
    before = parse_prometheus((PAGES / "trtllm.prom").read_text())
    after = parse_prometheus((PAGES / "trtllm_after.prom").read_text())
    s = server_summary(before, after)
    assert s is not None
    assert s["generation_tokens"] == 10 * 128 and s["prompt_tokens"] == 10 * 512
    assert s["kv_usage"] == 0.4375 and s["running"] == 3.0
    assert s["latency_ms"]["ttft_mean_ms"] == pytest.approx(45.0)
    assert s["latency_ms"]["itl_mean_ms"] == pytest.approx(12.0)
    assert s["metrics_used"]["kv_usage"] == "trtllm_kv_cache_utilization"
