"""`FrontEnd`: the API server's work on each request before the engine sees it, processor-shared.

An OpenAI-compatible server's front end (vLLM's API server, SGLang's tokenizer manager) is one
asyncio event loop: each request's handler parses the body, renders the chat template, tokenizes and
hands the prompt to the engine process, and yields to the loop at every `await` on the way. Requests
that are in the front end together therefore take turns, stage by stage, rather than one passing
through before the next starts: the service is shared among them (processor sharing), not first come,
first served. Both disciplines give a lone request the same delay and an M/G/1 queue the same mean
response time; they part on a burst. Of N requests sent at once, first come first served lets the
first reach the engine after one service time and the last after N; processor sharing lets none
reach it before about N service times, and then all together. GPUStack's bursts of 1,000 short
requests show the second shape: no first token for 0.4-16 s, then first tokens spread uniformly over
the rest of the run (docs/plan.md, "Bursts of short requests").

Every request costs the same `service_s` here, so requests leave in the order they came. Pure: any
clock (`sim.simulate`, `sim.disagg` on a virtual one, the emulator's inbox on the wall clock); times
given to `send` must not decrease.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FrontEnd"]


@dataclass(slots=True)
class FrontEnd:
    """A processor-shared queue with a fixed service time per request (`EngineConfig.frontend_s`).

    Virtual-time bookkeeping: `_v` is the work each request present has received since the queue was
    last empty, growing at 1/k with k present, so a request sent when it read v leaves when it reads
    v + service_s. Departures up to the time of the last `send` are final; a later one is tentative
    (`next_at`) until the clock passes it without another send.
    """

    service_s: float
    _t: float = 0.0  # the time `_v` refers to
    _v: float = 0.0
    _due: deque[tuple[float, Any]] = field(default_factory=deque)  # (virtual finish, item), in order
    _done: deque[tuple[float, Any]] = field(default_factory=deque)  # (departure time, item), in order

    def __post_init__(self) -> None:
        if not self.service_s >= 0.0:
            raise ValueError("a front end's service time must be >= 0")

    def __len__(self) -> int:
        """Requests sent and not yet taken (`pop_before`, `pop_first`), departed or not."""
        return len(self._due) + len(self._done)

    def _advance(self, t: float) -> None:
        due, k = self._due, len(self._due)
        while k:
            f, item = due[0]
            leave = self._t + (f - self._v) * k
            if leave > t:
                break
            due.popleft()
            self._done.append((leave, item))
            self._t, self._v = leave, f
            k -= 1
        if t > self._t:
            if k:
                self._v += (t - self._t) / k
            self._t = t

    def send(self, t: float, item: Any = None) -> None:
        """A request (`item`, returned when it leaves) reaches the front end at `t`."""
        self._advance(t)
        self._due.append((self._v + self.service_s, item))

    def next_at(self) -> float:
        """When the next request leaves, if none is sent before then (inf: none inside)."""
        if self._done:
            return self._done[0][0]
        if self._due:
            return self._t + (self._due[0][0] - self._v) * len(self._due)
        return float("inf")

    def pop_before(self, t: float) -> list[tuple[float, Any]]:
        """Take the requests that left strictly before `t` ((departure time, item), in order)."""
        self._advance(t)
        out = []
        done = self._done
        while done and done[0][0] < t:
            out.append(done.popleft())
        return out

    def pop_until(self, t: float) -> list[tuple[float, Any]]:
        """Take the requests that left at or before `t`."""
        self._advance(t)
        out = list(self._done)
        self._done.clear()
        return out

    def pop_first(self) -> tuple[float, Any]:
        """Take the next request to leave, moving the clock to its departure (none sent meanwhile)."""
        t = self.next_at()
        if t == float("inf"):
            raise IndexError("the front end is empty")
        self._advance(t)
        return self._done.popleft()

    @staticmethod
    def departures(service_s: float, sent_s: Sequence[float]) -> list[float]:
        """When each of requests sent at `sent_s` (non-decreasing) leaves, all sends known."""
        front = FrontEnd(service_s)
        for t in sent_s:
            front.send(t)
        return [front.pop_first()[0] for _ in range(len(sent_s))]
