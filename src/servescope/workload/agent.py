"""Agent sessions as work items: `--dataset agent[:OPTIONS]` (generated) and `--dataset sessions:PATH`
(a session trace replayed). The plan of turns is `agentplan` (pure); this module gives each turn its
text, counts it and works out the prefix reuse the design implies.

Each agent's context is a list of chat messages: a system message (the shared system prompt and tool
schemas, the same text in every session), the task as a user message, then per turn the answer as an
assistant message and the tool result as a user message (a plain user message: not every chat template
renders a `tool` role without a matching tool call). A turn that joins sub-agents gets one user message
holding their last answers. The answers in the history are the generator's texts of exactly the
answer's length (`output_len`, sent as max_tokens with --ignore-eos), not the server's words: every
body is built before the clock, so the server's prefix cache sees the designed reuse (the previous
prompt), while the blocks of its own answer are not reused.

`meta` of each item: `think_s` (the turn's wait), `branch` (the agent: 0 main, b sub-agent b).
`Workload.session_plan` keeps the rows with each turn's counted length and designed cached tokens;
the run writes them to `sessions.jsonl` in its directory (the session trace format, replayable).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np

from servescope.errors import ConfigError
from servescope.workload import WorkItem
from servescope.workload.agentplan import PlanRow, plan_sessions, rows_from_dicts, shape_from_options
from servescope.workload.exact.builder import PromptBuilder
from servescope.workload.exact.counter import ServerCounter
from servescope.workload.files import _file, _read_json_any
from servescope.workload.sessions import flatten

if TYPE_CHECKING:
    from servescope.run.config import RunConfig

__all__ = ["agent_items", "designed_hits", "session_trace_items"]

Msgs = list[dict[str, str]]


def _first_wave(rows: list[PlanRow], slots: int) -> set[int]:
    """The rows sent at the same instant when the run starts: the first turn of each of the first
    `slots` sessions (a closed loop starts one session per slot at once)."""
    firsts = [i for i, r in enumerate(rows) if r.turn == 0]
    return set(firsts[:slots]) if slots > 1 else set()


def designed_hits(prompts: list[list[int]], block: int, wave: set[int] | None = None) -> list[int]:
    """Tokens an ideal prefix cache of `block`-token blocks serves of each prompt, the prompts taken in
    order: the leading full blocks whose whole prefix an earlier prompt had, capped so that at least one
    token is computed (vLLM: a fully cached prompt still computes its last block). The prompts of
    `wave` (indices) arrive together, before all others: none finds another's blocks."""
    wave = wave or set()
    order = sorted(wave) + [i for i in range(len(prompts)) if i not in wave]
    seen: set[int] = set()
    late: set[int] = set()
    hits = [0] * len(prompts)
    for pos, i in enumerate(order):
        ids = prompts[i]
        if pos == len(wave):  # the wave is computed: its blocks are cached from here on
            seen |= late
        n_full = len(ids) // block
        keys = []
        h = 0
        for j in range(n_full):
            h = hash((h, tuple(ids[j * block : (j + 1) * block])))
            keys.append(h)
        hit_blocks = 0
        for key in keys:
            if key not in seen:
                break
            hit_blocks += 1
        hit_blocks = min(hit_blocks, (len(ids) - 1) // block) if ids else 0
        hits[i] = hit_blocks * block
        (late if i in wave else seen).update(keys)
    return hits


def _count_estimate_hits(rows: list[PlanRow], lens: list[int], shared: int, block: int, slots: int) -> list[int]:
    """Without token ids: the agent's previous prompt is reused whole, a first turn reuses the shared
    system message's content (tokens outside it, the template's, are not counted: an estimate), but
    not in the first wave (`_first_wave`)."""
    wave = _first_wave(rows, slots) or {0}
    prev: dict[tuple[int, int], int] = {}
    out = []
    for i, (r, n) in enumerate(zip(rows, lens)):
        key = (r.session, r.agent)
        reuse = prev.get(key, 0 if i in wave else shared)
        out.append(min(reuse, n - 1) // block * block if n > 0 else 0)
        prev[key] = n
    return out


def _texts(
    builder: PromptBuilder, rows: list[PlanRow], shared: tuple[int, int], seed: int
) -> tuple[str, list[str], list[str]]:
    """The shared system text, then per row its new text and its answer text (exact unit tokens)."""
    news = [r.new_tokens for r in rows]
    answers = [r.output_len for r in rows]
    sizes = [shared[0], shared[1], *news, *answers]
    pool = builder.pool(len(sizes), max(max(sizes), 1), seed)
    texts = pool.texts(np.array(sizes, dtype=np.int64), anchor=False)
    system = texts[0] + ("\n\n# Tools\n" + texts[1] if shared[1] else "")
    n = len(rows)
    return system, texts[2 : 2 + n], texts[2 + n :]


def _histories(rows: list[PlanRow], system: str, news: list[str], answers: list[str]) -> list[Msgs]:
    """Each row's whole context, as the rules in the module's docstring build it."""
    ctx: dict[tuple[int, int], Msgs] = {}
    last_answer: dict[tuple[int, int], str] = {}
    out: list[Msgs] = []
    for r, new, answer in zip(rows, news, answers):
        key = (r.session, r.agent)
        msgs = ctx.get(key)
        if msgs is None:
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": new}]
        else:
            msgs = [*msgs, {"role": "assistant", "content": last_answer[key]}]
            parts = [last_answer[(r.session, b)] for b in r.joins]
            if r.new_tokens:
                parts.append(new)
            msgs.append({"role": "user", "content": "\n\n".join(parts)})
        ctx[key] = msgs
        last_answer[key] = answer
        out.append(msgs)
    return out


async def _lengths_and_hits(
    builder: PromptBuilder,
    hists: list[Msgs],
    rows: list[PlanRow],
    chat: bool,
    shared_tokens: int,
    block: int,
    slots: int,
) -> tuple[list[int], list[int], str]:
    counter = builder.counter
    if chat and isinstance(counter, ServerCounter) and hists:
        first = await counter.message_tokens(hists[0])
        if first is not None:
            sem = asyncio.Semaphore(32)

            async def one(h: Msgs) -> list[int] | None:
                async with sem:
                    return await counter.message_tokens(h)

            ids = [first, *await asyncio.gather(*(one(h) for h in hists[1:]))]
            if all(i is not None for i in ids):
                prompts = [list(i) for i in ids if i is not None]
                builder.chat_counts_exact = True
                wave = _first_wave(rows, slots)
                return [len(p) for p in prompts], designed_hits(prompts, block, wave), "token ids (server /tokenize)"
    exact = await builder.count_chats(hists) if chat else None
    if exact is None:
        flats = [flatten(h) for h in hists] if not chat else ["".join(m["content"] for m in h) for h in hists]
        first_overhead, _ = await builder.message_overheads()
        exact = [c + first_overhead for c in await builder.count_texts(flats)]
    return exact, _count_estimate_hits(rows, exact, shared_tokens, block, slots), "counts (estimate)"


async def _build(
    rows: list[PlanRow],
    cfg: RunConfig,
    builder: PromptBuilder,
    shared: tuple[int, int],
    block: int,
    slots: int,
) -> tuple[list[WorkItem], list[dict[str, Any]], dict[str, Any]]:
    chat = builder.target.api == "chat"
    system, news, answers = _texts(builder, rows, shared, cfg.seed)
    hists = _histories(rows, system, news, answers)
    lens, hits, basis = await _lengths_and_hits(builder, hists, rows, chat, sum(shared), block, slots)
    items = []
    plan = []
    for r, h, n, hit in zip(rows, hists, lens, hits):
        prompt: Any = [dict(m) for m in h] if chat else flatten(h)
        items.append(
            WorkItem(
                prompt=prompt,
                input_len=max(1, n),
                output_len=r.output_len,
                session=r.session,
                turn=r.turn,
                meta={"think_s": r.wait_s, "branch": r.agent},
            )
        )
        plan.append({**r.to_dict(), "input_len": n, "designed_cached": hit})
    total = sum(lens)
    info = {
        "sessions": len({r.session for r in rows}),
        "turns_max": max((r.turn for r in rows), default=-1) + 1,
        "sub_agents": len({(r.session, r.agent) for r in rows if r.agent}),
        "shared_prefix_tokens": sum(shared),
        "block_tokens": block,
        "designed_basis": basis,
    }
    if total:
        info["intended_prefix_hit_rate"] = round(sum(hits) / total, 4)
        info["intended_prefix_hit_rate_basis"] = f"agent sessions, {block}-token blocks, from {basis}"
    return items, plan, info


async def agent_items(
    options: dict[str, str], cfg: RunConfig, n: int, builder: PromptBuilder
) -> tuple[list[WorkItem], list[dict[str, Any]], dict[str, Any]]:
    try:
        shape = shape_from_options(options)
    except ValueError as e:
        raise ConfigError(f"--dataset agent: {e}") from None
    block = _block(options)
    per_session = shape.turns + shape.fanout * shape.sub_turns
    slots = cfg.effective_concurrency or 1
    sessions = _opt_int(options, "sessions") or max(-(-n // per_session), slots)
    rows = plan_sessions(shape, sessions, cfg.seed)
    items, plan, info = await _build(rows, cfg, builder, (shape.system, shape.tools), block, slots)
    info["shape"] = {k: getattr(shape, k) for k in shape.__dataclass_fields__}
    return items, plan, {"agent": info, **_top(info)}


async def session_trace_items(
    path: str, options: dict[str, str], cfg: RunConfig, n: int, builder: PromptBuilder
) -> tuple[list[WorkItem], list[dict[str, Any]], dict[str, Any]]:
    """A session trace (JSONL, the rows `sessions.jsonl` holds) rebuilt and replayed. Shared prefix
    sizes come from the options (`system=`, `tools=`; the generator's defaults otherwise)."""
    p = _file(path)
    docs = list(_read_json_any(p))
    if not all(isinstance(d, dict) for d in docs):
        raise ConfigError(f"{p}: every line must be a JSON object")
    try:
        rows = rows_from_dicts(docs, str(p))
        shape = shape_from_options({k: v for k, v in options.items() if k in ("system", "tools")})
    except ValueError as e:
        raise ConfigError(f"--dataset sessions: {e}") from None
    if not rows:
        raise ConfigError(f"{p}: an empty session trace")
    if "sessions" in options:
        keep = set(sorted({r.session for r in rows})[: _opt_int(options, "sessions") or 0])
        rows = [r for r in rows if r.session in keep]
    slots = cfg.effective_concurrency or 1
    items, plan, info = await _build(rows, cfg, builder, (shape.system, shape.tools), _block(options), slots)
    info["trace"] = str(p)
    return items, plan, {"agent": info, **_top(info)}


def _top(info: dict[str, Any]) -> dict[str, Any]:
    """The keys the summary's prefix-cache check and the sessions table read at the workload's top."""
    keys = ("sessions", "turns_max", "intended_prefix_hit_rate", "intended_prefix_hit_rate_basis")
    return {k: info[k] for k in keys if k in info}


def _opt_int(options: dict[str, str], key: str) -> int | None:
    v = options.get(key)
    if v is None:
        return None
    try:
        out = int(v)
    except ValueError:
        raise ConfigError(f"--dataset: {key}={v!r} is not a whole number") from None
    if out < 1:
        raise ConfigError(f"--dataset: {key} must be >= 1")
    return out


def _block(options: dict[str, str]) -> int:
    """The server's cache block in tokens, for the designed hit rate: 16 (vLLM's GPU default) unless
    `block=N` (vLLM's CPU build caches in 128-token blocks)."""
    return _opt_int(options, "block") or 16
