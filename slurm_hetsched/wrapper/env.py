"""The job's view of its environment: Slurm's variables and the wrapper's HETSCHED_* settings.

This is the only module of the job-side wrapper that reads `os.environ`.
Everything else receives a `JobEnvironment`. It works outside Slurm too (local runs): then
the job key is "local" and the settings fall back to their defaults.

Variables (all optional):
    SLURM_JOB_ID / SLURM_JOB_ID_HET_GROUP_0   the job id (the leader's for a heterogeneous job)
    SLURM_RESTART_COUNT                        restarts so far; Slurm <= 26.05 leaves it unset
                                               on the first run, which means 0
    SLURM_PROCID / RANK, SLURM_LOCALID / LOCAL_RANK, SLURM_NTASKS / WORLD_SIZE
    SLURMD_NODENAME                            the node (the dev cluster's hostname is not it)
    SLURM_GPUS_ON_NODE, SLURM_JOB_NUM_NODES, CUDA_VISIBLE_DEVICES
    HETSCHED_JOB_KEY                           set by the controller when it re-submits a job
    HETSCHED_STATE_DIR                         this job's state folder (the SPANK plugin sets it)
    HETSCHED_STATE_ROOT                        else <root>/<uid>/<job key>; else under
                                               DEFAULT_STATE_ROOT
    HETSCHED_COPY                              a forked copy's index, 1 to 63 (HadarE); its
                                               files go to <state folder>/copy-<i>/ (absent
                                               or 0: the job itself, copy 0)
    HETSCHED_SIGNAL                            checkpoint signal, e.g. USR2 (default), or "none"
    HETSCHED_LEASE_TIMEOUT_S                   pause this long at most after an ack (600)
    HETSCHED_CHECKPOINT_EVERY_STEPS / _S       periodic checkpoints (off / 1800 s)
    HETSCHED_KEEP_CHECKPOINTS                  committed checkpoints kept (3)
    HETSCHED_PROGRESS_EVERY_S                  progress.json cadence (5 s)
    HETSCHED_EMULATE_GPU_SPEED                 1 = stretch steps by the GPU type's speed (off)
    HETSCHED_EMULATE_RATES                     e.g. v100=3,k80=1: the speeds it emulates, instead
                                               of the shipped table's (needs the knob above)
    HETSCHED_JOB_CLASS                         job class for the emulation (else the comment)
    HETSCHED_TEST_CHECKPOINT_STALL_S           TEST HOOK: stall each checkpoint write (0)
"""

from __future__ import annotations

import math
import os
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurm_hetsched.core.jobspec import JobSpecError, check_job_key
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.statefolder import copy_folder_name, state_folder

DEFAULT_STATE_ROOT = Path("~/.hetsched/state")
DEFAULT_SIGNAL = signal.SIGUSR2  # as submitit: NCCL's proxy thread used to catch SIGUSR1
DEFAULT_LEASE_TIMEOUT_S = 600.0
DEFAULT_CHECKPOINT_EVERY_S = 1800.0
DEFAULT_KEEP_CHECKPOINTS = 3
DEFAULT_PROGRESS_EVERY_S = 5.0
LOCAL_JOB_KEY = "local"
COPY_MAX = 63  # a forked job's copies are numbered 0 (the job itself) to COPY_MAX
_OFF = {"", "0", "no", "false", "off", "none"}
_ON = {"1", "yes", "true", "on"}
# HETSCHED_EMULATE_RATES: bounded, so a stray value cannot make the wrapper parse megabytes.
_RATES_MAX_CHARS = 4096
_RATES_MAX_TYPES = 64
_RATE_MAX = 1e9
_GPU_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")  # a Slurm GRES type
_SPEED = re.compile(r"([0-9]{1,20}(\.[0-9]{0,20})?|\.[0-9]{1,20})([eE][+-]?[0-9]{1,3})?")


class WrapperConfigError(ConfigError):
    """A HETSCHED_* or SLURM_* variable the wrapper reads has a value it cannot use."""


