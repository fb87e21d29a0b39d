"""The import rules of docs/architecture.md, checked on the source tree (every import, top level or
inside a function). Each failure names the file, the line, the import and the rule it breaks.

The rules:
- nothing imports `servescope.cli` (the command line sits on top of everything);
- the pure cores import no I/O or network module, no I/O part of servescope, and call no `open`,
  `print` or `input`, nor a path's read/write methods;
- `sim/` (the performance model) imports neither the emulator, the planner, the loaders in `deploy/`
  nor anything that runs a benchmark: they all sit on top of it;
- `client/` (the hot path) imports no aiohttp and nothing above it (run orchestration, reports, sweeps,
  the planner, the emulator, the target's probe);
- the emulator is a server shell around `sim/`: it imports nothing of the benchmark client's side;
- `results/` (what a run leaves) imports nothing that produces load or renders a report;
- only `run/ray_run.py` imports Ray (an optional extra: `--ray`); `client/remote.py` hosts its actors
  without knowing Ray.
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# The pure cores: no I/O, no clock-driven loop, no network. Prefixes of module names.
PURE = (
    "servescope.sim",
    "servescope.results.records",
    "servescope.results.metrics",
    "servescope.results.slo",
    "servescope.results.cost",
    "servescope.results.repeats",
    "servescope.results.schema",
    "servescope.results.selfcheck",
    "servescope.results.precision",
    "servescope.results.interactivity",
    "servescope.results.energy",
    "servescope.results.colsummary",
    "servescope.results.streaming",
    "servescope.results.perrequest",
    "servescope.results.trust",
    "servescope.results.costschema",
    "servescope.results.engineschema",
    "servescope.results.engineview",
    "servescope.results.bootstrap",
    "servescope.client.split",
    "servescope.client.sse",
    "servescope.client.fastpath",
    "servescope.client.typedapis",
    "servescope.workload.schedule",
    "servescope.workload.agentplan",
    "servescope.results.sessions",
    "servescope.sweep.points",
    "servescope.sweep.table",
    "servescope.plan.recipes",
    "servescope.plan.intervals",
    "servescope.urls",
)
# Modules a pure core may not import (standard library and third-party I/O, and servescope's I/O parts).
IO_MODULES = (
    "asyncio",
    "socket",
    "ssl",
    "selectors",
    "subprocess",
    "shutil",
    "tempfile",
    "io",
    "os",
    "pathlib",
    "importlib.resources",
    "http",
    "urllib.request",
    "sqlite3",
    "threading",
    "multiprocessing",
    "aiohttp",
    "uvloop",
    "pyarrow",
    "rich.console",
    "rich.live",
    "click",
    "servescope.client.conn",
    "servescope.client.transport",
    "servescope.client.pool",
    "servescope.client.shard",
    "servescope.target",
    "servescope.results.store",
    "servescope.run",
    "servescope.emulator",
    "servescope.deploy",
    "servescope.report",
    "servescope.sweep.command",
    "servescope.plan.command",
)
IO_CALLS = ("open", "print", "input")
IO_METHODS = ("read_text", "write_text", "read_bytes", "write_bytes", "open")


@dataclass(frozen=True)
class Rule:
    """Modules under `where` may not import anything under `forbidden` (prefix match on dotted names)."""

    where: tuple[str, ...]
    forbidden: tuple[str, ...]
    why: str
    unless: tuple[str, ...] = ()  # importers exempt from this rule


RULES = (
    Rule(("servescope",), ("servescope.cli",), "nothing imports the command line", unless=("servescope.cli",)),
    Rule(PURE, IO_MODULES, "a pure core imports no I/O or network module"),
    Rule(
        ("servescope.sim",),
        (
            "servescope.emulator",
            "servescope.plan",
            "servescope.deploy",
            "servescope.run",
            "servescope.client",
            "servescope.target",
            "servescope.sweep",
            "servescope.report",
        ),
        "sim/ is the pure model: the emulator, the planner and the loaders sit on top of it",
    ),
    Rule(
        ("servescope.client",),
        (
            "aiohttp",
            "servescope.run",
            "servescope.report",
            "servescope.sweep",
            "servescope.plan",
            "servescope.emulator",
            "servescope.target",
            "servescope.deploy",
        ),
        "client/ is the hot path: no aiohttp, nothing above it",
    ),
    Rule(
        ("servescope.emulator",),
        (
            "servescope.client",
            "servescope.target",
            "servescope.run",
            "servescope.report",
            "servescope.sweep",
            "servescope.plan",
        ),
        "the emulator is a server around sim/, independent of the benchmark's side",
    ),
    Rule(
        ("servescope.results",),
        (
            "servescope.client",
            "servescope.run",
            "servescope.emulator",
            "servescope.report",
            "servescope.sweep",
            "servescope.plan",
        ),
        "results/ holds what a run leaves: it neither produces load nor renders reports",
    ),
    Rule(
        ("servescope",),
        ("ray",),
        "Ray is an optional extra: only run/ray_run.py imports it",
        unless=("servescope.run.ray_run",),
    ),
)


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.AST, module: str, is_pkg: bool) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in the file, relative imports resolved; `from a import b`
    yields both `a` and `a.b` (b may be a submodule)."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join([*pkg, base] if base else pkg)
            out.append((node.lineno, base))
            out += [(node.lineno, f"{base}.{a.name}") for a in node.names if a.name != "*"]
    return out


def _io_calls(tree: ast.AST) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in IO_CALLS:
                out.append((node.lineno, f"{f.id}()"))
            elif (
                isinstance(f, ast.Attribute)
                and f.attr in IO_METHODS
                and not (isinstance(f.value, ast.Name) and f.value.id in ("gzip", "lzma", "bz2"))
            ):
                out.append((node.lineno, f".{f.attr}()"))
    return out


def violations(root: Path) -> list[str]:
    """Every broken rule under `root` (a directory holding the `servescope` package)."""
    found: list[str] = []
    for path in sorted((root / "servescope").rglob("*.py")):
        module = _module_name(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = path.relative_to(root)
        imports = _imports(tree, module, path.name == "__init__.py")
        for rule in RULES:
            if not _under(module, rule.where) or _under(module, rule.unless):
                continue
            seen: set[str] = set()
            for line, name in imports:
                if _under(name, rule.forbidden) and not _under(name, (module,)) and name not in seen:
                    seen.add(name)
                    found.append(f"{rel}:{line} imports {name}: {rule.why}")
        if _under(module, PURE):
            found += [f"{rel}:{line} calls {call}: a pure core does no I/O" for line, call in _io_calls(tree)]
    return found


def test_the_tree_keeps_the_import_rules() -> None:
    found = violations(SRC)
    assert not found, "import rules broken (docs/architecture.md):\n" + "\n".join(found)


def test_every_pure_module_exists() -> None:
    """A rule about a module that was renamed away would hold vacuously: each prefix names real code."""
    for prefix in PURE:
        rel = Path(*prefix.split("."))
        assert (SRC / rel).is_dir() or (SRC / rel).with_suffix(".py").is_file(), f"{prefix} names no module"


@pytest.mark.parametrize(
    ("target", "line", "expect"),
    [
        ("servescope/sim/steptime.py", "from servescope.emulator import server", "imports servescope.emulator"),
        ("servescope/sim/memory/fit.py", "import socket", "imports socket: a pure core imports no I/O"),
        ("servescope/results/metrics.py", "from servescope.cli import main", "imports servescope.cli"),
        ("servescope/client/sse.py", "from . import pool", "imports servescope.client.pool"),
        ("servescope/client/openai.py", "import aiohttp", "imports aiohttp: client/ is the hot path"),
        ("servescope/emulator/wire.py", "from servescope.client import openai", "imports servescope.client"),
        ("servescope/client/remote.py", "import ray", "imports ray: Ray is an optional extra"),
    ],
)
def test_a_forbidden_import_is_named(tmp_path: Path, target: str, line: str, expect: str) -> None:
    """The checker is not vacuous: adding one forbidden import to a copy of the tree breaks it, by name."""
    shutil.copytree(SRC / "servescope", tmp_path / "servescope")
    path = tmp_path / target
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    found = violations(tmp_path)
    assert any(target in v and expect in v for v in found), found


def test_file_io_in_a_pure_core_is_named(tmp_path: Path) -> None:
    shutil.copytree(SRC / "servescope", tmp_path / "servescope")
    path = tmp_path / "servescope/sim/catalog/models.py"
    path.write_text(
        path.read_text(encoding="utf-8") + "\n\ndef _peek(p):\n    return p.read_text()\n", encoding="utf-8"
    )
    assert any("sim/catalog/models.py" in v and ".read_text()" in v for v in violations(tmp_path))
