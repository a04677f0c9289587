"""Start torch.distributed for the ranks of one job from Slurm's environment (docs/job-side.md,
"Multi-rank jobs").

A job's ranks are the tasks of one srun step, one per GPU; when the controller placed the job
on GPUs of several types or nodes it runs as a heterogeneous job and the step spans all its
components (`srun --het-group=0,1,...`, sbatch_templates/train.sbatch). Inside such a step
Slurm numbers the tasks 0..n-1 across the components (SLURM_PROCID), SLURM_STEP_NUM_TASKS is n
and SLURM_JOB_ID the leader's id on every component (tested on Slurm 22.05; env.py's
RANK_VARIABLES). Under torchrun: RANK, WORLD_SIZE, LOCAL_RANK.

Rendezvous: MASTER_ADDR and MASTER_PORT when set (the template sets them in the batch script,
on the node where rank 0 runs), else this machine's name and a port derived from the job's
leader id and restart count (`default_port`), so that two jobs, or two runs of one job, on one
node do not meet. Backend: NCCL when CUDA is usable, else
gloo. The standard library only, but for `init_distributed`, which imports torch.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from slurm_hetsched.wrapper.env import (
    LOCAL_RANK_VARIABLES,
    RANK_VARIABLES,
    WORLD_SIZE_VARIABLES,
    WrapperConfigError,
    first_int,
)

# Ports MASTER_PORT is derived from when unset: a job id picks one of PORT_SPAN from PORT_BASE.
PORT_BASE = 20_000
PORT_SPAN = 20_000
DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class Rendezvous:
    """Where this process stands among the job's ranks, and where they meet."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Rendezvous:
        """Read it from Slurm's (or torchrun's) variables (module docstring).

        Raises:
            WrapperConfigError: a variable is not a number, or the rank is not below the
                world size; the message names the variable.
        """
        env = os.environ if environ is None else environ
        rank = first_int(env, RANK_VARIABLES, 0)
        world = max(1, first_int(env, WORLD_SIZE_VARIABLES, 1))
        if not 0 <= rank < world:
            raise WrapperConfigError(f"rank {rank} is not below the job's {world} ranks")
        port_default = default_port(env)
        port = first_int(env, ("MASTER_PORT",), port_default)
        if not 0 < port < 65536:
            raise WrapperConfigError(f"MASTER_PORT={port} is not a TCP port")
        return cls(
            rank=rank,
            world_size=world,
            local_rank=first_int(env, LOCAL_RANK_VARIABLES, 0),
            master_addr=env.get("MASTER_ADDR") or socket.gethostname(),
            master_port=port,
        )


def default_port(env: Mapping[str, str]) -> int:
    """The port of a job's rendezvous when MASTER_PORT is unset (the template's formula): from
    the leader's job id and the restart count, so that a requeued run does not meet on its
    previous run's port, whose sockets may linger."""
    leader = env.get("SLURM_JOB_ID_HET_GROUP_0") or env.get("SLURM_JOB_ID") or "0"
    job = int(leader) if leader.isdigit() else 0
    restart = first_int(env, ("SLURM_RESTART_COUNT",), 0)
    return PORT_BASE + (job * 8 + restart % 8) % PORT_SPAN


def init_distributed(
    environ: Mapping[str, str] | None = None,
    *,
    backend: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Rendezvous:
    """Join the job's process group (every rank calls it; once per process). A job of one
    rank gets no process group: the wrapper then works as a single process.

    Args:
        environ: the variables to read (default: os.environ).
        backend: "gloo" or "nccl" (default: NCCL when CUDA is usable, else gloo).
        timeout_s: how long the ranks wait for each other at start and in collectives.
    """
    import datetime

    import torch
    import torch.distributed as dist

    where = Rendezvous.from_environ(environ)
    if where.world_size == 1 or dist.is_initialized():
        return where
    chosen = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if chosen == "nccl":
        torch.cuda.set_device(where.local_rank % torch.cuda.device_count())
    dist.init_process_group(
        backend=chosen,
        init_method=f"tcp://{where.master_addr}:{where.master_port}",
        rank=where.rank,
        world_size=where.world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return where
