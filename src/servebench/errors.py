"""The error tree. Errors before the clock starts stop the run (exit 2); errors during it are data."""

from __future__ import annotations

__all__ = ["ServebenchError", "ConfigError", "TargetUnavailable", "ProtocolError"]


class ServebenchError(Exception):
    """Base of every error servebench raises on purpose; the CLI prints it as one line, exit 2."""

    exit_code = 2


class ConfigError(ServebenchError):
    """Invalid flags, scenario file or flag combination."""


class TargetUnavailable(ServebenchError):
    """The target cannot be reached, or does not serve the requested model."""


class ProtocolError(ServebenchError):
    """The target speaks something other than the expected OpenAI-compatible wire format."""
