"""Where a closed-loop corpus point's simulated TTFT comes from: the first token of each wave of
`concurrency` requests, as the validation simulates it. Run by hand:

    .venv/bin/python benchmarks/plan_waves.py l33-70b-2xh100-fp8-tp2-200-200-c150
    .venv/bin/python benchmarks/plan_waves.py l33-70b-2xh100-fp8-tp2-200-200-c150 --budget 8192,2048 --fitted
    .venv/bin/python benchmarks/plan_waves.py l33-70b-2xh100-fp8-tp2-200-200-c150 --waves 16 \
        --budget 1024 --set admit.eng.trtllm=1e-4 --set ttft.eng.trtllm=0.1 --steps

A point is named by the end of its key (`source/point-id`). Its knobs are its fold's held-out table
(`held_out:` of deploy/calibration.yaml), or with `--fitted` the all-sources table. `--budget` reruns it
with other batch token budgets (`max_num_batched_tokens`), `--waves N` simulates N waves instead of the
validation's request count (its steady state), `--set knob=value` overrides a knob of the table (a
what-if, never a fit), and `--steps` prints the engine steps around one late wave's first tokens (how
long each step took, how many of the wave arrived during it and how many got their first token at its
end). For each run: request i belongs to wave
i // concurrency; a wave whose mean TTFT stays where the first burst's was is a closed loop still in
lock-step (docs/plan.md, Limits: fixed-length closed loops). Only points the validation runs on one
engine with `sim.simulate` (no disaggregation, no attention-DP lock-step) are shown.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

from servescope.deploy.calibration import load_calibration
from servescope.plan import validate
from servescope.plan.corpus import load_corpus
from servescope.sim.request import SimRequest
from servescope.sim.simulate import SimRun, simulate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("key", help="the end of a corpus point's key, e.g. l31-8b-1xh100-fp8-tp1-200-200-c50")
    ap.add_argument("--budget", default="", help="comma-separated batch token budgets to run it with as well")
    ap.add_argument("--fitted", action="store_true", help="the all-sources table instead of the held-out one")
    ap.add_argument("--waves", type=int, default=0, help="simulate this many waves of `concurrency` requests")
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="override a knob of the table (repeatable)",
    )
    ap.add_argument("--steps", action="store_true", help="print the steps around a late wave's first tokens")
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
    table = dict(cal.knobs if args.fitted else cal.held_out[s.source])
    for item in args.overrides:
        name, _, value = item.partition("=")
        try:
            table[name] = float(value)
        except ValueError:
            print(f"--set {item!r}: give KNOB=VALUE with a number (e.g. admit.eng.trtllm=0.002)", file=sys.stderr)
            return 2
    if args.waves:
        s = dataclasses.replace(s, requests=args.waves * s.concurrency)
    knobs = validate.Predictor([point]).knobs(point.key, table)
    measured = validate.measured_for(point)
    print(f"{point.key}: {s.label}, {s.requests} requests simulated at concurrency {s.concurrency}")
    print("measured: " + ", ".join(f"{m} {stat} {v:g}" for m, (stat, v) in measured.items()))
    budgets = [s.base.max_num_batched_tokens] + [int(b) for b in args.budget.split(",") if b]
    for budget in budgets:
        base = dataclasses.replace(s.base, max_num_batched_tokens=budget, max_num_seqs=min(s.base.max_num_seqs, budget))
        run_s = dataclasses.replace(s, base=base)
        sim_knobs = validate._sim_knobs(run_s, knobs)
        cfg = validate._engine_for(run_s, sim_knobs)
        reqs, _ = validate.sim_requests(run_s, sim_knobs)  # the requests `predict` runs
        run = simulate(cfg, reqs, concurrency=s.concurrency)
        ttft = [run.first_token_s(r) - r.arrival_s + knobs.first_token_s for r in reqs]
        print(
            f"\nbatch token budget {budget} (front end {1e3 * cfg.frontend_s:.1f} ms a request, "
            f"first-token latency {1e3 * knobs.first_token_s:.1f} ms):"
        )
        c = s.concurrency
        for w in range(0, len(reqs), c):
            t = ttft[w : w + c]
            print(
                f"  wave {w // c}: TTFT mean {1e3 * statistics.fmean(t):8.1f} ms, median "
                f"{1e3 * statistics.median(t):8.1f}, min {1e3 * min(t):8.1f}, max {1e3 * max(t):8.1f}"
            )
        print(f"  all: mean {1e3 * statistics.fmean(ttft):.1f} ms, median {1e3 * statistics.median(ttft):.1f}")
        if args.steps:
            _print_steps(run, reqs, c)
    return 0


def _print_steps(run: SimRun, reqs: list[SimRequest], c: int) -> None:
    """The steps from the first arrival of the last full wave but one to its last first token: each
    step's start (ms from that arrival), length, the wave's requests that arrived during it and that
    got their first token at its end."""
    waves = len(reqs) // c
    if waves < 2:
        return
    wave = reqs[(waves - 2) * c : (waves - 1) * c]
    t0 = min(r.arrival_s for r in wave)
    first = min(r.first_token_step for r in wave)
    last = max(r.first_token_step for r in wave)
    start = first
    while start > 0 and run.step_start_s[start] > t0:
        start -= 1
    print(f"  steps of wave {waves - 2} (ms from its first arrival):")
    for k in range(start, last + 1):
        a, b = run.step_start_s[k], run.step_end_s[k]
        came = sum(1 for r in wave if a <= r.arrival_s < b)
        got = sum(1 for r in wave if r.first_token_step == k)
        print(
            f"    step {k}: start {1e3 * (a - t0):8.1f}, {1e3 * (b - a):7.1f} ms long, "
            f"{came:4d} arrived during it, {got:4d} first tokens at its end"
        )


if __name__ == "__main__":
    sys.exit(main())
