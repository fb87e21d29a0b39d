"""The client's timings against the scripted server's own record of every write (test support).

The scripted server (tests/support/scripted_server.py) answers GET /truth with the perf_counter_ns of
each chunk write per request (its x-request-id header). On one host that is the client's clock too
(CLOCK_MONOTONIC), and the run's manifest gives the client's origin, so both line up exactly.

Over several shards each shard's records are relative to its own start instant: with `--workers` every
process takes the run's `clock.origin_ns` as given (one clock), so that is every shard's origin; with
`--ray` the run sends each actor `origin_ns + clock_offset_ns` in the actor's clock (run/ray_run.py), so a
shard's records are relative to that. Ray nodes in network namespaces of one machine (tests/support/raynet.py)
still share its CLOCK_MONOTONIC, the true offset is 0, and a shard's origin on the server's clock is
`origin_ns + clock_offset_ns` of that shard (`shard_origins_ns`): the measured offset's error moves the
shard's whole origin, never a latency inside it.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from pathlib import Path

import numpy as np

from servescope.client.split import shard_of
from servescope.results.records import RequestRecord
from servescope.results.store import load_run
from tests.support.oracle import itl_gaps_ms, request_latencies_ms


def server_truth(url: str) -> dict[str, dict]:
    """GET /truth: per request (the x-request-id header), the perf_counter_ns of each chunk write."""
    return json.loads(urllib.request.urlopen(url + "/truth", timeout=10).read())["requests"]


def shard_origins_ns(manifest: dict) -> list[int]:
    """Each shard's origin on this host's CLOCK_MONOTONIC (module docstring): the run's `origin_ns`, plus,
    for Ray actors, each one's measured clock offset (`workers.shards[].clock_offset_ns`). One shard: one."""
    origin = int(manifest["clock"]["origin_ns"])
    workers = manifest.get("workers") or {}
    if workers.get("engine") == "ray":
        shards = sorted(workers["shards"], key=lambda s: s["index"])
        return [origin + int(s["clock_offset_ns"]) for s in shards]
    return [origin] * max(int(workers.get("count") or 1), 1)


def truth_twin(
    url: str, out: Path, truth: dict[str, dict] | None = None
) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """The run's records, and their twins with every arrival time replaced by the instant the
    server wrote that chunk (one host, one CLOCK_MONOTONIC). The client's send time stays: it is
    the client's own truth. Summarising both with the same code isolates the timing error.
    `truth`: the server's /truth answer's requests where the caller fetched it (from another network
    namespace, say); else it is fetched from `url`."""
    truth = server_truth(url) if truth is None else truth
    run = load_run(out)
    origins = shard_origins_ns(run.manifest)
    twins = []
    for r in run.records:
        origin = origins[shard_of(r.id, len(origins))]
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
