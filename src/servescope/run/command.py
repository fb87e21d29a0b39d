"""The click command `servescope run`: flags -> RunConfig -> one benchmark. The CLI loads this module
only when `run` is invoked or its help is asked for (cli.py's lazy command table).

`vllm bench serve` and SGLang `bench_serving` command lines run here unchanged: their flags are
defined, mapped and refused in run/compat.py; their result files are written by results/foreign.py.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from servescope.errors import handle_errors
from servescope.run.compat import CompatCommand, compat_options, resolve
from servescope.run.options import config_from_options, run_options

__all__ = ["run_command"]


@click.command("run", cls=CompatCommand)
@run_options
@click.option(
    "--out", type=click.Path(file_okay=False), help="Result directory. [default: ./servescope-results/<time>-<slug>/]"
)
@compat_options
@handle_errors
def run_command(**options: Any) -> None:
    """One benchmark: load a target, measure, write a result directory, print a summary.

    With no --url it starts the built-in emulator on a free loopback port and benchmarks it.
    """
    from servescope.run.bench import run_benchmark_sync  # the run's machinery: after flags are checked

    foreign = resolve(options, click.get_current_context().meta.get("servescope.compat.used"))
    if foreign is not None and foreign.path is not None:
        from servescope.run.compat import prepare_foreign

        prepare_foreign(options, foreign)
    cfg = config_from_options(options)
    if cfg.serve:
        from servescope.sweep.serve import run_one_served  # --serve: start the server too

        sys.exit(run_one_served(cfg, run_benchmark_sync))
    outcome = run_benchmark_sync(cfg)
    if foreign is not None and foreign.path is not None:
        from servescope.run.compat import write_foreign

        write_foreign(foreign, outcome.out_dir)
    sys.exit(outcome.exit_code)
