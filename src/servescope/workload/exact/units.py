"""Prompts of an exact token length, built before the clock from a calibrated pool of word units.

How (no tokenizer on the hot path, and only ~250 small /tokenize calls per run):

1. Units are common English words with a leading space (" the", " water", ...). Byte-level BPE
   pre-tokenizers (GPT-2, Llama 3, Qwen, DeepSeek), SentencePiece with whitespace splitting, llama.cpp
   and our emulator never merge across that space, so a text's token count is the sum of its units'.
   Each unit's cost is learnt as `count(ANCHOR + unit) - count(ANCHOR)` (differences cancel the BOS
   some /tokenize endpoints add), and additivity is checked on a long random text.
2. Every prompt is `ANCHOR + units`: the fixed anchor keeps the first unit's leading space even under
   chat templates that trim content. The overhead — anchor, BOS and the chat template, exactly what
   the server will count in `usage.prompt_tokens` — is measured once per message structure with one
   real request (`probe_usage`), or with /tokenize on chat messages, and subtracted from the target.
3. One seeded pool of units (one long string, cumulative token counts and character offsets) serves
   every prompt: a prompt is a slice of the pool starting at its own distinct offset (so prompts share
   no prefix beyond the anchor), cut where the cumulative count reaches the target, then topped up
   with one-token units. 10,000 prompts of 1,024 tokens take well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from servescope.workload.exact.counter import TokenCounter
from servescope.workload.random import WORDS

__all__ = ["ANCHOR", "UnitPool", "Units", "approximate_units", "calibrate_units"]

ANCHOR = "Text:"
_MAX_UNIT_COST = 4
_CHECK_UNITS = 1500


@dataclass(slots=True)
class Units:
    """Word units and their token costs (exact when `exact`, else assumed 1 token each)."""

    texts: list[str]
    costs: np.ndarray  # int64, one per unit
    anchor_cost: int  # count(ANCHOR) as the counter sees it, special tokens included
    exact: bool
    label: str
    notes: list[str] = field(default_factory=list)

    @property
    def one_token(self) -> str:
        return self.texts[int(np.flatnonzero(self.costs == 1)[0])]


def approximate_units(note: str) -> Units:
    texts = [" " + w for w in WORDS]
    return Units(
        texts=texts,
        costs=np.ones(len(texts), dtype=np.int64),
        anchor_cost=2,
        exact=False,
        label="approximate (about one token per word)",
        notes=[note],
    )


async def calibrate_units(counter: TokenCounter) -> Units:
    """Each unit's exact cost with `counter`, checked for additivity; approximate units if it fails."""
    cands = [" " + w for w in WORDS]
    counts = await counter.count([ANCHOR] + [ANCHOR + u for u in cands])
    base = counts[0]
    costs = np.array([c - base for c in counts[1:]], dtype=np.int64)
    keep = (costs >= 1) & (costs <= _MAX_UNIT_COST)
    texts = [u for u, k in zip(cands, keep) if k]
    costs = costs[keep]
    if not (costs == 1).any() or len(texts) < 8:
        return approximate_units(
            f"{counter.label.removeprefix('exact ')}: too few word units of a known length; lengths are approximate"
        )
    units = Units(texts=texts, costs=costs, anchor_cost=base, exact=True, label=counter.label)
    # additivity: one long random text must count exactly as the sum of its parts
    rng = np.random.default_rng(12345)
    idx = rng.integers(0, len(texts), size=_CHECK_UNITS)
    text = ANCHOR + "".join(texts[i] for i in idx)
    (got,) = await counter.count([text])
    want = base + int(costs[idx].sum())
    if got != want:
        units.exact = False
        units.label = "approximate (word units are not additive for this tokenizer)"
        units.notes.append(f"{counter.label}: a {want}-token check text counted {got}; lengths are approximate")
    return units


class UnitPool:
    """A seeded random sequence of units; prompts are slices of it with exact content token counts."""

    def __init__(self, units: Units, *, n_prompts: int, max_tokens: int, seed: int) -> None:
        self.units = units
        rng = np.random.default_rng(seed)
        self._rng = rng
        # prefer one-token units in the pool when there are enough of them: no top-up needed
        ones = np.flatnonzero(units.costs == 1)
        choice = ones if len(ones) >= 32 else np.arange(len(units.texts))
        self._distinct = min(n_prompts, 2_000_000)
        size = self._distinct + max_tokens + 16
        idx = choice[rng.integers(0, len(choice), size=size)]
        texts = np.array(units.texts, dtype=object)[idx]
        self._text = "".join(texts.tolist())
        self._cum = np.concatenate([[0], np.cumsum(units.costs[idx])])
        lens = np.fromiter((len(t) for t in units.texts), dtype=np.int64, count=len(units.texts))
        self._coff = np.concatenate([[0], np.cumsum(lens[idx])])
        self._span = max_tokens + 1
        self._one = units.one_token if (units.costs == 1).any() else units.texts[0]

    def starts(self, n: int) -> np.ndarray:
        """`n` distinct start offsets (repeating only past 2M prompts)."""
        hi = len(self._cum) - self._span
        if n <= hi:
            return self._rng.choice(hi, size=n, replace=False)
        return self._rng.integers(0, hi, size=n)

    def texts(
        self, content_tokens: np.ndarray | list[int], starts: np.ndarray | None = None, *, anchor: bool = True
    ) -> list[str]:
        """Texts of exactly `content_tokens[i]` unit tokens (plus the anchor, whose cost is overhead)."""
        t = np.asarray(content_tokens, dtype=np.int64)
        if starts is None:
            starts = self.starts(len(t))
        cum, coff, text, one = self._cum, self._coff, self._text, self._one
        ends = np.searchsorted(cum, cum[starts] + t, side="right") - 1
        rems = t - (cum[ends] - cum[starts])
        head = ANCHOR if anchor else ""
        out = []
        for s, e, r in zip(coff[starts].tolist(), coff[ends].tolist(), rems.tolist()):
            out.append(head + text[s:e] + one * r if r else head + text[s:e])
        return out
