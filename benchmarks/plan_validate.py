"""Validation of the what-if model against the published measurement corpus (run by hand; CI runs the
regression test in tests/unit/test_validate.py):

    .venv/bin/python benchmarks/plan_validate.py            # table + summary from the committed calibration
    .venv/bin/python benchmarks/plan_validate.py --refit    # refit all knobs and the held-out folds (minutes)
    .venv/bin/python benchmarks/plan_validate.py --refit --only ttft. admit. pfl. --iterations 3
                      # refit those knobs only, each table (all sources, every fold) from its committed values
    .venv/bin/python benchmarks/plan_validate.py --refit --warm --iterations 2
                      # refit every knob, each table from its committed values (the committed calibration)
    .venv/bin/python benchmarks/plan_validate.py --json out.json --quiet
    .venv/bin/python benchmarks/plan_validate.py --quiet --by-source   # docs/plan.md's by-source table

Every corpus point is predicted twice: with the knobs fitted on all sources ("train") and with the
knobs fitted with its own source left out ("held-out", leave-one-source-out). Prints predicted vs
measured per metric for every point, median |error| by metric for both, and coverage.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from importlib import resources
from pathlib import Path

from servescope.deploy.calibration import Calibration, corpus_digest, dump_calibration, load_calibration
from servescope.plan import intervals
from servescope.plan.corpus import corpus_files, load_corpus
from servescope.plan.knobfit import (
    by_source,
    fit_table,
    knob_sources,
    loso,
    median_abs_error,
    published_bands,
    summarize,
)
from servescope.plan.validate import METRICS, Predictor, evaluate

BOUNDS = {"tok_s": 0.20, "itl": 0.25, "ttft": 0.25}
_NAMES = {"tok_s": "output tok/s", "itl": "ITL", "ttft": "TTFT"}


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}" if v >= 10 else f"{v:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--refit", action="store_true", help="refit the knobs (all sources + one fold per source)")
    ap.add_argument("--write", default=None, help="where --refit writes the calibration [default: the package]")
    ap.add_argument("--json", default=None, help="write the per-point results and summary as JSON")
    ap.add_argument("--quiet", action="store_true", help="summary only")
    ap.add_argument("--jobs", type=int, default=2, help="processes fitting the held-out folds [2]")
    ap.add_argument(
        "--only",
        nargs="+",
        default=[],
        metavar="PREFIX",
        help="with --refit: move only the knobs with these name prefixes, each table (all sources, "
        "every fold) starting from the committed calibration's",
    )
    ap.add_argument(
        "--warm",
        action="store_true",
        help="with --refit: move every knob, each table starting from the committed calibration's "
        "(--only with the empty prefix)",
    )
    ap.add_argument("--iterations", type=int, default=6, help="Gauss-Newton iterations per fit [6]")
    ap.add_argument(
        "--tol",
        type=float,
        default=0.01,
        help="with --refit: a fit stops after an iteration that improves its loss by less than this share of it [0.01]",
    )
    ap.add_argument(
        "--by-source",
        action="store_true",
        help="print the median errors by source document as a markdown table (docs/plan.md's)",
    )
    ap.add_argument(
        "--publish",
        action="store_true",
        help="write the held-out figures into the calibration (plan's uncertainty band; --refit does)",
    )
    ap.add_argument(
        "--coverage-table",
        action="store_true",
        help="print the intervals' held-out coverage by kind of load, reach and class as a markdown table "
        "(docs/plan.md's)",
    )
    ap.add_argument(
        "--coverage",
        action="store_true",
        help="with --quiet: still print the intervals' coverage by kind of load and class",
    )
    args = ap.parse_args(argv)
    if (args.only or args.warm) and not args.refit:
        ap.error("--only and --warm choose how a refit starts and what it moves: give them with --refit")
    if args.only and args.warm:
        ap.error("--warm moves every knob and --only some of them: give one")
    if args.warm:
        args.only = [""]  # every knob name starts with the empty prefix
    t0 = time.perf_counter()
    points = load_corpus()
    digest = corpus_digest(corpus_files())
    pred = Predictor(points)
    if args.refit:
        log = lambda s: print(s, file=sys.stderr, flush=True)
        base = load_calibration(args.write) if args.only else None
        log("fitting on all sources" + (f", only {' '.join(args.only)}" if args.only else ""))
        full = fit_table(
            pred,
            sorted(pred.settings),
            iterations=args.iterations,
            progress=log,
            start=base.knobs if base else None,
            only=args.only,
            tol=args.tol,
        )
        folds = loso(
            pred,
            iterations=args.iterations,
            progress=log,
            jobs=args.jobs,
            # a fold the committed calibration lacks (a new source) starts from the table on every source
            starts={f: base.held_out.get(f, base.knobs) for f in {st.source for st in pred.settings.values()}}
            if base
            else None,
            only=args.only,
            tol=args.tol,
        )
        cal = Calibration(
            knobs=full,
            held_out=folds,
            corpus_digest=digest,
            notes=f"{len(pred.settings)} expressible points of {len(points)}"
            + (
                "; no fit iteration (--iterations 0): the committed tables carried over, a new source's fold "
                "the table on every other source, which never saw it"
                if args.iterations == 0
                else ""
            ),
        )
        out = Path(args.write) if args.write else Path(str(resources.files("servescope.deploy") / "calibration.yaml"))
        out.write_text(dump_calibration(cal), encoding="utf-8")
        log(f"wrote {out}")
    else:
        cal = load_calibration(args.write)
        if cal.corpus_digest and cal.corpus_digest != digest:
            print(
                f"warning: calibration was fitted to corpus {cal.corpus_digest}, this corpus is {digest}; "
                "run with --refit",
                file=sys.stderr,
            )
    train = evaluate(pred, cal.knobs)
    held = []
    for r in train:
        table = cal.held_out.get(r.point.source.fold)
        held.append(pred.result(r.point, table) if table is not None and r.predicted else r)
    summary = summarize(
        [r for r in train if r.predicted],
        [r for r in held if r.predicted],
        total=len(points),
        expressible=len(pred.settings),
    )
    if not args.quiet:
        print(f"{'source / point':70} {'setting':58} metric  measured (stat)       train  err   held-out  err")
        for tr, ho in zip(train, held):
            s = pred.settings.get(tr.point.key)
            if s is None:
                print(f"{tr.point.key[:70]:70} not expressible: {pred.unexpressible.get(tr.point.key, '')}")
                continue
            for m in METRICS:
                if m not in tr.measured:
                    continue
                stat, val = tr.measured[m]
                e_tr, e_ho = tr.error(m), ho.error(m)
                print(
                    f"{tr.point.key[:70]:70} {s.label[:58]:58} {m:6} {_fmt(val):>9} ({stat[:14]:14}) "
                    f"{_fmt(tr.predicted[m]):>9} {e_tr:+5.0%} {_fmt(ho.predicted[m]):>9} {e_ho:+5.0%}"
                )
    if args.by_source:
        print(
            "\n| source | metric | n | train median abs error | held-out median abs error | held-out median signed |"
            "\n|---|---|---:|---:|---:|---:|"
        )
        for r in by_source(train, held):
            print(
                f"| {r['source']} | {r['metric']} | {r['n']} | {r['train']:.0%} | {r['held_out']:.0%} "
                f"| {r['held_out_signed']:+.0%} |"
            )
    ok = True
    single = {n: v[0] for n, v in knob_sources(pred).items() if len(v) == 1}
    print(
        "\nknobs informed by one source only (when it is held out: an engine family's knob at the geometric "
        "mean of the fitted families', any other at its prior): "
        + "; ".join(f"{n} ({src})" for n, src in single.items())
    )
    print(
        f"\ncoverage: {summary['expressible']} of {summary['points']} points expressible "
        f"({summary['coverage']:.1%}; bound >= 90%)"
    )
    ok &= float(summary["coverage"]) >= 0.90  # type: ignore[arg-type]
    for m in METRICS:
        tr = summary["train"][m]  # type: ignore[index]
        ho = summary["held_out"][m]  # type: ignore[index]
        line = (
            f"{_NAMES[m]:13} median |error|: train {tr['median_abs_error']:.1%} (n={tr['n']}), "
            f"held-out by source {ho['median_abs_error']:.1%} (n={ho['n']}; bound {BOUNDS[m]:.0%})"
        )
        ok &= ho["median_abs_error"] <= BOUNDS[m]
        print(line)
        if ho.get("interval_90_over_folds"):
            lo, hi = ho["interval_90_over_folds"]
            print(f"{'':13} held out, 90% of medians over resampled folds: {lo:.1%}-{hi:.1%}")
    for mode, stats in summary["held_out_by_mode"].items():  # type: ignore[attr-defined]
        print(
            f"{'':13} held out, {mode} points: "
            + ", ".join(
                f"{_NAMES[m]} {st['median_abs_error']:.1%} (n={st['n']})"
                for m, st in stats.items()
                if st["median_abs_error"] is not None
            )
        )
    ok &= _early_deepseek(held, pred)
    residuals = intervals.residuals_from(held, pred.settings)
    covered = intervals.honest_coverage(residuals)
    ok &= _print_coverage(covered, by_class=not args.quiet or args.coverage)
    if args.coverage_table:
        _coverage_markdown(covered)
    print(f"({time.perf_counter() - t0:.1f} s) {'within the bounds' if ok else 'OUTSIDE the bounds'}")
    if args.refit or args.publish:
        band, by_mode = published_bands(summary)
        cal = dataclasses.replace(
            cal,
            heldout_median_abs_error=band,
            heldout_by_mode=by_mode,
            intervals={
                **intervals.published(residuals, covered),
                "engine_releases": intervals.engine_releases(pred.settings.values()),
            },
            heldout_source=(
                f"held-out median |error| by source against {summary['expressible']} published measurements "
                f"(leave-one-source-out, benchmarks/plan_validate.py): {band['output_tokens_per_s']:.0%} output tok/s, "
                f"{band['itl_ms']:.0%} ITL, {band['ttft_ms']:.0%} TTFT"
            ),
        )
        out = Path(args.write) if args.write else Path(str(resources.files("servescope.deploy") / "calibration.yaml"))
        out.write_text(dump_calibration(cal), encoding="utf-8")
        print(f"wrote the held-out figures to {out}", file=sys.stderr)
    if args.json:
        rows = [
            {
                "key": tr.point.key,
                "measured": {m: list(v) for m, v in tr.measured.items()},
                "train": tr.predicted,
                "held_out": ho.predicted,
            }
            for tr, ho in zip(train, held)
        ]
        Path(args.json).write_text(json.dumps({"summary": summary, "points": rows}, indent=1), encoding="utf-8")
    return 0 if ok else 1


def _early_deepseek(held: list, pred: Predictor) -> bool:
    """Held-out median |error| on the DeepSeek-V3/R1 points of sources dated before 2025-07 (the early-2025
    deployments), against the same bounds."""
    pts = [
        r
        for r in held
        if r.predicted and (s := pred.settings.get(r.point.key)) and s.arch.startswith("mla-moe") and s.date < "2025-07"
    ]
    ok, parts = True, []
    for m in METRICS:
        med, n = median_abs_error(pts, m)
        if med is None:
            continue
        ok &= med <= BOUNDS[m]
        parts.append(f"{_NAMES[m]} {med:.1%} (n={n}; bound {BOUNDS[m]:.0%})")
    srcs = len({r.point.source.fold for r in pts})
    print(f"early-2025 DeepSeek points ({srcs} sources), held out: " + ", ".join(parts))
    return ok


def _print_coverage(covered: list, *, by_class: bool) -> bool:
    """The 80% and 95% intervals' coverage on held-out sources (plan/intervals.py `honest_coverage`), per
    metric over all points (bounds: 75-85% and >= 90%), then by kind of load, reach and class."""
    ok = True
    rows = intervals.coverage_rows(covered)
    print("\nintervals on held-out sources (each source's points against intervals its residuals did not set):")
    print(f"{'metric':13} {'by':12} {'class':26} {'n':>5} {'src':>4} {'80% in':>10} {'95% in':>10} {'80% hi/lo':>9}")
    for r in rows:
        if r["group"] != "all" and not by_class:
            continue
        if r["group"] == "all":
            ok &= 0.75 <= r["p80"] <= 0.85 and r["p95"] >= 0.90
        print(
            f"{_NAMES[r['metric']]:13} {r['group']:12} {r['class'][:26]:26} {r['n']:5} {r['sources']:4} "
            f"{r['p80']:10.0%} {r['p95']:10.0%} {r['width80']:8.2f}x"
        )
    return ok


def _coverage_markdown(covered: list) -> None:
    """One row per kind of load, reach and class: per metric n and the 80% / 95% intervals' coverage."""
    rows = intervals.coverage_rows(covered)
    cells: dict[tuple[str, str], dict[str, dict]] = {}
    for r in rows:
        cells.setdefault((r["group"], r["class"]), {})[r["metric"]] = r
    print("\n| by | class | output tok/s: n, 80%, 95% | ITL | TTFT |\n|---|---|---:|---:|---:|")
    for (g, cls), per in cells.items():
        parts = [
            f"{per[m]['n']}: {per[m]['p80']:.0%} / {per[m]['p95']:.0%}" if m in per else "-"
            for m in ("tok_s", "itl", "ttft")
        ]
        print(f"| {g} | {cls or 'all'} | " + " | ".join(parts) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
