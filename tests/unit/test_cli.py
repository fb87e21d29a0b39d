"""The command line: lazy start (a command's module loads only when it runs), the listing of
`servescope --help`, and the one error printer every command uses."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from servescope.cli import LAZY_COMMANDS, cli
from servescope.errors import ConfigError, handle_errors


def test_importing_the_cli_loads_no_command() -> None:
    code = (
        "import sys, servescope.cli; heavy = ('servescope.run', 'servescope.sweep', 'servescope.plan', "
        "'servescope.report', 'servescope.sim', 'numpy', 'aiohttp', 'rich'); "
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_help_lists_every_command_once() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "servescope.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    listed = [line.split()[0] for line in out.split("Commands:")[1].splitlines() if line.strip()]
    assert listed == sorted(["compare", "emulate", "export", "plan", "report", "run", "sweep"])


@pytest.mark.parametrize("name", sorted(LAZY_COMMANDS))
def test_one_line_help_kept_in_cli_matches_the_command(name: str) -> None:
    ctx = click.Context(cli)
    command = cli.get_command(ctx, name)  # loads the module
    assert command is not None and command.name == name
    for limit in (30, 45, 80, 200):
        kept = click.Command(name, help=LAZY_COMMANDS[name][1]).get_short_help_str(limit)
        assert kept == command.get_short_help_str(limit), (name, limit)


def test_the_listing_is_the_same_before_and_after_loading() -> None:
    before = CliRunner().invoke(cli, ["--help"]).output
    for name in LAZY_COMMANDS:
        cli.get_command(click.Context(cli), name)
    assert CliRunner().invoke(cli, ["--help"]).output == before


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["compare", "only-one"], "at least two"),
        (["plan", "--model", "nope"], "unknown model"),
        (["run", "--url", "http://127.0.0.1:9", "--num-requests", "1", "--quiet"], "cannot reach"),
        (["sweep", "--url", "http://127.0.0.1:9", "--concurrency", "1,x"], ""),
    ],
)
def test_every_command_prints_errors_the_same_way(args: list[str], words: str) -> None:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2, res.output
    assert "servescope: error: " in res.output and words in res.output
    assert "Traceback" not in res.output


def test_the_message_is_printed_as_written() -> None:
    @click.command()
    @handle_errors
    def boom() -> None:
        raise ConfigError("bad value [bold]x[/bold] in [section]")

    res = CliRunner().invoke(boom, [])
    assert res.exit_code == 2
    assert res.output.strip() == "servescope: error: bad value [bold]x[/bold] in [section]"