def parse_signal(value: str, variable: str = "HETSCHED_SIGNAL") -> signal.Signals | None:
    """A signal from 'USR2', 'SIGUSR2' or '12'; None for 'none' / 'off' (handling disabled).

    Raises:
        WrapperConfigError: the name or number is not a signal, or is one the wrapper needs
            for itself (SIGTERM ends a paused job; SIGKILL and SIGSTOP cannot be caught).
    """
    text = value.strip()
    if text.lower() in _OFF:
        return None
    try:
        if text.isdigit():
            sig = signal.Signals(int(text))
        else:
            name = text.upper()
            sig = signal.Signals[name if name.startswith("SIG") else "SIG" + name]
    except (KeyError, ValueError):
        raise WrapperConfigError(
            f"{variable}={value!r} is not a signal; use a name such as USR2 or USR1, a number, "
            "or 'none' to disable the checkpoint signal"
        ) from None
    if sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGSTOP):
        raise WrapperConfigError(
            f"{variable}={value!r} cannot be the checkpoint signal: SIGTERM ends a paused job "
            "and SIGKILL/SIGSTOP cannot be caught; use USR2 (the default) or USR1"
        )
    return sig


def parse_emulate_rates(
    value: str, variable: str = "HETSCHED_EMULATE_RATES"
) -> tuple[tuple[str, float], ...] | None:
    """GPU type -> relative speed from 'v100=3,p100=2,k80=1'; None for an empty value.

    Only the ratios matter: the emulation stretches each step by fastest / this type's.

    Raises:
        WrapperConfigError: not a comma-separated list of TYPE=NUMBER, a type named twice, a
            speed that is not a finite number in (0, 1e9], or more than 64 types or 4096
            characters.
    """
    text = value.strip()
    if not text:
        return None
    form = f"expected TYPE=SPEED,... e.g. v100=3,p100=2,k80=1 (each speed > 0, <= {_RATE_MAX:g})"
    if len(text) > _RATES_MAX_CHARS:
        raise WrapperConfigError(f"{variable} is longer than {_RATES_MAX_CHARS} characters")
    items = text.split(",")
    if len(items) > _RATES_MAX_TYPES:
        raise WrapperConfigError(f"{variable} names more than {_RATES_MAX_TYPES} GPU types")
    rates: dict[str, float] = {}
    for item in items:
        gpu_type, sep, number = (part.strip() for part in item.partition("="))
        if not sep or not _GPU_TYPE.fullmatch(gpu_type):
            raise WrapperConfigError(f"{variable}: {item.strip()!r} is not TYPE=SPEED; {form}")
        if gpu_type in rates:
            raise WrapperConfigError(f"{variable}: GPU type {gpu_type!r} is given twice")
        # ASCII digits only: float() also takes '1_0', 'nan' and other scripts' digits.
        speed = float(number) if _SPEED.fullmatch(number) else math.nan
        if not (math.isfinite(speed) and 0 < speed <= _RATE_MAX):
            raise WrapperConfigError(f"{variable}: {gpu_type}={number!r}: {form}")
        rates[gpu_type] = speed
    return tuple(rates.items())


