"""The client's timings against the scripted server's own record of every write (test support).

The scripted server (tests/support/scripted_server.py) answers GET /truth with the perf_counter_ns of
each chunk write per request (its x-request-id header). On one host that is the client's clock too
(CLOCK_MONOTONIC), and the run's manifest gives the client's origin, so both line up exactly.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from pathlib import Path

import numpy as np

from servescope.results.records import RequestRecord
from servescope.results.store import load_run
from tests.support.oracle import itl_gaps_ms, request_latencies_ms


def server_truth(url: str) -> dict[str, dict]:
    """GET /truth: per request (the x-request-id header), the perf_counter_ns of each chunk write."""
    return json.loads(urllib.request.urlopen(url + "/truth", timeout=10).read())["requests"]


def truth_twin(url: str, out: Path) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """The run's records, and their twins with every arrival time replaced by the instant the
    server wrote that chunk (one host, one CLOCK_MONOTONIC). The client's send time stays: it is
    the client's own truth. Summarising both with the same code isolates the timing error."""
    truth = server_truth(url)
    run = load_run(out)
    origin = run.manifest["clock"]["origin_ns"]
    twins = []
    for r in run.records:
        t = [x - origin for x in truth[r.response_id]["token_ns"]]
        assert len(t) == len(r.chunk_ns), (len(t), len(r.chunk_ns))
        # a token is never seen before the server wrote it
        assert all(c >= w for c, w in zip(r.chunk_ns, t)), r.id
        answer_at = r.chunk_ns.index(r.t_first_answer_ns) if r.t_first_answer_ns is not None else None
        twins.append(
            dataclasses.replace(
                r,
                chunk_ns=t,
                t_first_ns=t[0],
                t_last_ns=t[-1],
                t_first_answer_ns=t[answer_at] if answer_at is not None else None,
            )
        )
    return run.records, twins


def truth_vs_client(url: str, out: Path) -> dict[str, float]:
    """Client-measured against true timings: medians and P99s of both, and the per-token errors
    (client gap minus true gap of the same token pair: what a P99 comparison can hide)."""
    client, true = truth_twin(url, out)
    ttft_c = np.array([request_latencies_ms(r)["ttft"] for r in client])
    ttft_t = np.array([request_latencies_ms(r)["ttft"] for r in true])
    gaps_c = np.concatenate([itl_gaps_ms(r) for r in client])
    gaps_t = np.concatenate([itl_gaps_ms(r) for r in true])
    delay = np.concatenate([(np.array(c.chunk_ns) - np.array(t.chunk_ns)) / 1e6 for c, t in zip(client, true)])
    gap_error = np.abs(gaps_c - gaps_t)
    return {
        "true_ttft_median": float(np.median(ttft_t)),
        "ttft_median": float(np.median(ttft_c)),
        "true_itl_median": float(np.median(gaps_t)),
        "itl_median": float(np.median(gaps_c)),
        "true_itl_p99": float(np.percentile(gaps_t, 99)),
        "itl_p99": float(np.percentile(gaps_c, 99)),
        "gap_error_median": float(np.median(gap_error)),
        "gap_error_p99": float(np.percentile(gap_error, 99)),
        "gaps_off_3ms": float(np.mean(gap_error > 3.0)),  # share of gaps more than 3 ms off
        "arrival_delay_min": float(delay.min()),
        "arrival_delay_median": float(np.median(delay)),
        "arrival_delay_p99": float(np.percentile(delay, 99)),
        "arrival_delay_max": float(delay.max()),
    }
