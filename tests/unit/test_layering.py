"""The decision core stays pure: no processes, environment, wall clock or files, and no imports of
the layers above it (docs/architecture.md).

The check parses every module under slurm_hetsched/core/ (it imports nothing), and is itself
tested on snippets that break each rule, so it can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "slurm_hetsched" / "core"

FORBIDDEN_MODULES = {"subprocess"}
FORBIDDEN_PACKAGES = (
    "slurm_hetsched.slurm",
    "slurm_hetsched.store",
    "slurm_hetsched.controller",
    "slurm_hetsched.rounds",
    "slurm_hetsched.sim",
    "slurm_hetsched.devcluster",
    "slurm_hetsched.cli",
    "slurm_hetsched.data_files",
    "slurm_hetsched.allocate",
)
# (module, attribute): reading the environment or the wall clock.
FORBIDDEN_ATTRIBUTES = {
    ("os", "environ"),
    ("os", "getenv"),
    ("os", "putenv"),
    ("os", "system"),
    ("os", "popen"),
    ("time", "time"),
    ("time", "time_ns"),
    ("io", "open"),
}
FORBIDDEN_CALLS = {"open"}  # the builtin


def violations(source: str, filename: str = "<snippet>") -> list[str]:
    """Every layering violation in one module's source, as 'file:line: what'."""
    found: list[str] = []
    tree = ast.parse(source, filename)

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{filename}:{getattr(node, 'lineno', '?')}: {what}")

    def check_module(node: ast.AST, name: str) -> None:
        if name.split(".")[0] in FORBIDDEN_MODULES:
            report(node, f"imports {name}")
        if any(name == p or name.startswith(p + ".") for p in FORBIDDEN_PACKAGES):
            report(node, f"imports {name}, a layer above the core")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check_module(node, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                report(node, "relative import (use absolute slurm_hetsched.core imports)")
                continue
            module = node.module or ""
            check_module(node, module)
            for alias in node.names:
                check_module(node, f"{module}.{alias.name}")
                if (module, alias.name) in FORBIDDEN_ATTRIBUTES:
                    report(node, f"imports {module}.{alias.name}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in FORBIDDEN_ATTRIBUTES:
                report(node, f"uses {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in FORBIDDEN_CALLS:
                report(node, f"calls {node.func.id}()")
    return found


def test_core_modules_exist() -> None:
    assert len(list(CORE.rglob("*.py"))) >= 5, CORE


def test_core_is_pure() -> None:
    problems = [
        v
        for path in sorted(CORE.rglob("*.py"))
        for v in violations(path.read_text(encoding="utf-8"), str(path.relative_to(CORE.parent)))
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "snippet",
    [
        "import subprocess",
        "from subprocess import run",
        "import os\nx = os.environ['HOME']",
        "import os\nx = os.getenv('HOME')",
        "from os import environ",
        "import time\nnow = time.time()",
        "from time import time",
        "with open('f') as f: pass",
        "import io\nio.open('f')",
        "from slurm_hetsched.slurm import backend",
        "import slurm_hetsched.store.sqlite",
        "from slurm_hetsched import controller",
        "from slurm_hetsched.sim.engine import run",
        "from slurm_hetsched.devcluster import DevCluster",
        "from slurm_hetsched import data_files",
        "from .. import cli",
    ],
)
def test_checker_catches(snippet: str) -> None:
    assert violations(snippet), snippet


@pytest.mark.parametrize(
    "snippet",
    [
        "import numpy as np",
        "from slurm_hetsched.core.model import Problem",
        "from slurm_hetsched.errors import SolverError",
        "import logging\nlogger = logging.getLogger(__name__)",
        "def f(problem):\n    return problem.now_s",
    ],
)
def test_checker_allows(snippet: str) -> None:
    assert not violations(snippet), snippet


# ----------------------------------------------------------------------------------------------
# Which part of the package may import which (docs/architecture.md, "Layers")

PACKAGE = CORE.parent
# Part (a subpackage or a top-level module) -> the parts it may import. The core at the
# bottom; the formats and adapters beside it; the round tick above it; the two drivers (the
# simulator and the controller) on top of that, neither importing the other; the job side; the
# commands at the top.
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "core": {"errors"},
    "nodelayout": {"errors"},
    "statefolder": {"errors"},
    "data_files": {"core", "errors"},
    "slurm": {"errors"},
    "store": {"core", "errors"},
    "rounds": {"core", "errors"},
    "whatif": {"core", "data_files", "errors"},
    "allocate": {"core", "data_files", "errors", "whatif"},
    "sim": {"core", "data_files", "errors", "nodelayout", "rounds", "store"},
    "controller": {"core", "data_files", "errors", "rounds", "slurm", "statefolder", "store"},
    "wrapper": {"core", "data_files", "errors", "slurm", "statefolder"},
    "devcluster": {"errors", "nodelayout", "slurm"},
    # `hetsched profile`: submits through Slurm, reads reports as the controller does.
    "profiling": {"controller", "core", "data_files", "errors", "slurm"},
    "cli": {
        "allocate",
        "controller",
        "core",
        "data_files",
        "devcluster",
        "errors",
        "nodelayout",
        "profiling",
        "rounds",
        "sim",
        "slurm",
        "store",
        "whatif",
    },
}


def part_of(module: str) -> str:
    """'slurm_hetsched.sim.run' -> 'sim'; 'slurm_hetsched.errors' -> 'errors'."""
    return module.split(".")[1]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str, filename: str) -> list[tuple[int, str]]:
    """(line, module) of every slurm_hetsched module a source imports, at any depth (also
    under TYPE_CHECKING: a reader follows those arrows too)."""
    out = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith(PACKAGE.name)]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE.name):
            if node.module == PACKAGE.name:  # from slurm_hetsched import data_files
                out += [
                    (node.lineno, f"{PACKAGE.name}.{a.name}")
                    for a in node.names
                    if not a.name.startswith("__")  # __version__: the package itself
                ]
            else:
                out.append((node.lineno, str(node.module)))
    return out


