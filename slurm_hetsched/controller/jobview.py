"""What the controller sees in Slurm: managed jobs, jobs it refuses, and the snapshot it decides on.

Pure: it takes the records `squeue --json` and `sinfo --json` gave (and a function that reads a
job's trusted progress) and returns values; it runs no command and reads no file itself, so the
recorded JSON of a real cluster tests it.

A job is managed when its comment holds a `hetsched:` spec (docs/interfaces.md). The spec is
re-read every round: a user may edit it at any time. A job whose spec is malformed, names a class
the throughput table does not know, or asks for GPUs in a way the controller cannot move is
*rejected*: reported, and handed back to Slurm's own scheduling, never kept held.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo

from slurm_hetsched.core.jobspec import JobSpec, JobSpecError, is_managed, parse_job_spec
from slurm_hetsched.core.model import ClusterSnapshot, Job, Node
from slurm_hetsched.core.throughput import ThroughputTable, UnknownJobClassError
from slurm_hetsched.slurm.records import JobState, SlurmJob, SlurmNode
from slurm_hetsched.wrapper.placement import expand_hostlist


@dataclass(frozen=True, slots=True)
class Progress:
    """A job's progress report, already checked (owner, plausibility) by the caller."""

    step: int
    total_steps: int | None = None
    steps_per_s: float | None = None
    gpu_type: str | None = None
    restart_count: int | None = None
    status: str = "running"


@dataclass(frozen=True, slots=True)
class ManagedJob:
    """One managed job: its spec and its Slurm record(s).

    Attributes:
        key: the job key (`key=` in the spec, else the leader's Slurm job id).
        spec: the parsed spec.
        components: the Slurm records; one for a plain job, one per component (leader first)
            for a heterogeneous job the controller submitted.
        num_gpus: GPUs the job uses at once (the sum over its components).
    """

    key: str
    spec: JobSpec
    components: tuple[SlurmJob, ...]
    num_gpus: int

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
            for node in expand_nodes(component.nodes):
                held[node] = held.get(node, 0) + count
        return held


@dataclass(frozen=True, slots=True)
class RejectedJob:
    """A job with a `hetsched:` comment that the controller does not manage, and why."""

    job_id: str
    user: str
    reason: str
    job: SlurmJob


@dataclass(frozen=True, slots=True)
class SlurmView:
    """One observation of Slurm, in the controller's terms.

    Attributes:
        now_s: when it was taken (Unix seconds).
        managed: job key -> managed job (active ones only: pending, running, suspended).
        rejected: jobs with a spec the controller refuses, with the reason.
        nodes: Slurm's nodes.
        snapshot: what the decision core sees: nodes with the GPUs of unmanaged jobs counted as
            in use, and the managed jobs that can be scheduled.
        busy: managed jobs still finishing a requeue or a run (COMPLETING): their GPUs are in
            use and they are left alone this round.
        progress: job key -> its trusted progress report.
        unprofiled_gpu_types: GPU types on nodes that the throughput table has no column for;
            left out of the snapshot (their GPUs stay Slurm's) and reported.
    """

    now_s: float
    managed: Mapping[str, ManagedJob]
    rejected: tuple[RejectedJob, ...]
    nodes: tuple[SlurmNode, ...]
    snapshot: ClusterSnapshot
    busy: tuple[str, ...] = ()
    progress: Mapping[str, Progress] = field(default_factory=dict)
    unprofiled_gpu_types: tuple[str, ...] = ()


_SCHEDULABLE = frozenset({JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED})


