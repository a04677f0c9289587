"""The rule of tests/conftest.py: under CI a missing optional package (pytest.importorskip)
fails the test; elsewhere it is a skip. Proven on a throw-away test suite run by pytest."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MISSING = "hetsched_no_such_module"
SUITE = {
    "test_inside.py": f"""
import pytest

def test_needs_a_missing_package():
    pytest.importorskip("{MISSING}", reason="custom reason")

def test_skips_for_another_reason():
    pytest.skip("not on this machine")

def test_passes():
    pass
""",
    "test_module_level.py": f"""
import pytest

pytest.importorskip("{MISSING}")

def test_never_collected():
    pass
""",
}


def run_suite(folder: Path, ci: str | None) -> tuple[dict[str, str], str]:
    """Outcome per test ('error': a module that failed to collect), and the report's text."""
    for name, text in SUITE.items():
        (folder / name).write_text(text)
    (folder / "pytest.ini").write_text("[pytest]\n")  # not this project's settings
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(ROOT)
    report = folder / "report.xml"
    subprocess.run(
        # Our conftest as a plugin: the suite gets exactly its hooks.
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "-c", str(folder / "pytest.ini"), "--continue-on-collection-errors",
         f"--junitxml={report}", str(folder)],
        cwd=folder, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        name = case.get("name", "")
        kinds = {child.tag for child in case} & {"failure", "error", "skipped"}
        outcomes[name] = kinds.pop() if kinds else "passed"
    return outcomes, report.read_text()


def test_under_ci_a_missing_optional_package_fails(tmp_path: Path) -> None:
    outcomes, text = run_suite(tmp_path, "true")
    assert outcomes == {
        "test_needs_a_missing_package": "failure",
        "test_skips_for_another_reason": "skipped",
        "test_passes": "passed",
        "test_module_level": "error",  # the module failed to collect
    }
    # Each failure says what is missing and why it is not a skip.
    assert "custom reason; under CI (CI=true) a missing optional package fails" in text
    assert f"No module named '{MISSING}'; under CI (CI=true) a missing optional" in text


def test_elsewhere_a_missing_optional_package_is_a_skip(tmp_path: Path) -> None:
    outcomes, _ = run_suite(tmp_path, "false")
    assert outcomes == {
        "test_needs_a_missing_package": "skipped",
        "test_skips_for_another_reason": "skipped",
        "test_passes": "passed",
        "test_module_level": "skipped",
    }
