"""servebench: benchmark and capacity-plan LLM inference serving."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
