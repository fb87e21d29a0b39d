"""The one Prometheus text-format reader servescope has (pure): a page's samples, as sums or family names.

Both users read the same lines through `samples`: the capability probe wants the family names on a
page (`family_names`: which engine is this, which roles does it expose) and the server-metrics scrape
wants values (`parse_prometheus`: sample name without `_total` -> value summed over label sets) and,
for the engine's request-level histograms, their buckets (`histogram_buckets`: one flat sample per
bound, `<family>_bucket{le="<bound>"}`, summed over the other labels, read back by `buckets_of`).

Why not `prometheus_client.parser.text_string_to_metric_families`? It is the reference reader and the
tests use it as the oracle (tests/unit/test_prometheus.py: same values on every engine's page), but on
a 20 kB vLLM page (tests/fixtures/engines/metrics/vllm.prom) it takes ~3.0 ms a parse against ~0.2 ms
here (best of 5 x 50, this 2-core host), costs ~50 ms of import, and would move prometheus_client from a
test extra into the install. The scrape runs outside the clock, so speed alone would not decide; the
import and the dependency do.
servescope needs none of what it adds (exemplars, escapes in metric names, typed families): a sample
line is `name[{labels}] value [timestamp]`, and label values may hold any character, `}` included.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterator, Mapping

__all__ = [
    "bucket_key",
    "buckets_of",
    "family_names",
    "histogram_buckets",
    "labelled_samples",
    "parse_prometheus",
    "samples",
]

# name, then optional labels (quoted values may hold `}` and escaped quotes), then the value
_LINE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}"]*(?:"[^"\\]*(?:\\.[^"\\]*)*"[^}"]*)*\})?\s+(\S+)')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_FAMILY_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def samples(text: str) -> Iterator[tuple[str, str]]:
    """(sample name, value as written) for every sample line; comments, blanks and junk skipped."""
    match = _LINE.match
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = match(line)
        if m is not None:
            yield m.group(1), m.group(3)


def labelled_samples(text: str) -> Iterator[tuple[str, dict[str, str], str]]:
    """(sample name, labels, value as written) for every sample line: for pages whose label sets
    matter (one series per GPU on a DCGM exporter's page)."""
    match = _LINE.match
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = match(line)
        if m is not None:
            body = (m.group(2) or "{}")[1:-1]
            labels = {k: re.sub(r"\\[\\\"n]", lambda e: _UNESCAPE[e.group(0)], v) for k, v in _LABEL.findall(body)}
            yield m.group(1), labels, m.group(3)


def parse_prometheus(text: str) -> dict[str, float]:
    """Sample name (without `_total`) -> value summed over label sets. Histogram series are kept
    as `<name>_sum` / `<name>_count`; buckets and `_created` are dropped (deltas of sums and counts
    suffice here), and so are NaN values and values that are not numbers."""
    out: dict[str, float] = {}
    for name, value in samples(text):
        if name.endswith(("_bucket", "_created")):
            continue
        try:
            v = float(value)
        except ValueError:
            continue
        if math.isnan(v):
            continue
        name = name.removesuffix("_total")
        out[name] = out.get(name, 0.0) + v
    return out


def bucket_key(family: str, le: float) -> str:
    """The flat key of a histogram's bucket: `<family>_bucket{le="<bound>"}`, the bound written as
    Python's repr of the float (`+Inf` for infinity), so `0.1`, `1e-1` and `0.10` are one bucket."""
    return f'{family}_bucket{{le="{"+Inf" if math.isinf(le) else repr(le)}"}}'


def histogram_buckets(text: str, families: Collection[str]) -> dict[str, float]:
    """The cumulative bucket counts of the histogram `families` on a page, one `bucket_key` per bound,
    summed over every other label (a histogram per engine core or model merges into one: buckets
    of the same bounds add). Lines without an `le` label or with a value that is not a number are
    skipped."""
    wanted = {f"{f}_bucket": f for f in families}
    out: dict[str, float] = {}
    for name, labels, value in labelled_samples(text):
        family = wanted.get(name)
        if family is None or "le" not in labels:
            continue
        try:
            le, v = float(labels["le"]), float(value)
        except ValueError:
            continue
        if math.isnan(v) or math.isnan(le):
            continue
        key = bucket_key(family, le)
        out[key] = out.get(key, 0.0) + v
    return out


def buckets_of(page: Mapping[str, float], family: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of `family`'s buckets in a page read with `histogram_buckets`,
    in increasing bound order (empty when the page holds none)."""
    head = f'{family}_bucket{{le="'
    out = [(float(k[len(head) : -2]), v) for k, v in page.items() if k.startswith(head) and k.endswith('"}')]
    return sorted(out)


def family_names(text: str) -> set[str]:
    """Family names on a page: sample names with `_total`, `_bucket`, `_sum`, `_count`, `_created` stripped."""
    names: set[str] = set()
    for name, _value in samples(text):
        for suffix in _FAMILY_SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        names.add(name)
    return names
