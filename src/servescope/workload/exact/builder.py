"""Exact-length prompts for one target: units calibrated with its counter, overheads measured once.

`PromptBuilder.create` picks the counter (`--tokenizer PATH`, else the server's /tokenize, else none:
approximate), calibrates word units (workload/exact/units.py), and measures, once per message structure,
the tokens the server adds around the content (anchor, BOS, chat template): one real request with
`max_tokens: 1` and its `usage.prompt_tokens`, or /tokenize on the chat messages where the server
has it. All of it happens before the clock.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from servescope.workload.exact.counter import (
    LocalCounter,
    ServerCounter,
    TokenCounter,
    detect_server_counter,
    probe_usage,
)
from servescope.workload.exact.units import ANCHOR, UnitPool, Units, approximate_units, calibrate_units

if TYPE_CHECKING:
    from servescope.target.capabilities import Capabilities

__all__ = ["PromptBuilder", "Target"]

_PROBE_UNITS = 24


@dataclass(slots=True)
class Target:
    base_url: str
    model: str
    headers: dict[str, str]
    api: str
    caps: Capabilities | None = None
    allow_probe: bool = True  # False with --no-probe: no real request before the clock


@dataclass
class PromptBuilder:
    target: Target
    units: Units
    counter: TokenCounter | None
    notes: list[str] = field(default_factory=list)
    overhead_source: str = ""
    _overheads: dict[str, int] = field(default_factory=dict)
    probe_requests: int = 0  # real requests sent before the clock to learn the template overhead
    probe_output_tokens: int = 0
    chat_counts_exact: bool = False  # dataset chats counted whole by the server (template included)
    _empty: int | None = None

    # ------------------------------------------------------------------ setup
    @classmethod
    async def create(cls, target: Target, tokenizer: str | None) -> PromptBuilder:
        counter: TokenCounter | None = None
        if tokenizer:
            counter = LocalCounter(tokenizer)
        elif target.allow_probe:
            counter = await detect_server_counter(target.base_url, target.model, target.headers, target.caps)
        if counter is None:
            why = (
                "--no-probe sends nothing to the target before the clock, so its /tokenize is not used"
                if not target.allow_probe and not tokenizer
                else "the target has no /tokenize this tool can use"
            )
            units = approximate_units(
                f"{why} and no --tokenizer was given: prompt lengths are approximate "
                "(the summary reports the server's usage.prompt_tokens)"
            )
        else:
            units = await calibrate_units(counter)
        return cls(target=target, units=units, counter=counter, notes=list(units.notes))

    async def close(self) -> None:
        if self.counter is not None:
            await self.counter.close()

    @property
    def lengths_label(self) -> str:
        return self.units.label

    def pool(self, n_prompts: int, max_tokens: int, seed: int) -> UnitPool:
        return UnitPool(self.units, n_prompts=n_prompts, max_tokens=max(1, max_tokens), seed=seed)

    # --------------------------------------------------------------- overheads
    def _probe_content(self, k: int, offset: int) -> tuple[str, int]:
        texts, costs = self.units.texts, self.units.costs
        idx = [(offset + 7 * i) % len(texts) for i in range(k)]
        return ANCHOR + "".join(texts[i] for i in idx), int(sum(int(costs[i]) for i in idx))

    async def overhead(self, structure: str = "single") -> int:
        """Tokens the server counts beyond the unit tokens: anchors, BOS and chat template.

        `single`: one user message (chat) or one text (completions); `system+user`: a system message
        and a user message, each starting with the anchor (completions: one text, as `single`).
        """
        if self.target.api != "chat":
            structure = "single"
        if structure in self._overheads:
            return self._overheads[structure]
        if structure == "single":
            text, units = self._probe_content(_PROBE_UNITS, 0)
            prompt: Any = text if self.target.api != "chat" else [{"role": "user", "content": text}]
        else:
            t1, u1 = self._probe_content(_PROBE_UNITS, 0)
            t2, u2 = self._probe_content(_PROBE_UNITS, 3)
            prompt, units = [{"role": "system", "content": t1}, {"role": "user", "content": t2}], u1 + u2
        t = self.target
        # The server's /tokenize counts exactly what the request will (vLLM: messages or a prompt; llama.cpp:
        # /apply-template + /tokenize with special tokens): no generation. Elsewhere one real request tells.
        n = None
        if isinstance(self.counter, ServerCounter):
            if isinstance(prompt, list):
                n = await self.counter.count_messages(prompt)
            else:
                n = await self.counter.count_request_text(prompt)
        if n is not None:
            self.overhead_source = "server /tokenize (template and special tokens included)"
            value = n - units
        else:
            # a real request only when it buys exact lengths (approximate units gain nothing from it)
            used = None
            if self.units.exact and t.allow_probe:
                used = await probe_usage(t.base_url, t.model, t.headers, t.api, prompt)
            if used is not None:
                self.overhead_source = "usage.prompt_tokens of a probe request (max_tokens 1)"
                self.probe_requests += 1
                self.probe_output_tokens += used[1]
                value = used[0] - units
            else:
                anchors = 1 if structure == "single" else 2
                value = anchors * self.units.anchor_cost
                self.overhead_source = "none (the chat template and BOS are not counted)"
                if self.units.exact:
                    why = (
                        "--no-probe forbids the probe request that would measure it"
                        if not t.allow_probe
                        else "the server sent no usage on a probe request"
                    )
                    self.notes.append(
                        f"{why}, and the server's /tokenize cannot count the chat template: "
                        "the template's tokens are not counted in input lengths"
                    )
        self._overheads[structure] = max(0, value)
        return self._overheads[structure]

    # ----------------------------------------------------------------- counts
    async def count_texts(self, texts: list[str]) -> list[int]:
        """Content tokens of free texts (dataset prompts): counter where there is one, else ~4 chars/token."""
        if self.counter is None:
            return [max(1, round(len(t) / 4)) for t in texts]
        if self._empty is None:
            try:
                (self._empty,) = await self.counter.count([""])
            except Exception:
                self._empty = 0
        uniq = list(dict.fromkeys(texts))
        counts = dict(zip(uniq, await self.counter.count(uniq)))
        return [max(0, counts[t] - self._empty) for t in texts]

    async def count_chats(self, chats: list[list[dict[str, str]]]) -> list[int] | None:
        """Exact prompt tokens of whole chat requests (template included) where the server's /tokenize
        takes chat messages (vLLM, SGLang, emulator); None elsewhere."""
        if not isinstance(self.counter, ServerCounter) or self.counter.shape not in ("prompt", "content") or not chats:
            return None
        counter = self.counter
        if await counter.count_messages(chats[0]) is None:
            return None
        sem = asyncio.Semaphore(64)

        async def one(msgs: list[dict[str, str]]) -> int | None:
            async with sem:
                return await counter.count_messages(msgs)

        counts = await asyncio.gather(*(one(m) for m in chats))
        if any(c is None for c in counts):
            return None
        return [int(c) for c in counts]  # type: ignore[arg-type]

    async def message_overheads(self) -> tuple[int, int]:
        """(first message, each further message) template tokens, for dataset conversations (estimates)."""
        single = await self.overhead("single")
        anchor = max(0, self.units.anchor_cost - (self._empty or 0))
        base = max(0, single - anchor)
        if self.target.api != "chat":
            return base, 0
        double = await self.overhead("system+user")
        return base, max(0, double - single - anchor)

    def content_targets(self, totals: np.ndarray, overhead: int) -> np.ndarray:
        """Unit tokens that make `totals` after `overhead`; at least 1 (noted when a target is too short)."""
        t = np.asarray(totals, dtype=np.int64) - overhead
        if (t < 1).any():
            self.notes.append(
                f"some input lengths are shorter than the {overhead} tokens the server adds "
                "(template/BOS): those prompts are longer than asked"
            )
        return np.maximum(t, 1)
