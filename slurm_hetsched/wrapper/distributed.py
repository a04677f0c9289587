"""Start torch.distributed for the ranks of one job from Slurm's environment (docs/job-side.md,
"Multi-rank jobs").

A job's ranks are the tasks of one srun step, one per GPU; when the controller placed the job
on GPUs of several types or nodes it runs as a heterogeneous job and the step spans all its
components (`srun --het-group=0,1,...`, sbatch_templates/train.sbatch). Inside such a step
Slurm numbers the tasks 0..n-1 across the components (SLURM_PROCID), SLURM_STEP_NUM_TASKS is n
and SLURM_JOB_ID the leader's id on every component (tested on Slurm 22.05; env.py's
RANK_VARIABLES). Under torchrun: RANK, WORLD_SIZE, LOCAL_RANK.

Rendezvous: with MASTER_PORT set (torchrun, or HETSCHED_MASTER_PORT in the template) the ranks
meet at MASTER_ADDR:MASTER_PORT. Without it rank 0 opens torch's TCPStore on a port the kernel
picks (never one another job or run holds: jobs with equal ids on two clusters' dev nodes did
meet on a derived port) and publishes it, with its address (MASTER_ADDR, else its host name),
in `rendezvous.json` of the job's state folder, naming its job id and restart count; the other
ranks wait for that run's file and connect. The state folder is on storage every node of the
job shares, as for checkpoints. Backend: NCCL when CUDA is usable, else gloo. The standard
library only, but for `init_distributed`, which imports torch.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurm_hetsched.wrapper.env import (
    LOCAL_RANK_VARIABLES,
    RANK_VARIABLES,
    WORLD_SIZE_VARIABLES,
    JobEnvironment,
    WrapperConfigError,
    first_int,
)
from slurm_hetsched.wrapper.files import write_json_atomic

DEFAULT_TIMEOUT_S = 300.0
RENDEZVOUS_FILE = "rendezvous.json"
_RENDEZVOUS_MAX_BYTES = 4096
_POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class Rendezvous:
    """Where this process stands among the job's ranks, and where they meet."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int | None  # None: rank 0 picks one and publishes it (module docstring)

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
        port: int | None = None
        if env.get("MASTER_PORT"):
            port = first_int(env, ("MASTER_PORT",), 0)
            if not 0 < port < 65536:
                raise WrapperConfigError(f"MASTER_PORT={port} is not a TCP port")
        return cls(
            rank=rank,
            world_size=world,
            local_rank=first_int(env, LOCAL_RANK_VARIABLES, 0),
            master_addr=env.get("MASTER_ADDR") or socket.gethostname(),
            master_port=port,
        )


def init_distributed(
    environ: Mapping[str, str] | None = None,
    *,
    backend: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    state_dir: Path | None = None,
) -> Rendezvous:
    """Join the job's process group (every rank calls it; once per process). A job of one
    rank gets no process group: the wrapper then works as a single process.

    Args:
        environ: the variables to read (default: os.environ).
        backend: "gloo" or "nccl" (default: NCCL when CUDA is usable, else gloo).
        timeout_s: how long the ranks wait for each other at start and in collectives.
        state_dir: the job's state folder, where the rendezvous is published without
            MASTER_PORT (default: the wrapper's, from the environment).

    Returns:
        Where this process stands, with the address and port the ranks met on.
    """
    import datetime

    import torch
    import torch.distributed as dist

    env = os.environ if environ is None else environ
    where = Rendezvous.from_environ(env)
    if where.world_size == 1 or dist.is_initialized():
        return where
    chosen = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if chosen == "nccl":
        torch.cuda.set_device(where.local_rank % torch.cuda.device_count())
    timeout = datetime.timedelta(seconds=timeout_s)
    # A process group left to the interpreter's teardown can abort the process at exit
    # ("terminate called without an active exception": gloo's threads; pytorch/pytorch
    # #190489), failing a job whose training had finished (seen on the dev cluster).
    atexit.register(_destroy_at_exit)
    if where.master_port is not None:
        dist.init_process_group(
            backend=chosen,
            init_method=f"tcp://{where.master_addr}:{where.master_port}",
            rank=where.rank,
            world_size=where.world_size,
            timeout=timeout,
        )
        return where
    folder = state_dir if state_dir is not None else JobEnvironment.from_environ(env).state_dir
    run = _this_run(env)
    path = folder / RENDEZVOUS_FILE
    if where.rank == 0:
        store = dist.TCPStore(  # type: ignore[attr-defined]
            where.master_addr, 0, where.world_size, True, timeout=timeout, wait_for_workers=False
        )
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_json_atomic(path, {**run, "addr": where.master_addr, "port": int(store.port)})
        port = int(store.port)
        addr = where.master_addr
    else:
        addr, port = wait_for_rendezvous(path, run, where.rank, timeout_s)
        store = dist.TCPStore(  # type: ignore[attr-defined]
            addr, port, where.world_size, False, timeout=timeout
        )
    dist.init_process_group(
        backend=chosen, store=store, rank=where.rank, world_size=where.world_size, timeout=timeout
    )
    return dataclasses.replace(where, master_addr=addr, master_port=port)


def leave_distributed() -> None:
    """Leave the job's process group at the end of training (every rank calls it): wait for
    all ranks, then destroy the group while the interpreter is whole. Without a group, nothing
    to do. `init_distributed` also destroys the group at exit, without the wait."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    try:
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _destroy_at_exit() -> None:
    import torch.distributed as dist

    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # at exit: the group may be half gone with a failed peer
        pass


def _this_run(env: Mapping[str, str]) -> dict[str, object]:
    """The run a published rendezvous belongs to: the job's (leader's) id and restart count."""
    job_id = env.get("SLURM_JOB_ID_HET_GROUP_0") or env.get("SLURM_JOB_ID") or ""
    return {"job_id": job_id, "restart_count": first_int(env, ("SLURM_RESTART_COUNT",), 0)}


def wait_for_rendezvous(
    path: Path, run: Mapping[str, object], rank: int, timeout_s: float
) -> tuple[str, int]:
    """The address and port rank 0 published for this run (`run`), waited for up to
    `timeout_s`; a file of an earlier run (or another job) is not this run's.

    Raises:
        WrapperConfigError: nothing for this run within the timeout.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        found = _read_rendezvous(path)
        if found is not None and all(found.get(k) == v for k, v in run.items()):
            addr, port = found.get("addr"), found.get("port")
            if isinstance(addr, str) and addr and isinstance(port, int) and 0 < port < 65536:
                return addr, port
        if time.monotonic() >= deadline:
            raise WrapperConfigError(
                f"rank {rank}: rank 0 published no rendezvous for this run in {path} within "
                f"{timeout_s:g} s (is the state folder shared by the job's nodes?)"
            )
        time.sleep(_POLL_S)


def _read_rendezvous(path: Path) -> dict[str, object] | None:
    try:
        with path.open("rb") as handle:
            data = json.loads(handle.read(_RENDEZVOUS_MAX_BYTES + 1)[:_RENDEZVOUS_MAX_BYTES])
    except (OSError, ValueError):
        return None  # not there yet, or half a file: look again
    return data if isinstance(data, dict) else None
