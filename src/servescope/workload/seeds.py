"""Seeds of their own for the parts of a series (sweep points, repeats), derived from the user's --seed.

A series that reused one seed would send the same prompts at every point, and a server with a prefix
cache (vLLM V1 and SGLang cache by default) would serve every point after the first from a warm cache:
TTFT and throughput too good. `derive_seed(seed, label)` gives each part its own prompts (and arrival
draws), reproducibly: the same --seed and label give the same seed on any machine and any Python.
Pure.
"""

from __future__ import annotations

import hashlib

__all__ = ["derive_seed"]


def derive_seed(seed: int, label: str) -> int:
    """A 31-bit seed for the part of a series named `label` (e.g. a sweep point's directory name,
    `repeat-2`), from the user's `seed`: a hash of both, stable across processes (no `hash()`)."""
    digest = hashlib.blake2b(f"{seed}:{label}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF
