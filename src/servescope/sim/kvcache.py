"""The paged KV cache's block pool, with prefix caching. Pure; used by `sim.engine`.

Blocks are counted, not stored: a request holds `blocks` blocks, of which the ones named in its
`hashed` list are shared cache entries (a block hash names the whole prefix up to that block, see
`engine.block_hashes`). A cache entry whose reference count drops to 0 stays cached but evictable,
in least-recently-freed order; a request's blocks are freed tail first, so a prefix's head
outlives its tail (as vLLM does). Allocation takes truly free blocks first, then evicts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["BlockPool"]


class BlockPool:
    """`num_blocks` KV blocks: free, in use, or cached and evictable."""

    __slots__ = ("num_blocks", "free", "table", "lru")

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.free = num_blocks  # blocks holding nothing
        self.table: dict[int, int] = {}  # block hash -> refcount (cached blocks)
        self.lru: OrderedDict[int, None] = OrderedDict()  # cached blocks with refcount 0, oldest first

    @property
    def used(self) -> int:
        """Blocks referenced by a request."""
        return self.num_blocks - self.free - len(self.lru)

    def available(self) -> int:
        """Blocks an allocation can get (free + evictable)."""
        return self.free + len(self.lru)

    def alloc(self, n: int) -> None:
        """Take `n` blocks (caller checked `available()`), evicting cached ones if needed."""
        free = self.free
        if n <= free:
            self.free = free - n
            return
        self.free = 0
        lru, table = self.lru, self.table
        for _ in range(n - free):
            h, _ = lru.popitem(last=False)
            del table[h]

    def cached_prefix(self, hashes: Sequence[int], limit: int) -> int:
        """How many leading blocks of the hash chain `hashes` (at most `limit`) are cached, by bisection.

        The cached blocks of a chain are always a prefix of it: a request holds a chain's first blocks
        whenever it holds a later one (it matched or computed them in order), releases its blocks tail
        first into the LRU (`release`), and eviction takes the LRU's oldest; so a block leaves the cache
        no later than the blocks before it, and is named (`name`) no earlier than them."""
        table = self.table
        lo, hi = 0, min(limit, len(hashes))  # hashes[:lo] cached; hashes[hi] (if any) not, or past limit
        if hi and hashes[hi - 1] in table:
            return hi
        while lo < hi:
            mid = (lo + hi) // 2
            if hashes[mid] in table:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def evictable(self, hashes: Sequence[int]) -> int:
        """Of these cached blocks, how many no request holds (an allocation could evict them)."""
        table = self.table
        return sum(1 for h in hashes if table[h] == 0)

    def acquire(self, hashes: Sequence[int]) -> None:
        """Reference cached blocks (from `cached_prefix`)."""
        table, lru = self.table, self.lru
        for h in hashes:
            rc = table[h]
            if rc == 0:
                del lru[h]
            table[h] = rc + 1

    def name(self, h: int) -> bool:
        """Turn one of the caller's private blocks into cache entry `h`; False if `h` is cached already."""
        if h in self.table:
            return False
        self.table[h] = 1
        return True

    def release(self, hashed: Sequence[int], private: int) -> None:
        """Drop a request's blocks: its cache references (tail first) and its private blocks."""
        table, lru = self.table, self.lru
        for h in reversed(hashed):
            rc = table[h] - 1
            table[h] = rc
            if rc == 0:
                lru[h] = None
        self.free += private

    def drop_cached(self) -> int:
        """Forget every cached block no request holds (a prefix-cache reset); returns how many."""
        lru, table = self.lru, self.table
        n = len(lru)
        for h in lru:
            del table[h]
        lru.clear()
        self.free += n
        return n
