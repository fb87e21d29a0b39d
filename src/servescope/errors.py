"""The error tree, and the one place a command turns one of them into its message and exit code.

Errors before the clock starts stop the run (exit 2); errors during it are data (records).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import NoReturn, ParamSpec, TypeVar

__all__ = ["ServescopeError", "ConfigError", "TargetUnavailable", "ProtocolError", "fail", "handle_errors"]

P = ParamSpec("P")
R = TypeVar("R")


class ServescopeError(Exception):
    """Base of every error servescope raises on purpose; the CLI prints it as one line, exit 2."""

    exit_code = 2


class ConfigError(ServescopeError):
    """Invalid flags, scenario file or flag combination."""


class TargetUnavailable(ServescopeError):
    """The target cannot be reached, or does not serve the requested model."""


class ProtocolError(ServescopeError):
    """The target speaks something other than the expected OpenAI-compatible wire format."""


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `servescope: error: <message>` on stderr and exit with `code` (every command's one printer)."""
    from rich.console import Console  # on the way out only: importing errors stays free
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]servescope: error:[/bold red] {escape(message)}", highlight=False)
    sys.exit(code)


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a click command: a `ServescopeError` it raises is printed by `fail`, with its exit code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except ServescopeError as e:
            fail(str(e), e.exit_code)

    return wrapper
