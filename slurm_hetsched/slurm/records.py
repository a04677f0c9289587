"""What the Slurm backend reads and writes: immutable records of jobs, nodes and requests.

These are the adapter's own types, close to Slurm's vocabulary; drivers turn them into the
decision core's model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class JobState(StrEnum):
    """Slurm's base job states (the part of job_state before any flag)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    UNKNOWN = "UNKNOWN"

    @property
    def is_active(self) -> bool:
        """Still holds or waits for resources (not finished)."""
        return self in _ACTIVE


_ACTIVE = frozenset({JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING})

# Reasons Slurm gives for a job that waits on a hold rather than on resources.
HELD_REASONS = frozenset({"JobHeldAdmin", "JobHeldUser", "job_requeued_in_held_state"})


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """GPUs asked for per node: `gpu_type` None means an untyped request (`--gres=gpu:N`)."""

    count: int
    gpu_type: str | None = None

    def gres(self) -> str:
        """The --gres value, e.g. 'gpu:v100:2' or 'gpu:2'."""
        return f"gpu:{self.gpu_type}:{self.count}" if self.gpu_type else f"gpu:{self.count}"


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job (or one component of a heterogeneous job) as squeue reports it.

    Times are Unix seconds; None where Slurm has none yet (a pending job's start time).
    """

    job_id: str
    name: str
    user: str
    user_id: int | None
    account: str
    partition: str
    state: JobState
    state_flags: tuple[str, ...]
    reason: str
    comment: str
    admin_comment: str
    restart_count: int
    requeue: bool
    priority: int
    tres_per_node: str
    gpus_per_node: GpuRequest | None
    features: str
    required_nodes: str
    excluded_nodes: str
    nodes: str
    batch_host: str
    gres_detail: tuple[str, ...]
    submit_time: int | None
    start_time: int | None
    het_job_id: str | None = None
    het_job_offset: int | None = None
    work_dir: str = ""
    standard_output: str = ""
    group_id: int | None = None
    end_time: int | None = None
    qos: str = ""
    standard_error: str = ""
    time_limit_min: int | None = None  # None: no limit (or Slurm did not say)

    @property
    def held(self) -> bool:
        """Pending because of a hold (admin, user, or requeue-hold), not for resources."""
        return self.state is JobState.PENDING and self.reason in HELD_REASONS

    @property
    def slurm_id(self) -> str:
        """The id that addresses this job or component in scontrol/scancel ('35' or '35+1')."""
        if self.het_job_id is not None and self.het_job_offset is not None:
            return f"{self.het_job_id}+{self.het_job_offset}"
        return self.job_id

    @property
    def is_het_component(self) -> bool:
        return self.het_job_id is not None


# What Slurm's node states mean for planning, in one place. A node's state is one base state
# (22.05: `state`, lowercase; 26.05: the base word of the `state` list) plus flags (22.05:
# `state_flags`; 26.05: the other words of the list).
NODE_BASE_STATES = frozenset({"UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE"})
# Only these base states take new jobs: DOWN, ERROR, FUTURE and UNKNOWN never do, and a base
# state a later Slurm adds is not trusted.
PLANNABLE_BASE_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED"})
# Flags (and the combined names scontrol and sinfo print) under which no job is planned onto a
# node. RESERVED: the node is in an active reservation (22.05 and 26.05 flag it so; MAINTENANCE
# is added for a maintenance one); a job that asked for that reservation could use it, which
# the controller does not do. A drained node with jobs still running is "mixed" + DRAIN.
UNPLANNABLE_NODE_FLAGS = frozenset(
    {
        "DRAIN",
        "DRAINED",
        "DRAINING",
        "FAIL",
        "FAILING",
        "MAINTENANCE",
        "MAINT",
        "RESERVED",
        "RES",
        "NOT_RESPONDING",
        "NO_RESPOND",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWER_DOWN",
        "POWER_DRAIN",
        "POWERING_UP",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "INVALID_REG",
        "INVAL",
        "DYNAMIC_FUTURE",
        "BLOCKED",
    }
)


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """One node as sinfo reports it: GPUs per type, GPUs in use per type, features."""

    name: str
    state: str
    state_flags: tuple[str, ...]
    gpus: Mapping[str, int]
    gpus_used: Mapping[str, int]
    features: tuple[str, ...]
    active_features: tuple[str, ...]
    partitions: tuple[str, ...]
    reason: str
    cpus: int
    alloc_cpus: int

    @property
    def unplannable(self) -> tuple[str, ...]:
        """The state words that keep jobs from being planned onto the node (empty: none)."""
        base = self.state.upper()
        flags = tuple(f.upper() for f in self.state_flags if f.upper() in UNPLANNABLE_NODE_FLAGS)
        return flags if base in PLANNABLE_BASE_STATES else (base, *flags)

    @property
    def available(self) -> bool:
        """Up, taking jobs and in no reservation: jobs may be planned onto it."""
        return not self.unplannable

    @property
    def gpus_free(self) -> dict[str, int]:
        return {t: n - self.gpus_used.get(t, 0) for t, n in self.gpus.items()}


@dataclass(frozen=True, slots=True)
class JobOptions:
    """sbatch options of one job (or one heterogeneous-job component).

    Only the fields that are set become options; `extra` holds further sbatch options as
    (name, value) pairs, e.g. ("time", "10") for --time=10, each its own argv element.
    """

    job_name: str | None = None
    gpus: GpuRequest | None = None
    constraint: str | None = None
    nodelist: str | None = None
    exclude: str | None = None
    nodes: int | None = None
    ntasks: int | None = None
    cpus_per_task: int | None = None
    partition: str | None = None
    account: str | None = None
    comment: str | None = None
    output: str | None = None
    error: str | None = None
    chdir: str | None = None
    hold: bool = False
    requeue: bool | None = None
    open_mode_append: bool = False
    signal: str | None = None
    export: Mapping[str, str] | None = None
    # With export set: True passes the submitter's whole environment plus `export`
    # (--export=ALL,...); False passes only `export` (and Slurm's own variables).
    export_all: bool = True
    extra: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class JobUpdate:
    """Fields to change on a pending job with one `scontrol update`; None leaves a field alone.

    An empty string clears a list field (e.g. required_nodes="" drops ReqNodeList).
    `gpus_per_node` is written as an untyped count (TresPerNode=gres:gpu:N): on Slurm 22.05 a
    typed GRES change is accepted but ignored, so the type travels in `features` instead.
    """

    features: str | None = None
    gpus_per_node: int | None = None
    required_nodes: str | None = None
    excluded_nodes: str | None = None
    priority: int | None = None
    start_now: bool = False
    admin_comment: str | None = None
    comment: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
