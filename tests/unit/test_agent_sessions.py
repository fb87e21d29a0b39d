"""Agent sessions: the plan's shapes (seeded), the session trace rows, the designed prefix reuse and
the session metrics over records, with plain values."""

from __future__ import annotations

import pytest

from servescope.results.sessions import TurnTimes, session_metrics
from servescope.workload.agent import designed_hits
from servescope.workload.agentplan import AgentShape, plan_sessions, rows_from_dicts, shape_from_options
from servescope.workload.spec import parse_dataset, session_workload


def test_parse_agent_and_sessions_kinds() -> None:
    spec = parse_dataset("agent:turns=3,fanout=2")
    assert spec.kind == "agent" and spec.options == {"turns": "3", "fanout": "2"}
    assert parse_dataset("agent").options == {}
    s = parse_dataset("sessions:/tmp/x.jsonl:system=10")
    assert (s.kind, s.path, s.options) == ("sessions", "/tmp/x.jsonl", {"system": "10"})
    assert session_workload("agent:turns=2") and session_workload("sessions:/x") and not session_workload("random")


@pytest.mark.parametrize(
    ("opts", "word"),
    [
        ({"turns": "0"}, "turns"),
        ({"turns": "x"}, "whole number"),
        ({"fanout": "2", "fanout_at": "3", "turns": "4"}, "fanout_at"),
        ({"spread": "1.5"}, "spread"),
        ({"tool_wait": "2", "tool_wait_max": "1"}, "tool_wait_max"),
        ({"nosuch": "1"}, "unknown"),
    ],
)
def test_bad_shapes_are_named(opts: dict[str, str], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        shape_from_options(opts)


def test_plan_structure_turns_fan_out_and_join() -> None:
    shape = AgentShape(turns=4, fanout=2, fanout_at=1, sub_turns=2, task=30, tool_result=40, answer=8, tool_wait=0.5)
    rows = plan_sessions(shape, 2, seed=1)
    assert len(rows) == 2 * (4 + 2 * 2)
    s0 = [r for r in rows if r.session == 0]
    assert [r.turn for r in s0] == list(range(8))
    assert [r.agent for r in s0] == [0, 0, 1, 1, 2, 2, 0, 0]  # spawning turn 1, then the sub-agents, then the join
    assert [r.new_tokens for r in s0] == [30, 40, 200, 40, 200, 40, 0, 40]  # the join's results are the answers
    assert s0[6].joins == [1, 2] and all(not r.joins for r in s0 if r.turn != 6)
    assert [r.wait_s for r in s0] == [0.0, 0.5, 0.0, 0.5, 0.0, 0.5, 0.5, 0.5]  # a sub-agent starts at once


def test_plan_is_seeded_and_spread_stays_in_bounds() -> None:
    shape = shape_from_options({"spread": "0.5", "tool_wait": "1", "tool_wait_max": "3", "answer": "100"})
    a, b, c = plan_sessions(shape, 5, 7), plan_sessions(shape, 5, 7), plan_sessions(shape, 5, 8)
    assert a == b and a != c
    assert all(50 <= r.output_len <= 150 for r in a)
    assert all(1.0 <= r.wait_s <= 3.0 for r in a if r.turn)
    assert len({r.output_len for r in a}) > 5  # drawn, not one value


def test_session_trace_rows_round_trip_and_bad_lines_are_named() -> None:
    rows = plan_sessions(AgentShape(turns=3, fanout=1, fanout_at=0, sub_turns=1), 2, seed=0)
    back = rows_from_dicts([r.to_dict() for r in reversed(rows)], "t.jsonl")  # any order on disk
    assert back == rows
    with pytest.raises(ValueError, match="line 1"):
        rows_from_dicts([{"session": 0, "turn": 0}], "t.jsonl")
    with pytest.raises(ValueError, match="twice"):
        rows_from_dicts([{"session": 0, "turn": 0, "new_tokens": 1, "output_len": 1}] * 2, "t.jsonl")
    with pytest.raises(ValueError, match="never ran"):
        rows_from_dicts(
            [
                {"session": 0, "turn": 0, "new_tokens": 1, "output_len": 1},
                {"session": 0, "turn": 1, "new_tokens": 0, "output_len": 1, "joins": [3]},
            ],
            "t.jsonl",
        )


def test_designed_hits_are_whole_blocks_of_seen_prefixes() -> None:
    shared = list(range(100, 132))  # two 16-token blocks every prompt starts with
    a = [*shared, *range(1000, 1020)]  # 52 tokens: 3 full blocks
    b = [*a, *range(2000, 2030)]  # a's prompt, then more: 82 tokens
    c = [*shared, *range(3000, 3010)]  # another session's first turn
    assert designed_hits([a, b, c], 16) == [0, 48, 32]
    # a prompt that is wholly cached still computes its last block
    assert designed_hits([a, a], 16) == [0, 48]
    assert designed_hits([shared, shared], 16) == [0, 16]
    # the first wave arrives together: neither finds the other's blocks; the prompts after do
    assert designed_hits([a, c, b], 16, wave={0, 1}) == [0, 0, 48]


def _t(session: int, turn: int, send: float, first: float, end: float, ok: bool = True) -> TurnTimes:
    return TurnTimes(session, turn, int(send * 1e9), int(first * 1e9), int(end * 1e9), int(end * 1e9), ok)


def test_session_metrics_from_records() -> None:
    plan = [
        {"session": 0, "turn": 0, "agent": 0, "wait_s": 0.0, "input_len": 100, "designed_cached": 0},
        {"session": 0, "turn": 1, "agent": 1, "wait_s": 0.0, "input_len": 80, "designed_cached": 64},
        {"session": 0, "turn": 2, "agent": 2, "wait_s": 0.0, "input_len": 80, "designed_cached": 64},
        {"session": 0, "turn": 3, "agent": 0, "wait_s": 0.5, "input_len": 300, "designed_cached": 96, "joins": [1, 2]},
        {"session": 1, "turn": 0, "agent": 0, "wait_s": 0.0, "input_len": 100, "designed_cached": 64},
        {"session": 1, "turn": 1, "agent": 0, "wait_s": 1.0, "input_len": 200, "designed_cached": 96},
    ]
    recs = [
        _t(0, 0, 0.0, 0.1, 1.0),
        _t(0, 1, 1.0, 1.2, 2.0),
        _t(0, 2, 1.0, 1.3, 3.0),  # the later sub-agent: the join waits for it
        _t(0, 3, 3.6, 3.8, 4.0),  # 0.6 s after the join: 0.1 s late
        _t(1, 0, 0.0, 0.05, 0.5),
        _t(1, 1, 1.5, 1.55, 2.5, ok=False),
        _t(1, 1, 9.0, 9.1, 9.5),  # a second record of a turn (a cycled run): only the first counts
    ]
    m = session_metrics(plan, recs)
    assert (m["sessions"], m["sessions_completed"], m["turns_planned"], m["turns_sent"], m["turns_ok"]) == (
        2,
        1,
        6,
        6,
        5,
    )
    assert m["session_duration_s"]["count"] == 1 and m["session_duration_s"]["max"] == pytest.approx(4.0)
    assert m["wait_planned_s"] == pytest.approx(0.5 + 0.0 + 0.0 + 1.0)
    assert m["wait_measured_s"] == pytest.approx(0.6 + 0.0 + 0.0 + 1.0)
    assert m["wait_error_ms"]["max"] == pytest.approx(100.0)
    by_turn = {g["key"]: g for g in m["ttft_by_turn"]}
    assert by_turn[0]["count"] == 4 and by_turn[1]["count"] == 1  # turn 1 of session 1 failed
    assert by_turn[1]["median_ms"] == pytest.approx(200.0)
    by_ctx = {g["key"]: g["count"] for g in m["ttft_by_context"]}
    assert by_ctx == {64: 4, 256: 1}
    assert m["designed_prefix_hit_rate"] == pytest.approx((64 + 64 + 96 + 64 + 96) / 860)
    per = {r["session"]: r for r in m["per_session"]}
    assert per[0]["sub_agents"] == 2 and per[0]["designed_hit_rate"] == pytest.approx(224 / 560)


def test_histories_grow_by_answer_and_tool_result_and_join_the_sub_agents() -> None:
    from servescope.workload.agent import _histories

    rows = plan_sessions(AgentShape(turns=3, fanout=2, fanout_at=0, sub_turns=1), 1, seed=0)
    news = [f"new{i}" for i in range(len(rows))]
    answers = [f"ans{i}" for i in range(len(rows))]
    hists = _histories(rows, "SYS", news, answers)
    assert [r.agent for r in rows] == [0, 1, 2, 0, 0]
    assert hists[0] == [{"role": "system", "content": "SYS"}, {"role": "user", "content": "new0"}]
    assert hists[1] == [{"role": "system", "content": "SYS"}, {"role": "user", "content": "new1"}]  # its own context
    # the join: the spawning turn's messages, its answer, then both sub-agents' answers as one tool result
    assert hists[3] == [
        *hists[0],
        {"role": "assistant", "content": "ans0"},
        {"role": "user", "content": "ans1\n\nans2"},
    ]
    # the next main turn: the previous prompt whole, its answer, the tool result
    assert hists[4] == [*hists[3], {"role": "assistant", "content": "ans3"}, {"role": "user", "content": "new4"}]
