"""Injected faults: the fractions of requests the emulator fails on purpose, by kind, and the seeded draw."""

from __future__ import annotations

import random
from dataclasses import dataclass

from servescope.errors import ConfigError

__all__ = ["Faults"]


@dataclass(frozen=True, slots=True)
class Faults:
    """Fractions of requests that fail, by kind; drawn in arrival order from `seed`.

    error_500 / error_429: answered with that status (never reach the engine); drop: the connection
    is closed after a seeded number of tokens; stall: no more bytes after a seeded number of tokens.
    """

    error_500: float = 0.0
    error_429: float = 0.0
    drop: float = 0.0
    stall: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        vals = (self.error_500, self.error_429, self.drop, self.stall)
        if any(v < 0 or v > 1 for v in vals) or sum(vals) > 1 + 1e-9:
            raise ConfigError("fault fractions must be in [0, 1] and sum to at most 1")

    def draw(self, rng: random.Random) -> str | None:
        """The fault of the next request ("error_500", "error_429", "drop", "stall") or None; draws
        from `rng` only when some fault is configured."""
        if not (self.error_500 or self.error_429 or self.drop or self.stall):
            return None
        u = rng.random()
        for kind, frac in (
            ("error_500", self.error_500),
            ("error_429", self.error_429),
            ("drop", self.drop),
            ("stall", self.stall),
        ):
            if u < frac:
                return kind
            u -= frac
        return None
