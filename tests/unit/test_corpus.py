"""The measurement corpus: it loads, every point carries its provenance, the schema check bites."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from servescope.errors import ConfigError
from servescope.plan.corpus import MODES, corpus_files, load_corpus, parse_source
from tests.support.corpus_points import SRC, corpus_point, vars_of

SEEDS = Path(__file__).resolve().parents[3] / "shared" / "seeds"


def test_corpus_loads_with_enough_points_and_sources() -> None:
    points = load_corpus()
    sources = {p.source.id for p in points}
    assert len(points) >= 150
    assert len(sources) >= 8
    assert len({p.key for p in points}) == len(points)


def test_every_point_has_provenance() -> None:
    for p in load_corpus():
        s = p.source
        assert s.url.startswith("https://") and s.title and s.publisher and s.kind, p.key
        assert re.match(r"^\d{4}-\d{2}(-\d{2})?$", s.date), (p.key, s.date)
        assert p.engine and p.gpu and p.gpus >= 1 and p.model, p.key
        assert p.mode in MODES, p.key
        assert p.measured and all(v > 0 for v in p.measured.values()), p.key
        assert p.notes, f"{p.key}: say where in the source the figure is"
        if p.mode == "closed":
            assert p.concurrency, p.key
        if p.mode == "rate":
            assert p.request_rate, p.key


def _seed_titles() -> list[str]:
    titles = []
    for f in sorted(SEEDS.iterdir()):
        head = f.read_text(encoding="utf-8", errors="replace")[:3000]
        m = re.search(r'^title:\s*"?([^"\n]+)', head, re.M) or re.search(r"^#\s+(.+)$", head, re.M)
        if m:
            titles.append(m.group(1).strip().lower())
    return titles


def test_no_figures_from_the_test_only_seed_documents() -> None:
    """The four seed articles are test-only: no corpus source may be one of them (by title), and none
    may come from the seeds' publishers' DeepSeek-R1 posts (dstack MI300X vs H200, Azure)."""
    if not SEEDS.is_dir():
        pytest.skip("seed documents not present")
    titles = _seed_titles()
    assert len(titles) >= 3
    for p in load_corpus():
        t = p.source.title.lower()
        assert not any(seed in t or t in seed for seed in titles), p.key
        url = p.source.url.lower()
        assert "azure" not in url and "h200-mi300x-deep" not in url and "deepseek-v3-r1-671b-on-8xh100" not in url


def _doc() -> dict:
    _name, text = corpus_files()[0]
    return yaml.safe_load(text)


def test_schema_check_rejects_a_point_without_a_url_or_measurement() -> None:
    doc = _doc()
    doc["source"]["url"] = "http://example.com/x"
    with pytest.raises(ConfigError, match="https"):
        parse_source(doc)
    doc = _doc()
    doc["points"][0]["measured"] = {}
    with pytest.raises(ConfigError, match="measured"):
        parse_source(doc)
    doc = _doc()
    doc["points"][0]["measured"] = {"tok_per_gpu": 3.0}
    with pytest.raises(ConfigError, match="unknown measured"):
        parse_source(doc)
    doc = _doc()
    del doc["points"][0]["engine"]
    with pytest.raises(ConfigError, match="engine"):
        parse_source(doc)


def test_a_directory_of_sources_loads_and_file_names_must_match_ids(tmp_path: Path) -> None:
    name, text = corpus_files()[0]
    (tmp_path / name).write_text(text)
    assert len(load_corpus(tmp_path)) == len(parse_source(yaml.safe_load(text))[1])
    (tmp_path / "renamed.yaml").write_text(text)
    with pytest.raises(ConfigError):
        load_corpus(tmp_path)


def test_engine_args_are_checked_and_kept() -> None:
    """A point may state the launch settings it ran with (`engine_args:`); unknown keys, a non-boolean
    chunked_prefill and non-positive sizes are refused."""
    doc = _doc()
    doc["points"][0]["engine_args"] = {"max_model_len": 91680, "chunked_prefill": False, "max_num_seqs": 1024}
    _src, pts = parse_source(doc)
    assert dict(pts[0].engine_args) == {"max_model_len": 91680, "chunked_prefill": False, "max_num_seqs": 1024}
    for bad, match in (
        ({"max_num_seqs": 0}, "positive"),
        ({"chunked_prefill": "no"}, "true or false"),
        ({"enforce_eager": True}, "unknown engine_args"),
        ([1, 2], "mapping"),
    ):
        doc = _doc()
        doc["points"][0]["engine_args"] = bad
        with pytest.raises(ConfigError, match=match):
            parse_source(doc)


def test_stated_launch_commands_are_transcribed() -> None:
    """The dstack sources publish their launch commands: MI300X serving ran without chunked prefill and
    with 1024 sequences, the H100 runs with --max-model-len 91680, and vLLM in the TGI comparison with
    the model's own 131,072-token context (no --max-model-len)."""
    pts = {p.key: p for p in load_corpus()}
    mi = pts["dstack-h100-vs-mi300x-llama405b-2024-12/serve-mi300x-meta-tp8-rate16"].engine_args
    assert mi["chunked_prefill"] is False and mi["max_num_seqs"] == 1024
    assert pts["dstack-h100-vs-mi300x-llama405b-2024-12/serve-h100-tp8-rate16"].engine_args["max_model_len"] == 91680
    assert (
        pts["dstack-tgi-vs-vllm-mi300x-llama405b-2024-10/vllm-mi300x-tp8-in80-n1"].engine_args["max_model_len"]
        == 131072
    )


