"""The sbatch options of a re-submitted job: the old job's own, one component per GPU slice.

A move across GPU types or nodes (or back from several to one) re-submits a job under the
same key (controller/enact.py). The new job carries the whole old one: user and group (by
`sbatch --uid/--gid`, not here), account, partition, QOS, name, working directory, output
and error files (appended to), the comment with the key, and the rest of its time limit.

Pure: the caller reads Slurm and the clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from slurm_hetsched.controller.managed import ManagedJob
from slurm_hetsched.core.model import Placement
from slurm_hetsched.slurm.records import GpuRequest, JobOptions, JobState, SlurmJob


def remaining_minutes(leader: SlurmJob, now_s: float) -> int | None:
    """The old job's time limit less what its last run used, in whole minutes (at least 1);
    None when it has no limit.

    Slurm gives each run of a requeued job its whole limit again, so a job moved in place
    restarts its clock; a re-submitted job continues the run it replaces, as if it had not
    moved. Only a job running when the round read Slurm has a run to count: one held since an
    earlier round gets its whole limit, as a requeue in place would.
    """
    limit = leader.time_limit_min
    if limit is None:
        return None
    used_s = 0.0
    if leader.state is JobState.RUNNING and leader.start_time is not None:
        used_s = max(0.0, now_s - leader.start_time)
    return max(1, limit - math.ceil(used_s / 60.0))


def carried_limits(leader: SlurmJob, now_s: float) -> tuple[tuple[str, str], ...]:
    """The old job's QOS and the rest of its time limit, as extra sbatch options."""
    extra: list[tuple[str, str]] = []
    if leader.qos:
        extra.append(("qos", leader.qos))
    minutes = remaining_minutes(leader, now_s)
    if minutes is not None:
        extra.append(("time", str(minutes)))
    return tuple(extra)


def resubmission_options(
    job: ManagedJob, target: Placement, environment: Mapping[str, str], now_s: float
) -> list[JobOptions]:
    """One JobOptions per slice of `target` (one slice: a plain job), each asking one task
    per GPU (the template starts one rank per task: sbatch_templates/train.sbatch)."""
    leader = job.leader
    comment = (
        leader.comment if job.spec.key else leader.comment.rstrip("; ") + f";key={job.job_key}"
    )
    extra = carried_limits(leader, now_s)
    return [
        JobOptions(
            job_name=leader.name,
            gpus=GpuRequest(part.count),
            constraint=part.gpu_type,
            nodelist=part.node,
            nodes=1,
            ntasks=part.count,
            partition=leader.partition or None,
            account=leader.account or None,
            comment=comment,
            output=leader.standard_output or None,
            error=leader.standard_error or None,
            chdir=leader.work_dir or None,
            requeue=True,
            open_mode_append=True,
            export=environment,
            export_all=False,
            extra=extra,  # every component: each has its own limit and QOS
        )
        for part in target.slices
    ]
