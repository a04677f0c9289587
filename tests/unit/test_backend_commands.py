"""The argv lists the Slurm backend builds: no shell, one element per option."""

from __future__ import annotations

import pytest

from slurm_hetsched.slurm.backend import sbatch_argv, update_argv
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
        "--export=ALL,HETSCHED_JOB_KEY=42",
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


def test_export_of_only_the_given_variables() -> None:
    only = JobOptions(export={"HETSCHED_JOB_KEY": "7"}, export_all=False)
    assert sbatch_argv([only], None)[-1] == "--export=HETSCHED_JOB_KEY=7"
    assert sbatch_argv([JobOptions(export={}, export_all=False)], None)[-1] == "--export=NONE"


def test_export_refuses_values_sbatch_would_split() -> None:
    with pytest.raises(ValueError, match="cannot export"):
        sbatch_argv([JobOptions(export={"KEY": "a,b"})], None)
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
