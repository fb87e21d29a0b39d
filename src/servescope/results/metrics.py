"""The formulas the summary's figures share, and the client verdict. Pure; every formula is written
down in docs/metrics.md.

`distribution` (the latency statistics), `error_adjusted` (percentiles with failures as +inf),
`offered_rate` and `dig` are used by `colsummary.summarize_columns`, which builds the summary from
a run's columns, and by the report; `assess_client` judges the summary's client block. Nothing here
runs during a run: the runner only stores timestamps and counts, and the summary is computed
afterwards from the requests on disk (so `servescope report` can recompute it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from servescope.results.schema import SUMMARY_VERSION, Distribution, ErrorAdjusted, RunInfo, Summary

__all__ = [
    "PERCENTILES",
    "assess_client",
    "dig",
    "SCHEMA",
    "distribution",
    "error_adjusted",
    "offered_rate",
    "unvouched",
]

SCHEMA = SUMMARY_VERSION
PERCENTILES = (50, 90, 95, 99)


def dig(doc: Mapping[str, Any] | None, *path: str) -> Any:
    """doc[a][b]... of a summary-like document, or None when any step is missing.

    For paths held as data (tables of metrics: repeats.SPREAD_METRICS, the report's axes); code
    that names a key reads the typed `Summary` instead, so mypy checks it."""
    cur: Any = doc
    for key in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur


def distribution(values: Sequence[float] | np.ndarray) -> Distribution:
    """mean, median, p90, p95, p99, min, max, std (population) and count of finite values.

    Percentiles use linear interpolation between order statistics (numpy's default, the same
    as vLLM's `bench serve`), so figures compare with theirs.
    """
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {
            "count": 0,
            "mean": None,
            "median": None,
            "p90": None,
            "p95": None,
            "p99": None,
            "min": None,
            "max": None,
            "std": None,
        }
    p50, p90, p95, p99 = np.percentile(arr, PERCENTILES)
    return {
        "count": int(arr.size),
        "mean": float(arr.mean()),
        "median": float(p50),
        "p90": float(p90),
        "p95": float(p95),
        "p99": float(p99),
        "min": float(arr.min()),
        "max": float(arr.max()),
        "std": float(arr.std()),
    }


def error_adjusted(values: Sequence[float], n_failed: int) -> ErrorAdjusted:
    """Percentiles where each failed request counts as +inf; `None` in JSON means infinite.

    With 2% failures the P99 is infinite: the tail is made of requests that never finished, and a
    percentile that quietly drops them would hide exactly what the SLO is about.
    """
    arr = np.concatenate([np.asarray(values, dtype=float), np.full(n_failed, np.inf)])
    if arr.size == 0:
        return {"median": None, "p90": None, "p95": None, "p99": None}
    # "lower" picks an order statistic, so inf never mixes into an interpolation (inf - x = nan).
    median, p90, p95, p99 = (
        float(q) if math.isfinite(q) else None for q in np.percentile(arr, PERCENTILES, method="lower")
    )
    return {"median": median, "p90": p90, "p95": p95, "p99": p99}


def _closed_loop(run: RunInfo | None) -> bool:
    """A closed-loop run (N workers, each sending when its last request ended); a trace replays its
    own send times whatever the load mode says."""
    return dig(run, "load", "mode") == "concurrency" and not dig(run, "workload", "trace")


def offered_rate(sched_ns: Sequence[int], window_s: float, *, closed_loop: bool) -> float:
    """Requests per second the client offered (docs/metrics.md, "The measured window and throughput").

    Open loop: the schedule's rate, (n − 1) / (last − first scheduled send); every request at once
    (one instant): n / window. Closed loop: the rate requests were sent over the measured window,
    n / window — never a rate over the first wave's spread of slot times (c requests sent within
    ~ms of each other would read as thousands of requests/s). 0 when there is no window.
    """
    n = len(sched_ns)
    if not closed_loop and n > 1:
        span_s = (max(sched_ns) - min(sched_ns)) / 1e9
        if span_s > 0:
            return (n - 1) / span_s
    return n / window_s if window_s > 0 else 0.0


# Client self-check thresholds (docs/metrics.md, "Client self-check").
LOOP_LAG_P99_MS = 5.0
# "Tokens read together" needs a record of it: more than this share of token gaps at 0 (two chunks of a
# stream in one read, `client.tokens_read_together`). Against the scripted server's truth at 512 streams
# (2026-11-27, 22 runs with 0-2 busy or duty-cycled processes beside the client), the runs whose figures
# were right had 0.3-7.1%, those with 1.5-5.2% of gaps merged 8.0-54% (one with 0.7% merged 3.5%): a
# server starved beside the client writes tokens together too, so the share bounds the merged gaps from
# above, it does not count them.
READ_TOGETHER_SHARE = 0.08
# ...and a stall is no reason where at most this share of the gaps is 0: a pair read together makes one gap 0
# and puts one more off, so at most twice the share is off, under the 1% a P99 may hold (CI 2026-11-27: loop
# lag p99 25 ms against 20 ms tokens while every gap but 1% was within 0.06 ms of the truth).
READ_TOGETHER_FLOOR = 0.005
SCHEDULE_LAG_P99_MS = 10.0
CONCURRENCY_HELD_MIN = 0.9
CPU_MEAN_CEILING = 0.9
CPU_BUSY_PEAK = 0.95


def assess_client(summary: Summary, *, open_loop: bool, rx_timestamps: str = "kernel") -> tuple[bool, list[str], str]:
    """Did the client limit the run? (saturated, reasons, advice) from the summary's client block.

    Only what harms the figures counts: sends that lag the schedule (open loop: schedule lag p99 >
    10 ms; closed loop: less than 90% of --concurrency held between the first wave and the last
    send), the client's CPU at its ceiling (≥ 90% of a core over the run; where the run's CPU time
    is not known, a one-second peak ≥ 95%), and, only where arrivals are stamped when the loop gets
    to read them (`rx_timestamps` "read": TLS, other systems, or asked for), event-loop lag p99 >
    5 ms, which then delays every stamp. With kernel receive stamps loop lag delays reading, not
    timing, while it is shorter than the gap between tokens; stalls as long as the gap are a reason:
    loop lag p99 > 5 ms and > the median TPOT, or > half of it where more than `READ_TOGETHER_SHARE`
    of token gaps are 0 (`client.tokens_read_together`), because one read then returns several tokens
    and a read carries one stamp, that of its newest bytes (client/transport.py); never where at most
    `READ_TOGETHER_FLOOR` of the gaps are 0, as then at most twice that share can be off.
    A run too large to hold its gaps (no share) keeps the rule before it: loop lag p99 > the median
    TPOT. Otherwise it stays in `client.loop_lag_ms_p99`.
    """
    client = summary["client"]
    reasons = []
    lag = client["schedule_lag_ms"]["p99"] or 0.0
    if open_loop and lag > SCHEDULE_LAG_P99_MS:
        reasons.append(f"sends lag the schedule: schedule lag p99 {lag:.1f} ms > {SCHEDULE_LAG_P99_MS:g} ms")
    held = client.get("concurrency_held")
    deficit = client.get("load_deficit")
    if not open_loop and deficit is not None:
        if deficit > LOAD_DEFICIT_MAX:
            setup = client.get("setup")
            late = setup["requests"] if setup is not None else 0
            reasons.append(
                f"sends lag: the client left {deficit:.1%} of the closed loop's slot time empty "
                f"(> {LOAD_DEFICIT_MAX:.0%}), so the server carried less than --concurrency"
                + (f"; {late} requests first waited for a connection opened inside the window" if late else "")
            )
    elif not open_loop and held is not None and held < CONCURRENCY_HELD_MIN:
        reasons.append(
            f"sends lag: the closed loop held {held:.0%} of --concurrency in flight "
            f"(< {CONCURRENCY_HELD_MIN:.0%}): slots waited on the client to refill them"
        )
    cpu_s, elapsed = client.get("cpu_s"), client.get("elapsed_s")
    if cpu_s is not None and elapsed:
        if cpu_s / elapsed >= CPU_MEAN_CEILING:
            reasons.append(f"client CPU at its ceiling: {cpu_s / elapsed:.0%} of a core over the run")
    elif (peak := client.get("cpu_busy_peak") or 0.0) >= CPU_BUSY_PEAK:
        reasons.append(f"client CPU peaked at {peak * 100:.0f}% of a core")
    loop_lag = client.get("loop_lag_ms_p99") or 0.0
    # the spacing of a stream's tokens: TPOT (from each request's first and last stamps), not ITL, whose
    # median is 0 when a server writes tokens in bursts (seen: the scripted server pacing 512 streams)
    gap = ((summary.get("latency_ms") or {}).get("tpot") or {}).get("median")
    together = client.get("tokens_read_together")
    reasons += [_bias_reason(b) for b in client.get("biases") or () if _counts(b, rx_timestamps)]
    if "loop_stall_share" in client and rx_timestamps != "kernel":
        pass  # stamps taken at read time: the loop's stalls are judged by their bound (biases, above)
    elif rx_timestamps != "kernel" and loop_lag > LOOP_LAG_P99_MS:
        reasons.append(
            f"arrivals stamped at read time and the event loop lags: loop lag p99 {loop_lag:.1f} ms "
            f"> {LOOP_LAG_P99_MS:g} ms"
        )
    # a p99 stall longer than the gap, or one of half the gap (it has a tail beyond: seen 19.8 ms p99 against a
    # 20 ms TPOT with 2.8% of gaps merged) where the records show tokens read together; a run too large to
    # hold its gaps (no share) has the first test only
    elif (
        loop_lag > LOOP_LAG_P99_MS
        and gap is not None
        and (together is None or together > READ_TOGETHER_FLOOR)
        and (loop_lag > gap or (together is not None and loop_lag > gap / 2 and together > READ_TOGETHER_SHARE))
    ):
        seen = "" if together is None else f"; {together:.1%} of token gaps were read together, two tokens in one read"
        reasons.append(
            f"the event loop stalls about as long as the gap between tokens (loop lag p99 {loop_lag:.1f} "
            f"ms, median TPOT {gap:.2f} ms){seen}: tokens that arrive during a stall are read together "
            "and share the newest one's receive stamp, which shortens ITL and TPOT"
        )
    advice = ""
    if reasons:
        advice = (
            "the client, not the server, may be limiting this run ("
            + "; ".join(reasons)
            + "). Lower --concurrency/--rate, close other work on this "
            "machine, or split the load over more client processes."
        )
        causes = {b["cause"] for b in client.get("biases") or () if _counts(b, rx_timestamps)}
        advice += "".join(f" {_WHAT_TO_DO[c]}" for c in sorted(causes) if c in _WHAT_TO_DO)
    return bool(reasons), reasons, advice


#: The most of a closed loop's slot time the client may leave empty (`client.load_deficit`).
LOAD_DEFICIT_MAX = 0.01

_WHY = {
    "late_connections": "requests sent on connections opened inside the window, which a full accept queue "
    "may hold after the send (a dropped handshake is sent again after 1 s, then 3 s)",
    "loop_stalls": "event-loop stalls longer than the gap between tokens: tokens that arrive in one are read "
    "together and share the newest one's receive stamp",
    "read_pauses": "read coalescing's pauses",
}
_WHAT_TO_DO = {
    "late_connections": "Connections opened late: raise the server's accept backlog or connection limit, "
    "or this host's file-descriptor limit (ulimit -n), so that every connection opens before the clock.",
    "loop_stalls": "Loop stalls: fewer streams per client process (--workers), or fewer other processes on this host.",
    "read_pauses": "Read pauses: run with --no-read-coalescing.",
}


def _counts(b: Mapping[str, Any], rx_timestamps: str) -> bool:
    """A bias over its tolerance that the verdict counts. With kernel stamps a loop stall's bound is
    reported, not counted: no count the client keeps tells tokens a stall merged from tokens a server
    wrote together (docs/metrics.md, "Client self-check"), and the read-together rule judges them."""
    if b["cause"] == "loop_stalls" and rx_timestamps == "kernel":
        return False
    bound = b.get("bound_ms")
    return bound is None or bound > b["tolerance_ms"]


def unvouched(client: Mapping[str, Any], rx_timestamps: str) -> list[str]:
    """The figures the client cannot vouch for without calling the run saturated: each bias bound over its
    tolerance that the verdict does not count (with kernel stamps, a loop stall's: it may have merged tokens,
    or the server may have written them together, and no count the client keeps tells which)."""
    out = []
    for b in client.get("biases") or ():
        bound = b.get("bound_ms")
        if not _counts(b, rx_timestamps) and bound is not None and bound > b["tolerance_ms"]:
            others = [f for f in b.get("over") or () if f != b["figure"]]
            also = f"; so could {', '.join(others)}, each by more than its tolerance" if others else ""
            out.append(
                f"{b['figure']} could be off by up to {bound:.1f} ms (> {b['tolerance_ms']:.1f} ms tolerance{also}) "
                f"from {_WHY.get(b['cause'], b['cause'])} ({b['affected_share']:.1%} of arrivals), or not at "
                "all where the server wrote those tokens together: the client cannot tell which"
            )
    return out


def _bias_reason(b: Mapping[str, Any]) -> str:
    """A bias over its tolerance, as the verdict names it: not trustworthy, which figure, how far, why."""
    bound = "any amount" if b.get("bound_ms") is None else f"up to {b['bound_ms']:.1f} ms"
    return (
        f"not trustworthy: {b['figure']} could be off by {bound} (> {b['tolerance_ms']:.1f} ms tolerance) "
        f"from {_WHY.get(b['cause'], b['cause'])} ({b['affected_share']:.1%} affected)"
    )