def build_view(
    jobs: Sequence[SlurmJob],
    nodes: Sequence[SlurmNode],
    *,
    now_s: float,
    table: ThroughputTable,
    local_tz: tzinfo,
    partition: str | None = None,
    progress: Callable[[ManagedJob], Progress | None] | None = None,
    arrivals: Mapping[str, float] | None = None,
    measured: Mapping[str, Mapping[str, float]] | None = None,
) -> SlurmView:
    """The controller's view of the cluster from Slurm's jobs and nodes.

    Args:
        jobs: every job `squeue --json --states=all` listed.
        nodes: every node.
        now_s: the observation's time (Unix seconds).
        table: the throughput table; a class it does not know is rejected.
        local_tz: the time zone of a `due=` without an offset.
        partition: manage only jobs of this partition (None: every partition).
        progress: reads a managed job's checked progress report (None: no reports).
        arrivals: job key -> arrival time remembered from earlier rounds (a requeue resets
            Slurm's submit time; the first one seen stays the job's arrival).
        measured: job key -> GPU type -> steps/s measured in earlier rounds; the current run's
            report updates its type (the throughput table's online estimate).
    """
    arrivals = arrivals or {}
    measured = measured or {}
    # A GPU type the table has no column for cannot be decided on: its GPUs are left to Slurm.
    profiled = set(table.gpu_types)
    unprofiled = tuple(sorted({t for node in nodes for t in node.gpus} - profiled))
    gpu_types = tuple(sorted({t for node in nodes for t in node.gpus} & profiled))
    managed: dict[str, ManagedJob] = {}
    rejected: list[RejectedJob] = []
    for group in _job_groups(jobs):
        leader = group[0]
        if not is_managed(leader.comment) or not leader.state.is_active:
            continue
        if partition is not None and leader.partition != partition:
            continue
        try:
            job = _managed_job(group, table, gpu_types, local_tz)
        except JobSpecError as exc:
            rejected.append(RejectedJob(leader.job_id, leader.user, str(exc), leader))
            continue
        if job.key in managed:
            # Two live jobs claim one key: keep the newer (a re-submission), report the other.
            older, newer = sorted([managed[job.key], job], key=lambda j: int(j.slurm_id))
            managed[job.key] = newer
            rejected.append(
                RejectedJob(
                    older.slurm_id,
                    older.leader.user,
                    f"job key {job.key!r} is also used by job {newer.slurm_id}",
                    older.leader,
                )
            )
            continue
        managed[job.key] = job
    # After the loop: of two jobs with one key, the one kept decides whether the key is busy.
    busy = sorted(key for key, job in managed.items() if job.state is JobState.COMPLETING)

    reports: dict[str, Progress] = {}
    if progress is not None:
        for key, job in managed.items():
            report = progress(job)
            if report is not None:
                reports[key] = report

    # GPUs managed jobs hold per node, summed once (not once per node).
    ours: dict[str, int] = {}
    for job in managed.values():
        if job.state is not JobState.COMPLETING:
            for name, count in job.gpus_by_node().items():
                ours[name] = ours.get(name, 0) + count
    snapshot_nodes = tuple(_snapshot_node(node, ours.get(node.name, 0), profiled) for node in nodes)
    snapshot_jobs = tuple(
        _model_job(
            job,
            reports.get(key),
            arrivals.get(key),
            _measurements(job, reports.get(key), measured.get(key, {}), gpu_types),
            now_s,
        )
        for key, job in sorted(managed.items())
        if job.state in _SCHEDULABLE
    )
    return SlurmView(
        now_s=now_s,
        managed=managed,
        rejected=tuple(rejected),
        nodes=tuple(nodes),
        snapshot=ClusterSnapshot(now_s=now_s, nodes=snapshot_nodes, jobs=snapshot_jobs),
        busy=tuple(busy),
        progress=reports,
        unprofiled_gpu_types=unprofiled,
    )


def expand_nodes(text: str) -> list[str]:
    """Slurm's node list ('n1,n3' or 'n[1-2],gpu7') as node names."""
    names: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(text + ","):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            term = text[start:i].strip()
            if term:
                names.extend(expand_hostlist(term))
            start = i + 1
    return names


def _job_groups(jobs: Iterable[SlurmJob]) -> list[list[SlurmJob]]:
    """Plain jobs alone, heterogeneous components together (leader first)."""
    groups: dict[str, list[SlurmJob]] = {}
    for job in jobs:
        groups.setdefault(job.het_job_id or job.job_id, []).append(job)
    out = []
    for group in groups.values():
        group.sort(key=lambda j: j.het_job_offset or 0)
        out.append(group)
    return out


