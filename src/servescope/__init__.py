"""servescope: benchmark and capacity-plan LLM inference serving."""

from __future__ import annotations

__all__ = ["__version__"]

#: The one place the version is written (pyproject.toml reads it: `[tool.setuptools.dynamic]`).
__version__ = "0.2.0"
