"""Fitting the calibration knobs to the corpus, leave-one-source-out folds, and the error summary.

`plan/validate.py` predicts a corpus point for a knob table; this module searches the table (a
Gauss-Newton fit of log errors with a Cauchy loss and a ridge towards the defaults), runs one fold per
held-out source (in worker processes), and summarises median |error| by metric, train vs held out.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from servescope.plan.validate import METRICS, PointResult, Predictor
from servescope.sim.knobs import DEFAULT_KNOBS, FAMILIES, PINNED, RELEASE_CLASSES

# --- fitting ----------------------------------------------------------------------------------------
_WEIGHTS = {"tok_s": 1.0, "itl": 1.0, "ttft": 0.5}
_RIDGE = 0.05  # pull of each knob's log towards its default (per knob, in squared log units)
# Engine-specific efficiency factors (mem.eng.*, comp.eng.*) are pulled 40x harder: HBM and tensor-core
# efficiency are mostly the GPU's and the kernels' (shared across engines); an engine factor moves only
# as far as many points of that engine insist, so a source alone in its engine group cannot bend it.
_RIDGE_ENGINE_EFF = 2.0
# Cauchy loss on the log error (scipy.optimize.least_squares' 'cauchy', scale 0.3): quadratic within
# ~30%, and a point's pull on the knobs falls again beyond it (its influence x / (1 + (x/c)^2) peaks at
# x = c, ~35% error, is half of that at 3x and a quarter at 10x). What the validation reports is a median
# error, which points far off do not move; with soft-L1 (linear beyond 30%, the loss until 2026-11-26)
# each such point kept a constant pull on the knobs it shares with points the model does express.
_LOSS_SCALE = 0.3
_STEP_H = 0.1  # finite-difference step in log space for the Jacobian
_LOG_BOUNDS = 3.0  # a knob moves at most e^3 ~ 20x from its default
_TOL = 0.01  # stop when an iteration improves the loss by less than 1%


def _fit_names(pred: Predictor, keys: Sequence[str]) -> list[str]:
    """The knobs these points can inform: MTP acceptance only with speculative points, collective
    knobs only with points that communicate (per GPU generation for its factor), an engine's
    admission cost only with points served over its API server."""
    names: set[str] = set()
    for k in keys:
        s = pred.settings[k]
        names.update(n for n in s.knob_names if not n.startswith(("spec.", "comm.", "admit.")))
        if s.draft_tokens:
            names.add("spec.accept")
        if s.base.cost.comm_bytes_per_token or s.base.cost.collectives:
            names.update(("comm.eff", "comm.latency_s", f"comm.gpu.{s.generation}"))
        if s.base.cost.internode_collectives:
            names.add("comm.latency_s.internode")
        if s.base.cost.comm_bytes_per_token:
            names.add(f"comm.prefill.gpu.{s.generation}")
        if s.served:
            names.add(f"admit.eng.{s.family}")
    return sorted(names - PINNED.keys())


def knob_sources(pred: Predictor) -> dict[str, list[str]]:
    """Knob -> the sources whose points inform it (`_fit_names` of each source's points). A knob
    informed by one source is at its prior whenever that source is held out."""
    out: dict[str, set[str]] = {}
    for src in sorted({s.source for s in pred.settings.values()}):
        for n in _fit_names(pred, [k for k, s in pred.settings.items() if s.source == src]):
            out.setdefault(n, set()).add(src)
    return {n: sorted(v) for n, v in sorted(out.items())}


def _default(name: str) -> float:
    return float(DEFAULT_KNOBS.get(name, 1.0))


def _start_value(start: Mapping[str, float], name: str) -> float:
    """A knob's value to start a fit from: the start table's; a DeepSeek release class it lacks starts
    where resolve_knobs reads it, at the start table's mla-moe factor; else the default."""
    if name in start:
        return start[name]
    prefix, _, cls = name.rpartition(".")
    if cls in RELEASE_CLASSES and f"{prefix}.mla-moe" in start:
        return start[f"{prefix}.mla-moe"]
    return _default(name)


def _robust(x: float) -> float:
    """Signed residual whose square is the Cauchy loss c^2 ln(1 + (x/c)^2) of a log error x."""
    c = _LOSS_SCALE
    return math.copysign(math.sqrt(c * c * math.log1p((x / c) ** 2)), x)


# Source balance: a fold (source) with M residuals (point x metric) among a fit's points weighs each of
# them by min(1, sqrt(_SOURCE_RESIDUALS / M)) in the squared loss, so one large document cannot set the
# knobs it shares with every other: GPUStack's 264 residuals (24% of all, mostly 1,000-request bursts
# behind one API server) weigh 0.48 each; AMD's MAD tables, the SGLang team's documents and SemiAnalysis
# ~0.74, the small sources 1. Kept 2026-11-27 by a rule written before the run
# (docs/plan-decisions.md): one warm iteration with it against one without, held out
# 18.4 / 23.4 / 32.8% vs 18.6 / 23.6 / 33.0%.
_SOURCE_RESIDUALS = 60.0


def _source_weights(pred: Predictor, keys: Sequence[str]) -> dict[str, float]:
    """Fold -> the weight of each of its residuals in a fit of `keys` (counted over those keys)."""
    count: dict[str, int] = {}
    for k in keys:
        src = pred.settings[k].source
        count[src] = count.get(src, 0) + sum(1 for m in METRICS if m in pred.measured[k])
    return {s: min(1.0, math.sqrt(_SOURCE_RESIDUALS / n)) if n else 1.0 for s, n in count.items()}


def _residuals(pred: Predictor, keys: Sequence[str], table: Mapping[str, float]) -> np.ndarray:
    r: list[float] = []
    w = _source_weights(pred, keys)
    for k in keys:
        got = pred.predicted(k, table)
        ws = math.sqrt(w[pred.settings[k].source])
        for m in METRICS:
            if m in got:
                r.append(ws * math.sqrt(_WEIGHTS[m]) * _robust(math.log(max(got[m], 1e-9) / pred.measured[k][m][1])))
    return np.asarray(r)


def _ridge(names: Sequence[str]) -> np.ndarray:
    return np.array([_RIDGE_ENGINE_EFF if n.startswith(("mem.eng.", "comp.eng.")) else _RIDGE for n in names])


def fit_table(
    pred: Predictor,
    keys: Sequence[str],
    *,
    iterations: int = 6,
    start: Mapping[str, float] | None = None,
    only: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
    tol: float = _TOL,
) -> dict[str, float]:
    """Fit the knob table to the points `keys` (Gauss-Newton on log error + ridge, damped), from
    `start` (else the defaults). With `only` (knob name prefixes), just those knobs move and every
    other knob keeps its value in `start`. Stops after `iterations`, or after an iteration that
    improves the loss by less than `tol` of it."""
    names = _fit_names(pred, keys)
    fixed: dict[str, float] = {}
    if only:
        names = [n for n in names if n.startswith(tuple(only))]
        fixed = {k: v for k, v in (start or {}).items() if k not in names}
    x0 = np.array([math.log(_default(n)) for n in names])
    x = np.array([math.log(_start_value(start or {}, n)) for n in names])

    def fitted(v: np.ndarray) -> dict[str, float]:
        return {n: float(math.exp(val)) for n, val in zip(names, v)}

    def table_of(v: np.ndarray) -> dict[str, float]:
        return {**fixed, **fitted(v)}

    if iterations <= 0:  # no fit: the start table as it stands
        return {**fixed, **_with_unseen_families(fitted(x))}
    ridge = _ridge(names)

    def loss(v: np.ndarray) -> float:
        res = _residuals(pred, keys, table_of(v))
        return float(res @ res + ridge @ ((v - x0) ** 2))

    best = loss(x)
    lam = 1.0
    for it in range(iterations):
        prev = best
        r0 = _residuals(pred, keys, table_of(x))
        jac = np.zeros((len(r0), len(names)))
        for j in range(len(names)):
            xj = x.copy()
            xj[j] += _STEP_H
            jac[:, j] = (_residuals(pred, keys, table_of(xj)) - r0) / _STEP_H
        a = jac.T @ jac + np.diag(ridge)
        g = jac.T @ r0 + ridge * (x - x0)
        improved = False
        for _ in range(6):  # Levenberg-Marquardt damping
            step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-6), -g)
            cand = np.clip(x + step, x0 - _LOG_BOUNDS, x0 + _LOG_BOUNDS)
            lc = loss(cand)
            if lc < best - 1e-9:
                x, best, lam, improved = cand, lc, max(lam / 3, 1e-3), True
                break
            lam *= 4
        if progress:
            progress(f"  iteration {it + 1}: loss {best:.3f} ({len(keys)} points, {len(names)} knobs)")
        if not improved or prev - best < tol * prev:
            break
    return {**fixed, **_with_unseen_families(fitted(x))}


