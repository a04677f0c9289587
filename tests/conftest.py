"""Shared pytest set-up: integration tests need the real dev cluster, and under CI nothing a
test needs may be missing.

Tests marked `slurm` run against the cluster that SLURM_CONF points at, else the dev cluster
of this checkout (`hetsched devcluster up`). Without one they are skipped with the reason on a
laptop; under CI (CI=true) a missing cluster is a failure, never a skip.

Tests that need an optional package (an extra of pyproject.toml: torch, matplotlib) get it
with `pytest.importorskip("name")`: skipped with the reason on a laptop without it, a failure
under CI. (At module level, leave out `reason=`: a collection report keeps only the message,
and the default one is how it is recognised.)
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if {"integration", "e2e"} & set(item.path.parts):
            item.add_marker(pytest.mark.slurm)


def pytest_report_header(config: pytest.Config) -> str | None:
    """Which Slurm the `slurm` tests run against, on the first lines of the output."""
    from slurm_hetsched.errors import SlurmError
    from slurm_hetsched.slurm import CliSlurmBackend, SlurmCli

    conf = os.environ.get("SLURM_CONF") or str(ROOT / ".devcluster" / "etc" / "slurm.conf")
    if not Path(conf).is_file():
        return f"slurm: no cluster config at {conf}"
    try:
        release = CliSlurmBackend(SlurmCli(slurm_conf=conf, timeout_s=10)).version()
    except SlurmError as exc:
        return f"slurm: {conf}: version unknown ({exc})"
    return f"slurm: {release} ({conf})"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


# The messages of pytest.importorskip: a module that is missing, or too old.
_IMPORTORSKIP_MESSAGE = re.compile(
    r"^(Skipped: )?(could not import '|module '.*' has __version__ )"
)


def _missing_in_ci(reason: str) -> str:
    return (
        f"{reason}; under CI (CI={os.environ.get('CI')}) a missing optional package fails the "
        "test instead of skipping it: install the extras (`make setup`)"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    excinfo = call.excinfo
    if report.skipped and in_ci() and excinfo is not None:
        # Raised by importorskip itself, whatever its reason= says.
        if any(entry.name == "importorskip" for entry in excinfo.traceback):
            report.outcome = "failed"
            report.longrepr = _missing_in_ci(str(excinfo.value))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    if report.skipped and in_ci() and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if _IMPORTORSKIP_MESSAGE.match(reason):  # a module-level importorskip
            report.outcome = "failed"
            report.longrepr = _missing_in_ci(reason.removeprefix("Skipped: "))
    return report


@pytest.fixture(scope="session")
def slurm_conf() -> str:
    """SLURM_CONF of a cluster that answers, or skip (fail under CI)."""
    from slurm_hetsched.errors import SlurmError
    from slurm_hetsched.slurm import CliSlurmBackend, SlurmCli

    conf = os.environ.get("SLURM_CONF") or str(ROOT / ".devcluster" / "etc" / "slurm.conf")
    reason = None
    if not Path(conf).is_file():
        reason = f"no Slurm config at {conf}"
    else:
        try:
            nodes = CliSlurmBackend(SlurmCli(slurm_conf=conf, timeout_s=10)).list_nodes()
            if not nodes:
                reason = "the cluster has no nodes"
        except SlurmError as exc:
            reason = f"the cluster does not answer: {exc}"
    if reason is not None:
        message = f"{reason}; start one with `hetsched devcluster up` (or run `make test`)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return conf
