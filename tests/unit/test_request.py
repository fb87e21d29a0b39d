"""A sequence's state (sim/request.py): the hash chain that names a prompt's full KV blocks."""

from __future__ import annotations

from servescope.sim.request import block_hashes


def test_block_hashes_chain() -> None:
    a = block_hashes(list(range(40)), 16)
    b = block_hashes(list(range(32)) + [0] * 8, 16)
    assert len(a) == 2 and a == b  # the partial third block is not hashed
    c = block_hashes([1, *range(1, 40)], 16)
    assert c[0] != a[0] and c[1] != a[1]  # a change in block 0 changes every later hash