_FAMILY_KNOBS = ("mem.eng.", "comp.eng.", "step.eng.", "layer.eng.", "seq.eng.", "ttft.eng.", "admit.eng.", "pfl.eng.")


def _with_unseen_families(table: dict[str, float]) -> dict[str, float]:
    """An engine family no fitted point ran (TGI when its one source is held out) behaves like a typical
    fitted engine: each of its knobs is the geometric mean of that knob over the families fitted, not the
    uncalibrated default. Families the points informed keep their fitted values. Likewise an unseen
    mla-moe-early or mla-moe-late class takes the mla-moe layer factor."""
    out = dict(table)
    for prefix in _FAMILY_KNOBS:
        seen = [v for f in FAMILIES if (v := table.get(prefix + f)) is not None]
        if not seen:
            continue
        typical = math.exp(sum(math.log(v) for v in seen) / len(seen))
        for f in FAMILIES:
            out.setdefault(prefix + f, typical)
    # DeepSeek on SGLang before 0.4.3 (one source), or on the releases from 2025-H2: unseen, its layers cost
    # and compute what the other DeepSeek layers do
    for prefix in ("layer.arch.", "pfl.arch.", "comp.arch."):
        if prefix + "mla-moe" in table:
            for cls in RELEASE_CLASSES:
                out.setdefault(prefix + cls, table[prefix + "mla-moe"])
    return out