def _managed_job(
    group: Sequence[SlurmJob],
    table: ThroughputTable,
    gpu_types: Sequence[str],
    local_tz: tzinfo,
) -> ManagedJob:
    leader = group[0]
    spec = parse_job_spec(leader.comment, local_tz=local_tz)
    num_gpus = 0
    for component in group:
        request = component.gpus_per_node
        if request is None or request.count < 1:
            raise JobSpecError("the job asks for no GPUs; managed jobs need --gres=gpu:N")
        if request.gpu_type is not None:
            raise JobSpecError(
                f"typed GPU request gpu:{request.gpu_type}:{request.count}; managed jobs ask "
                "for an untyped count (--gres=gpu:N) so the controller can choose the type"
            )
        num_gpus += request.count
    if spec.gpus is not None and spec.gpus != num_gpus:
        raise JobSpecError(f"gpus={spec.gpus} in the spec but the job asks for {num_gpus} GPUs")
    try:
        rates = table.row(spec.job_class, num_gpus, gpu_types)
    except UnknownJobClassError as exc:
        close = difflib.get_close_matches(spec.job_class, table.classes, n=2, cutoff=0.5)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise JobSpecError(
            f"unknown job class {spec.job_class!r}: not in the throughput table{hint} "
            "(`hetsched allocate --list-classes` prints them)"
        ) from exc
    if not gpu_types:
        raise JobSpecError(
            "no GPU type of this cluster is in the throughput table, so the controller cannot "
            "schedule any job; add the types to the site's throughput file (site.throughputs)"
        )
    if not (rates > 0).any():
        raise JobSpecError(
            f"no GPU type of this cluster ({', '.join(gpu_types)}) can run class "
            f"{spec.job_class!r} on {num_gpus} GPUs according to the throughput table"
        )
    key = spec.key or leader.job_id
    return ManagedJob(key=key, spec=spec, components=tuple(group), num_gpus=num_gpus)


def _snapshot_node(node: SlurmNode, ours: int, profiled: set[str]) -> Node:
    """The node with only the GPUs of unmanaged jobs (and managed jobs in COMPLETING) in use,
    and only the GPU types the throughput table knows; `ours`: GPUs managed jobs (not
    COMPLETING) hold on it."""
    in_use: dict[str, int] = {}
    gpus = {t: n for t, n in node.gpus.items() if t in profiled}
    for gpu_type in sorted(gpus):
        used = node.gpus_used.get(gpu_type, 0)
        taken_back = min(ours, used)
        ours -= taken_back
        in_use[gpu_type] = min(node.gpus[gpu_type], max(0, used - taken_back))
    return Node(
        name=node.name,
        gpus=gpus,
        gpus_in_use=in_use,
        features=node.features,
        available=node.available,
    )


def _measurements(
    job: ManagedJob,
    progress: Progress | None,
    before: Mapping[str, float],
    gpu_types: Sequence[str],
) -> dict[str, float]:
    """The job's measured steps/s per GPU type: what earlier rounds saw, updated with the
    report of the run now going (training, not paused, on one known type)."""
    out = {t: v for t, v in before.items() if t in gpu_types}
    if (
        progress is not None
        and job.running
        and progress.status == "running"
        and progress.restart_count in (None, job.leader.restart_count)
        and progress.gpu_type is not None
        and progress.gpu_type in gpu_types
        and progress.steps_per_s is not None
        and progress.steps_per_s > 0
    ):
        out[progress.gpu_type] = progress.steps_per_s
    return out


def _model_job(
    job: ManagedJob,
    progress: Progress | None,
    arrival_s: float | None,
    measured: Mapping[str, float],
    now_s: float,
) -> Job:
    spec = job.spec
    total = spec.steps if spec.steps is not None else (progress.total_steps if progress else None)
    remaining: float | None = None
    if total is not None:
        done = progress.step if progress else 0
        remaining = float(max(0, total - done))
    if arrival_s is None:
        arrival_s = float(job.leader.submit_time or now_s)
    return Job(
        key=job.key,
        job_class=spec.job_class,
        num_gpus=job.num_gpus,
        steps_remaining=remaining,
        total_steps=None if total is None else float(total),
        weight=spec.weight,
        account=job.leader.account,
        user=job.leader.user,
        arrival_s=arrival_s,
        due_s=spec.due_s,
        tardiness_weight=spec.tardiness_weight,
        slurm_job_ids=(job.slurm_id,),
        measured_steps_per_s=measured,
    )
