"""Dataset records -> work items; conversations become multi-turn sessions.

Contract with the runner: every user turn of a conversation is one `WorkItem`; all turns of a
conversation share `session`, `turn` counts 0.. in order, and each turn's prompt already carries the
whole history — the previous user AND assistant messages as the dataset wrote them (never the
server's replies, so nothing is tokenized or rebuilt on the hot path). `meta["think_s"]` is the pause
before the turn (0 for turn 0). The runner sends a session's turns in order, one at a time.

A turn's output length is the token count of the dataset's own reply to it (as vLLM's ShareGPT
loader does), else the file's `output_len`, else `--output-len`; with `output=fixed` every turn asks
for `--output-len`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from servescope.workload import WorkItem
from servescope.workload.exact.builder import PromptBuilder
from servescope.workload.files import Record

if TYPE_CHECKING:
    from servescope.run.config import RunConfig

__all__ = ["records_to_items", "flatten"]


def flatten(messages: list[dict[str, str]]) -> str:
    """Chat messages as one text, for `--api completions`."""
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    return "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"


async def records_to_items(
    records: list[Record],
    cfg: RunConfig,
    n: int,
    builder: PromptBuilder,
    *,
    multi_turn: bool,
    think_s: float = 0.0,
    max_turns: int | None = None,
    shuffle: bool = True,
    fixed_output: bool = False,
) -> tuple[list[WorkItem], dict[str, Any]]:
    order = list(range(len(records)))
    if shuffle:
        order = np.random.default_rng(cfg.seed).permutation(len(records)).tolist()
    chat = builder.target.api == "chat"
    # (session, turn, history, reply, file output_len), in send order, until n requests
    plan: list[tuple[int, int, list[dict[str, str]], str | None, int | None]] = []
    passes = 0
    n_sessions = 0
    while len(plan) < n and passes < 1 + n:  # cycles through the file when it holds fewer than n turns
        for k in order:
            msgs = records[k].messages
            users = [j for j, m in enumerate(msgs) if m["role"] == "user"]
            if not multi_turn:
                users = users[-1:]  # one request: everything up to the last user message
            if max_turns:
                users = users[:max_turns]
            for turn, j in enumerate(users):
                nxt = msgs[j + 1] if j + 1 < len(msgs) else None
                reply = nxt["content"] if nxt is not None and nxt["role"] == "assistant" else None
                plan.append((n_sessions, turn, msgs[: j + 1], reply, records[k].output_len))
                if len(plan) >= n:
                    break
            n_sessions += 1
            if len(plan) >= n:
                break
        passes += 1
    cycled = passes > 1
    plan = plan[:n]
    if fixed_output:  # every turn asks for --output-len; dataset replies still travel in the history
        plan = [(sid, turn, hist, None, None) for sid, turn, hist, _, _ in plan]
    in_lens, reply_lens = await _count(plan, builder, chat)
    items = []
    for (sid, turn, hist, reply, file_out), in_len, reply_len in zip(plan, in_lens, reply_lens):
        out_len = max(1, reply_len) if reply else (file_out or cfg.output_len)
        prompt: Any = [dict(m) for m in hist] if chat else flatten(hist)
        meta = {"think_s": think_s if turn else 0.0} if multi_turn else {}
        items.append(
            WorkItem(
                prompt=prompt,
                input_len=max(1, in_len),
                output_len=out_len,
                session=sid if multi_turn else None,
                turn=turn if multi_turn else None,
                meta=meta,
            )
        )
    info: dict[str, Any] = {
        "records": len(records),
        "output_len_source": (
            "--output-len"
            if fixed_output
            else "dataset replies"
            if any(r for *_, r, _ in plan)
            else "file or --output-len"
        ),
    }
    if multi_turn:
        info["sessions"] = len({p[0] for p in plan})
        info["turns_max"] = max((p[1] for p in plan), default=-1) + 1
        info["think_s"] = think_s
    if cycled:
        info["cycled"] = True
    return items, info


async def _count(plan: list[tuple[Any, ...]], builder: PromptBuilder, chat: bool) -> tuple[list[int], list[int]]:
    """(prompt tokens, reply tokens) per planned request: exact where the server tokenizes chat messages,
    else content counts plus the template overhead measured once (an estimate)."""
    replies = [r for *_, r, _ in plan if r]
    reply_counts = dict(zip(replies, await builder.count_texts(replies))) if replies else {}
    reply_lens = [reply_counts.get(r, 0) if r else 0 for *_, r, _ in plan]
    first, further = await builder.message_overheads()
    if chat:
        exact = await builder.count_chats([h for _, _, h, _, _ in plan])
        if exact is not None:
            builder.chat_counts_exact = True
            return exact, reply_lens
        texts = [m["content"] for _, _, h, _, _ in plan for m in h]
        counts = dict(zip(texts, await builder.count_texts(texts))) if texts else {}
        return [
            sum(counts[m["content"]] for m in h) + first + further * (len(h) - 1) for _, _, h, _, _ in plan
        ], reply_lens
    flats = [flatten(h) for _, _, h, _, _ in plan]
    counts = dict(zip(flats, await builder.count_texts(flats)))
    return [counts[f] + first for f in flats], reply_lens
