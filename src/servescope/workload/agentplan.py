"""Pure: agent sessions as a plan of turns — shapes in, one row per request out (seeded, no I/O).

An agent session is a main agent's turns, each a request whose prompt is the previous turn's prompt,
the previous answer and a tool result (the context grows by both every turn), separated by a tool
wait. One main turn may spawn sub-agents: each runs its own short thread of turns (its own context:
the shared prefix plus a sub-task), all of them at once; the next main turn waits for every one of
them (the join), then takes their last answers as its tool results. Every context starts with the
same system prompt and tool schemas, shared by all sessions (AIPerf's agentic code generator calls
this layer L1: "global tools and system prompt ... identical across all sessions").

A row (`PlanRow`, also one line of the session trace format, docs/workloads.md):
  session   the session id
  turn      the request's place in the session's send order (0, 1, ...): main turns, and after a
            spawning turn the sub-agents' turns (agent 1's, then agent 2's, ...), then the next main turn
  agent     0 for the main agent, b >= 1 for sub-agent b of the session's fan-out
  wait_s    the pause before this turn, after what it waits for: the same agent's previous answer (a
            tool call running), the spawning turn's answer (a sub-agent's first turn), or the join
  new_tokens  tokens this turn adds to its agent's context beyond the previous prompt and answer: the
            task (first turn) or the tool result (0 on a turn that joins: its tool results are the
            sub-agents' answers)
  output_len  the answer's tokens (max_tokens; the next prompt carries an answer of this length)
  joins     on the main turn after a fan-out: the sub-agents whose last answers it takes as tool results
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = ["AGENT_DEFAULTS", "AgentShape", "PlanRow", "plan_sessions", "rows_from_dicts", "shape_from_options"]

# The generator's defaults. Each is a stated choice, not a fit: the sources describe the structure
# (shared L1 tools + system prompt, growing history, tool waits, fan-out and join) and replay
# recorded figures; they publish no default sizes this generator could copy. docs/workloads.md
# lists the sources and what was taken from each.
AGENT_DEFAULTS: dict[str, float] = {
    "turns": 6,  # main-agent turns per session
    "system": 1500,  # shared system prompt tokens
    "tools": 1000,  # shared tool schema tokens (in the system message, after the system prompt)
    "task": 300,  # the user's task, the first turn's own tokens
    "answer": 128,  # tokens per answer (max_tokens; the next prompt carries an answer this long)
    "tool_result": 400,  # tool result tokens added per main turn
    "tool_wait": 1.0,  # seconds a tool call runs between a turn's answer and the next turn
    "tool_wait_max": 0.0,  # > tool_wait: each wait uniform in [tool_wait, tool_wait_max] (seeded)
    "fanout": 0,  # sub-agents spawned by the main turn `fanout_at` (0: none)
    "fanout_at": 1,
    "sub_turns": 2,  # turns of each sub-agent
    "sub_task": 200,  # a sub-agent's task tokens (its first turn's own tokens)
    "spread": 0.0,  # lengths (task, tool results, answers) uniform in [x(1-spread), x(1+spread)] (seeded)
}
_INT_KEYS = (
    "turns",
    "system",
    "tools",
    "task",
    "answer",
    "tool_result",
    "fanout",
    "fanout_at",
    "sub_turns",
    "sub_task",
)


@dataclass(frozen=True, slots=True)
class AgentShape:
    turns: int = 6
    system: int = 1500
    tools: int = 1000
    task: int = 300
    answer: int = 128
    tool_result: int = 400
    tool_wait: float = 1.0
    tool_wait_max: float = 0.0
    fanout: int = 0
    fanout_at: int = 1
    sub_turns: int = 2
    sub_task: int = 200
    spread: float = 0.0

    @property
    def shared_tokens(self) -> int:
        return self.system + self.tools


@dataclass(slots=True)
class PlanRow:
    session: int
    turn: int
    agent: int
    wait_s: float
    new_tokens: int
    output_len: int
    joins: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.joins:
            d.pop("joins")
        return d


def shape_from_options(options: dict[str, str]) -> AgentShape:
    """An `AgentShape` from `--dataset agent:key=value,...` options; ValueError names a bad one."""
    unknown = set(options) - set(AGENT_DEFAULTS) - {"sessions", "block"}
    if unknown:
        raise ValueError(
            f"unknown option(s) {sorted(unknown)} (known: {', '.join([*AGENT_DEFAULTS, 'sessions', 'block'])})"
        )
    values: dict[str, Any] = {}
    for key, default in AGENT_DEFAULTS.items():
        raw = options.get(key)
        if raw is None:
            values[key] = int(default) if key in _INT_KEYS else float(default)
            continue
        try:
            values[key] = int(raw) if key in _INT_KEYS else float(raw)
        except ValueError:
            raise ValueError(f"{key}={raw!r} is not a {'whole number' if key in _INT_KEYS else 'number'}") from None
    shape = AgentShape(**values)
    if shape.turns < 1 or shape.task < 1 or shape.answer < 1 or shape.sub_task < 1 or shape.sub_turns < 1:
        raise ValueError("turns, task, answer, sub_task and sub_turns must be >= 1")
    if min(shape.system, shape.tools, shape.tool_result, shape.fanout) < 0 or shape.tool_wait < 0:
        raise ValueError("system, tools, tool_result, fanout and tool_wait must be >= 0")
    if shape.fanout and not 0 <= shape.fanout_at < shape.turns - 1:
        raise ValueError(f"fanout_at={shape.fanout_at}: the spawning turn must be before the last main turn")
    if not 0 <= shape.spread < 1:
        raise ValueError("spread must be in [0, 1)")
    if shape.tool_wait_max and shape.tool_wait_max < shape.tool_wait:
        raise ValueError("tool_wait_max must be >= tool_wait")
    return shape


def plan_sessions(shape: AgentShape, sessions: int, seed: int) -> list[PlanRow]:
    """Every request of `sessions` sessions, each session's rows in its send order."""
    rng = np.random.default_rng(seed)

    def length(x: int) -> int:
        if not shape.spread or x <= 0:
            return x
        return max(1, round(float(x * rng.uniform(1 - shape.spread, 1 + shape.spread))))

    def wait() -> float:
        if shape.tool_wait_max > shape.tool_wait:
            return round(float(rng.uniform(shape.tool_wait, shape.tool_wait_max)), 6)
        return shape.tool_wait

    rows: list[PlanRow] = []
    for s in range(sessions):
        turn = 0
        joins: list[int] = []
        for k in range(shape.turns):
            # the turn after a join takes the sub-agents' answers as its tool results, nothing else
            new = length(shape.task) if k == 0 else (0 if joins else length(shape.tool_result))
            rows.append(PlanRow(s, turn, 0, 0.0 if k == 0 else wait(), new, length(shape.answer), joins))
            turn += 1
            joins = []
            if shape.fanout and k == shape.fanout_at:
                for b in range(1, shape.fanout + 1):
                    for j in range(shape.sub_turns):
                        new_b = length(shape.sub_task) if j == 0 else length(shape.tool_result)
                        rows.append(PlanRow(s, turn, b, 0.0 if j == 0 else wait(), new_b, length(shape.answer)))
                        turn += 1
                joins = list(range(1, shape.fanout + 1))
    return rows


