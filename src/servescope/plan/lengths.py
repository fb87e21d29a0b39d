"""Request lengths of a corpus point: the mean the requests really had and how they were spread. Pure.

Sources state mean lengths; a benchmark's requests differ around them. `output_mean` is what was
generated, `distributions` says how lengths varied for the dataset the source used, and `draw`
samples them, seeded, so that a simulated run sees the spread a closed loop or a burst saw (identical
lengths move in lock-step waves, which real traffic does not).
"""

from __future__ import annotations

import math

import numpy as np

from servescope.plan.corpus import CorpusPoint

__all__ = [
    "SEED",
    "SHAREGPT_MAX_PROMPT",
    "SHAREGPT_MAX_TOTAL",
    "output_mean",
    "distributions",
    "max_len",
    "draw",
    "draw_pairs",
]

SEED = 12345  # arrivals and sampled lengths: every prediction is deterministic
# vLLM benchmark_serving's ShareGPT sampler (sample_sharegpt_requests) drops prompts over 1024 tokens
# and prompt + output over 2048, and sequences under 4 tokens.
SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL, _SHAREGPT_MIN = 1024, 2048, 4
# Log-space spread of ShareGPT lengths. The vLLM paper's Fig. 11 (Kwon et al. 2023) shows long-tailed
# ShareGPT input/output lengths (mean 161 / 338 tokens, a tail past 1,000); sigma = 1 (median = 0.61 x
# mean) is our reading of that shape, not a published fit.
_SHAREGPT_SIGMA = 1.0


def output_mean(p: CorpusPoint) -> float | None:
    """Mean output tokens per request. Where the source measured both output tokens/s and requests/s,
    their ratio is what the requests really generated; it overrides the requested length when the two
    differ by more than 3% (requests stopped at EOS, or a random dataset that draws lengths up to the
    stated one: dstack's PD runs generated 62-815 tokens on average for a stated 128 or 2048)."""
    m = p.measured
    derived = m["output_tok_s"] / m["req_s"] if ("output_tok_s" in m and "req_s" in m) else None
    if p.output_len and (derived is None or abs(derived / p.output_len - 1.0) <= 0.03):
        return p.output_len
    return derived if derived is not None else p.output_len


def distributions(p: CorpusPoint) -> tuple[str, str]:
    """(input, output) length distributions around the stated means.

    - ShareGPT: both 'lognormal' (long-tailed conversation lengths, see `_lengths`).
    - Output lengths that were not what the client asked for (`output_mean` overrode them): 'uniform'
      on [1, 2 x mean - 1]. SGLang's and vLLM's random datasets draw output lengths uniformly in
      [range_ratio x L, L] (sglang bench_serving sample_random_requests; range_ratio 0 gives mean L/2,
      as dstack's 62-67 of 128 show), and EOS stops only shorten them further.
    - Otherwise 'fixed' (trtllm-bench / benchmark_throughput fixed ISL/OSL, sonnet's fixed prompts).

    A point's `length_dist` (what the source's tool did, recorded in the corpus) overrides all of this
    for both lengths: SGLang bench_serving's random dataset at its default range ratio 0 draws input
    and output lengths uniformly up to the nominal length.
    """
    if p.length_dist:
        return p.length_dist, p.length_dist
    if p.dataset.lower().startswith("sharegpt"):
        return "lognormal", "lognormal"
    out = output_mean(p)
    varied = bool(p.output_len and out and abs(out / p.output_len - 1.0) > 0.03)
    return "fixed", ("uniform" if varied else "fixed")


# Lengths uniform on [lo L, hi L] around a stated L:
# - `range-0.8`: [0.8 L, L] around a nominal L (the sampler of InferenceX's
#   utils/bench_serving/benchmark_serving.py, sample_random_requests, at the --random-range-ratio 0.8 its
#   benchmark workflow sets); the stated length is L and the mean 0.9 L.
# - `pm-0.15`: [0.85 L, 1.15 L], mean L (a source's "+/-15% variance" around its stated lengths, as
#   `vllm bench serve --random-range-ratio 0.15` draws them).
_RANGES = {"range-0.8": (0.8, 1.0), "pm-0.15": (0.85, 1.15)}


def max_len(dist: str, mean: int, cap: int) -> int:
    """Longest length a distribution draws (for the engine's max_model_len)."""
    if dist == "uniform":
        return 2 * mean
    if dist == "lognormal":
        return cap
    if dist in _RANGES:
        return int(mean * _RANGES[dist][1])
    return mean


def draw(rng: np.random.Generator, dist: str, mean: int, n: int, cap: np.ndarray | int) -> np.ndarray:
    """n integer lengths with (close to) the given mean: fixed, uniform on [1, 2 mean - 1], or a
    lognormal clipped to [4, cap] and rescaled to the mean; `range-0.8` on [0.8 mean, mean] (there
    `mean` is the nominal length), `pm-0.15` on [0.85 mean, 1.15 mean]."""
    if dist == "fixed" or n == 0:
        return np.full(n, mean, dtype=np.int64)
    if dist == "uniform":
        return rng.integers(1, max(2, 2 * mean), size=n)
    if dist in _RANGES:
        lo, hi = _RANGES[dist]
        return rng.integers(int(mean * lo), int(mean * hi) + 1, size=n)
    x = rng.lognormal(math.log(mean) - _SHAREGPT_SIGMA**2 / 2, _SHAREGPT_SIGMA, size=n)
    for _ in range(3):  # clipping lowers the mean: rescale and clip again
        x = np.clip(x, _SHAREGPT_MIN, cap)
        x = x * (mean / x.mean())
    return np.clip(np.rint(x), _SHAREGPT_MIN, cap).astype(np.int64)


def draw_pairs(in_dist: str, out_dist: str, input_len: int, output_len: int, n: int) -> list[tuple[int, int]]:
    """(prompt, output) tokens of n requests, seeded (ShareGPT outputs capped at 2048 - prompt)."""
    rng = np.random.default_rng(SEED)
    ins = draw(rng, in_dist, input_len, n, SHAREGPT_MAX_PROMPT)
    outs = draw(
        rng,
        out_dist,
        output_len,
        n,
        np.maximum(_SHAREGPT_MIN, SHAREGPT_MAX_TOTAL - ins) if out_dist == "lognormal" else 0,
    )
    return [(int(a), int(b)) for a, b in zip(ins, outs)]
