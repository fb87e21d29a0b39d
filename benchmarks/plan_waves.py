"""Where a closed-loop corpus point's simulated TTFT comes from: the first token of each wave of
`concurrency` requests, as the validation simulates it. Run by hand:

    .venv/bin/python benchmarks/plan_waves.py l33-70b-2xh100-fp8-tp2-200-200-c150
    .venv/bin/python benchmarks/plan_waves.py l33-70b-2xh100-fp8-tp2-200-200-c150 --budget 8192,2048 --fitted

A point is named by the end of its key (`source/point-id`). Its knobs are its fold's held-out table
(`held_out:` of deploy/calibration.yaml), or with `--fitted` the all-sources table. `--budget` reruns it
with other batch token budgets (`max_num_batched_tokens`). For each run: request i belongs to wave
i // concurrency; a wave whose mean TTFT stays where the first burst's was is a closed loop still in
lock-step (docs/plan.md, Limits: fixed-length closed loops). Only points the validation runs on one
engine with `sim.simulate` (no disaggregation, no attention-DP lock-step) are shown.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

from servebench.deploy.calibration import load_calibration
from servebench.plan import validate
from servebench.plan.corpus import load_corpus
from servebench.sim.simulate import simulate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("key", help="the end of a corpus point's key, e.g. l31-8b-1xh100-fp8-tp1-200-200-c50")
    ap.add_argument("--budget", default="", help="comma-separated batch token budgets to run it with as well")
    ap.add_argument("--fitted", action="store_true", help="the all-sources table instead of the held-out one")
    args = ap.parse_args(argv)
    points = [p for p in load_corpus() if p.key.endswith(args.key)]
    if len(points) != 1:
        print(f"{args.key!r} names {len(points)} corpus points; give more of the key", file=sys.stderr)
        return 2
    point = points[0]
    s = validate.setting_for(point)
    if s.mode != "closed" or not s.concurrency or s.disagg or s.lockstep > 1:
        print(f"{point.key}: not a closed loop on one engine (mode {s.mode}); nothing to show", file=sys.stderr)
        return 2
    cal = load_calibration()
    table = cal.knobs if args.fitted else cal.held_out[s.source]
    knobs = validate.Predictor([point]).knobs(point.key, table)
    measured = validate.measured_for(point)
    print(f"{point.key}: {s.label}, {s.requests} requests simulated at concurrency {s.concurrency}")
    print("measured: " + ", ".join(f"{m} {stat} {v:g}" for m, (stat, v) in measured.items()))
    budgets = [s.base.max_num_batched_tokens] + [int(b) for b in args.budget.split(",") if b]
    for budget in budgets:
        base = dataclasses.replace(s.base, max_num_batched_tokens=budget,
                                   max_num_seqs=min(s.base.max_num_seqs, budget))
        run_s = dataclasses.replace(s, base=base)
        sim_knobs = validate._sim_knobs(run_s, knobs)
        cfg = validate._engine_for(run_s, sim_knobs)
        reqs, _ = validate.sim_requests(run_s, sim_knobs)  # the requests `predict` runs
        run = simulate(cfg, reqs, concurrency=s.concurrency)
        ttft = [run.first_token_s(r) - r.arrival_s + knobs.first_token_s for r in reqs]
        print(f"\nbatch token budget {budget} (front end {1e3 * cfg.frontend_s:.1f} ms a request, "
              f"first-token latency {1e3 * knobs.first_token_s:.1f} ms):")
        c = s.concurrency
        for w in range(0, len(reqs), c):
            t = ttft[w:w + c]
            print(f"  wave {w // c}: TTFT mean {1e3 * statistics.fmean(t):8.1f} ms, median "
                  f"{1e3 * statistics.median(t):8.1f}, min {1e3 * min(t):8.1f}, max {1e3 * max(t):8.1f}")
        print(f"  all: mean {1e3 * statistics.fmean(ttft):.1f} ms, median {1e3 * statistics.median(ttft):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
