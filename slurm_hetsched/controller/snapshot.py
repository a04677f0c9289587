"""What the decision core sees of Slurm's nodes and the managed jobs (the snapshot's parts).

Pure. A node Slurm would not give new jobs (drained, down, reserved, ...: SlurmNode.available)
stays in the snapshot with `available=False`, so it offers no free GPU, while the managed jobs
still running on it are jobs to schedule like any other: the round places them elsewhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

from slurm_hetsched.controller.managed import ManagedJob, Progress
from slurm_hetsched.core.model import ClusterSnapshot, Job, Node
from slurm_hetsched.slurm.records import SlurmNode


def snapshot_nodes(
    nodes: Sequence[SlurmNode], ours: Mapping[str, int], profiled: Collection[str]
) -> tuple[Node, ...]:
    """One snapshot node per Slurm node, in order.

    Args:
        nodes: the nodes the controller may plan onto (its partitions).
        ours: node name -> GPUs managed jobs (not COMPLETING) hold there; they are the
            controller's to re-plan, so they do not count as in use.
        profiled: the GPU types of the throughput table; other types are left out.
    """
    return tuple(_snapshot_node(node, ours.get(node.name, 0), profiled) for node in nodes)


def _snapshot_node(node: SlurmNode, ours: int, profiled: Collection[str]) -> Node:
    """The node with only the GPUs of unmanaged jobs (and managed jobs in COMPLETING) in use,
    and only the GPU types the throughput table knows."""
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
        # Node.free_gpus is 0 on an unavailable node, whoever holds its GPUs.
        available=node.available,
    )


def _measurements(
    job: ManagedJob,
    progress: Progress | None,
    before: Mapping[str, float],
    gpu_types: Sequence[str],
) -> dict[str, float]:
    """The job's measured steps/s per GPU type: what earlier rounds saw, updated with the
    report of the run now going (training, not paused, on one known type). A run across
    several components (types or nodes: its rate is the gang's slowest, spread) or an elastic
    job on more than its smallest gang (the rates rescale the row at that count) measures no
    one type's figure at the job's count, so it updates nothing."""
    out = {t: v for t, v in before.items() if t in gpu_types}
    elastic = job.spec.elastic_gpus
    at_its_count = not elastic or job.num_gpus == elastic[0]
    if (
        progress is not None
        and len(job.components) == 1
        and at_its_count
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


def snapshot_job(
    job: ManagedJob,
    progress: Progress | None,
    arrival_s: float | None,
    measured_before: Mapping[str, float],
    gpu_types: Sequence[str],
    now_s: float,
) -> Job:
    """The managed job as the decision core sees it. Its memory need (`Job.mem_gib`) is the
    larger of the spec's `mem=` and the peak its progress report measured, so a job that grew
    past its own estimate is never sent back where it no longer fits.

    Args:
        job: a managed job that can be scheduled (pending, running or suspended).
        progress: its trusted progress report, if any.
        arrival_s: its arrival remembered from earlier rounds (None: Slurm's submit time).
        measured_before: GPU type -> steps/s measured in earlier rounds.
        gpu_types: the snapshot's GPU types.
        now_s: the observation's time.
    """
    measured = _measurements(job, progress, measured_before, gpu_types)
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
        # An elastic job is its smallest gang, allowed every count up to its largest.
        num_gpus=spec.elastic_gpus[0] if spec.elastic_gpus else job.num_gpus,
        allowed_gpus=spec.elastic_gpus,
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
        mem_gib=_memory_need(spec.mem_gib, progress.peak_mem_gib if progress else None),
        utility=spec.utility,
        preemptible=spec.preemptible,
    )


def _memory_need(spec_gib: float | None, peak_gib: float | None) -> float | None:
    """The larger of the two figures either may lack (None: neither is known)."""
    known = [gib for gib in (spec_gib, peak_gib) if gib is not None]
    return max(known) if known else None


def with_restart_costs(
    snapshot: ClusterSnapshot, restart_s: Mapping[str, float]
) -> ClusterSnapshot:
    """The snapshot with each job's restart cost (`Job.restart_s`, controller/restart_cost.py)
    from `restart_s` (job identity -> seconds); a job not there keeps None: the mechanism's
    default."""
    jobs = tuple(
        dataclasses.replace(job, restart_s=restart_s.get(job.key)) for job in snapshot.jobs
    )
    return dataclasses.replace(snapshot, jobs=jobs)
