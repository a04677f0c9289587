"""What the controller sees in Slurm: managed jobs, jobs it refuses, and the snapshot it decides on.

Pure: it takes the records `squeue --json` and `sinfo --json` gave (and a function that reads a
job's trusted progress) and returns values; it runs no command and reads no file itself, so the
recorded JSON of a real cluster tests it.

A job is managed when it is in the controller's scope (its partitions and QOS:
controller/scope.py) and its comment holds a `hetsched:` spec (docs/interfaces.md). The spec is
re-read every round: a user may edit it at any time. A class in no table is scheduled on the
table's neutral prior (core/throughput/prior.py) and learned online. A job whose spec is
malformed, names a class the table does not know while it has no prior, asks for GPUs in a
way the controller cannot move, names a job key bound to another user (controller/keys.py),
or was set aside because the policy failed with it, is *rejected*: reported, and handed back
to Slurm's own scheduling, never kept held.
Every decision is per job: one user's bad input never stops the view of the others.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo

from slurm_hetsched.controller.keys import KeyBinding, KeyClaim, job_id_order, resolve_keys
from slurm_hetsched.controller.managed import ManagedJob, Progress, job_identity
from slurm_hetsched.controller.scope import Scope
from slurm_hetsched.controller.snapshot import snapshot_job, snapshot_nodes
from slurm_hetsched.core.jobspec import JobSpec, JobSpecError, is_managed, parse_job_spec
from slurm_hetsched.core.model import ClusterSnapshot
from slurm_hetsched.core.throughput import ThroughputTable, UnknownJobClassError
from slurm_hetsched.slurm.records import JobState, SlurmJob, SlurmNode

__all__ = [
    "ManagedJob",
    "Progress",
    "RejectedJob",
    "SetAside",
    "SlurmView",
    "build_view",
    "job_groups",
    "job_identity",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SetAside:
    """A job the policy failed with: refused while its comment stays the same.

    Attributes:
        comment: the job's comment when it was set aside; an edited spec is tried again.
        reason: what failed.
        round: the round that set it aside.
    """

    comment: str
    reason: str
    round: int


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
        nodes: Slurm's nodes in the managed partitions (the snapshot's, in the same order).
        snapshot: what the decision core sees: nodes with the GPUs of unmanaged jobs counted as
            in use, and the managed jobs that can be scheduled.
        busy: managed jobs still finishing a requeue or a run (COMPLETING): their GPUs are in
            use and they are left alone this round.
        progress: job key -> its trusted progress report.
        unprofiled_gpu_types: GPU types on nodes that the throughput table has no column for,
            not even an estimated one (no datasheet figures); left out of the snapshot (their
            GPUs stay Slurm's) and reported.
        key_bindings: job key -> the user it belongs to, after this observation (to keep).
        set_aside: the earlier set-asides that still refuse a live job (to keep).
    """

    now_s: float
    managed: Mapping[str, ManagedJob]
    rejected: tuple[RejectedJob, ...]
    nodes: tuple[SlurmNode, ...]
    snapshot: ClusterSnapshot
    busy: tuple[str, ...] = ()
    progress: Mapping[str, Progress] = field(default_factory=dict)
    unprofiled_gpu_types: tuple[str, ...] = ()
    key_bindings: Mapping[str, KeyBinding] = field(default_factory=dict)
    set_aside: Mapping[str, SetAside] = field(default_factory=dict)


# A key stays bound to its user this long after its last job left Slurm (a day).
DEFAULT_KEY_RELEASE_S = 86_400.0

_SCHEDULABLE = frozenset({JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED})


