"""`SimRequest`: one request as the engine sees it (what the caller fills in, then the engine's
per-sequence state), its lifecycle states, and `block_hashes`, the prefix-cache names of a prompt's blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SimRequest", "block_hashes", "WAITING", "PREFILL", "DECODE", "DONE", "SAMPLED"]

# A request's `state`: queued; running its prefill; decoding (one token a step, advanced lazily);
# finished or aborted; sampled its token in the step that completed its prefill (momentarily).
WAITING, PREFILL, DECODE, DONE, SAMPLED = 0, 1, 2, 3, 4


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Hash chain over the full blocks of `token_ids` (a block's hash names its whole prefix)."""
    out: list[int] = []
    h = 0
    for i in range(0, len(token_ids) - block_size + 1, block_size):
        h = hash((h, tuple(token_ids[i : i + block_size])))
        out.append(h)
    return out


@dataclass(slots=True, eq=False)
class SimRequest:
    """One request. Fill the first fields; the rest is engine state."""

    id: Any
    prompt_len: int
    max_tokens: int
    arrival_s: float = 0.0
    prompt_token_ids: Sequence[int] | None = None
    prefix_hashes: Sequence[int] | None = None  # block hashes, if no token ids are given
    payload: Any = None  # opaque to the engine (the emulator hangs its stream here)
    # the max_tokens the client asked for when the request will stop earlier (EOS): what an engine that
    # reserves KV at admission sets aside for (EngineConfig.reserve_output); 0: max_tokens
    limit_tokens: int = 0
    # --- engine state ---
    state: int = WAITING
    out: int = 0  # tokens emitted (exact when not decoding; see Engine.emitted for decoding)
    computed: int = 0  # tokens whose KV is computed (prefill phase)
    target: int = 0  # tokens to compute before the next token is sampled
    hashed: list[int] = field(default_factory=list)  # cached blocks this request references
    blocks: int = 0  # blocks held (prefill phase; decoding: derived lazily)
    reserved: int = 0  # blocks set aside at admission (EngineConfig.reserve_output), until it leaves
    q: int = 0  # step that completed the prefill (decoding phase)
    pos0: int = 0  # decoding: context length before step s is pos0 + s
    gen: int = 0  # bumps on preempt/abort to invalidate heap entries
    first_token_step: int = -1
    finish_step: int = -1
    segments: list[tuple[int, int]] = field(default_factory=list)  # [first, last] steps with a token
    preemptions: int = 0
    cached_tokens: int = 0  # prefix-cache hit tokens at first admission
    first_scheduled_s: float = -1.0  # start of the step that first scheduled it (its queue time ends)
