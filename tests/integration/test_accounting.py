"""Slurm accounting on the dev cluster (`hetsched devcluster up --accounting`): the accounts,
users and GPU quotas it made, the quotas read back as the controller reads them, limits not
enforced (a job over its account's quota runs), and sacct recording jobs with their account.

On a system cluster brought up without --accounting these tests are skipped with the reason
(under CI, a failure: `make test` brings it up with --accounting). The sid cluster has no
accounting (`--accounting` is for the system Slurm's cluster only): there they are skipped,
CI or not (docs/devcluster.md, "Accounting")."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hetsched.controller.config import ControllerConfig, effective_quotas
from slurm_hetsched.errors import SlurmCommandError
from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions
from slurm_hetsched.slurm.accounts import (
    accounting_enabled,
    enforces_limits,
    read_config,
    read_quotas,
)

from ..conftest import in_ci
from .conftest import Submitter, wait_for

QUOTAS = {"acct-a": {"v100": 2}, "acct-b": {"k80": 4}}
SLEEPER = "#!/bin/bash\nsleep 300\n"


@pytest.fixture(scope="module")
def settings(slurm_conf: str, backend: CliSlurmBackend) -> dict[str, str]:
    """The cluster's `scontrol show config`, when it keeps accounting."""
    found = read_config(backend.cli)
    if accounting_enabled(found):
        return found
    if Path(slurm_conf).resolve().parent.parent.name == "sid":  # <dev cluster>/sid/etc/
        pytest.skip(
            "the sid dev cluster runs without accounting: `up --accounting` is for the system "
            "Slurm's dev cluster only (docs/devcluster.md, 'Accounting')"
        )
    message = (
        f"the cluster of {slurm_conf} runs without accounting "
        f"(AccountingStorageType={found.get('AccountingStorageType')}): bring it up with "
        "`hetsched devcluster down; hetsched devcluster up --accounting` (`make test` does)"
    )
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def sacctmgr(backend: CliSlurmBackend, *argv: str) -> list[list[str]]:
    text = backend.cli.run(["sacctmgr", "--parsable2", "--noheader", *argv])
    return [line.split("|") for line in text.splitlines() if line]


def sacct_row(backend: CliSlurmBackend, job_id: str) -> dict[str, str] | None:
    """The job's allocation record in sacct once it shows the job running (slurmctld sends
    the start to slurmdbd a moment after it, and the submission before)."""
    fields = ["JobID", "Account", "User", "State", "AllocTRES"]
    text = backend.cli.run(
        ["sacct", "-X", "--parsable2", "--noheader", "-j", job_id, f"--format={','.join(fields)}"]
    )
    rows = [dict(zip(fields, line.split("|"), strict=True)) for line in text.splitlines() if line]
    return next((r for r in rows if r["JobID"] == job_id and r["State"] == "RUNNING"), None)


def test_the_accounts_and_users_are_there(
    settings: dict[str, str], backend: CliSlurmBackend
) -> None:
    accounts = {row[0] for row in sacctmgr(backend, "show", "account", "format=Account")}
    assert {"acct-a", "acct-b", "acct-c"} <= accounts
    associations = {
        (row[1], row[2])
        for row in sacctmgr(
            backend,
            "show",
            "associations",
            "format=Cluster,Account,User",
            "where",
            f"cluster={settings['ClusterName']}",
        )
    }
    for user in ("root", "hetsched-alice", "hetsched-bob"):
        assert {(account, user) for account in ("acct-a", "acct-b", "acct-c")} <= associations
    defaults = dict(
        row[:2] for row in sacctmgr(backend, "show", "user", "format=User,DefaultAccount")
    )
    assert defaults["root"] == "acct-c"


def test_the_quotas_read_back_and_are_no_caps(
    settings: dict[str, str], backend: CliSlurmBackend
) -> None:
    assert read_quotas(backend.cli) == QUOTAS
    assert settings["AccountingStorageEnforce"] == "associations"
    assert not enforces_limits(settings)
    gpu_types = sorted({t for node in backend.list_nodes() for t in node.gpus})
    config = ControllerConfig(quotas_from="slurm")
    assert effective_quotas(config, backend.cli, gpu_types) == QUOTAS
    tres = settings["AccountingStorageTRES"].split(",")
    assert {"gres/gpu", "gres/gpu:v100", "gres/gpu:p100", "gres/gpu:k80"} <= set(tres)


def test_a_job_over_its_accounts_quota_runs_and_sacct_shows_its_account(
    settings: dict[str, str], backend: CliSlurmBackend, submit: Submitter
) -> None:
    """acct-b owns k80s only: two v100s are beyond its quota, and Slurm starts the job
    anyway (limits are not enforced: the scheduler lets tenants borrow)."""
    job_id = submit(SLEEPER, JobOptions(account="acct-b", gpus=GpuRequest(2), constraint="v100"))
    job = submit.wait_state(job_id, "RUNNING")
    assert (job.account, job.nodes) == ("acct-b", "n1")
    row = wait_for(lambda: sacct_row(backend, job_id), f"sacct to record job {job_id}", 30)
    assert row["Account"] == "acct-b"
    assert "gres/gpu:v100=2" in row["AllocTRES"].split(",")


def test_a_job_without_account_runs_in_the_default_one(
    settings: dict[str, str], backend: CliSlurmBackend, submit: Submitter
) -> None:
    job_id = submit(SLEEPER, JobOptions(gpus=GpuRequest(1), constraint="k80"))
    assert submit.wait_state(job_id, "RUNNING").account == "acct-c"
    row = wait_for(lambda: sacct_row(backend, job_id), f"sacct to record job {job_id}", 30)
    assert (row["Account"], row["User"]) == ("acct-c", "root")


def test_an_unknown_account_is_refused(settings: dict[str, str], submit: Submitter) -> None:
    """Associations are enforced: a job needs a valid account."""
    with pytest.raises(SlurmCommandError, match="Invalid account"):
        submit(SLEEPER, JobOptions(account="no-such-account", gpus=GpuRequest(1)))
