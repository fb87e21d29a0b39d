"""The points of a sweep and the capacity search over them. Pure: no I/O, no clock.

A point is one run's load (closed-loop concurrency, or an open-loop rate with an optional
concurrency cap) and lengths. `find_max` brackets the highest load meeting every SLO with a
caller-supplied `measure(load) -> bool`, so the same search runs on the emulator, a real server or
a table in a test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servescope.errors import ConfigError

__all__ = [
    "Point",
    "SearchResult",
    "auto_rates",
    "build_grid",
    "find_max",
    "parse_int_list",
    "parse_lengths",
    "parse_rate_list",
]


@dataclass(frozen=True)
class Point:
    concurrency: int | None
    rate: float | None  # requests/s; math.inf = every request at once
    input_len: int
    output_len: int | None
    kind: str = "grid"  # grid | synchronous | throughput | auto | search

    @property
    def dir_name(self) -> str:
        if self.rate is None:
            load = f"c{self.concurrency or 0:04d}"
        else:
            load = "rinf" if math.isinf(self.rate) else "r" + f"{self.rate:g}".replace(".", "p").replace("+", "")
            if self.concurrency:
                load += f"-c{self.concurrency}"
        return f"{load}-in{self.input_len}-out{self.output_len}"

    @property
    def load(self) -> float:
        """The swept quantity: the rate for open-loop points, else the concurrency."""
        if self.rate is not None:
            return self.rate
        return float(self.concurrency or 0)

    @property
    def load_label(self) -> str:
        if self.rate is None:
            return f"c={self.concurrency}"
        r = "inf" if math.isinf(self.rate) else f"{self.rate:g}"
        return f"{r} req/s" + (f" (c≤{self.concurrency})" if self.concurrency else "")

    def run_settings(self) -> dict[str, Any]:
        """RunConfig keywords of this point."""
        return {
            "concurrency": self.concurrency,
            "rate": self.rate,
            "input_len": self.input_len,
            "output_len": self.output_len,
        }

    def entry(self) -> dict[str, Any]:
        """The point's row in sweep.json (the report reads `dir` and the load keys)."""
        rate = None if self.rate is None else ("inf" if math.isinf(self.rate) else self.rate)
        return {
            "dir": self.dir_name,
            "concurrency": self.concurrency,
            "rate_rps": rate,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "kind": self.kind,
        }


def _items(text: Any, flag: str) -> list[str]:
    if isinstance(text, (list, tuple)):  # a list in a scenario file
        text = ",".join(str(x) for x in text)
    items = [p.strip() for p in str(text).split(",") if p.strip()]
    if not items:
        raise ConfigError(f"{flag}: expected a comma-separated list, e.g. 1,2,4,8")
    return items


def parse_int_list(text: str | int | list[int] | None, flag: str) -> list[int] | None:
    """`1,2,4,8` -> [1, 2, 4, 8] (each >= 1; duplicates dropped, order kept)."""
    if text is None:
        return None
    out: list[int] = []
    for item in _items(text, flag):
        try:
            v = int(item)
        except ValueError:
            raise ConfigError(f"{flag} {item!r}: not a whole number") from None
        if v < 1:
            raise ConfigError(f"{flag} {item}: must be at least 1")
        if v not in out:
            out.append(v)
    return out


def parse_rate_list(text: str | float | list[float] | None) -> list[float] | str | None:
    """`1,2,4` -> [1.0, 2.0, 4.0]; `inf` allowed; `auto` -> "auto"."""
    if text is None:
        return None
    if str(text).strip().lower() == "auto":
        return "auto"
    out: list[float] = []
    for item in _items(text, "--rate"):
        try:
            v = float(item)
        except ValueError:
            raise ConfigError(f"--rate {item!r}: not a number (or 'inf', or 'auto' alone)") from None
        if not v > 0:
            raise ConfigError(f"--rate {item}: must be > 0")
        if v not in out:
            out.append(v)
    return out


