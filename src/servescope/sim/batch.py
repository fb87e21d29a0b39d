"""The running batch under `sim.engine.Engine`: its state (queue, running and decoding sequences, the KV
block pool, the blocks set aside at admission, the counters) and how a sequence enters and leaves it:
admission under the reserve with its cached prefix and first chunk, KV blocks as it grows, the decoding
phase, preemption by recompute, abort and finish. Pure; the step loop that drives it is `Engine`'s.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

from servescope.sim.config import EngineConfig
from servescope.sim.kvcache import BlockPool
from servescope.sim.request import DECODE, DONE, PREFILL, WAITING, SimRequest
from servescope.sim.steptime import DecodeTerms

__all__ = ["RunningBatch"]

# Block names for prompts known by their length only (`Engine.add`): consecutive integers from here, far
# from where names made by `hash` fall but by a chance of a few million in 2**64
_OWN_NAMES = -(2**62)


class RunningBatch:
    """The batch's state and the per-sequence transitions; `Engine` adds the public API and the step."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._bs = config.block_size
        self._extra = config.seq_overhead_blocks
        self._waiting: deque[SimRequest] = deque()
        self._running: list[SimRequest] = []  # admission order; victims come from the end
        self._prefilling: list[SimRequest] = []
        self._decoding: dict[int, SimRequest] = {}  # id(req) -> req, insertion ordered
        self._phase = [0] * self._bs  # decoding sequences per (pos0 mod block_size)
        self._sum_pos0 = 0
        self._finish_heap: list[tuple[int, int, int, SimRequest]] = []
        self._seq = 0
        self._s = 0  # index of the next step
        # block pool
        self.pool = BlockPool(config.kv_blocks)
        self._reserved = 0  # blocks the running requests set aside at admission (`reserve_output`)
        self._prefix = config.enable_prefix_caching
        self._prompt_tokens = 0
        self._gen_tokens = 0
        self._prefix_queries = 0
        self._prefix_hits = 0
        self._preemptions = 0
        self._finished = 0
        self._own = _OWN_NAMES  # the next block name of a prompt known by its length only (`Engine.add`)
        self._decode_terms: dict[int, DecodeTerms] = {}  # by batch size (`Engine.decode_run`)

    def _chunk(self, req: SimRequest, budget: int) -> int:
        remaining = req.target - req.computed
        if remaining <= budget:
            return remaining
        return budget if self.config.chunked_prefill else 0

    def _grow(self, req: SimRequest, tokens: int) -> bool:
        """Make `req` hold blocks for `tokens` tokens; False if the pool cannot."""
        need = -(-tokens // self._bs) + self._extra - req.blocks
        if need <= 0:
            return True
        if need > self.pool.available():
            return False
        self.pool.alloc(need)
        req.blocks += need
        return True

    def _queue_blocked(self) -> bool:
        """Whether the queue's head cannot start before a running request leaves: the batch is at
        `max_num_seqs`, or the KV it would set aside (`EngineConfig.reserve_blocks`) does not fit beside
        what the running requests set aside, which changes only when one of them leaves."""
        if len(self._running) >= self.config.max_num_seqs:
            return True
        reserve = self._reserve_for(self._waiting[0])
        return bool(reserve) and self._reserved + reserve > self.config.kv_blocks

    def _reserve_for(self, req: SimRequest) -> int:
        """Blocks a waiting request would set aside if it started now: its context (prompt + tokens made
        before a preemption) and the reserved share of what the client may still get (its max_tokens)."""
        return self.config.reserve_blocks(req.prompt_len + req.out, max(req.limit_tokens, req.max_tokens) - req.out)

    def _admit(self, req: SimRequest, budget: int) -> int:
        """Start (or resume) a waiting request; returns its first chunk, 0 if it cannot start."""
        bs = self._bs
        req.target = req.prompt_len + req.out
        reserve = self._reserve_for(req)
        if reserve and self._reserved + reserve > self.config.kv_blocks:
            return 0
        hashes: Sequence[int] = (req.prefix_hashes or ()) if self._prefix else ()
        hits = hit_in_lru = 0
        if hashes:
            hits = self.pool.cached_prefix(hashes, (req.target - 1) // bs)
        computed = hits * bs
        remaining = req.target - computed
        if remaining <= budget:
            chunk = remaining
        elif self.config.chunked_prefill:
            chunk = budget
        else:
            return 0
        need = -(-(computed + chunk) // bs) + self._extra - hits
        available = self.pool.available()
        if need > available:  # cannot start whichever of its hits are evictable (the usual case when full)
            return 0
        if hits:  # names of its own (`Engine.add`) are held by no one while it waits: every hit is evictable
            hit_in_lru = hits if isinstance(hashes, range) else self.pool.evictable(hashes[:hits])
            if need > available - hit_in_lru:
                return 0
        # commit
        if self._prefix:
            self._prefix_queries += req.target
            self._prefix_hits += computed
            if req.out == 0:
                req.cached_tokens = computed
        if hits:
            self.pool.acquire(hashes[:hits])
        req.hashed = list(hashes[:hits]) if hits else []
        req.blocks = hits
        req.computed = computed
        req.reserved = reserve
        self._reserved += reserve
        self.pool.alloc(need)
        req.blocks += need
        req.state = PREFILL
        self._running.append(req)
        self._prefilling.append(req)
        return chunk

    def _register_blocks(self, req: SimRequest) -> None:
        """Name the newly computed full prompt blocks in the cache table."""
        hashes = req.prefix_hashes
        assert hashes is not None
        upto = min(len(hashes), req.computed // self._bs)
        done = len(req.hashed)
        if upto <= done:
            return
        pool = self.pool
        for i in range(done, upto):
            h = hashes[i]
            if not pool.name(h):  # computed twice concurrently: keep ours private; stop the chain here
                return
            req.hashed.append(h)

    def _start_decode(self, req: SimRequest, q: int) -> None:
        req.state = DECODE
        req.q = q
        req.pos0 = req.target - q - 1
        self._phase[req.pos0 % self._bs] += 1
        self._sum_pos0 += req.pos0
        self._decoding[id(req)] = req
        self._seq += 1
        heapq.heappush(self._finish_heap, (q + req.max_tokens - req.out, self._seq, req.gen, req))

    def _stop_decode(self, req: SimRequest, last_step: int) -> None:
        """Leave the decoding set after `last_step` (the last step it took part in)."""
        del self._decoding[id(req)]
        self._phase[req.pos0 % self._bs] -= 1
        self._sum_pos0 -= req.pos0
        req.out += last_step - req.q
        req.blocks = -(-(req.pos0 + last_step + 1) // self._bs) + self._extra
        first, _ = req.segments[-1]
        req.segments[-1] = (first, last_step)

    def _release(self, req: SimRequest, last_step: int) -> None:
        if req.state == DECODE:
            self._stop_decode(req, last_step)
        elif req.state == PREFILL:
            self._prefilling.remove(req)
        self.pool.release(req.hashed, req.blocks - len(req.hashed))
        req.hashed = []
        req.blocks = 0
        req.computed = 0
        self._reserved -= req.reserved
        req.reserved = 0

    def _preempt(self, req: SimRequest, last_step: int) -> None:
        own = req.prefix_hashes
        if self._prefix and isinstance(own, range):
            # names of its own (`Engine.add`) matter only to its re-admission: its computed prompt blocks are
            # named now, as they leave for the cache's LRU (the cache holds what naming them as they were
            # computed would leave, at a fraction of the cost); one cached already stays private, as in
            # `_register_blocks`
            upto = min(len(own), (req.computed if req.state == PREFILL else req.prompt_len) // self._bs)
            for h in own[len(req.hashed) : upto]:
                if not self.pool.name(h):
                    break
                req.hashed.append(h)
        self._release(req, last_step)
        self._running.remove(req)
        req.state = WAITING
        req.gen += 1
        req.preemptions += 1
        self._preemptions += 1
        self._waiting.appendleft(req)

    def _finish(self, req: SimRequest, s: int) -> None:
        self._release(req, s)
        self._running.remove(req)
        req.state = DONE
        req.finish_step = s
        self._finished += 1