_FORKED: Predictor | None = None  # the predictor a forked fold worker inherits


_Task = tuple[str, list[str], int, Mapping[str, float] | None, Sequence[str], float]


def _fold(args: _Task) -> tuple[str, dict[str, float]]:
    src, train, iterations, start, only, tol = args
    assert _FORKED is not None
    return src, fit_table(_FORKED, train, iterations=iterations, start=start, only=only, tol=tol)


def loso(
    pred: Predictor,
    *,
    iterations: int = 6,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
    starts: Mapping[str, Mapping[str, float]] | None = None,
    only: Sequence[str] = (),
    tol: float = _TOL,
) -> dict[str, dict[str, float]]:
    """Leave-one-source-out: for each source, the table fitted on every other source's points, from
    `starts[source]` (else the defaults) and, with `only`, moving just those knobs (`fit_table`).
    `jobs` > 1 fits folds in that many forked processes (the results do not depend on it)."""
    global _FORKED
    keys = sorted(pred.settings)
    sources = sorted({pred.settings[k].source for k in keys})
    tasks: list[_Task] = [
        (src, [k for k in keys if pred.settings[k].source != src], iterations, (starts or {}).get(src), only, tol)
        for src in sources
    ]
    out: dict[str, dict[str, float]] = {}
    if jobs > 1:
        import multiprocessing

        _FORKED = pred
        try:
            with multiprocessing.get_context("fork").Pool(jobs) as pool:
                for src, table in pool.imap_unordered(_fold, tasks):
                    out[src] = table
                    if progress:
                        progress(f"fold {src}: done")
        finally:
            _FORKED = None
        return {src: out[src] for src in sources}
    for src, train, _, start, _, _ in tasks:
        if progress:
            progress(f"fold {src}: fitting on {len(train)} points")
        out[src] = fit_table(pred, train, iterations=iterations, start=start, only=only, progress=progress, tol=tol)
    return out


# --- summaries --------------------------------------------------------------------------------------
def median_abs_error(results: Iterable[PointResult], metric: str) -> tuple[float | None, int]:
    errs = [abs(e) for r in results if (e := r.error(metric)) is not None]
    return (statistics.median(errs) if errs else None), len(errs)


