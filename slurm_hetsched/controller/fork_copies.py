"""The sbatch options of a forked copy (HadarE): the job itself, once more, held.

A copy is a separate single-node Slurm job of the job's user, submitted from the job's own
batch script (`sbatch --uid/--gid`, as a re-submission: controller/enact.py), with the same key
and a copy index: `copy=<k>` in its comment, `.copy<k>` after its name and its log files, and
`HETSCHED_COPY=<k>` in its environment (the wrapper keeps the copy's files in `copy-<k>/` of
the key folder). It is submitted held with an untyped GPU count; the policy places it like any
job. Pure: the caller reads Slurm and the clock.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_hetsched.controller.managed import ManagedJob
from slurm_hetsched.controller.resubmit_options import carried_limits
from slurm_hetsched.slurm.records import GpuRequest, JobOptions

COPY_ENV = "HETSCHED_COPY"


def copy_suffix(copy: int) -> str:
    """What a copy's name and log files end with."""
    return f".copy{copy}"


def copy_comment(job: ManagedJob, copy: int) -> str:
    """The job's comment with its key and `copy=<copy>` (a copy never forks itself: only copy
    0 is forked)."""
    comment = job.leader.comment.rstrip("; ")
    if not job.spec.key:
        comment += f";key={job.job_key}"
    return comment + f";copy={copy}"


def copy_options(
    job: ManagedJob, copy: int, environment: Mapping[str, str], now_s: float
) -> JobOptions:
    """The options of copy `copy` of `job` (copy 0, the user's own job)."""
    leader = job.leader
    suffix = copy_suffix(copy)
    return JobOptions(
        job_name=(leader.name or "job") + suffix,
        gpus=GpuRequest(job.num_gpus),
        nodes=1,
        ntasks=job.num_gpus,
        partition=leader.partition or None,
        account=leader.account or None,
        comment=copy_comment(job, copy),
        output=(leader.standard_output + suffix) if leader.standard_output else None,
        error=(leader.standard_error + suffix) if leader.standard_error else None,
        chdir=leader.work_dir or None,
        hold=True,
        requeue=True,
        open_mode_append=True,
        export=dict(environment) | {COPY_ENV: str(copy)},
        export_all=False,
        extra=carried_limits(leader, now_s),
    )
