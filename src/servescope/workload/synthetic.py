"""Generated workloads: random lengths (fixed, spread or mixtures) and shared-prefix groups."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from servescope.workload import WorkItem
from servescope.workload.exact.builder import PromptBuilder
from servescope.workload.random import mixture_lengths
from servescope.workload.spec import SHARED_PREFIX_PRESET, DatasetSpec

if TYPE_CHECKING:
    from servescope.run.config import RunConfig

__all__ = ["intended_hit_rate", "random_items", "shared_prefix_items", "template_hit_rate"]


async def random_items(
    spec: DatasetSpec, cfg: RunConfig, n: int, builder: PromptBuilder
) -> tuple[list[WorkItem], dict[str, Any]]:
    rng = np.random.default_rng(cfg.seed)
    mix = [(m.input_len, m.output_len, m.weight) for m in spec.mix] or [(cfg.input_len, cfg.output_len, 1.0)]
    ins, outs = mixture_lengths(n, mix, cfg.range_ratio, rng)
    overhead = await builder.overhead("single")
    content = builder.content_targets(ins, overhead)
    pool = builder.pool(n, int(content.max()) if n else 1, cfg.seed)
    texts = pool.texts(content)
    items = [WorkItem(prompt=t, input_len=int(i), output_len=o) for t, i, o in zip(texts, ins.tolist(), outs)]
    info: dict[str, Any] = {"overhead_tokens": overhead}
    if n:
        info["intended_prefix_hit_rate"] = round(template_hit_rate(overhead, content), 4)
        info["intended_prefix_hit_rate_basis"] = "template"
    if spec.mix:
        info["mix"] = [{"input_len": a, "output_len": b, "weight": round(w, 6)} for a, b, w in mix]
    return items, info


def template_hit_rate(overhead: int, content: np.ndarray) -> float:
    """The designed prefix-cache hit rate of prompts that share nothing but what the server adds around
    them (chat template, BOS) and the anchor: `overhead` tokens of every prompt of `overhead + content`
    tokens. An upper bound: the overhead also counts the template's tail (after the content, not a
    prefix), and caches hit whole blocks only (vLLM: 16 tokens), so a few shared tokens hit nothing."""
    total = int(np.sum(content)) + overhead * len(content)
    return overhead * len(content) / total if total else 0.0


def intended_hit_rate(groups: list[int], shared: int, totals: list[int]) -> float:
    """Token share an ideal prefix cache would hit: every request but the first of its group reuses
    `shared` tokens. `groups[i]` is request i's group, in send order."""
    seen: set[int] = set()
    hits = 0
    for g in groups:
        if g in seen:
            hits += shared
        seen.add(g)
    total = sum(totals)
    return hits / total if total else 0.0


async def shared_prefix_items(
    spec: DatasetSpec, cfg: RunConfig, n: int, builder: PromptBuilder
) -> tuple[list[WorkItem], dict[str, Any]]:
    """G groups × P prompts: a system prompt of S tokens shared within a group + a unique question.

    Chat: `[system, user]` messages; completions: one text, the shared part first. Total input
    `S + Q` tokens exactly (template overhead is taken from the question). Requests are shuffled
    with the seed; the run sends `n` of them (cycling through the groups when n > G·P).
    """
    g = spec.opt_int("groups", SHARED_PREFIX_PRESET["groups"]) or 1
    p = spec.opt_int("prompts", SHARED_PREFIX_PRESET["prompts"]) or 1
    s_len = spec.opt_int("system", SHARED_PREFIX_PRESET["system"]) or 1
    q_len = spec.opt_int("question", SHARED_PREFIX_PRESET["question"]) or 1
    chat = builder.target.api == "chat"
    overhead = await builder.overhead("system+user" if chat else "single")
    rng = np.random.default_rng(cfg.seed)
    per = g * p
    order = rng.permutation(per)
    group_of = [int(k) // p for k in order]
    if n > per:
        group_of = [group_of[i % per] for i in range(n)]
    group_of = group_of[:n]
    pool = builder.pool(g + n, max(s_len, q_len), cfg.seed)
    starts = pool.starts(g + n)
    systems = pool.texts([s_len] * g, starts[:g])
    q_content = builder.content_targets(np.array([q_len]), overhead)[0]
    questions = pool.texts([int(q_content)] * n, starts[g:], anchor=chat)
    total = s_len + q_len if q_content + overhead == q_len else s_len + int(q_content) + overhead
    items = []
    for i, grp in enumerate(group_of):
        prompt: Any
        if chat:
            prompt = [{"role": "system", "content": systems[grp]}, {"role": "user", "content": questions[i]}]
        else:
            prompt = systems[grp] + questions[i]
        items.append(WorkItem(prompt=prompt, input_len=total, output_len=cfg.output_len, meta={"group": grp}))
    info = {
        "shared_prefix": {
            "groups": g,
            "prompts_per_group": p,
            "system_len": s_len,
            "question_len": q_len,
            "shared_fraction": round(s_len / total, 4),
        },
        "intended_prefix_hit_rate": round(intended_hit_rate(group_of, s_len, [total] * n), 4),
        "overhead_tokens": overhead,
    }
    return items, info
