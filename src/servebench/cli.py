"""The `servebench` command line: parse, build a config, call into the package. Nothing else.

Flag names follow `vllm bench serve` where the concept is the same (`--num-prompts` is accepted as
an alias of `--num-requests`, `--request-rate` of `--rate`, `--max-concurrency` of `--concurrency`,
`--random-input-len`/`--random-output-len`/`--random-range-ratio` of the length flags).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from servebench import __version__
from servebench.run.options import config_from_options, handle_errors, run_options

__all__ = ["main", "cli"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="servebench")
def cli() -> None:
    """Benchmark and capacity-plan LLM inference serving: plan, load, measure, report, compare."""


@cli.command()
@run_options
@click.option("--out", type=click.Path(file_okay=False), help="Result directory. [default: ./servebench-results/<time>-<slug>/]")
@handle_errors
def run(**options: Any) -> None:
    """One benchmark: load a target, measure, write a result directory, print a summary.

    With no --url it starts the built-in emulator on a free loopback port and benchmarks it.
    """
    from servebench.run.bench import run_benchmark_sync  # noqa: PLC0415 - keep --help fast

    cfg = config_from_options(options)
    outcome = run_benchmark_sync(cfg)
    sys.exit(outcome.exit_code)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def emulate(args: tuple[str, ...]) -> None:
    """Start the built-in emulated OpenAI-compatible server (see --help for its flags).

    Prints `READY http://HOST:PORT` once listening; runs until Ctrl-C.
    """
    from servebench.emulator.server import main as emulator_main  # noqa: PLC0415

    sys.exit(emulator_main(list(args)))


def _register() -> None:
    from servebench.plan.command import plan_command  # noqa: PLC0415
    from servebench.report.commands import compare_command, report_command  # noqa: PLC0415
    from servebench.sweep.command import sweep_command  # noqa: PLC0415

    cli.add_command(report_command)
    cli.add_command(compare_command)
    cli.add_command(plan_command)
    cli.add_command(sweep_command)


_register()


def main() -> None:
    cli()


if __name__ == "__main__":  # pragma: no cover
    main()
