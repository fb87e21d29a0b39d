"""docs/architecture.md stays true to the code: every module it names exists, every name it gives
in code spans (`run.bench.run_against`, `results/parquet.py`) resolves, and its module map lists every
module of the package, so a module added, moved or removed without the map fails here."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "src" / "servescope"
#: servescope's top-level units: a code span starting with one of these names servescope code.
UNITS = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()) + [
    p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"
]


def module_map(text: str) -> dict[str, set[str]]:
    """The fenced block under '## The tree' that lists each package's modules: package -> the module
    paths it names (relative to src/servescope, e.g. 'sim/memory/fit.py')."""
    block = text.split("Inside each package, the modules:", 1)[1].split("```", 2)[1]
    named: dict[str, set[str]] = {}
    package = ""
    for line in block.splitlines():
        head = re.match(r"^([a-z_]+)/\s", line)
        if head:
            package = head.group(1)
        for token in re.findall(r"(?<![\w./])((?:[a-z_]+/)*[a-z_][a-z0-9_]*\.py)\b", line):
            named.setdefault(package, set()).add(f"{package}/{token}")
    return named


def code_modules() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in PACKAGE.rglob("*.py"):
        rel = p.relative_to(PACKAGE)
        if len(rel.parts) < 2 or p.name in ("__init__.py", "__main__.py"):
            continue
        out.setdefault(rel.parts[0], set()).add(rel.as_posix())
    return out


def code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def resolve(dotted: str) -> bool:
    """servescope.<dotted> imports as a module, or as a module's attribute chain."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module("servescope." + ".".join(parts[:k]))
        except ImportError:
            continue
        for name in parts[k:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_the_module_map_lists_exactly_the_modules_in_the_tree() -> None:
    named, actual = module_map(DOC.read_text("utf-8")), code_modules()
    missing = sorted(m for pkg in actual for m in actual[pkg] - named.get(pkg, set()))
    extra = sorted(m for pkg in named for m in named[pkg] - actual.get(pkg, set()))
    assert (missing, extra) == ([], [])


def test_every_module_path_the_doc_names_exists() -> None:
    paths = {
        m
        for span in code_spans(DOC.read_text("utf-8"))
        for m in re.findall(r"(?<![\w./])((?:[a-z_]+/)+[a-z_][a-z0-9_]*\.py)", span)
        if m.split("/")[0] in UNITS
    }
    assert paths, "the doc names no module paths: the pattern is wrong"
    assert sorted(p for p in paths if not (PACKAGE / p).is_file()) == []


def test_every_dotted_name_the_doc_gives_resolves() -> None:
    names = set()
    for span in code_spans(DOC.read_text("utf-8")):
        for m in re.findall(r"(?<![\w./])([a-z_]+(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?![\w/])", span):
            if m.split(".")[0] in UNITS and not m.endswith((".py", ".yaml", ".json", ".md")):
                names.add(m)
    assert len(names) > 10, "the doc names few dotted names: the pattern is wrong"
    assert sorted(n for n in names if not resolve(n)) == []


@pytest.mark.parametrize("planted", ["run/nowhere.py", "results.store.no_such_function"])
def test_a_name_that_does_not_exist_is_caught(planted: str) -> None:
    if planted.endswith(".py"):
        assert not (PACKAGE / planted).is_file()
    else:
        assert not resolve(planted)
        assert resolve("results.store.load_run")