def test_harness_says_whether_the_engine_served_over_http() -> None:
    """`harness:` on a source: 'server' when the tool sent HTTP requests to the engine's API server (its
    server defaults apply even to an offline burst), 'inprocess' for the engine's own offline
    benchmark. Without it, offline points ran in process and the rest over HTTP. Other values are refused."""
    pts = {p.key: p for p in load_corpus()}
    burst = pts["gpustack-performance-lab-2025/gptoss120b-h100-vllm-s1-mxfp4-tp1-vllm"]
    assert burst.mode == "offline" and burst.source.harness == "server" and burst.served
    bench = pts["trtllm-perf-overview-v1.0/l33-70b-h200-tp1-fp8-128-128"]
    assert bench.mode == "offline" and not bench.source.harness and not bench.served
    assert pts["nvidia-nim-llm-benchmarking-perf/l33-70b-2xh100-fp8-tp2-500-2000-c1"].served
    doc = _doc()
    doc["source"]["harness"] = "inprocess"
    assert not any(p.served for p in parse_source(doc)[1])
    doc["source"]["harness"] = "http"
    with pytest.raises(ConfigError, match="harness"):
        parse_source(doc)


def test_documents_of_one_publisher_and_harness_are_held_out_together() -> None:
    """`group:` on a source makes it one leave-one-out fold with the other documents of the group (the
    validation's `Setting.source`); without it a source is its own fold. A group that is not a slug is
    refused."""
    from servescope.plan.validate import Predictor

    pts = load_corpus()
    pred = Predictor(pts)
    folds = {p.source.id: pred.settings[p.key].source for p in pts if p.key in pred.settings}
    assert folds["amd-rocm-blog-mi300x-vs-h100-inference-2025-01"] == "amd-rocm-mad-vllm"
    assert folds["amd-rocm-vllm-dev-docker-mi300x-2025-08"] == "amd-rocm-mad-vllm"
    assert folds["trtllm-perf-overview-v1.0"] == folds["trtllm-deepseek-r1-best-perf-blog"] == "nvidia-trtllm-bench"
    assert folds["gpustack-performance-lab-2025"] == "gpustack-performance-lab-2025"
    # a group names two documents or more (a group of one would be its own fold under another name)
    by_group: dict[str, set[str]] = {}
    for p in pts:
        if p.source.group:
            by_group.setdefault(p.source.group, set()).add(p.source.id)
    assert by_group and all(len(ids) >= 2 for ids in by_group.values()), by_group
    doc = _doc()
    doc["source"]["group"] = "Not A Slug"
    with pytest.raises(ConfigError, match="group"):
        parse_source(doc)
    doc["source"]["group"] = "x-y"
    assert parse_source(doc)[0].fold == "x-y"
    del doc["source"]["group"]
    src = parse_source(doc)[0]
    assert src.fold == src.id


def test_closed_loop_streams_cannot_outrun_their_stated_inter_token_gap() -> None:
    """A consistency check of every closed-loop point without speculative decoding: c streams, each
    receiving at most `stream_interval` tokens a gap (one a TPOT), cannot carry more output tokens/s
    than c x interval / ITL. A mean ITL measured per chunk of a server that streams every k-th token
    and recorded without `engine_args.stream_interval` fails it by about k (InferenceX's SGLang FP4
    runs: --stream-interval 10, 9.4x); so would an ITL given in the wrong unit. The slack (25%) is for
    medians: with varied output lengths the median request's TPOT can lie under the gap that carries
    the tokens (dstack's 3P1D gpt-oss run at c=32 generated 62-815 tokens: 1.18)."""
    checked = 0
    for p in load_corpus():
        m = p.measured
        if p.mode != "closed" or not p.concurrency or p.speculative or "output_tok_s" not in m:
            continue
        for stat in ("itl_ms_median", "itl_ms_mean", "tpot_ms_median", "tpot_ms_mean"):
            if not m.get(stat):
                continue
            per_gap = int(p.engine_args.get("stream_interval", 1)) if stat.startswith("itl") else 1
            cap = p.concurrency * per_gap * 1000.0 / m[stat]
            assert m["output_tok_s"] <= 1.25 * cap, (p.key, stat, m[stat], m["output_tok_s"], cap)
            checked += 1
    assert checked > 200


def test_disaggregated_field_is_checked() -> None:
    row = vars_of(corpus_point())
    row.update(gpus=8, tp=2, disaggregated={"prefill_gpus": 2, "decode_gpus": 6})
    _, [pt] = parse_source({"source": vars_of(SRC), "points": [row]})
    assert pt.disaggregated == (2, 6)
    row["disaggregated"] = {"prefill_gpus": 2, "decode_gpus": 2}
    with pytest.raises(ConfigError, match="8 GPUs"):
        parse_source({"source": vars_of(SRC), "points": [row]})
