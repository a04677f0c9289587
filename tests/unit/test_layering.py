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
