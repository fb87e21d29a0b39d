"""Arrival processes as absolute send times, computed before the clock starts (pure, seeded).

An open-loop schedule is a list of offsets in ns from the run origin. The runner sleeps until
`t0 + offset` for each request, so a late wake-up delays one request and never shifts the rest
(no drift from per-request relative sleeps).

- constant rate R: offsets i/R.
- gamma arrivals with burstiness G (1 = Poisson): inter-arrival ~ Gamma(shape=G, scale=1/(R·G)),
  mean 1/R, coefficient of variation 1/sqrt(G); G = inf is the constant schedule. At one fixed
  rate the drawn gaps are scaled by one common factor so that the schedule's mean rate is exactly
  R: 4,000 Poisson gaps alone miss their mean by 1.6% (one standard deviation), which would make
  "offered 200 req/s" a coin toss between 197 and 203. The shape (CV) of the gaps is unchanged.
- ramp-up (vLLM's `--ramp-up-strategy`): the rate of request i moves from `start` to `end` rps,
  linearly or exponentially in i, and each gap is drawn at the current rate.
- rate inf (offline / maximum throughput): every offset is 0.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["open_loop_offsets_ns", "ramp_rates"]


def ramp_rates(n: int, start_rps: float, end_rps: float, strategy: str) -> np.ndarray:
    """The request rate in force when request i is scheduled, for i in 0..n-1."""
    if n <= 0:
        return np.empty(0)
    frac = np.linspace(0.0, 1.0, n) if n > 1 else np.zeros(1)
    if strategy == "linear":
        return start_rps + (end_rps - start_rps) * frac
    if strategy == "exponential":
        if start_rps <= 0:
            raise ValueError("exponential ramp-up needs --ramp-up-start-rps > 0")
        return start_rps * (end_rps / start_rps) ** frac
    raise ValueError(f"unknown ramp-up strategy {strategy!r} (linear or exponential)")


def open_loop_offsets_ns(
    n: int,
    rate_rps: float | np.ndarray,
    *,
    burstiness: float = 1.0,
    seed: int = 0,
    exact_mean: bool = True,
) -> list[int]:
    """Send offsets (ns from the run origin) of `n` requests; the first is sent at 0.

    `rate_rps` is one rate or a per-request array (ramp-up). `math.inf` sends everything at 0.
    """
    if n <= 0:
        return []
    rates = np.broadcast_to(np.asarray(rate_rps, dtype=float), (n,))
    if np.any(rates <= 0):
        raise ValueError("request rate must be > 0")
    if np.all(np.isinf(rates)):
        return [0] * n
    mean_gap_s = 1.0 / rates[1:]  # the gap before request i is drawn at request i's rate
    if math.isinf(burstiness):
        gaps_s = mean_gap_s
    else:
        if burstiness <= 0:
            raise ValueError("burstiness must be > 0")
        rng = np.random.default_rng(seed)
        gaps_s = rng.gamma(shape=burstiness, scale=mean_gap_s / burstiness)
        if exact_mean and gaps_s.size and np.all(rates == rates[0]) and gaps_s.sum() > 0:
            gaps_s *= mean_gap_s.sum() / gaps_s.sum()
    offsets_s = np.concatenate(([0.0], np.cumsum(gaps_s)))
    return [int(x) for x in np.round(offsets_s * 1e9)]
