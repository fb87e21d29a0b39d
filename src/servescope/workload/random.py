"""Random prompts of a requested length, without a tokenizer.

Each prompt is a run of common short English words, each a single token in the byte-level BPE
vocabularies of Llama 3, Qwen, DeepSeek and GPT-2 when preceded by a space, so N words come to
about N tokens. The server's own `usage.prompt_tokens` is what the summary reports; exact
lengths need the server's `/tokenize` or a local tokenizer.
Every prompt starts with a distinct random word run, so prompts share no prefix and prefix caching
cannot make a random workload look faster than it is.
"""

from __future__ import annotations

import numpy as np

from servescope.workload import WorkItem

__all__ = ["WORDS", "mixture_lengths", "random_lengths", "random_prompt", "random_workload"]

WORDS = tuple(
    dict.fromkeys(
        """the of and to in is was for on that with as by at from his it an were are which this be
    has had not but have one all their new first two after who its been also more they other time
    can there when into some out only over made most city than so up year may about world state
    people part used between under many while where then during these because same since such both
    day through until them each work way life found home well high much before would known school
    take life three end long great small each large place four good power name even three water
    still early line back war five game must show here last area form main team name air land old
    year page set hand group house point rule light food book room word line head side case form
    care fire wind song road tree king star fish bird rain snow moon sun sea lake hill rock gold
    iron cold warm blue red green black white open near far low fast slow free full deep dark
    """.split()
    )
)


def random_lengths(n: int, mean: int, range_ratio: float, rng: np.random.Generator) -> list[int]:
    """Uniform lengths in [mean·(1−r), mean·(1+r)] (vLLM's `--random-range-ratio`), at least 1."""
    if range_ratio <= 0:
        return [max(1, mean)] * n
    lo = max(1, int(mean * (1 - range_ratio)))
    hi = max(lo, int(mean * (1 + range_ratio)))
    return [int(x) for x in rng.integers(lo, hi + 1, size=n)]


def random_prompt(n_tokens: int, rng: np.random.Generator) -> str:
    idx = rng.integers(0, len(WORDS), size=max(1, n_tokens))
    return " ".join(WORDS[i] for i in idx)


def random_workload(
    n: int,
    *,
    input_len: int,
    output_len: int | None,
    range_ratio: float = 0.0,
    seed: int = 0,
) -> list[WorkItem]:
    rng = np.random.default_rng(seed)
    ins = random_lengths(n, input_len, range_ratio, rng)
    outs = random_lengths(n, output_len, range_ratio, rng) if output_len else [None] * n
    return [
        WorkItem(prompt=random_prompt(i_len, rng), input_len=i_len, output_len=o_len) for i_len, o_len in zip(ins, outs)
    ]


def mixture_lengths(
    n: int, mix: list[tuple[int, int | None, float]], range_ratio: float, rng: np.random.Generator
) -> tuple[np.ndarray, list[int | None]]:
    """Input and output lengths for `n` requests from a length mixture `[(in, out, weight), ...]`.

    Each component gets its share of requests exactly (largest remainders), order shuffled with the
    seed; `range_ratio` spreads each component uniformly around its lengths.
    """
    weights = np.array([w for _, _, w in mix], dtype=float)
    raw = weights / weights.sum() * n
    counts = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - counts))[: n - int(counts.sum())]:
        counts[i] += 1
    comp = rng.permutation(np.repeat(np.arange(len(mix)), counts))
    ins = np.empty(n, dtype=np.int64)
    outs: list[int | None] = [None] * n
    for c, (i_len, o_len, _) in enumerate(mix):
        sel = np.flatnonzero(comp == c)
        if not len(sel):
            continue
        ins[sel] = random_lengths(len(sel), i_len, range_ratio, rng)
        if o_len is not None:
            for j, v in zip(sel.tolist(), random_lengths(len(sel), o_len, range_ratio, rng)):
                outs[j] = v
    return ins, outs
