"""Agent sessions against the real vLLM (CPU build, prefix caching on, 128-token blocks): each turn's
prompt holds the previous turn's prompt and answer (token ids through vLLM's /tokenize), tool waits and
the sub-agents' fan-out and join show in the records as planned, and the designed prefix reuse agrees
with vLLM's `vllm:prefix_cache_queries` / `_hits` counters within 5%."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from servescope.results.store import read_records, read_session_plan
from servescope.run.config import RunConfig
from servescope.workload import prepare_workload
from tests.e2e.vllm.test_real_vllm import MODEL, run
from tests.support.real_servers import RealServer

pytestmark = pytest.mark.e2e

# 2 sessions, 4 main turns each; main turn 1 spawns 2 sub-agents of 2 turns; waits of 0.3 s
DATASET = (
    "agent:sessions=2,turns=4,fanout=2,fanout_at=1,sub_turns=2,system=300,tools=200,task=60,"
    "tool_result=80,answer=24,tool_wait=0.3,block=128"
)


def _tokenize(srv: RealServer, messages: list[dict[str, Any]], gen: bool = True) -> list[int]:
    body = orjson.dumps({"model": MODEL, "messages": messages, "add_generation_prompt": gen})
    req = urllib.request.Request(srv.root + "/tokenize", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return list(orjson.loads(r.read())["tokens"])


def _items(srv: RealServer) -> list[Any]:
    cfg = RunConfig(url=srv.url, model=MODEL, dataset=DATASET, concurrency=1, seed=0)
    wl = asyncio.run(prepare_workload(cfg, 100, base_url=srv.url, model=MODEL, headers={}))
    return wl.items


def test_agent_sessions_grow_wait_fan_out_and_hit_the_cache_as_designed(
    vllm_server: RealServer, tmp_path: Path
) -> None:
    s = run(vllm_server.url, tmp_path, "--dataset", DATASET, "--concurrency", "1", "--reset-cache", timeout_s=300)
    plan = read_session_plan(tmp_path)
    assert plan is not None and len(plan) == 2 * (4 + 2 * 2)
    assert s["requests"]["completed"] == len(plan) and s["requests"]["failed"] == 0

    # The prompts the run sent (the same seed rebuilds them): each main turn's token ids start with the
    # previous turn's prompt, then that turn's answer, and are as long as the plan says.
    items = _items(vllm_server)
    assert [(i.session, i.turn) for i in items] == [(p["session"], p["turn"]) for p in plan]
    prev: dict[tuple[int, int], Any] = {}
    checked = 0
    for item, row in zip(items, plan):
        ids = _tokenize(vllm_server, item.prompt)
        assert len(ids) == row["input_len"] == item.input_len
        key = (row["session"], row["agent"])
        if key in prev:
            before, before_row = prev[key]
            assert ids[: len(before)] == before  # the previous prompt, whole, as a prefix
            answer = item.prompt[len(before_row.prompt)]
            assert answer["role"] == "assistant"
            with_answer = _tokenize(vllm_server, [*before_row.prompt, answer], gen=False)
            assert ids[: len(with_answer)] == with_answer  # ... then the previous answer
            assert len(ids) >= len(before) + before_row.output_len + row["new_tokens"]
            checked += 1
        prev[key] = (ids, item)
    assert checked == len(plan) - 2 * 3  # every turn but each agent's first (2 sessions x 3 agents)

    # The server counted the prompts the plan counted.
    recs = {(r.session, r.turn): r for r in read_records(tmp_path)}
    assert all(recs[(p["session"], p["turn"])].input_tokens == p["input_len"] for p in plan)

    # Tool waits and fan-out, from the records.
    for sess in (0, 1):
        rows = [p for p in plan if p["session"] == sess]
        main = [p for p in rows if p["agent"] == 0]
        subs = {b: [p for p in rows if p["agent"] == b] for b in (1, 2)}
        spawn = recs[(sess, main[1]["turn"])]
        firsts = [recs[(sess, subs[b][0]["turn"])] for b in (1, 2)]
        assert all(f.t_send_ns >= spawn.t_end_ns for f in firsts)  # sub-agents start after the spawning answer
        assert max(f.t_send_ns for f in firsts) < min(f.t_end_ns for f in firsts)  # ... and run at once
        for b in (1, 2):
            a, z = (recs[(sess, p["turn"])] for p in subs[b])
            assert z.t_send_ns - a.t_end_ns >= 0.3e9 - 1e6  # the sub-agent's tool wait
        join = recs[(sess, main[2]["turn"])]
        assert main[2]["joins"] == [1, 2]
        last_sub = max(recs[(sess, subs[b][-1]["turn"])].t_end_ns for b in (1, 2))
        assert join.t_send_ns - last_sub >= 0.3e9 - 1e6  # the join waits for both, then its tool wait
        for k in (1, 3):  # the main agent's own tool waits
            gap = recs[(sess, main[k]["turn"])].t_send_ns - recs[(sess, main[k - 1]["turn"])].t_end_ns
            assert gap >= 0.3e9 - 1e6
    # The designed reuse against vLLM's counters.
    intended = s["workload"]["intended_prefix_hit_rate"]
    achieved = s["server"]["prefix_cache_hit_rate"]
    assert s["server"]["metrics_used"]["prefix_hits"] == "vllm:prefix_cache_hits"
    assert s["server"]["prefix_queries"] == sum(p["input_len"] for p in plan)
    assert intended > 0.5 and abs(achieved - intended) <= 0.05 * intended, (intended, achieved, s["server"])
    expect_hits = sum(p["designed_cached"] for p in plan)
    print(json.dumps({"intended": intended, "achieved": achieved, "designed_hits": expect_hits, **s["server"]}))
