"""One managed job as the controller sees it: its spec, its Slurm record(s) and the progress
report it wrote. Values only, shared by the view (jobview.py), the snapshot's parts
(snapshot.py) and the enactor."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_hetsched.core.jobspec import JobSpec
from slurm_hetsched.slurm.records import JobState, SlurmJob
from slurm_hetsched.statefolder import expand_hostlist


@dataclass(frozen=True, slots=True)
class Progress:
    """A job's progress report, already checked (owner, plausibility) by the caller.

    `job_id`, `restart_count` and `updated_at` tell which run wrote it and when (by the job's
    own clock: a user's claim, only believed within bounds the controller knows).
    `peak_mem_gib` is the most GPU memory the run allocated on one GPU so far (GiB, above 0 up
    to jobspec.MEM_GIB_MAX), or None: types with less memory are ruled out for the job.
    """

    step: int
    total_steps: int | None = None
    steps_per_s: float | None = None
    gpu_type: str | None = None
    restart_count: int | None = None
    status: str = "running"
    job_id: str | None = None
    updated_at: float | None = None
    peak_mem_gib: float | None = None


@dataclass(frozen=True, slots=True)
class ManagedJob:
    """One managed job: its spec and its Slurm record(s).

    Attributes:
        key: the job's identity in rounds, plans and the journal: its job key, with
            `#<copy>` appended for a forked copy (`job_identity`).
        spec: the parsed spec.
        components: the Slurm records; one for a plain job, one per component (leader first)
            for a heterogeneous job the controller submitted.
        num_gpus: GPUs the job uses at once (the sum over its components).
        job_key: the job key (`key=` in the spec, else the leader's Slurm job id): it names
            the state folder and is bound to the job's user.
        copy: the copy index (`copy=`, 0 for the job itself).
    """

    key: str
    spec: JobSpec
    components: tuple[SlurmJob, ...]
    num_gpus: int
    job_key: str = ""
    copy: int = 0

    def __post_init__(self) -> None:
        if not self.job_key:
            object.__setattr__(self, "job_key", self.key)

    @property
    def leader(self) -> SlurmJob:
        return self.components[0]

    @property
    def slurm_id(self) -> str:
        """The id that addresses the whole job in scontrol and scancel."""
        return self.leader.job_id

    @property
    def state(self) -> JobState:
        return self.leader.state

    @property
    def running(self) -> bool:
        return self.leader.state is JobState.RUNNING

    def gpus_by_node(self) -> dict[str, int]:
        """GPUs the job holds per node while it runs (empty while pending)."""
        held: dict[str, int] = {}
        for component in self.components:
            if component.state not in (JobState.RUNNING, JobState.COMPLETING):
                continue
            count = component.gpus_per_node.count if component.gpus_per_node else 0
            for node in expand_hostlist(component.nodes):
                held[node] = held.get(node, 0) + count
        return held


def job_identity(job_key: str, copy: int) -> str:
    """A job's identity: its key, or `<key>#<copy>` for a copy (`#` never occurs in a key)."""
    return job_key if copy == 0 else f"{job_key}#{copy}"
