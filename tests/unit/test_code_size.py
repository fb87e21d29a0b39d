"""Size limits a reader can hold in their head: no module in src/ over 500 lines, and no function over
80 lines in the orchestrating packages (run/, plan/, sweep/), where a long function is a sequence of
steps that wants names. Counted on the formatted source (ruff format), docstrings, comments and
decorators included, as a reader meets them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "servescope"
MODULE_LINES = 500
FUNCTION_LINES = 80
SHORT_FUNCTION_PACKAGES = ("run", "plan", "sweep")


def long_modules(paths: list[Path], root: Path, limit: int = MODULE_LINES) -> list[str]:
    """'path: N lines' for each module over `limit` lines."""
    out = []
    for p in paths:
        n = len(p.read_text("utf-8").splitlines())
        if n > limit:
            out.append(f"{p.relative_to(root)}: {n} lines (limit {limit})")
    return out


def long_functions(path: Path, root: Path, limit: int = FUNCTION_LINES) -> list[str]:
    """'path:line name: N lines' for each function (nested ones too) over `limit` lines."""
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            n = (node.end_lineno or node.lineno) - start + 1
            if n > limit:
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {n} lines (limit {limit})")
    return out


def test_no_module_is_over_the_line_limit() -> None:
    assert long_modules(sorted(PACKAGE.rglob("*.py")), SRC) == []


@pytest.mark.parametrize("package", SHORT_FUNCTION_PACKAGES)
def test_no_function_is_over_the_line_limit_in_the_orchestrators(package: str) -> None:
    found = [f for p in sorted((PACKAGE / package).rglob("*.py")) for f in long_functions(p, SRC)]
    assert found == []


def test_the_counters_catch_a_line_over_and_pass_at_the_limit(tmp_path: Path) -> None:
    over, at = tmp_path / "over.py", tmp_path / "at.py"
    over.write_text("x = 1\n" * (MODULE_LINES + 1))
    at.write_text("x = 1\n" * MODULE_LINES)
    assert long_modules([over, at], tmp_path) == [f"over.py: {MODULE_LINES + 1} lines (limit {MODULE_LINES})"]

    body = "    y = 1\n" * (FUNCTION_LINES - 1)
    decorated = tmp_path / "decorated.py"  # decorator + def + body: one line over
    decorated.write_text("import functools\n\n\n@functools.cache\ndef f():\n" + body)
    plain = tmp_path / "plain.py"  # def + body: at the limit
    plain.write_text("def f():\n" + body)
    assert long_functions(decorated, tmp_path) == [f"decorated.py:5 f: {FUNCTION_LINES + 1} lines (limit 80)"]
    assert long_functions(plain, tmp_path) == []
