"""Where a rank stands and where the ranks meet, from Slurm's and torchrun's variables, and the
rendezvous rank 0 publishes in the state folder (slurm_hetsched/wrapper/distributed.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hetsched.wrapper import WrapperConfigError
from slurm_hetsched.wrapper.distributed import (
    RENDEZVOUS_FILE,
    Rendezvous,
    wait_for_rendezvous,
)
from slurm_hetsched.wrapper.files import write_json_atomic


def test_a_process_outside_any_launcher_is_one_rank() -> None:
    alone = Rendezvous.from_environ({})
    assert (alone.rank, alone.world_size, alone.local_rank) == (0, 1, 0)
    assert alone.master_addr == socket.gethostname() and alone.master_port is None


def test_torchrun_variables() -> None:
    env = {
        "RANK": "2",
        "WORLD_SIZE": "3",
        "LOCAL_RANK": "2",
        "MASTER_ADDR": "h",
        "MASTER_PORT": "29400",
    }
    assert Rendezvous.from_environ(env) == Rendezvous(2, 3, 2, "h", 29400)


def test_a_plain_slurm_step_has_no_port_until_rank_0_publishes_one() -> None:
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_LOCALID": "1",
    }
    where = Rendezvous.from_environ(env)
    assert (where.rank, where.world_size, where.local_rank) == (1, 2, 1)
    assert where.master_port is None
    # HETSCHED_MASTER_PORT, passed on by the template as MASTER_PORT, wins.
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
    assert where.master_port is None


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


RUN = {"job_id": "41", "restart_count": 2}


def test_a_rank_waits_for_its_own_runs_rendezvous(tmp_path: Path) -> None:
    path = tmp_path / RENDEZVOUS_FILE
    # The previous run's file is not this run's: the rank waits, then says where it looked.
    write_json_atomic(path, {"job_id": "41", "restart_count": 1, "addr": "n1", "port": 40000})
    with pytest.raises(WrapperConfigError, match=r"rank 2: rank 0 published no rendezvous"):
        wait_for_rendezvous(path, RUN, 2, timeout_s=0.3)
    write_json_atomic(path, {**RUN, "addr": "n1", "port": 40001})
    assert wait_for_rendezvous(path, RUN, 2, timeout_s=0.3) == ("n1", 40001)
    # Garbage, an out-of-range port, a file that is too big: never taken.
    for bad in ("[1]", json.dumps({**RUN, "addr": "n1", "port": 70000}), " " * 5000):
        path.write_text(bad)
        with pytest.raises(WrapperConfigError):
            wait_for_rendezvous(path, RUN, 1, timeout_s=0.2)


_RANK = """
import sys
from pathlib import Path
import torch, torch.distributed as dist
from slurm_hetsched.wrapper.distributed import init_distributed
where = init_distributed(state_dir=Path(sys.argv[1]), timeout_s=60)
total = torch.tensor([float(where.rank + 1)])
dist.all_reduce(total)
print(where.rank, where.master_port, int(total.item()))
dist.destroy_process_group()
"""


def test_ranks_meet_on_the_port_rank_0_publishes(tmp_path: Path) -> None:
    """Three processes as srun starts them (no MASTER_PORT): rank 0 binds a port the kernel
    picks and publishes it; the others read it and join; an all-reduce sums 1 + 2 + 3."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "MASTER", "RANK"))}
    base |= {"SLURM_JOB_ID": "41", "SLURM_RESTART_COUNT": "2", "SLURM_STEP_NUM_TASKS": "3"}
    base |= {"MASTER_ADDR": "127.0.0.1", "OMP_NUM_THREADS": "1"}
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", _RANK, str(tmp_path)],
            env={**base, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (2, 1, 0)  # rank 0 last: the others wait for its file
    ]
    outputs = [process.communicate(timeout=120)[0] for process in ranks]
    assert [process.returncode for process in ranks] == [0, 0, 0], outputs
    published = json.loads((tmp_path / RENDEZVOUS_FILE).read_text())
    assert published["job_id"] == "41" and published["restart_count"] == 2
    lines = sorted(out.split()[-3:] for out in outputs)
    assert lines == [[str(r), str(published["port"]), "6"] for r in range(3)]
