"""Checking a trace against a throughput table and a cluster: can every job run somewhere?"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.errors import TraceError
from slurm_hetsched.sim.trace_job import TraceJob

_MAX_LISTED = 20  # problems listed in one validation error


def validate_trace(
    trace: Sequence[TraceJob],
    table: ThroughputTable,
    gpu_types: Sequence[str],
    *,
    capacity: Mapping[str, int] | None = None,
) -> None:
    """Check that every job can run on some GPU type; name every one that cannot.

    A job can run on type t when the table gives its class a positive steps/s on t at its
    GPU count and, if `capacity` is given, the cluster has at least num_gpus GPUs of t.

    Args:
        trace: the jobs.
        table: the throughput table the simulation uses.
        gpu_types: the cluster's GPU types (each must be a column of `table`).
        capacity: optional GPUs per type of the cluster.

    Raises:
        TraceError: listing each job whose class is not in the table or that no GPU type can
            run (with its file and line), and the known classes.
        InvalidProblemError: a GPU type of `gpu_types` has no column in `table`.
    """
    types_ = tuple(gpu_types)
    known = set(table.classes)
    problems: list[str] = []
    unknown_class = False
    for job in trace:
        if job.job_class not in known:
            unknown_class = True
            problems.append(f"{job.where}: class {job.job_class!r} is not in the throughput table")
            continue
        row = table.row(job.job_class, job.num_gpus, types_)
        runnable = [t for t, v in zip(types_, row, strict=True) if v > 0]
        if not runnable:
            counts = ", ".join(str(n) for n in table.gpu_counts(job.job_class))
            problems.append(
                f"{job.where}: class {job.job_class!r} on {job.num_gpus} GPU(s) cannot run on "
                f"any of {list(types_)} (the table has this class at {counts} GPU(s))"
            )
            continue
        if capacity is not None and not any(capacity.get(t, 0) >= job.num_gpus for t in runnable):
            sizes = ", ".join(f"{t}: {capacity.get(t, 0)}" for t in runnable)
            problems.append(
                f"{job.where}: needs {job.num_gpus} GPUs of one type, and the types that can "
                f"run it have fewer ({sizes})"
            )
    if not problems:
        return
    listed = "\n  ".join(problems[:_MAX_LISTED])
    more = f"\n  ... and {len(problems) - _MAX_LISTED} more" if len(problems) > _MAX_LISTED else ""
    hint = f"\nknown classes: {list(table.classes)}" if unknown_class else ""
    raise TraceError(
        f"{len(problems)} of {len(trace)} jobs cannot run ({table.source or 'throughput table'}; "
        f"GPU types {list(types_)}); fix or remove them:\n  {listed}{more}{hint}"
    )
