"""The argv lists the Slurm backend builds: no shell, one element per option."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_hetsched.slurm.backend import sbatch_argv, submission_environment, update_argv
from slurm_hetsched.slurm.cli import JOB_PATH, SlurmCli
from slurm_hetsched.slurm.records import GpuRequest, JobOptions, JobUpdate


def test_sbatch_argv_for_a_managed_job() -> None:
    options = JobOptions(
        job_name="train; rm -rf /",
        gpus=GpuRequest(2),
        constraint="k80",
        comment="hetsched:class=ResNet-50 (batch size 64);steps=10",
        hold=True,
        requeue=True,
        open_mode_append=True,
        export={"HETSCHED_JOB_KEY": "42"},
    )
    assert sbatch_argv([options], "/s/train.sbatch", uid=1000) == [
        "sbatch",
        "--parsable",
        "--uid=1000",
        "--job-name=train; rm -rf /",
        "--gres=gpu:2",
        "--constraint=k80",
        "--comment=hetsched:class=ResNet-50 (batch size 64);steps=10",
        "--hold",
        "--requeue",
        "--open-mode=append",
        "--export=ALL",  # HETSCHED_JOB_KEY travels in sbatch's environment
        "/s/train.sbatch",
    ]


def test_heterogeneous_components_are_separated_by_a_colon_argument() -> None:
    argv = sbatch_argv(
        [
            JobOptions(gpus=GpuRequest(1, "p100"), nodelist="n2", nodes=1),
            JobOptions(gpus=GpuRequest(2, "k80"), nodelist="n3", nodes=1),
        ],
        None,
    )
    assert argv == [
        "sbatch",
        "--parsable",
        "--gres=gpu:p100:1",
        "--nodelist=n2",
        "--nodes=1",
        ":",
        "--gres=gpu:k80:2",
        "--nodelist=n3",
        "--nodes=1",
    ]


def test_exported_variables_go_through_sbatchs_environment() -> None:
    # Any --export but ALL or NIL (even ALL,NAME=value) makes slurmd build the job's
    # environment by logging the user in (`su -`): Slurm 26.05 holds the job when that fails.
    # So sbatch runs with the variables in its environment and exports it.
    only = JobOptions(export={"HETSCHED_JOB_KEY": "7", "LIST": "a,b"}, export_all=False)
    assert sbatch_argv([only], None)[-1] == "--export=ALL"
    assert submission_environment([only]) == ({"HETSCHED_JOB_KEY": "7", "LIST": "a,b"}, False)
    assert submission_environment([JobOptions(export={}, export_all=False)]) == ({}, False)
    assert submission_environment([JobOptions(export={"A": "1"})]) == ({"A": "1"}, True)
    assert submission_environment([JobOptions()]) == ({}, True)
    assert "--export=ALL" not in sbatch_argv([JobOptions()], None), "Slurm's default"


def test_components_of_one_job_export_the_same_variables() -> None:
    one = JobOptions(export={"KEY": "1"}, export_all=False)
    assert submission_environment([one, one]) == ({"KEY": "1"}, False)
    for other in (
        JobOptions(export={"KEY": "2"}, export_all=False),
        JobOptions(export={"KEY": "1"}),
        JobOptions(),
    ):
        with pytest.raises(ValueError, match="same variables"):
            submission_environment([one, other])
    with pytest.raises(ValueError, match="cannot export"):
        submission_environment([JobOptions(export={"BAD NAME": "1"}, export_all=False)])


def test_a_command_run_with_only_some_variables_sees_only_those(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sbatch"
    fake.write_text("#!/bin/sh\nenv | sort\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")  # found on the caller's PATH
    monkeypatch.setenv("SUBMITTER_SECRET", "leaked")
    cli = SlurmCli(slurm_conf="/etc/slurm/slurm.conf")
    only = cli.run(["sbatch"], env={"KEY": "a,b"}, inherit_env=False)
    seen = dict(line.split("=", 1) for line in only.splitlines())
    assert "SUBMITTER_SECRET" not in seen and seen["KEY"] == "a,b"
    assert seen["SLURM_CONF"] == "/etc/slurm/slurm.conf" and seen["PATH"] == JOB_PATH
    added = cli.run(["sbatch"], env={"KEY": "1"})
    assert "SUBMITTER_SECRET=leaked" in added and "KEY=1" in added, "else: the caller's, plus"


def test_a_job_needs_a_component() -> None:
    with pytest.raises(ValueError, match="at least one component"):
        sbatch_argv([], None)


def test_update_argv_keeps_each_assignment_one_element() -> None:
    update = JobUpdate(
        features="v100",
        gpus_per_node=2,
        required_nodes="n1",
        admin_comment="hetsched r=3 v100x2@n1 moved:faster-on-v100",
    )
    assert update_argv("17", update) == [
        "scontrol",
        "update",
        "JobId=17",
        "Features=v100",
        "TresPerNode=gres:gpu:2",
        "ReqNodeList=n1",
        "AdminComment=hetsched r=3 v100x2@n1 moved:faster-on-v100",
    ]
    assert update_argv("17", JobUpdate(required_nodes="", start_now=True))[3:] == [
        "ReqNodeList=",
        "StartTime=now",
    ]
    with pytest.raises(ValueError, match="nothing to update"):
        update_argv("17", JobUpdate())
