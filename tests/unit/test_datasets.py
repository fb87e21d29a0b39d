"""Dataset files -> work items: JSONL, ShareGPT (every turn, growing history), local HF tables, traces."""

from __future__ import annotations

import asyncio
import json
import types
from pathlib import Path

import pytest

from servescope.errors import ConfigError
from servescope.workload.exact.builder import PromptBuilder, Target
from servescope.workload.exact.units import ANCHOR, approximate_units, calibrate_units
from servescope.workload.files import load_hf, load_jsonl, load_sharegpt, resolve_hf_path
from servescope.workload.sessions import flatten, records_to_items
from servescope.workload.trace import read_trace, trace_items
from tests.unit.test_exact import BuiltinCounter


def _builder(api: str = "chat", counter: object | None = None) -> PromptBuilder:
    b = PromptBuilder(
        target=Target("http://127.0.0.1:9/v1", "m", {}, api), units=approximate_units("x"), counter=counter
    )  # type: ignore[arg-type]
    b._overheads = {"single": 5, "system+user": 9}
    return b


def _cfg(**kw: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{"seed": 0, "output_len": 77, "input_len": 100, "range_ratio": 0.0, **kw})


def _conversations(k: int) -> list[dict]:
    return [
        {
            "id": f"c{c}",
            "conversations": [
                {"from": "human", "value": f"question one of conversation {c} " + "word " * 10},
                {"from": "gpt", "value": "answer one " + "reply " * 20},
                {"from": "human", "value": f"second question {c}"},
                {"from": "gpt", "value": "answer two " + "reply " * 30},
                {"from": "human", "value": f"third question {c}"},
                {"from": "gpt", "value": "answer three " + "reply " * 40},
            ],
        }
        for c in range(k)
    ]


def test_sharegpt_keeps_every_turn_with_history(tmp_path: Path) -> None:
    p = tmp_path / "chats.json"
    p.write_text(json.dumps(_conversations(4)))
    recs = load_sharegpt(str(p))
    assert len(recs) == 4 and len(recs[0].messages) == 6
    items, info = asyncio.run(
        records_to_items(
            recs, _cfg(), 12, _builder(counter=BuiltinCounter()), multi_turn=True, think_s=1.5, shuffle=False
        )
    )
    assert len(items) == 12 and info["sessions"] == 4 and info["turns_max"] == 3
    for s in range(4):
        turns = [it for it in items if it.session == s]
        assert [t.turn for t in turns] == [0, 1, 2]
        # each turn carries the whole history: previous user AND assistant messages from the dataset
        assert [len(t.prompt) for t in turns] == [1, 3, 5]
        assert [m["role"] for m in turns[2].prompt] == ["user", "assistant", "user", "assistant", "user"]
        assert turns[2].prompt[1]["content"].startswith("answer one")
        assert turns[0].input_len < turns[1].input_len < turns[2].input_len
        # output length: the dataset's own reply, counted
        assert turns[0].output_len < turns[1].output_len < turns[2].output_len
        assert [t.meta["think_s"] for t in turns] == [0.0, 1.5, 1.5]
    # turns of one session are in order in the list
    order = [(it.session, it.turn) for it in items]
    assert order == sorted(order)


def test_sharegpt_messages_form_max_turns_and_completions(tmp_path: Path) -> None:
    p = tmp_path / "chats.jsonl"
    rows = [
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello there"},
                {"role": "user", "content": "more"},
            ]
        }
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows))
    recs = load_sharegpt(str(p))
    items, _ = asyncio.run(
        records_to_items(recs, _cfg(), 5, _builder("completions"), multi_turn=True, max_turns=1, shuffle=False)
    )
    # one turn per session, file cycled to give 5 requests
    assert [it.turn for it in items] == [0] * 5 and len({it.session for it in items}) == 5
    assert items[0].prompt == flatten(recs[0].messages[:2]) and items[0].prompt.endswith("Assistant:")