def parse_lengths(text: str) -> list[tuple[int, int]]:
    """`1024:256,4096:256` -> [(1024, 256), (4096, 256)]."""
    out = []
    for item in _items(text, "--lengths"):
        a, sep, b = item.partition(":")
        try:
            pair = (int(a), int(b))
        except ValueError:
            pair = (0, 0)
        if not sep or min(pair) < 1:
            raise ConfigError(f"--lengths {item!r}: expected INPUT:OUTPUT token counts, e.g. 1024:256")
        out.append(pair)
    return out


def build_grid(
    concurrency: list[int] | None,
    rates: list[float] | None,
    pairs: list[tuple[int, int | None]],
) -> list[Point]:
    """Loads × length pairs. A rate list with one concurrency uses it as a cap on every rate."""
    if rates:
        if concurrency and len(concurrency) > 1:
            raise ConfigError(
                "sweep --rate with several --concurrency values: give one concurrency (a cap) or sweep one of the two"
            )
        cap = concurrency[0] if concurrency else None
        loads: list[tuple[int | None, float | None]] = [(cap, r) for r in sorted(rates)]
    else:
        loads = [(c, None) for c in sorted(concurrency or [])]
    return [Point(c, r, i, o) for i, o in pairs for c, r in loads]


def auto_rates(sync_rps: float, max_rps: float, n: int) -> list[float]:
    """`n` rates spread evenly strictly between the synchronous and the saturation rate."""
    if n < 1 or not max_rps > 0:
        return []
    lo = min(max(sync_rps, 0.0), max_rps)
    step = (max_rps - lo) / (n + 1)
    if step <= 0:
        return [_round_sig(max_rps * (k + 1) / (n + 1)) for k in range(n)]
    return [_round_sig(lo + step * (k + 1)) for k in range(n)]


def _round_sig(x: float, digits: int = 3) -> float:
    if x <= 0 or not math.isfinite(x):
        return x
    return round(x, -math.floor(math.log10(x)) + digits - 1)


@dataclass
class SearchResult:
    """Outcome of a capacity search."""

    best: float | None  # highest load that met every SLO (None: even the lowest failed)
    fail: float | None  # lowest load seen failing above `best` (None: nothing failed up to max)
    probes: list[tuple[float, bool]] = field(default_factory=list)  # in the order measured
    tolerance: str = ""

    @property
    def bounded(self) -> bool:
        return self.best is not None and self.fail is not None


def find_max(
    measure: Callable[[float], bool],
    *,
    integer: bool,
    start: float = 1.0,
    max_load: float = 4096.0,
    rel_tol: float = 0.05,
) -> SearchResult:
    """Double from `start` until `measure` fails, then bisect the bracket.

    Integer loads (concurrency) bisect until the passing and failing loads are adjacent; rates until
    `(fail - best) / fail <= rel_tol`. If `start` itself fails, rates halve (at most 6 times) to find a
    passing load; concurrency 1 failing means no load passes. Each load is measured once.
    """
    seen: dict[float, bool] = {}
    probes: list[tuple[float, bool]] = []

    def probe(x: float) -> bool:
        if x not in seen:
            seen[x] = bool(measure(x))
            probes.append((x, seen[x]))
        return seen[x]

    x = float(int(start) if integer else start)
    if integer:
        x = max(x, 1.0)
    lo: float | None = None
    hi: float | None = None
    if probe(x):
        lo = x
        while True:
            nxt = x * 2
            if nxt > max_load:
                nxt = float(int(max_load)) if integer else max_load
                if nxt <= x:
                    break
            x = nxt
            if probe(x):
                lo = x
            else:
                hi = x
                break
    else:
        hi = x
        if not integer:
            for _ in range(6):
                x = _round_sig(x / 2, 4)
                if probe(x):
                    lo = x
                    break
                hi = x
    tol = "±1 (adjacent integers)" if integer else f"{rel_tol * 100:g}% of the rate"
    if lo is None or hi is None:
        return SearchResult(lo, hi, probes, tol)
    while True:
        if integer:
            if hi - lo <= 1:
                break
            mid = float((int(lo) + int(hi)) // 2)
        else:
            if (hi - lo) <= rel_tol * hi:
                break
            mid = _round_sig((lo + hi) / 2, 4)
            if mid <= lo or mid >= hi:
                break
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return SearchResult(lo, hi, probes, tol)
