"""Pure: one run's `ShardSpec` cut into the slices of N shards, and their records' ids put back.

How a run is dealt (docs/architecture.md, "Scale-out"):
- the schedule's *units* (one request, or a multi-turn session's turns, kept whole) go round-robin:
  unit u to shard u mod N. An open loop's units keep their absolute send offsets from the common
  start, so the merged stream is the planned one, arrival for arrival (rate and arrival process:
  Poisson, gamma, ramp, trace), and each shard's own stream is every N-th arrival of it;
- a closed loop's concurrency is split as evenly as it goes, the first shards taking one more
  (c=10 over 3: 4, 3, 3); an open loop's cap the same way. A run never gets a shard with no slot:
  with fewer slots (or units) than N, there are that many shards;
- counts that a shard must not exceed (`num_requests`, connections to open before the clock) are
  split the same way.

A shard numbers its requests 0, 1, 2… in the order it sends them; `global_id` makes those unique
over the run (local k of shard s of N is k·N + s), so with one request per unit and no cycling the
merged ids are the planned ones.
"""

from __future__ import annotations

import dataclasses

from servescope.client.spec import Prepared, ShardSpec

__all__ = ["deal_units", "global_id", "shard_of", "split_counts", "split_spec"]


def split_counts(total: int, n: int) -> list[int]:
    """`total` over `n` parts as evenly as it goes, the first parts one more: 10 over 3 is 4, 3, 3."""
    if n < 1:
        raise ValueError("n must be at least 1")
    base, extra = divmod(max(total, 0), n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def units_of(items: list[Prepared]) -> list[list[Prepared]]:
    """The schedule's units in order of their first request: a session's turns together (the grouping
    `shard.Shard` uses), every other request alone."""
    units: list[list[Prepared]] = []
    by_session: dict[int, list[Prepared]] = {}
    for item in items:
        if item.session is None:
            units.append([item])
        elif item.session in by_session:
            by_session[item.session].append(item)
        else:
            by_session[item.session] = [item]
            units.append(by_session[item.session])
    for unit in by_session.values():
        unit.sort(key=lambda p: p.turn or 0)
    return units


def deal_units(items: list[Prepared], n: int) -> list[list[Prepared]]:
    """Each shard's items: unit u to shard u mod n, in order (a session's turns stay together)."""
    hands: list[list[Prepared]] = [[] for _ in range(n)]
    for u, unit in enumerate(units_of(items)):
        hands[u % n].extend(unit)
    return hands


def split_spec(spec: ShardSpec, n: int) -> list[ShardSpec]:
    """The slices of `spec` for up to `n` shards (fewer when there are fewer slots or units than n)."""
    n_units = len(units_of(spec.items))
    k = max(1, min(n, n_units or 1))
    if spec.concurrency:
        k = min(k, spec.concurrency)
    hands = deal_units(spec.items, k)
    slots = split_counts(spec.concurrency, k) if spec.concurrency else [None] * k
    conns = split_counts(spec.preconnect, k)
    if spec.num_requests is None:
        caps: list[int | None] = [None] * k
    elif spec.num_requests >= len(spec.items):  # every item, and a share of any more (cycled with --duration)
        more = split_counts(spec.num_requests - len(spec.items), k)
        caps = [len(hand) + m for hand, m in zip(hands, more, strict=True)]
    else:
        caps = list(split_counts(spec.num_requests, k))
    return [
        dataclasses.replace(spec, items=hand, concurrency=c, num_requests=cap, preconnect=p)
        for hand, c, cap, p in zip(hands, slots, caps, conns, strict=True)
    ]


def global_id(local: int, shard: int, n: int) -> int:
    """The run-wide id of a shard's `local`-th request (shard `shard` of `n`)."""
    return local * n + shard


def shard_of(gid: int, n: int) -> int:
    """Which of `n` shards sent the request with run-wide id `gid` (inverse of `global_id`)."""
    return gid % n