def fold_interval(
    results: Iterable[PointResult], metric: str, *, level: float = 0.9, draws: int = 2000, seed: int = 1
) -> tuple[float, float] | None:
    """How far the median |error| could move with another sample of sources: the central `level`
    interval of the median over `draws` resamples of the folds, with replacement, each drawn fold
    bringing all its points (a bootstrap over folds, the unit the held-out error generalises over;
    seeded, so the figure is reproducible). None without points."""
    by_fold: dict[str, list[float]] = {}
    for r in results:
        if (e := r.error(metric)) is not None:
            by_fold.setdefault(r.point.source.fold, []).append(abs(e))
    if not by_fold:
        return None
    folds = list(by_fold.values())
    rng = random.Random(seed)
    meds = sorted(statistics.median([v for f in rng.choices(folds, k=len(folds)) for v in f]) for _ in range(draws))
    tail = (1.0 - level) / 2.0
    return meds[int(tail * draws)], meds[min(draws - 1, int((1.0 - tail) * draws))]


def summarize(
    train: Sequence[PointResult], held_out: Sequence[PointResult], total: int, expressible: int
) -> dict[str, object]:
    """Median |error| by metric for train and held-out, and coverage (machine-readable); held out, also
    the 90% interval of that median over resampled folds (`fold_interval`)."""
    out: dict[str, object] = {
        "points": total,
        "expressible": expressible,
        "coverage": expressible / total if total else 0.0,
    }
    for name, rs in (("train", train), ("held_out", held_out)):
        out[name] = {
            m: {"median_abs_error": median_abs_error(rs, m)[0], "n": median_abs_error(rs, m)[1]} for m in METRICS
        }
    for m in METRICS:
        out["held_out"][m]["interval_90_over_folds"] = fold_interval(held_out, m)  # type: ignore[index]
    by_mode: dict[str, dict[str, dict[str, float | int | None]]] = {}
    for mode in sorted({r.point.mode for r in held_out}):
        rs = [r for r in held_out if r.point.mode == mode]
        by_mode[mode] = {
            m: {"median_abs_error": median_abs_error(rs, m)[0], "n": median_abs_error(rs, m)[1]} for m in METRICS
        }
    out["held_out_by_mode"] = by_mode
    return out


def by_source(train: Sequence[PointResult], held_out: Sequence[PointResult]) -> list[dict[str, object]]:
    """Per source document and metric (the rows of docs/plan.md's by-source table): points, the median
    |error| in the fit and held out, and the held-out median signed error (which way the model misses)."""
    rows: list[dict[str, object]] = []
    for src in sorted({r.point.source.id for r in held_out}):
        tr = [r for r in train if r.point.source.id == src]
        ho = [r for r in held_out if r.point.source.id == src]
        for m in METRICS:
            signed = [e for r in ho if (e := r.error(m)) is not None]
            if not signed:
                continue
            rows.append(
                {
                    "source": src,
                    "metric": m,
                    "n": len(signed),
                    "train": median_abs_error(tr, m)[0],
                    "held_out": median_abs_error(ho, m)[0],
                    "held_out_signed": statistics.median(signed),
                }
            )
    return rows


# A mode's own held-out median is published (plan's band for a what-if point of that mode) only over at
# least this many points; below it the band is the median over all modes.
MODE_BAND_MIN_POINTS = 20
_BAND_NAMES = {"tok_s": "output_tokens_per_s", "itl": "itl_ms", "ttft": "ttft_ms"}


def published_bands(summary: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """plan's uncertainty bands from a `summarize` result: the held-out median |error| of each metric
    (output_tokens_per_s, itl_ms, ttft_ms) over all points, and by workload mode (closed, rate, offline)
    where that mode has `MODE_BAND_MIN_POINTS` points or more."""
    ho = summary["held_out"]
    overall = {
        _BAND_NAMES[m]: float(ho[m]["median_abs_error"]) for m in METRICS if ho[m]["median_abs_error"] is not None
    }
    by_mode: dict[str, dict[str, float]] = {}
    for mode, stats in (summary.get("held_out_by_mode") or {}).items():
        band = {
            _BAND_NAMES[m]: float(st["median_abs_error"])
            for m, st in stats.items()
            if st["median_abs_error"] is not None and int(st["n"]) >= MODE_BAND_MIN_POINTS
        }
        if band:
            by_mode[mode] = band
    return overall, by_mode
