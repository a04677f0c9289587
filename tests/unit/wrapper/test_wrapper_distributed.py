"""Where a rank stands and where the ranks meet, from Slurm's and torchrun's variables
(slurm_hetsched/wrapper/distributed.py)."""

from __future__ import annotations

import socket

import pytest

from slurm_hetsched.wrapper import WrapperConfigError
from slurm_hetsched.wrapper.distributed import PORT_BASE, PORT_SPAN, Rendezvous, default_port


def test_a_process_outside_any_launcher_is_one_rank() -> None:
    alone = Rendezvous.from_environ({})
    assert (alone.rank, alone.world_size, alone.local_rank) == (0, 1, 0)
    assert alone.master_addr == socket.gethostname() and alone.master_port == PORT_BASE


def test_torchrun_variables() -> None:
    env = {
        "RANK": "2",
        "WORLD_SIZE": "3",
        "LOCAL_RANK": "2",
        "MASTER_ADDR": "h",
        "MASTER_PORT": "29400",
    }
    assert Rendezvous.from_environ(env) == Rendezvous(2, 3, 2, "h", 29400)


def test_a_plain_slurm_step_meets_on_a_port_of_its_job() -> None:
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_LOCALID": "1",
    }
    where = Rendezvous.from_environ(env)
    assert (where.rank, where.world_size, where.local_rank) == (1, 2, 1)
    assert where.master_port == PORT_BASE + 4242 * 8 % PORT_SPAN
    # A requeued run meets elsewhere.
    assert default_port({**env, "SLURM_RESTART_COUNT": "1"}) == where.master_port + 1
    # The template's MASTER_* (set on the node of rank 0) win.
    pinned = Rendezvous.from_environ({**env, "MASTER_ADDR": "n1", "MASTER_PORT": "31000"})
    assert (pinned.master_addr, pinned.master_port) == ("n1", 31000)


def test_the_batch_script_itself_is_one_rank_whatever_the_jobs_tasks() -> None:
    batch = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    assert Rendezvous.from_environ(batch).world_size == 1


def test_a_heterogeneous_step_spans_every_component() -> None:
    # What the tasks of `srun --het-group=0,1` saw on the dev cluster (Slurm 22.05), 2 tasks on
    # n1 and 1 on n3: the third task.
    env = {
        "SLURM_JOB_ID": "3",
        "SLURM_JOB_ID_HET_GROUP_0": "3",
        "SLURM_HET_SIZE": "2",
        "SLURM_NTASKS": "3",
        "SLURM_NTASKS_HET_GROUP_0": "2",
        "SLURM_NTASKS_HET_GROUP_1": "1",
        "SLURM_STEP_NUM_TASKS": "3",
        "SLURM_PROCID": "2",
        "SLURM_LOCALID": "0",
    }
    where = Rendezvous.from_environ(env)
    assert (where.rank, where.world_size, where.local_rank) == (2, 3, 0)
    assert where.master_port == PORT_BASE + 3 * 8  # the leader's id: the same on every component


@pytest.mark.parametrize(
    "env",
    [
        {"SLURM_PROCID": "x"},
        {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "3"},
        {"MASTER_PORT": "70000"},
    ],
)
def test_unusable_values_are_refused_with_the_variable_named(env: dict[str, str]) -> None:
    with pytest.raises(WrapperConfigError, match=r"SLURM_PROCID|rank 3|MASTER_PORT"):
        Rendezvous.from_environ(env)
