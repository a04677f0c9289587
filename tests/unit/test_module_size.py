"""No module of the package is over 400 lines: a module has one job, stated in its docstring,
and a newcomer reads it in one sitting (docs/architecture.md). Tests and benchmarks may be
longer where a table of cases makes them so."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "slurm_hetsched"
MAX_LINES = 400


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in sorted(PACKAGE.rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, long


def test_every_module_says_what_it_is_for() -> None:
    silent = [
        str(p.relative_to(PACKAGE.parent))
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.stat().st_size > 0 and not p.read_text(encoding="utf-8").lstrip().startswith('"""')
    ]
    assert not silent, silent
