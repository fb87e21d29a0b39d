"""What-if on a virtual clock: the deployment's engine configuration (the one the emulator serves on the
wall clock) run with `sim.simulate` under a load (a closed loop of N users, Poisson arrivals at a rate,
or every request at once), and the table it prints as. A shared prompt prefix (`prefix_len`) meets the
engine's prefix cache as a real workload's would.

Pure (no I/O beyond the deployment's knob table): a model of a deployment, not a measurement.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.table import Table

from servescope.deploy.deployment import Deployment
from servescope.errors import ConfigError
from servescope.sim.config import EngineConfig
from servescope.sim.knobs import StepKnobs
from servescope.sim.lockstep import LockstepRun, simulate_lockstep
from servescope.sim.request import SimRequest
from servescope.sim.simulate import SimRun, simulate, step_gaps, weighted_median
from servescope.workload.schedule import open_loop_offsets_ns

__all__ = [
    "WhatIfPoint",
    "engine_config",
    "simulate_point",
    "whatif",
    "whatif_table",
    "knobs_yaml",
    "point_dict",
    "poisson_arrivals",
    "shared_prefix_hashes",
    "SEED",
]


def knobs_yaml(knobs: StepKnobs) -> str:
    """A `knobs:` block for a saved deployment (emulate --profile FILE, or a profile YAML)."""
    import yaml

    vals = {k: float(f"{v:.4g}") for k, v in dataclasses.asdict(knobs).items()}
    return "# fitted by servescope plan --calibrate; add to a saved deployment (profile YAML)\n" + yaml.safe_dump(
        {"knobs": vals}, sort_keys=False
    )


SEED = 0  # Poisson arrivals: vllm bench serve's default --seed; every what-if is deterministic


@dataclass(frozen=True, slots=True)
class WhatIfPoint:
    concurrency: int | None  # closed loop: users, each sending its next request at its last one's end
    input_len: int  # prompt tokens after the shared prefix
    output_len: int
    output_tokens_per_s: float
    total_tokens_per_s: float
    requests_per_s: float
    ttft_ms_p50: float
    itl_ms_p50: float  # median gap between consecutive tokens, all requests
    e2e_ms_p50: float
    request_rate: float | None = None  # open loop: Poisson arrivals per second (inf: all at once)
    prefix_len: int = 0  # tokens every prompt shares before its own input_len
    prefix_cache_hit_rate: float | None = None  # of prompt tokens, found in the prefix cache (with a prefix)
    num_requests: int = 0

    @property
    def mode(self) -> str:
        """The corpus's name for this kind of load (plan/corpus.py): "closed" (a concurrency),
        "offline" (every request at once) or "rate" (Poisson arrivals)."""
        if self.request_rate is None:
            return "closed"
        return "offline" if math.isinf(self.request_rate) else "rate"

    @property
    def load(self) -> str:
        """The load in words: "c=8", "4 req/s", "all at once"."""
        if self.request_rate is None:
            return f"c={self.concurrency}"
        return "all at once" if math.isinf(self.request_rate) else f"{self.request_rate:g} req/s"


def poisson_arrivals(rate: float, n: int, seed: int = SEED) -> list[float]:
    """Send times (s) of `n` requests at `rate` per second: the schedule `servescope run --rate` computes
    (`workload.schedule.open_loop_offsets_ns`, burstiness 1), its gaps as drawn, as vllm bench serve
    sends them (the first at 0, then exponential gaps of mean 1 / rate); all at 0 for an infinite rate."""
    try:
        offsets = open_loop_offsets_ns(n, rate, seed=seed, exact_mean=False)
    except ValueError as exc:
        raise ConfigError(f"{exc} (or inf), got {rate}") from None
    return [ns / 1e9 for ns in offsets]


def shared_prefix_hashes(i: int, prefix_len: int, prompt_len: int, block_size: int) -> list[int]:
    """Prefix-cache names of request `i`'s full prompt blocks when every prompt starts with the same
    `prefix_len` tokens and goes on with its own: the blocks inside the prefix are named alike in every
    request (a hash chain, as `sim.request.block_hashes` names them), every later one is the request's own."""
    out: list[int] = []
    h = 0
    for b in range(prompt_len // block_size):
        inside = (b + 1) * block_size <= prefix_len
        h = hash((h, "prefix", b) if inside else (h, i, b))
        out.append(h)
    return out


def engine_config(dep: Deployment, knobs: StepKnobs | None = None) -> EngineConfig:
    """The engine of one replica of `dep` (with `knobs`, else the deployment's own)."""
    return dep.engine_config(knobs)


def simulate_point(
    cfg: EngineConfig,
    *,
    input_len: int,
    output_len: int,
    num_requests: int,
    concurrency: int | None = None,
    request_rate: float | None = None,
    prefix_len: int = 0,
    seed: int = SEED,
    ranks: int = 1,
) -> WhatIfPoint:
    """One load on a virtual clock: a closed loop of `concurrency`, or Poisson arrivals at `request_rate`
    (inf: every request at 0, the offline burst of `vllm bench serve --request-rate inf`). Each prompt is
    `prefix_len` shared tokens then `input_len` of its own. Throughput over the whole run (as a benchmark
    sees it); ITL is the median gap between consecutive tokens over all requests (as vLLM's bench
    reports). TTFT counts from the send and adds `cfg.first_token_s` (the knobs' first-token latency), as
    the validation does; throughput, ITL and end-to-end latency do not carry it (a response shorter than
    it ends with its first token, as the emulator's hold sends it). `ranks` > 1: attention-DP ranks of a
    MoE, stepping together (`sim.lockstep`), the load over all of them and `cfg` one rank's engine behind
    the one API server."""
    if (concurrency is None) == (request_rate is None):
        raise ConfigError("a what-if load is a concurrency or a request rate, one of them")
    prompt = prefix_len + input_len
    reqs = [SimRequest(id=i, prompt_len=prompt, max_tokens=output_len) for i in range(num_requests)]
    if prefix_len and cfg.enable_prefix_caching:
        for i, r in enumerate(reqs):
            r.prefix_hashes = shared_prefix_hashes(i, prefix_len, prompt, cfg.block_size)
    if request_rate is not None:
        for r, t in zip(reqs, poisson_arrivals(request_rate, num_requests, seed)):
            r.arrival_s = t
    run: SimRun | LockstepRun
    if ranks > 1:
        run = simulate_lockstep(cfg, reqs, ranks, concurrency=concurrency)
        itl_s = run.median_itl_s()
    else:
        run = simulate(cfg, reqs, concurrency=concurrency)
        itl_s = _median_itl_s(run, reqs)
    dur = run.duration_s or 1e-9
    ttft = [run.first_token_s(r) - r.arrival_s + cfg.first_token_s for r in reqs]
    e2e = [max(run.end_s(r) - r.arrival_s, t) for r, t in zip(reqs, ttft)]
    out_tok = output_len * num_requests
    hit = None
    if prefix_len:
        st = run.stats
        hit = st.prefix_hits / st.prefix_queries if st.prefix_queries else 0.0
    return WhatIfPoint(
        concurrency=concurrency,
        input_len=input_len,
        output_len=output_len,
        output_tokens_per_s=out_tok / dur,
        total_tokens_per_s=(out_tok + prompt * num_requests) / dur,
        requests_per_s=num_requests / dur,
        ttft_ms_p50=1e3 * statistics.median(ttft),
        itl_ms_p50=1e3 * itl_s,
        e2e_ms_p50=1e3 * statistics.median(e2e),
        request_rate=request_rate,
        prefix_len=prefix_len,
        prefix_cache_hit_rate=hit,
        num_requests=num_requests,
    )


def _median_itl_s(run: SimRun, reqs: Sequence[SimRequest]) -> float:
    """Median gap between consecutive tokens over all requests (`sim.simulate.step_gaps`: each step
    gap weighted by the requests decoding across it)."""
    ends = np.asarray(run.step_end_s, dtype=np.float64)
    if len(ends) < 2:
        return 0.0
    return weighted_median(*step_gaps(ends, reqs))


def _n_requests(concurrency: int | None, rate: float | None, num_requests: int | None) -> int:
    """Requests in a point: the given number, else max(200, 4 x the concurrency) for a closed loop, a
    minute of arrivals (at least 200) at a rate, and vllm bench serve's default 1,000 all at once."""
    if num_requests:
        return num_requests
    if rate is None:
        return max(200, 4 * (concurrency or 1))
    if math.isinf(rate):
        return 1000
    return max(200, min(20_000, math.ceil(60 * rate)))


def dp_share(concurrency: int, dp: int) -> tuple[int, float]:
    """A closed loop of `concurrency` users over `dp` replicas: the users the busiest replica holds
    (ceil) and how many such replicas' worth of work the loop keeps busy (concurrency / that share).
    One user keeps one replica busy, not dp of them; 100 users over 8 replicas are 4 x 13 + 4 x 12,
    7.7 replicas of 13 (each user's pace is nearly the same at 12 or 13), not 8."""
    per = math.ceil(concurrency / dp)
    return per, concurrency / per


def whatif(
    dep: Deployment,
    knobs: StepKnobs | None = None,
    *,
    input_len: int,
    output_len: int,
    concurrencies: Sequence[int] = (),
    request_rates: Sequence[float] = (),
    num_requests: int | None = None,
    prefix_len: int = 0,
) -> list[WhatIfPoint]:
    """The what-if at each closed-loop concurrency, then at each request rate (per second; inf: all at
    once). DP ranks of a MoE (attention DP, or DP + EP) run their steps together, each as long as the
    slowest rank's (`sim.lockstep`): every rank is simulated with the whole load. DP replicas of a dense
    model are independent engines sharing the load evenly: each runs 1/dp of the users or of the rate; a
    closed loop of fewer users than replicas keeps only as many busy (`dp_share`), and the API server in
    front of them admits only their requests."""
    cfg = engine_config(dep, knobs)
    total = prefix_len + input_len + output_len
    if total > cfg.max_model_len:
        lens = "prefix_len + input_len + output_len" if prefix_len else "input_len + output_len"
        raise ConfigError(f"{lens} = {total} exceeds max_model_len {cfg.max_model_len}")
    replicas = dep.dp
    loads: list[tuple[int | None, float | None]] = [(c, None) for c in concurrencies]
    loads += [(None, r) for r in request_rates]
    out: list[WhatIfPoint] = []
    if replicas > 1 and dep.model.is_moe:  # one API server: engine_config priced it x dp for one rank's share
        lock = dataclasses.replace(cfg, frontend_s=cfg.frontend_s / replicas)
        return [
            simulate_point(
                lock,
                concurrency=c,
                request_rate=r,
                input_len=input_len,
                output_len=output_len,
                num_requests=_n_requests(c, r, num_requests),
                prefix_len=prefix_len,
                ranks=replicas,
            )
            for c, r in loads
        ]
    for c, r in loads:
        n = _n_requests(c, r, num_requests)
        per, busy = dp_share(c, replicas) if c is not None else (None, float(replicas))
        # the front end serves every replica's requests (engine_config: frontend_s x dp); only the busy ones'
        one = cfg if busy == replicas else dataclasses.replace(cfg, frontend_s=cfg.frontend_s * busy / replicas)
        p = simulate_point(
            one,
            concurrency=per,
            request_rate=r / replicas if r is not None else None,
            input_len=input_len,
            output_len=output_len,
            num_requests=math.ceil(n / busy),
            prefix_len=prefix_len,
        )
        if replicas > 1:
            p = dataclasses.replace(
                p,
                concurrency=c,
                request_rate=r,
                num_requests=n,
                output_tokens_per_s=p.output_tokens_per_s * busy,
                total_tokens_per_s=p.total_tokens_per_s * busy,
                requests_per_s=p.requests_per_s * busy,
            )
        out.append(p)
    return out


def point_dict(p: WhatIfPoint, band: dict[str, float] | None = None) -> dict[str, Any]:
    """One what-if point for plan.json; `band` gives each metric's relative uncertainty (+-)."""
    out: dict[str, Any] = dataclasses.asdict(p)
    if out["request_rate"] is not None and math.isinf(out["request_rate"]):
        out["request_rate"] = "inf"  # JSON has no infinity
    if band:
        out["uncertainty"] = {
            m: {"rel": r, "low": out[k] * (1 - r), "high": out[k] * (1 + r)}
            for m, k, r in (
                (m, k, band[m])
                for m, k in (
                    ("output_tokens_per_s", "output_tokens_per_s"),
                    ("itl_ms", "itl_ms_p50"),
                    ("ttft_ms", "ttft_ms_p50"),
                )
                if m in band
            )
        }
    return out


def whatif_table(points: Sequence[WhatIfPoint], title: str) -> Table:
    t = Table(title=title)
    prefix = any(p.prefix_len for p in points)
    for col in (
        "load",
        "in/out",
        "output tok/s",
        "total tok/s",
        "TTFT p50 ms",
        "ITL p50 ms",
        "E2E p50 ms",
        "req/s",
        *(("prefix hits",) if prefix else ()),
    ):
        t.add_column(col, justify="right")
    for p in points:
        io = f"{p.prefix_len}+{p.input_len}/{p.output_len}" if p.prefix_len else f"{p.input_len}/{p.output_len}"
        t.add_row(
            p.load,
            io,
            f"{p.output_tokens_per_s:,.0f}",
            f"{p.total_tokens_per_s:,.0f}",
            f"{p.ttft_ms_p50:,.0f}",
            f"{p.itl_ms_p50:,.1f}",
            f"{p.e2e_ms_p50:,.0f}",
            f"{p.requests_per_s:,.2f}",
            *(
                (f"{p.prefix_cache_hit_rate:.0%}",)
                if prefix and p.prefix_cache_hit_rate is not None
                else (("-",) if prefix else ())
            ),
        )
    return t