@dataclass(frozen=True, slots=True)
class JobEnvironment:
    """Everything the wrapper needs to know about the job it runs in.

    Attributes:
        job_id: Slurm's job id (the leader's for a heterogeneous job); None outside Slurm.
        job_key: the stable key of the job across re-submissions (docs/interfaces.md).
        restart_count: how often Slurm restarted this job id (0 on the first run).
        rank, local_rank, world_size: the process's place in a distributed job.
        node: the Slurm node name (SLURMD_NODENAME), else this machine's hostname.
        num_gpus: GPUs of the job over all its nodes (0 if none are visible).
        state_dir: this run's state folder (checkpoints, progress.json, ack.json, ...): the
            job's key folder, or for a forked copy i >= 1 its folder `<key folder>/copy-<i>`.
        checkpoint_signal: the signal that asks for checkpoint-ack-pause; None = not handled.
        lease_timeout_s: how long a paused job waits for the requeue before it trains on.
        checkpoint_every_steps / checkpoint_every_s: periodic checkpoints; None = off.
        keep_checkpoints: how many committed checkpoints are kept.
        progress_every_s: how often progress.json is rewritten.
        emulate_gpu_speed: stretch steps by the assigned GPU type's speed (CPU demos only).
        emulate_rates: (GPU type, relative speed) pairs the emulation uses instead of the
            shipped table's rates for the job's class; None = the table.
        job_class: the throughput-table class used by the emulation; None = ask Slurm.
        test_checkpoint_stall_s: TEST HOOK; seconds each checkpoint write stalls before its
            commit, so a test can kill the job in the middle of a write. 0 in real use.
        copy: the index of a forked copy (HETSCHED_COPY; 0: the job itself).
    """

    job_id: str | None
    job_key: str
    restart_count: int
    rank: int
    local_rank: int
    world_size: int
    node: str
    num_gpus: int
    state_dir: Path
    checkpoint_signal: signal.Signals | None = DEFAULT_SIGNAL
    lease_timeout_s: float = DEFAULT_LEASE_TIMEOUT_S
    checkpoint_every_steps: int | None = None
    checkpoint_every_s: float | None = DEFAULT_CHECKPOINT_EVERY_S
    keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS
    progress_every_s: float = DEFAULT_PROGRESS_EVERY_S
    emulate_gpu_speed: bool = False
    emulate_rates: tuple[tuple[str, float], ...] | None = None
    job_class: str | None = None
    test_checkpoint_stall_s: float = 0.0
    copy: int = 0

    @property
    def key_dir(self) -> Path:
        """The job's key folder, shared by its forked copies (merged checkpoints live in it)."""
        return self.state_dir if self.copy == 0 else self.state_dir.parent

    @property
    def in_slurm(self) -> bool:
        return self.job_id is not None

    @property
    def is_rank_zero(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> JobEnvironment:
        """Read the job's environment (default: `os.environ`).

        Raises:
            WrapperConfigError: a variable is set to something unusable; the message names it
                and the expected form.
        """
        env = os.environ if environ is None else environ
        job_id = env.get("SLURM_JOB_ID_HET_GROUP_0") or env.get("SLURM_JOB_ID") or None
        job_key = env.get("HETSCHED_JOB_KEY") or job_id or LOCAL_JOB_KEY
        try:
            check_job_key(job_key, "HETSCHED_JOB_KEY")
        except JobSpecError as exc:
            raise WrapperConfigError(str(exc)) from None
        emulate = _flag(env, "HETSCHED_EMULATE_GPU_SPEED")
        emulate_rates = parse_emulate_rates(env.get("HETSCHED_EMULATE_RATES", ""))
        if emulate_rates is not None and not emulate:
            # Set alone it would change nothing, silently: a test or demo would run unemulated.
            raise WrapperConfigError(
                "HETSCHED_EMULATE_RATES is set but HETSCHED_EMULATE_GPU_SPEED is not 1: set "
                "both to emulate those speeds, or neither"
            )
        copy = _int(env, "HETSCHED_COPY", 0)
        if copy > COPY_MAX:
            raise WrapperConfigError(f"HETSCHED_COPY={copy} is not a copy index (0 to {COPY_MAX})")
        state_dir = _state_dir(env, job_key)
        return cls(
            job_id=job_id,
            job_key=job_key,
            restart_count=_int(env, "SLURM_RESTART_COUNT", 0),
            rank=first_int(env, RANK_VARIABLES, 0),
            local_rank=first_int(env, LOCAL_RANK_VARIABLES, 0),
            world_size=max(1, first_int(env, WORLD_SIZE_VARIABLES, 1)),
            node=env.get("SLURMD_NODENAME") or os.uname().nodename,
            num_gpus=_num_gpus(env),
            state_dir=state_dir / copy_folder_name(copy) if copy else state_dir,
            checkpoint_signal=parse_signal(env.get("HETSCHED_SIGNAL", "USR2")),
            lease_timeout_s=_float(env, "HETSCHED_LEASE_TIMEOUT_S", DEFAULT_LEASE_TIMEOUT_S),
            checkpoint_every_steps=_int(env, "HETSCHED_CHECKPOINT_EVERY_STEPS", 0) or None,
            checkpoint_every_s=(
                _float(env, "HETSCHED_CHECKPOINT_EVERY_S", DEFAULT_CHECKPOINT_EVERY_S) or None
            ),
            keep_checkpoints=max(
                1, _int(env, "HETSCHED_KEEP_CHECKPOINTS", DEFAULT_KEEP_CHECKPOINTS)
            ),
            progress_every_s=_float(env, "HETSCHED_PROGRESS_EVERY_S", DEFAULT_PROGRESS_EVERY_S),
            emulate_gpu_speed=emulate,
            emulate_rates=emulate_rates,
            job_class=env.get("HETSCHED_JOB_CLASS") or None,
            test_checkpoint_stall_s=_float(env, "HETSCHED_TEST_CHECKPOINT_STALL_S", 0.0),
            copy=copy,
        )


def default_state_root() -> Path:
    """The state root used when neither HETSCHED_STATE_DIR nor HETSCHED_STATE_ROOT is set."""
    return DEFAULT_STATE_ROOT.expanduser()


def _state_dir(env: Mapping[str, str], job_key: str) -> Path:
    if env.get("HETSCHED_STATE_DIR"):
        return Path(env["HETSCHED_STATE_DIR"]).expanduser()
    root = env.get("HETSCHED_STATE_ROOT")
    return state_folder(
        Path(root).expanduser() if root else default_state_root(), os.geteuid(), job_key
    )


def _num_gpus(env: Mapping[str, str]) -> int:
    """GPUs over all the job's nodes: Slurm's per-node count times nodes, else CUDA's list."""
    per_node = env.get("SLURM_GPUS_ON_NODE", "")
    if per_node.isdigit():
        return int(per_node) * max(1, _int(env, "SLURM_JOB_NUM_NODES", 1))
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible and visible not in ("-1", "NoDevFiles"):
        return len([d for d in visible.split(",") if d.strip()])
    return 0


# Where a process stands among the job's ranks: an srun step's (SLURM_STEP_NUM_TASKS counts the
# tasks over every component of a heterogeneous step, SLURM_PROCID numbers them across it), else
# torchrun's. A process of the batch script itself is one rank, whatever the job's --ntasks.
RANK_VARIABLES = ("SLURM_PROCID", "RANK")
LOCAL_RANK_VARIABLES = ("SLURM_LOCALID", "LOCAL_RANK")
WORLD_SIZE_VARIABLES = ("SLURM_STEP_NUM_TASKS", "WORLD_SIZE")


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        raise WrapperConfigError(f"{name}={value!r} is not a whole number") from None
    if number < 0:
        raise WrapperConfigError(f"{name}={value!r} must not be negative")
    return number


def first_int(env: Mapping[str, str], names: tuple[str, ...], default: int) -> int:
    """The first of `names` that is set, as a whole number >= 0, else `default`.

    Raises:
        WrapperConfigError: it is not a whole number >= 0 (the message names it).
    """
    for name in names:
        if env.get(name, "").strip():
            return _int(env, name, default)
    return default


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        number = float(value)
    except ValueError:
        raise WrapperConfigError(f"{name}={value!r} is not a number of seconds") from None
    if not number >= 0:  # also rejects NaN
        raise WrapperConfigError(f"{name}={value!r} must be 0 or more")
    return number


def _flag(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in _OFF:
        return False
    if value in _ON:
        return True
    raise WrapperConfigError(f"{name}={env[name]!r}: use 1 to turn it on or 0 to leave it off")
