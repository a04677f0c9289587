"""Shared pytest set-up: integration tests need the real dev cluster.

Tests marked `slurm` run against the cluster that SLURM_CONF points at, else the dev cluster
of this checkout (`hetsched devcluster up`). Without one they are skipped with the reason on a
laptop; under CI (CI=true) a missing cluster is a failure, never a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if {"integration", "e2e"} & set(item.path.parts):
            item.add_marker(pytest.mark.slurm)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


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