def build_view(
    jobs: Sequence[SlurmJob],
    nodes: Sequence[SlurmNode],
    *,
    now_s: float,
    table: ThroughputTable,
    local_tz: tzinfo,
    partitions: Sequence[str] = (),
    qos: Sequence[str] = (),
    progress: Callable[[ManagedJob], Progress | None] | None = None,
    arrivals: Mapping[str, float] | None = None,
    measured: Mapping[str, Mapping[str, float]] | None = None,
    key_bindings: Mapping[str, KeyBinding] | None = None,
    key_release_s: float = DEFAULT_KEY_RELEASE_S,
    set_aside: Mapping[str, SetAside] | None = None,
) -> SlurmView:
    """The controller's view of the cluster from Slurm's jobs and nodes.

    Args:
        jobs: every job `squeue --json --states=all` listed.
        nodes: every node.
        now_s: the observation's time (Unix seconds).
        table: the throughput table; a class it does not know is rejected.
        local_tz: the time zone of a `due=` without an offset.
        partitions: manage only jobs of these partitions and plan onto their nodes only
            (empty: every partition); jobs and nodes outside are left out (controller/scope.py).
        qos: manage only jobs of these QOS (empty: any).
        progress: reads a managed job's checked progress report (None: no reports).
        arrivals: job key -> arrival time remembered from earlier rounds (a requeue resets
            Slurm's submit time; the first one seen stays the job's arrival).
        measured: job key -> GPU type -> steps/s measured in earlier rounds; the current run's
            report updates its type (the throughput table's online estimate).
        key_bindings: job key -> the user it is bound to, from earlier observations.
        key_release_s: how long a key stays bound after its last job left Slurm.
        set_aside: job identity -> why an earlier round set it aside (refused while its
            comment is unchanged).
    """
    arrivals = arrivals or {}
    measured = measured or {}
    set_aside = set_aside or {}
    scope = Scope.of(partitions, qos)
    nodes = [node for node in nodes if scope.manages_node(node)]
    # A GPU type the table has no column for cannot be decided on: its GPUs are left to Slurm.
    profiled = set(table.gpu_types)
    unprofiled = tuple(sorted({t for node in nodes for t in node.gpus} - profiled))
    gpu_types = tuple(sorted({t for node in nodes for t in node.gpus} & profiled))
    managed: dict[str, ManagedJob] = {}
    rejected: list[RejectedJob] = []
    still_aside: dict[str, SetAside] = {}

    def reject(job: SlurmJob, reason: str) -> None:
        rejected.append(RejectedJob(job.job_id, job.user, reason, job))

    # 1. Parse every spec; a job with a valid spec claims its key, even if refused below, so
    # a spec its owner is fixing does not free the key for someone else.
    parsed: list[tuple[list[SlurmJob], JobSpec, str]] = []
    for group in job_groups(jobs):
        leader = group[0]
        if not is_managed(leader.comment) or not leader.state.is_active:
            continue
        if not scope.manages_job(leader):
            continue
        try:
            spec = parse_job_spec(leader.comment, local_tz=local_tz, now_s=now_s)
        except JobSpecError as exc:
            reject(leader, str(exc))
            continue
        if leader.user_id is None:
            reject(leader, "Slurm reports no user id for the job")
            continue
        parsed.append((group, spec, spec.key or leader.job_id))
    # 2. Keys belong to users: a job naming another user's key is refused, never the owner.
    claims = [
        KeyClaim(
            key,
            int(group[0].user_id or 0),
            group[0].user,
            group[0].job_id,
            float(group[0].submit_time if group[0].submit_time is not None else now_s),
            explicit=spec.key is not None,
        )
        for group, spec, key in parsed
    ]
    keys = resolve_keys(claims, key_bindings or {}, now_s=now_s, release_after_s=key_release_s)
    # 3. What is left must be a job the controller can schedule and move.
    for group, spec, job_key in parsed:
        leader = group[0]
        if leader.job_id in keys.refused:
            reject(leader, keys.refused[leader.job_id])
            continue
        ident = job_identity(job_key, spec.copy)
        aside = set_aside.get(ident)
        if aside is not None and aside.comment == leader.comment:
            still_aside[ident] = aside
            reject(leader, f"set aside in round {aside.round}: {aside.reason}")
            continue
        try:
            job = _managed_job(group, spec, job_key, table, gpu_types)
        except JobSpecError as exc:
            reject(leader, str(exc))
            continue
        if job.key in managed:
            # Two live jobs of one user claim one key and copy: keep the newer (a
            # re-submission), report the other.
            older, newer = sorted([managed[job.key], job], key=lambda j: job_id_order(j.slurm_id))
            managed[job.key] = newer
            reject(older.leader, f"job key {job.key!r} is also used by job {newer.slurm_id}")
            continue
        managed[job.key] = job
    # After the loop: of two jobs with one key, the one kept decides whether the key is busy.
    busy = sorted(key for key, job in managed.items() if job.state is JobState.COMPLETING)

    reports: dict[str, Progress] = {}
    if progress is not None:
        for key, job in managed.items():
            try:
                report = progress(job)
            except Exception:  # a job's files never stop the view of the others
                logger.exception("job %s: cannot read its progress report", key)
                continue
            if report is not None:
                reports[key] = report

    # GPUs managed jobs hold per node, summed once (not once per node).
    ours: dict[str, int] = {}
    for job in managed.values():
        if job.state is not JobState.COMPLETING:
            for name, count in job.gpus_by_node().items():
                ours[name] = ours.get(name, 0) + count
    snapshot_jobs = tuple(
        snapshot_job(
            job, reports.get(key), arrivals.get(key), measured.get(key, {}), gpu_types, now_s
        )
        for key, job in sorted(managed.items())
        if job.state in _SCHEDULABLE
    )
    return SlurmView(
        now_s=now_s,
        managed=managed,
        rejected=tuple(rejected),
        nodes=tuple(nodes),
        snapshot=ClusterSnapshot(
            now_s=now_s, nodes=snapshot_nodes(nodes, ours, profiled), jobs=snapshot_jobs
        ),
        busy=tuple(busy),
        progress=reports,
        unprofiled_gpu_types=unprofiled,
        key_bindings=keys.bindings,
        set_aside=still_aside,
    )