def rows_from_dicts(docs: list[dict[str, Any]], where: str) -> list[PlanRow]:
    """Session trace lines as rows, checked: each session's turns 0.. in order, a sub-agent's rows
    after a main turn, `joins` naming sub-agents the session ran before. ValueError says what is wrong."""
    rows: list[PlanRow] = []
    for i, d in enumerate(docs):
        at = f"{where} line {i + 1}"
        try:
            row = PlanRow(
                session=int(d["session"]),
                turn=int(d["turn"]),
                agent=int(d.get("agent", 0)),
                wait_s=float(d.get("wait_s", 0.0)),
                new_tokens=int(d["new_tokens"]),
                output_len=int(d["output_len"]),
                joins=[int(b) for b in d.get("joins", [])],
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{at}: needs session, turn, new_tokens, output_len (numbers): {e}") from None
        if (row.new_tokens < 1 and not row.joins) or row.new_tokens < 0 or row.output_len < 1:
            raise ValueError(f"{at}: new_tokens (>= 1, or 0 on a turn that joins sub-agents) and output_len >= 1")
        if row.wait_s < 0 or row.agent < 0:
            raise ValueError(f"{at}: wait_s and agent must be >= 0")
        rows.append(row)
    rows.sort(key=lambda r: (r.session, r.turn))
    seen: dict[int, set[int]] = {}
    last: tuple[int, int] = (-1, -1)
    for r in rows:
        if (r.session, r.turn) == last:
            raise ValueError(f"{where}: session {r.session} has turn {r.turn} twice")
        last = (r.session, r.turn)
        agents = seen.setdefault(r.session, set())
        if r.turn == 0 and r.agent != 0:
            raise ValueError(f"{where}: session {r.session} starts with a sub-agent; turn 0 is the main agent's")
        missing = [b for b in r.joins if b not in agents]
        if missing:
            raise ValueError(f"{where}: session {r.session} turn {r.turn} joins sub-agent(s) {missing} it never ran")
        agents.add(r.agent)
    return rows
