"""Workloads end to end: exact input lengths as the SERVER counts them, shared prefixes that the
server's prefix cache really hits, multi-turn sessions with growing history, local HF datasets.

Targets: our emulator (vLLM's /tokenize and prefix-cache counters) and llama.cpp's llama-server (a real
third-party server: /tokenize {"content"}, its own chat template; skipped locally when not built).
"""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from servescope.results.store import load_run
from tests.support.procs import servescope
from tests.support.real_servers import RealServer

pytestmark = pytest.mark.e2e


def _run(out: Path, *args: str, timeout_s: float = 300) -> tuple[dict[str, Any], Any]:
    proc = servescope("run", "--out", str(out), "--quiet", *args, timeout_s=timeout_s)
    # stderr's head holds the error; its tail may be only interpreter-exit warnings
    assert proc.returncode == 0, (
        f"servescope failed:\n{proc.stdout[-2000:]}\n{proc.stderr[:3000]}\n...\n{proc.stderr[-1000:]}"
    )
    return json.loads((out / "summary.json").read_text()), load_run(out)


# ------------------------------------------------------------------ (1) exact lengths
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_input_len_1024_is_exact_on_the_emulator(tmp_path: Path, api: str) -> None:
    s, run = _run(
        tmp_path,
        "--profile",
        "tiny",
        "--api",
        api,
        "--input-len",
        "1024",
        "--output-len",
        "4",
        "--num-requests",
        "40",
        "--concurrency",
        "8",
        "--range-ratio",
        "0",
    )
    wl = s["workload"]
    assert wl["lengths"] == "exact (server /tokenize)", wl
    counts = [r.input_tokens for r in run.records]
    assert len(counts) == 40 and set(counts) == {1024}, counts
    assert s["tokens"]["input_source"] == "usage"


def test_length_mixture_is_exact_per_request(tmp_path: Path) -> None:
    s, run = _run(
        tmp_path,
        "--profile",
        "tiny",
        "--dataset",
        "random:128:4@25%,512:8@75%",
        "--num-requests",
        "40",
        "--concurrency",
        "8",
    )
    pairs = sorted((r.input_tokens, r.output_tokens) for r in run.records)
    assert pairs.count((128, 4)) == 10 and pairs.count((512, 8)) == 30, pairs
    assert s["workload"]["mix"][0] == {"input_len": 128, "output_len": 4, "weight": 0.25}


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_input_len_1024_is_exact_on_llama_server(llama_server: RealServer, tmp_path: Path, api: str) -> None:
    s, run = _run(
        tmp_path,
        "--url",
        llama_server.url,
        "--model",
        "tiny-llama",
        "--api",
        api,
        "--input-len",
        "1024",
        "--output-len",
        "4",
        "--num-requests",
        "12",
        "--concurrency",
        "4",
    )
    assert s["workload"]["lengths"] == "exact (server /tokenize)", s["workload"]
    counts = [r.input_tokens for r in run.records]
    assert len(counts) == 12 and set(counts) == {1024}, counts


# ------------------------------------------------------------------ (2) shared prefix
def test_shared_prefix_preset_hits_as_intended_and_lowers_ttft(tmp_path: Path) -> None:
    """The seeds' preset lengths (2000-token system prompt + 1200-token question), 4 groups x 15 prompts."""
    common = ("--profile", "tiny", "--output-len", "8", "--concurrency", "4", "--num-requests", "60", "--seed", "3")
    shared, _ = _run(tmp_path / "shared", *common, "--dataset", "shared-prefix:groups=4,prompts=15")
    wl, server = shared["workload"], shared["server"]
    assert wl["shared_prefix"]["system_len"] == 2000 and wl["shared_prefix"]["question_len"] == 1200
    intended, achieved = wl["intended_prefix_hit_rate"], server["prefix_cache_hit_rate"]
    assert intended == pytest.approx((60 - 4) * 2000 / (60 * 3200), abs=1e-3)
    assert abs(achieved - intended) <= 0.05, (intended, achieved)
    assert not any("prefix cache:" in n for n in shared["notes"])
    plain, _ = _run(tmp_path / "plain", *common, "--input-len", "3200")
    assert plain["server"]["prefix_cache_hit_rate"] < 0.02
    assert shared["tokens"]["input_total"] == plain["tokens"]["input_total"] == 60 * 3200
    assert shared["latency_ms"]["ttft"]["median"] < 0.8 * plain["latency_ms"]["ttft"]["median"], (
        shared["latency_ms"]["ttft"],
        plain["latency_ms"]["ttft"],
    )