def job_groups(jobs: Iterable[SlurmJob]) -> list[list[SlurmJob]]:
    """Plain jobs alone, heterogeneous components together (leader first)."""
    groups: dict[str, list[SlurmJob]] = {}
    for job in jobs:
        groups.setdefault(job.het_job_id or job.job_id, []).append(job)
    return [sorted(g, key=lambda j: j.het_job_offset or 0) for g in groups.values()]


def _managed_job(
    group: Sequence[SlurmJob],
    spec: JobSpec,
    job_key: str,
    table: ThroughputTable,
    gpu_types: Sequence[str],
) -> ManagedJob:
    leader = group[0]
    if not leader.requeue:
        raise JobSpecError(
            "the job cannot be requeued (--no-requeue or Requeue=0); managed jobs need "
            "--requeue, as every move is a requeue"
        )
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
    smallest = num_gpus
    if spec.elastic_gpus:
        # An elastic job: the controller re-submits it with the count each round chooses.
        smallest = spec.elastic_gpus[0]
        if num_gpus not in spec.elastic_gpus:
            raise JobSpecError(
                f"gpus={spec.gpus}-{spec.gpus_max} in the spec but the job asks for {num_gpus} GPUs"
            )
    elif spec.gpus is not None and spec.gpus != num_gpus:
        raise JobSpecError(f"gpus={spec.gpus} in the spec but the job asks for {num_gpus} GPUs")
    try:
        rates = table.row(spec.job_class, smallest, gpu_types)
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
            f"{spec.job_class!r} on {smallest} GPUs according to the throughput table"
        )
    return ManagedJob(
        key=job_identity(job_key, spec.copy),
        spec=spec,
        components=tuple(group),
        num_gpus=num_gpus,
        job_key=job_key,
        copy=spec.copy,
    )
