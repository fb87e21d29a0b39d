"""The `servescope` command line: parse, build a config, call into the package. Nothing else.

Flag names follow `vllm bench serve` where the concept is the same (`--num-prompts` is accepted as
an alias of `--num-requests`, `--request-rate` of `--rate`, `--max-concurrency` of `--concurrency`,
`--random-input-len`/`--random-output-len`/`--random-range-ratio` of the length flags).

Start-up is lazy: each command lives in its own module (`LAZY_COMMANDS`), imported only when that
command runs or its own help is shown; `servescope --help` lists them from the one-line help kept
here (tests/unit/test_cli_lazy.py checks that it matches each command's docstring).
"""

from __future__ import annotations

import importlib
import sys

import click

from servescope import __version__

__all__ = ["LAZY_COMMANDS", "LazyGroup", "cli", "main"]

# name -> (module:attribute of the click command, its one-line help for `servescope --help`)
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "compare": (
        "servescope.report.commands:compare_command",
        "Compare results A B [C...]: each against A, ratio B/A with a bootstrap confidence interval.",
    ),
    "export": (
        "servescope.results.export:export_command",
        "Write a run's per-request records as CSV, Parquet or JSON lines for other tools.",
    ),
    "plan": (
        "servescope.plan.command:plan_command",
        "Memory fit, KV capacity, launch recipes and what-if performance of a model on GPUs.",
    ),
    "report": (
        "servescope.report.commands:report_command",
        "Re-render the HTML report of saved results (a run or a sweep directory).",
    ),
    "run": (
        "servescope.run.command:run_command",
        "One benchmark: load a target, measure, write a result directory, print a summary.",
    ),
    "sweep": (
        "servescope.sweep.command:sweep_command",
        "A series of runs over concurrency, request rate and lengths into one directory, with SLO checks, "
        "a capacity search (--find-max), saturation diagnosis and $ per 1M tokens.",
    ),
}


class LazyGroup(click.Group):
    """A group whose commands in `LAZY_COMMANDS` are imported on first use, not at start-up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY_COMMANDS:
            module, _, attr = LAZY_COMMANDS[cmd_name][0].partition(":")
            command = getattr(importlib.import_module(module), attr)
            if not isinstance(command, click.Command):
                raise TypeError(f"{module}:{attr} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of `servescope --help`, without importing a lazy command's module."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            loaded = self.commands.get(name)
            if loaded is not None:
                if loaded.hidden:
                    continue
                text = loaded.get_short_help_str(limit)
            else:
                text = click.Command(name, help=LAZY_COMMANDS[name][1]).get_short_help_str(limit)
            rows.append((name, text))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="servescope")
def cli() -> None:
    """Benchmark and capacity-plan LLM inference serving: plan, load, measure, report, compare."""


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def emulate(args: tuple[str, ...]) -> None:
    """Start the built-in emulated OpenAI-compatible server (see --help for its flags).

    Prints `READY http://HOST:PORT` once listening; runs until Ctrl-C.
    """
    from servescope.emulator.server import main as emulator_main

    sys.exit(emulator_main(list(args)))


def main() -> None:
    cli()


if __name__ == "__main__":  # pragma: no cover
    main()