# ------------------------------------------------------------------ (3) multi-turn
def _sharegpt(path: Path, n: int) -> None:
    convs = []
    for c in range(n):
        conv = []
        for t in range(3):
            conv.append({"from": "human", "value": f"Conversation {c} turn {t}: " + "tell me more about it " * (5 + t)})
            conv.append({"from": "gpt", "value": "Here is what I know. " * (20 + 10 * t)})
        convs.append({"id": str(c), "conversations": conv})
    path.write_text(json.dumps(convs))


def test_sharegpt_three_turns_send_every_turn_with_growing_history(tmp_path: Path) -> None:
    data = tmp_path / "chats.json"
    _sharegpt(data, 6)
    s, run = _run(
        tmp_path / "out",
        "--profile",
        "tiny",
        "--dataset",
        f"sharegpt:{data}:think=0.05",
        "--num-requests",
        "18",
        "--concurrency",
        "3",
        "--output-len",
        "8",
    )
    assert s["requests"]["completed"] == 18 and s["workload"]["sessions"] == 6
    by_session: dict[int, list] = defaultdict(list)
    for r in run.records:
        by_session[r.session].append(r)
    assert len(by_session) == 6
    for sid, recs in by_session.items():
        recs.sort(key=lambda r: r.turn)
        assert [r.turn for r in recs] == [0, 1, 2], sid
        ins = [r.input_tokens for r in recs]
        # each turn carries the previous user and assistant messages: input grows by at least the last reply
        assert ins[0] < ins[1] < ins[2], ins
        assert ins[1] - ins[0] > 60 and ins[2] - ins[1] > 90, ins
        # one at a time, in order, with the think time between
        for a, b in pairwise(recs):
            assert b.t_send_ns >= a.t_last_ns + 0.05e9 * 0.9, (a, b)
        # the workload's own input lengths match what the server counted
        assert all(abs(r.input_len - r.input_tokens) <= 2 for r in recs), [(r.input_len, r.input_tokens) for r in recs]


# ------------------------------------------------------------------ local HF dataset
def test_hf_parquet_dataset_runs(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"problem": f"Let n be the smallest integer with {k} divisors. Find n mod 1000.", "answer": str(k)}
        for k in range(30)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "aime.parquet")
    s, run = _run(
        tmp_path / "out",
        "--profile",
        "tiny",
        "--dataset",
        f"hf:{tmp_path / 'aime.parquet'}",
        "--num-requests",
        "30",
        "--concurrency",
        "4",
        "--output-len",
        "8",
    )
    assert s["requests"]["completed"] == 30
    assert s["workload"]["records"] == 30 and s["workload"]["lengths"].startswith("dataset text; counted with server")
    assert all(r.input_tokens == r.input_len for r in run.records), [(r.input_len, r.input_tokens) for r in run.records]


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_input_len_1024_is_exact_on_llama_server_with_local_tokenizer(
    llama_server: RealServer, tiny_model: Any, tmp_path: Path, api: str
) -> None:
    """--tokenizer: the model's own tokenizer.json counts locally; one probe request learns the template."""
    s, run = _run(
        tmp_path,
        "--url",
        llama_server.url,
        "--model",
        "tiny-llama",
        "--api",
        api,
        "--tokenizer",
        str(tiny_model.hf_dir),
        "--input-len",
        "1024",
        "--output-len",
        "4",
        "--num-requests",
        "8",
        "--concurrency",
        "4",
    )
    assert s["workload"]["lengths"].startswith("exact (local tokenizer"), s["workload"]
    assert s["workload"]["probe_requests"] == 1
    assert [r.input_tokens for r in run.records] == [1024] * 8


def test_input_len_exact_on_transformers_serve_with_local_tokenizer(
    hf_serve: RealServer, tiny_model: Any, tmp_path: Path
) -> None:
    """A second real server with no /tokenize at all: --tokenizer + one usage probe still give exact lengths."""
    s, run = _run(
        tmp_path,
        "--url",
        hf_serve.url,
        "--model",
        tiny_model.repo_id,
        "--api",
        "chat",
        "--tokenizer",
        str(tiny_model.hf_dir),
        "--input-len",
        "300",
        "--output-len",
        "4",
        "--num-requests",
        "4",
        "--concurrency",
        "1",
        timeout_s=400,
    )
    assert s["workload"]["lengths"].startswith("exact (local tokenizer"), s["workload"]
    assert [r.input_tokens for r in run.records] == [300] * 4