def wrong_way(sources: dict[str, str]) -> list[str]:
    """Every import of a part its part may not import, as 'module:line: imports what'."""
    found = []
    for module, source in sources.items():
        here = part_of(module)
        for line, target in imported(source, module):
            there = part_of(target) if target.count(".") else target
            if there != here and there not in MAY_IMPORT.get(here, set()):
                found.append(f"{module}:{line}: {here} imports {target}")
    return found


def cycles(sources: dict[str, str]) -> list[list[str]]:
    """Import circles between the package's modules (strongly connected groups of > 1)."""
    graph = {
        m: {t for _, t in imported(s, m) if t in sources and t != m} for m, s in sources.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def package_sources() -> dict[str, str]:
    return {
        module_name(p): p.read_text(encoding="utf-8")
        for p in sorted(PACKAGE.rglob("*.py"))
        if module_name(p) != PACKAGE.name
    }


def test_every_part_of_the_package_is_in_the_table() -> None:
    parts = {part_of(m) for m in package_sources()}
    assert parts == set(MAY_IMPORT), parts ^ set(MAY_IMPORT)


def test_imports_run_only_the_way_the_table_allows() -> None:
    problems = wrong_way(package_sources())
    assert not problems, "\n".join(problems)


def test_no_import_circle() -> None:
    assert cycles(package_sources()) == []


def test_the_table_checker_catches_a_driver_importing_the_other() -> None:
    sources = {
        "slurm_hetsched.sim.run": "from slurm_hetsched.controller.live import SlurmCluster\n",
        "slurm_hetsched.controller.live": "from slurm_hetsched.sim import run\n",
        "slurm_hetsched.core.model": "from slurm_hetsched import data_files\n",
    }
    assert len(wrong_way(sources)) == 3
    assert not wrong_way({"slurm_hetsched.sim.run": "from slurm_hetsched.rounds.tick import Tick"})


def test_the_circle_finder_finds_one() -> None:
    sources = {
        "slurm_hetsched.controller.a": "from slurm_hetsched.controller.b import x\n",
        "slurm_hetsched.controller.b": (
            "if TYPE_CHECKING:\n    from slurm_hetsched.controller.a import y\n"
        ),
        "slurm_hetsched.controller.c": "from slurm_hetsched.controller.a import z\n",
    }
    assert cycles(sources) == [["slurm_hetsched.controller.a", "slurm_hetsched.controller.b"]]
