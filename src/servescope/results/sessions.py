"""Pure: agent-session metrics from a run's records and its session plan (`sessions.jsonl`).

Definitions (docs/metrics.md, "Agent sessions"):
- a turn's latency is its request's E2E (send to last token), its TTFT the request's TTFT; its
  measured wait is its send time minus the end of what it waited for: the same agent's previous
  turn, the spawning turn (a sub-agent's first turn) or the last sub-agent to finish (the turn
  after a join);
- a session's duration is the end of its last turn minus the send of its first;
- TTFT by turn index groups turns by their place in their agent's thread (0 = the first turn);
  TTFT by context length groups them by prompt tokens, in power-of-two bins;
- the designed prefix-cache hit of a session is its designed cached tokens over its prompt tokens
  (both from the plan). The server's prefix-cache counters are run-wide, so beside it stands the
  run's designed rate against the server's achieved one (the summary's `server.prefix_cache_hit_rate`).

Records are matched to plan rows by (session, turn); a run that cycled its sessions (`--duration`)
sends a turn more than once, and then only its first record counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servescope.results.metrics import distribution
from servescope.results.perrequest import since_send_ms

__all__ = ["TurnTimes", "session_metrics", "turns_of"]


@dataclass(frozen=True, slots=True)
class TurnTimes:
    """One record's times (ns from the run's origin) and outcome, as the metrics need them."""

    session: int
    turn: int
    send_ns: int
    first_ns: int | None
    last_ns: int | None  # the last token
    end_ns: int  # the response's end: what the next turn waits for
    ok: bool


@dataclass(frozen=True, slots=True)
class Turn:
    """A planned turn joined with its record."""

    session: int
    turn: int
    agent: int
    index: int  # its place in its agent's thread
    planned_wait_s: float
    input_len: int
    designed_cached: int
    joins: tuple[int, ...]
    rec: TurnTimes | None


def turns_of(plan: Sequence[dict[str, Any]], records: Sequence[TurnTimes]) -> list[Turn]:
    """The plan's rows in order, each with its (first) record, or None where it was never sent."""
    by_key: dict[tuple[int, int], TurnTimes] = {}
    for r in records:
        by_key.setdefault((r.session, r.turn), r)
    counts: dict[tuple[int, int], int] = {}
    out = []
    for row in sorted(plan, key=lambda d: (int(d["session"]), int(d["turn"]))):
        s, t, a = int(row["session"]), int(row["turn"]), int(row.get("agent", 0))
        k = counts.get((s, a), 0)
        counts[(s, a)] = k + 1
        out.append(
            Turn(
                s,
                t,
                a,
                k,
                float(row.get("wait_s", 0.0)),
                int(row.get("input_len", 0)),
                int(row.get("designed_cached", 0)),
                tuple(int(b) for b in row.get("joins", [])),
                by_key.get((s, t)),
            )
        )
    return out


def _measured_waits(turns: list[Turn]) -> list[tuple[float, float]]:
    """(planned, measured) wait in seconds for every sent turn after the first of its session."""
    out = []
    last_end: dict[tuple[int, int], int] = {}  # (session, agent) -> end of its latest turn
    for t in turns:
        rec = t.rec
        if rec is None:
            continue
        if t.joins:
            ends = [last_end.get((t.session, b)) for b in t.joins]
            ref = max((e for e in ends if e is not None), default=None)
        elif t.index == 0 and t.agent:
            ref = last_end.get((t.session, 0))
        else:
            ref = last_end.get((t.session, t.agent)) if t.index else None
        if ref is not None:
            out.append((t.planned_wait_s, (rec.send_ns - ref) / 1e9))
        last_end[(t.session, t.agent)] = rec.end_ns
    return out


def _since_send_ms(send_ns: int, t_ns: int) -> float:
    """TTFT and E2E as `results.perrequest` defines them, for one record."""
    return float(since_send_ms(np.array([send_ns], dtype=float), np.array([t_ns], dtype=float))[0])


def _bins(lengths: np.ndarray) -> np.ndarray:
    """Power-of-two bin floors of prompt lengths: 1000 -> 512, 1024 -> 1024."""
    return np.where(lengths > 0, 2 ** np.floor(np.log2(np.maximum(lengths, 1))), 0).astype(np.int64)


def _grouped(keys: Sequence[int], values: Sequence[float]) -> list[dict[str, Any]]:
    groups: dict[int, list[float]] = {}
    for k, v in zip(keys, values):
        groups.setdefault(k, []).append(v)
    out = []
    for k in sorted(groups):
        d = distribution(groups[k])
        out.append({"key": k, "count": d["count"], "median_ms": d["median"], "p90_ms": d["p90"], "mean_ms": d["mean"]})
    return out


def session_metrics(plan: Sequence[dict[str, Any]], records: Sequence[TurnTimes]) -> dict[str, Any]:
    """The sessions block: counts, durations, turn latency and waits, TTFT by turn index and by
    context length, designed prefix reuse per session. Times in ms unless the key says s."""
    turns = turns_of(plan, records)
    sent = [t for t in turns if t.rec is not None]
    ok = [t for t in sent if t.rec is not None and t.rec.ok]
    per_session: dict[int, list[Turn]] = {}
    for t in turns:
        per_session.setdefault(t.session, []).append(t)
    rows = []
    for s, ts in sorted(per_session.items()):
        recs = [t.rec for t in ts if t.rec is not None]
        done = len(recs) == len(ts) and all(r.ok for r in recs)
        dur = (max(r.end_ns for r in recs) - min(r.send_ns for r in recs)) / 1e9 if recs else None
        prompt = sum(t.input_len for t in ts)
        rows.append(
            {
                "session": s,
                "turns": len(ts),
                "sub_agents": len({t.agent for t in ts if t.agent}),
                "completed": done,
                "duration_s": dur,
                "prompt_tokens": prompt,
                "designed_hit_rate": sum(t.designed_cached for t in ts) / prompt if prompt else None,
            }
        )
    ttft = [
        (t, _since_send_ms(t.rec.send_ns, t.rec.first_ns))
        for t in ok
        if t.rec is not None and t.rec.first_ns is not None
    ]
    waits = _measured_waits(turns)
    err = [abs(m - p) * 1e3 for p, m in waits]
    total_prompt = sum(t.input_len for t in turns)
    return {
        "sessions": len(rows),
        "sessions_completed": sum(1 for r in rows if r["completed"]),
        "turns_planned": len(turns),
        "turns_sent": len(sent),
        "turns_ok": len(ok),
        "session_duration_s": distribution(
            [float(r["duration_s"]) for r in rows if r["completed"] and r["duration_s"] is not None]
        ),
        "turn_latency_ms": distribution(
            [
                _since_send_ms(t.rec.send_ns, t.rec.last_ns)
                for t in ok
                if t.rec is not None and t.rec.last_ns is not None
            ]
        ),
        "wait_planned_s": float(sum(p for p, _ in waits)),
        "wait_measured_s": float(sum(m for _, m in waits)),
        "wait_error_ms": distribution(err),
        "ttft_by_turn": _grouped([t.index for t, _ in ttft], [v for _, v in ttft]),
        "ttft_by_context": _grouped(
            _bins(np.array([t.input_len for t, _ in ttft], dtype=np.int64)).tolist(), [v for _, v in ttft]
        ),
        "designed_prefix_hit_rate": sum(t.designed_cached for t in turns) / total_prompt if total_prompt else None,
        "designed_hit_rate_by_session": distribution(
            [r["designed_hit_rate"] for r in rows if r["designed_hit_rate"] is not None]
        ),
        "per_session": rows,
    }
