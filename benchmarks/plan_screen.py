"""Screen an idea before a refit: scale groups of knobs in every held-out table and see how far the
held-out medians could move (seconds, where a refit takes an hour). Run by hand:

    .venv/bin/python benchmarks/plan_screen.py                      # the standard screen (below)
    .venv/bin/python benchmarks/plan_screen.py admit.eng.=2 ttft.base=0.5,1.5
                      # each knob whose name starts with the prefix, times each factor, one row per factor
    .venv/bin/python benchmarks/plan_screen.py ttft.eng.:=1 admit.eng.vllm-v1:=0.004,0.008
                      # each such knob set to each value instead (`:=`)

Each row multiplies the named knobs in every fold's table (`held_out:` of deploy/calibration.yaml),
predicts every point with its own fold's table, and prints the held-out median |error| by metric and
how many points are within each metric's bound. No knob is refitted, so the others cannot make up
for the change: a row says how sensitive the held-out figures are to one group, not what a refit
with that group fixed would reach. A group whose every factor leaves a median where it is will not
move it in a refit either, unless other knobs move with it.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Mapping

from servescope.deploy.calibration import load_calibration
from servescope.plan.corpus import load_corpus
from servescope.plan.validate import METRICS, Predictor

BOUNDS = {"tok_s": 0.20, "itl": 0.25, "ttft": 0.25}
# The standard screen: the knob groups that carry TTFT (first-token latency, front end, a prompt
# step's per-layer cost, compute efficiency, the prompt tokens' link share) at half and double.
STANDARD = (
    "ttft.base=0.5,0.75,1.25,2",
    "admit.eng.=0.5,2",
    "pfl.eng.=0.5,0.7,1.4",
    "comp.base=0.8,1.25",
    "comm.prefill.gpu.=0.7,1.4",
)


def _parse(spec: str) -> tuple[str, bool, list[float]]:
    """PREFIX=FACTORS (scale) or PREFIX:=VALUES (set) -> (prefix, set?, numbers)."""
    prefix, _, numbers = spec.partition("=")
    setting = prefix.endswith(":")
    prefix = prefix.removesuffix(":")
    try:
        values = [float(f) for f in numbers.split(",") if f.strip()]
    except ValueError:
        values = []
    if not prefix or not values or any(v <= 0 for v in values):
        raise SystemExit(
            f"plan_screen: {spec!r} is not PREFIX=FACTOR[,FACTOR...] or PREFIX:=VALUE[,VALUE...] with "
            "numbers > 0 (e.g. admit.eng.=0.5,2 or ttft.eng.:=1)"
        )
    return prefix, setting, values


def scaled(prefix: str, factor: float, *, setting: bool = False) -> Callable[[Mapping[str, float]], dict[str, float]]:
    """Every knob whose name starts with `prefix`, times `factor` (or set to it)."""

    def apply(table: Mapping[str, float]) -> dict[str, float]:
        out = dict(table)
        for name in out:
            if name.startswith(prefix):
                out[name] = factor if setting else out[name] * factor
        return out

    return apply


def main(argv: list[str] | None = None) -> int:
    specs = (argv if argv is not None else sys.argv[1:]) or list(STANDARD)
    rows = [
        (f"{prefix} {'=' if setting else 'x'}{f:g}", scaled(prefix, f, setting=setting))
        for prefix, setting, fs in map(_parse, specs)
        for f in fs
    ]
    t0 = time.perf_counter()
    cal = load_calibration()
    points = load_corpus()
    pred = Predictor(points)
    folds: dict[str, list[str]] = {}
    for p in points:
        if p.key in pred.settings:
            folds.setdefault(p.source.fold, []).append(p.key)
    unknown = [
        prefix
        for prefix in (spec.partition("=")[0].removesuffix(":") for spec in specs)
        if not any(n.startswith(prefix) for t in cal.held_out.values() for n in t)
    ]
    if unknown:
        raise SystemExit(f"plan_screen: no knob in the held-out tables starts with {', '.join(unknown)}")

    def held_out(mod: Callable[[Mapping[str, float]], dict[str, float]]) -> dict[str, tuple[float, int, int]]:
        errs: dict[str, list[float]] = {}
        for fold, keys in folds.items():
            table = mod(cal.held_out[fold])
            for k in keys:
                got = pred.predicted(k, table)
                for m, (_, measured) in pred.measured[k].items():
                    if m in got:
                        errs.setdefault(m, []).append(abs(got[m] / measured - 1))
        return {m: (statistics.median(e), sum(x <= BOUNDS[m] for x in e), len(e)) for m, e in errs.items()}

    print(f"{'held-out tables':30} " + "  ".join(f"{m:>6} median (within bound / n)" for m in METRICS))
    for label, mod in [("as committed", lambda t: dict(t)), *rows]:
        got = held_out(mod)
        print(f"{label:30} " + "  ".join(f"{got[m][0]:13.1%} ({got[m][1]:3d} / {got[m][2]:3d})" for m in METRICS))
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