# ------------------------------------------------------------------ trace replay
def test_trace_replay_sends_at_recorded_times_sped_up(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [
        {"timestamp": 10_000 + 100 * k + (50 if k % 3 == 0 else 0), "input_length": 64 + k, "output_length": 4}
        for k in range(20)
    ]
    trace.write_text("\n".join(json.dumps(r) for r in reversed(rows)))  # unsorted on disk
    s, run = _run(
        tmp_path / "out", "--profile", "tiny", "--dataset", f"trace:{trace}:speedup=2", "--num-requests", "20"
    )
    assert s["requests"]["completed"] == 20 and s["workload"]["trace"]["speedup"] == 2.0
    want_s = [(r["timestamp"] - rows[0]["timestamp"]) / 1000 / 2 for r in rows]
    recs = sorted(run.records, key=lambda r: r.t_sched_ns)
    sched_s = [r.t_sched_ns / 1e9 for r in recs]
    assert sched_s == pytest.approx([w - want_s[0] + sched_s[0] for w in want_s], abs=1e-6)
    # sent on time: the typical send within 20 ms of its due time (a shared 2-core host can
    # stall one now and then; the exact schedule above is what replay fidelity rests on)
    lags_ms = sorted((r.t_send_ns - r.t_sched_ns) / 1e6 for r in recs)
    assert lags_ms[0] >= 0 and lags_ms[len(lags_ms) // 2] < 20 and lags_ms[-1] < 500, lags_ms
    assert sorted(r.input_tokens for r in recs) == [64 + k for k in range(20)]  # exact lengths


def test_no_tokenize_no_tokenizer_falls_back_to_approximate_with_a_note(scripted_server, tmp_path: Path) -> None:
    srv = scripted_server("--ttft-ms", "5", "--itl-ms", "1")
    s, run = _run(
        tmp_path,
        "--url",
        srv.url,
        "--model",
        "m",
        "--input-len",
        "64",
        "--output-len",
        "4",
        "--num-requests",
        "5",
        "--concurrency",
        "5",
    )
    assert s["requests"]["completed"] == 5
    assert s["workload"]["lengths"].startswith("approximate"), s["workload"]
    assert any("approximate" in n and "/tokenize" in n for n in s["notes"]), s["notes"]
    assert all(r.input_len == 64 for r in run.records)


def test_prefix_cache_disagreement_is_a_note(tmp_path: Path) -> None:
    """The same seeded shared-prefix run twice on one server: the second finds everything cached already
    (achieved ~100% vs intended ~53%), and the summary says so."""
    from servescope.emulator.server import EmulatorThread

    args = (
        "--model",
        "tiny",
        "--dataset",
        "shared-prefix:groups=2,prompts=8,system=512,question=256",
        "--num-requests",
        "16",
        "--concurrency",
        "2",
        "--output-len",
        "2",
    )
    with EmulatorThread("tiny") as emu:
        first, _ = _run(tmp_path / "a", "--url", emu.url, *args)
        second, _ = _run(tmp_path / "b", "--url", emu.url, *args)
    intended = first["workload"]["intended_prefix_hit_rate"]
    assert intended == pytest.approx(14 * 512 / (16 * 768), abs=1e-3)
    assert abs(first["server"]["prefix_cache_hit_rate"] - intended) <= 0.05
    assert not any(n.startswith("prefix cache:") for n in first["notes"])
    assert second["server"]["prefix_cache_hit_rate"] > intended + 0.3
    assert any(n.startswith("prefix cache:") and "more than the workload shares" in n for n in second["notes"])


def test_sharegpt_sessions_on_llama_server_counted_exactly(llama_server: RealServer, tmp_path: Path) -> None:
    """A real server's own template: /apply-template + /tokenize count every turn as the server will."""
    data = tmp_path / "chats.json"
    _sharegpt(data, 3)
    s, run = _run(
        tmp_path / "out",
        "--url",
        llama_server.url,
        "--model",
        "tiny-llama",
        "--dataset",
        f"sharegpt:{data}:output=fixed",
        "--num-requests",
        "9",
        "--concurrency",
        "3",
        "--output-len",
        "4",
    )
    assert s["requests"]["completed"] == 9
    assert s["workload"]["lengths"] == "dataset text; counted with server /tokenize (chat template included)"
    assert "probe_requests" not in s["workload"]
    for r in run.records:
        assert r.input_tokens == r.input_len, (r.session, r.turn, r.input_len, r.input_tokens)
    by_session: dict[int, list] = defaultdict(list)
    for r in run.records:
        by_session[r.session].append(r)
    for recs in by_session.values():
        ins = [r.input_tokens for r in sorted(recs, key=lambda r: r.turn)]
        assert len(ins) == 3 and ins[0] < ins[1] < ins[2], ins
