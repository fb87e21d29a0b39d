"""Click commands `report` and `compare`; the CLI registers them (`cli.add_command(...)`)."""

from __future__ import annotations

import string
from pathlib import Path

import click
from rich.console import Console

from servescope.errors import ConfigError, handle_errors

__all__ = ["compare_command", "report_command"]


@click.command("report")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="Report file. [default: DIR/report.html; with several DIRs, ./servescope-results/overlay/report.html]",
)
@click.option(
    "--interactivity-levels",
    "levels_text",
    metavar="LIST",
    help="Tokens/s per user at which the Pareto table reads the best throughput per GPU. [default: 20,50,100]",
)
@handle_errors
def report_command(dirs: tuple[str, ...], out: str | None, levels_text: str | None) -> None:
    """Re-render the HTML report of saved results (a run or a sweep directory).

    Several DIRs: each gets its own report, and one more report overlays them on shared axes.
    Charts are also written as charts/*.svg beside each report. Re-rendering the same results
    gives byte-identical files.
    """
    from servescope.report.html import write_overlay_report, write_report
    from servescope.results.interactivity import parse_levels
    from servescope.results.store import RESULTS_ROOT

    levels = parse_levels(levels_text)
    console = Console()
    if len(dirs) == 1:
        path = write_report(dirs[0], out, levels=levels)
        console.print(f"report: {path}", highlight=False)
        return
    for d in dirs:
        console.print(f"report: {write_report(d, levels=levels)}", highlight=False)
    path = write_overlay_report(list(dirs), out or Path(RESULTS_ROOT) / "overlay" / "report.html", levels=levels)
    console.print(f"overlay: {path}", highlight=False)


@click.command("compare")
@click.argument("sides", nargs=-1, required=True)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Directory for compare.html, compare.json and charts/. [default: ./servescope-results/compare-<A>-vs-<B>]",
)
@click.option(
    "--resamples",
    type=click.IntRange(100, 100_000),
    default=1000,
    show_default=True,
    help="Bootstrap replicates per side.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed (same seed, same intervals).")
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.95, show_default=True)
@click.option("--html/--no-html", default=True, show_default=True, help="Write compare.html.")
@click.option(
    "--interactivity-levels",
    "levels_text",
    metavar="LIST",
    help="Tokens/s per user at which the Pareto table reads the best throughput per GPU. [default: 20,50,100]",
)
@handle_errors
def compare_command(
    sides: tuple[str, ...],
    out: str | None,
    resamples: int,
    seed: int,
    confidence: float,
    html: bool,
    levels_text: str | None,
) -> None:
    """Compare results A B [C...]: each against A, ratio B/A with a bootstrap confidence interval.

    A side is a run directory, a sweep directory, or repeats of one configuration written as
    DIR1,DIR2,... (e.g. from --repeat): requests are resampled within each run, and repeats
    across runs. A difference whose interval contains 1.00 is reported as within noise.
    """
    from servescope.report.compare import (
        compare_sides,
        load_side,
        print_comparison,
        print_interactivity,
        write_compare_html,
        write_compare_json,
    )
    from servescope.results.interactivity import parse_levels
    from servescope.results.store import RESULTS_ROOT

    levels = parse_levels(levels_text)

    if len(sides) < 2:
        raise ConfigError("compare needs at least two result directories: servescope compare A B [C...]")
    if len(sides) > len(string.ascii_uppercase):
        raise ConfigError("compare takes at most 26 sides")
    console = Console()
    loaded = [load_side(spec, string.ascii_uppercase[i]) for i, spec in enumerate(sides)]
    for s, spec in zip(loaded, sides):
        console.print(f"{s.name}: {spec}", highlight=False)
    comparisons = compare_sides(loaded, resamples=resamples, seed=seed, confidence=confidence)
    print_comparison(comparisons, console, confidence)
    names = [Path(s.split(",")[0]).resolve().name for s in sides[:2]]
    out_dir = Path(out) if out else Path(RESULTS_ROOT) / f"compare-{names[0]}-vs-{names[1]}"
    out_dir.mkdir(parents=True, exist_ok=True)
    print_interactivity(loaded, levels, console)
    console.print(
        f"ratios: {write_compare_json(loaded, comparisons, out_dir / 'compare.json', confidence, levels)}",
        highlight=False,
    )
    if html:
        console.print(
            f"report: {write_compare_html(loaded, comparisons, out_dir, confidence, levels)}", highlight=False
        )