def test_jsonl_prompt_and_messages(tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text(
        "\n".join(
            [
                json.dumps({"prompt": "what is 2+2", "output_len": 12}),
                json.dumps({"messages": [{"role": "user", "content": "hey"}]}),
                "",
            ]
        )
    )
    recs = load_jsonl(str(p))
    items, _ = asyncio.run(records_to_items(recs, _cfg(), 2, _builder(), multi_turn=False, shuffle=False))
    assert items[0].prompt == [{"role": "user", "content": "what is 2+2"}] and items[0].output_len == 12
    assert items[1].output_len == 77 and items[0].session is None and items[0].meta == {}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": 1}\n')
    with pytest.raises(ConfigError, match="prompt"):
        load_jsonl(str(bad))
    with pytest.raises(ConfigError, match="not found"):
        load_jsonl(str(tmp_path / "nope.jsonl"))


def _aime_rows() -> list[dict]:
    return [
        {
            "id": i,
            "problem": f"Find the number of integers n with {i} < n < {i * 7}.",
            "answer": str(i),
            "solution": "...",
        }
        for i in range(1, 31)
    ]


def test_hf_parquet_json_arrow_and_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(_aime_rows())
    # a hub-cache layout, as `huggingface-cli download --repo-type dataset AI-MO/aimo-validation-aime` leaves it
    snap = tmp_path / "hub" / "datasets--AI-MO--aimo-validation-aime" / "snapshots" / "abc123" / "data"
    snap.mkdir(parents=True)
    pq.write_table(table, snap / "train-00000-of-00001.parquet")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert resolve_hf_path("AI-MO/aimo-validation-aime").name == "abc123"
    recs = load_hf("AI-MO/aimo-validation-aime", {})  # `problem` found on its own
    assert len(recs) == 30 and recs[0].messages[0]["content"].startswith("Find the number")
    # JSON lines and an Arrow stream file (datasets.save_to_disk)
    (tmp_path / "aime.jsonl").write_text("\n".join(json.dumps(r) for r in _aime_rows()))
    assert len(load_hf(str(tmp_path / "aime.jsonl"), {"prompt": "problem"})) == 30
    arrow = tmp_path / "saved" / "data-00000-of-00001.arrow"
    arrow.parent.mkdir()
    with pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    assert len(load_hf(str(arrow.parent), {"prompt": "problem"})) == 30
    with pytest.raises(ConfigError, match="no column"):
        load_hf(str(tmp_path / "aime.jsonl"), {"prompt": "question_text"})
    with pytest.raises(ConfigError, match="never downloads"):
        load_hf("nobody/nothing", {})


def test_hf_split_and_output_len_column(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "ds"
    d.mkdir()
    rows = [{"question": "q", "n": 9}]
    pq.write_table(pa.Table.from_pylist(rows * 3), d / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows * 2), d / "test.parquet")
    assert len(load_hf(str(d), {})) == 2  # test split preferred
    recs = load_hf(str(d), {"split": "train", "output_len": "n"})
    assert len(recs) == 3 and recs[0].output_len == 9


def test_trace_offsets_speedup_and_exact_generated_prompts(tmp_path: Path) -> None:
    p = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 1000 + 500 * k, "input_length": 40 + k, "output_length": 8} for k in (3, 0, 2, 1)]
    rows.append({"timestamp": 4000, "prompt": "hello there", "output_length": 4})
    p.write_text("\n".join(json.dumps(r) for r in rows))
    assert [r["t_s"] for r in read_trace(str(p))] == [1.0, 1.5, 2.0, 2.5, 4.0]
    b = _builder(counter=BuiltinCounter())
    b.units = asyncio.run(calibrate_units(BuiltinCounter()))
    items, info = asyncio.run(trace_items(str(p), _cfg(), 100, b, speedup=2.0))
    assert [it.meta["t_s"] for it in items] == [0.0, 0.25, 0.5, 0.75, 1.5]
    assert [it.input_len for it in items[:4]] == [40, 41, 42, 43]
    assert info["trace"]["speedup"] == 2.0 and "note" in info["trace"]
    from servescope.emulator.tokenizer import get_tokenizer

    tok = get_tokenizer()
    # generated prompts: exact unit tokens = input_len - overhead (5; the anchor is part of the overhead)
    assert [tok.count(it.prompt) - tok.count(ANCHOR) for it in items[:4]] == [40 - 5, 41 - 5, 42 - 5, 43 - 5]
    assert items[4].prompt == [{"role": "user", "content": "hello there"}]
    with pytest.raises(ConfigError, match="speedup"):
        asyncio.run(trace_items(str(p), _cfg(), 10, b, speedup=0))


def test_trace_hash_ids_share_block_texts(tmp_path: Path) -> None:
    """Mooncake-style hash_ids: the same block id gives the same text, so prefixes are really shared."""
    p = tmp_path / "mooncake.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 16 * 3, "output_length": 2, "hash_ids": [1, 2, 3]},
        {"timestamp": 10, "input_length": 16 * 2 + 5, "output_length": 2, "hash_ids": [1, 2, 4]},
        {"timestamp": 20, "input_length": 16 * 2, "output_length": 2, "hash_ids": [5, 2]},
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows))
    b = _builder(counter=BuiltinCounter())
    b.units = asyncio.run(calibrate_units(BuiltinCounter()))
    b._overheads = {"single": 0}
    items, info = asyncio.run(trace_items(str(p), _cfg(), 10, b, speedup=1.0, block_tokens=16))
    from servescope.emulator.tokenizer import get_tokenizer

    tok = get_tokenizer()
    anchor = tok.count(ANCHOR)
    ids = [tok.encode(it.prompt)[anchor:] for it in items]
    assert [len(x) for x in ids] == [48, 37, 32]  # exact lengths
    assert ids[0][:32] == ids[1][:32]  # blocks 1, 2 shared
    assert ids[0][32:37] != ids[1][32:37]  # block 3 vs block 4
    assert ids[2][:16] != ids[0][:16] and ids[2][16:32] == ids[0][16:32]  # same block text, different prefix
    # ideal cache: request 2 reuses blocks 1-2 (32 tokens); request 3's chain [5, 2] is new
    assert info["intended_prefix_hit_rate"] == pytest.approx(32 / (48 + 37 + 32), abs=1e-4)


def test_fixed_output_len_keeps_replies_in_history(tmp_path: Path) -> None:
    p = tmp_path / "chats.json"
    p.write_text(json.dumps(_conversations(2)))
    items, info = asyncio.run(
        records_to_items(
            load_sharegpt(str(p)), _cfg(), 6, _builder(), multi_turn=True, shuffle=False, fixed_output=True
        )
    )
    assert [it.output_len for it in items] == [77] * 6 and info["output_len_source"] == "--output-len"
    assert items[2].prompt[1]["role"] == "assistant"
