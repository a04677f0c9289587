"""Gavel's trace format (read only): 10 tab-separated fields a line -> a Trace."""

from __future__ import annotations

import math

from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.errors import TraceError
from slurm_hetsched.sim.trace_fields import number_field, whole_field
from slurm_hetsched.sim.trace_job import Trace, TraceJob, finish_trace

GAVEL_FIELDS = (
    "job_type",
    "command",
    "working_directory",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "SLO",
    "arrival_time",
)
# Reference GPU type for Gavel's SLO field (a multiple of the job's duration there), the same
# one Gavel's generator derives steps from.
REFERENCE_GPU_TYPE = "v100"


def parse_gavel(
    text: str,
    *,
    source: str = "<string>",
    table: ThroughputTable | None = None,
    reference_gpu_type: str = REFERENCE_GPU_TYPE,
) -> Trace:
    """Parse Gavel's trace format: one job per line, 10 tab-separated fields (GAVEL_FIELDS).

    `job_type` is the class, `scale_factor` the GPU count, `priority_weight` the weight and
    `arrival_time` seconds from the start; `command`, `working_directory`, `num_steps_arg` and
    `needs_data_dir` (0 or 1) only matter on Gavel's physical cluster and are checked, then
    dropped. Job ids are the 0-based line order of the jobs, as Gavel numbers them.

    `SLO` is -1 for none, else (as in Gavel's scheduler) a multiple of the job's duration,
    taken as total_steps / steps/s on `reference_gpu_type` at its GPU count from `table`;
    converting one needs `table`.

    Raises:
        TraceError: naming `source`, the line and the field, for a line without exactly 10
            fields, a field that is not a number where one is expected, or an SLO without a
            table to convert it.
    """
    jobs: list[TraceJob] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        here = f"{source}, line {lineno}"
        fields = raw.split("\t")
        if len(fields) != len(GAVEL_FIELDS):
            raise TraceError(
                f"{here}: {len(fields)} tab-separated fields; expected {len(GAVEL_FIELDS)} "
                f"({', '.join(GAVEL_FIELDS)})"
            )
        values = dict(zip(GAVEL_FIELDS, fields, strict=True))
        if values["needs_data_dir"].strip() not in ("0", "1"):
            raise TraceError(
                f"{here}: field 5 (needs_data_dir) is {values['needs_data_dir']!r}; expected 0 or 1"
            )
        job_class = values["job_type"].strip()
        if not job_class:
            raise TraceError(f"{here}: field 1 (job_type) is empty; expected a job class")
        steps = whole_field(values["total_steps"], "field 6 (total_steps)", here, "steps >= 1")
        num_gpus = whole_field(values["scale_factor"], "field 7 (scale_factor)", here, "GPUs >= 1")
        weight = number_field(values["priority_weight"], "field 8 (priority_weight)", here)
        slo = number_field(values["SLO"], "field 9 (SLO)", here)
        arrival = number_field(
            values["arrival_time"], "field 10 (arrival_time)", here, "seconds >= 0"
        )
        slo_s = None
        if slo != -1:
            slo_s = _gavel_slo_s(slo, job_class, num_gpus, steps, here, table, reference_gpu_type)
        jobs.append(
            TraceJob(
                job_id=str(len(jobs)),
                arrival_s=arrival,
                job_class=job_class,
                num_gpus=num_gpus,
                total_steps=steps,
                weight=weight,
                slo_s=slo_s,
                source=source,
                line=lineno,
            )
        )
    return finish_trace(jobs, source)


def _gavel_slo_s(
    slo: float,
    job_class: str,
    num_gpus: int,
    steps: int,
    here: str,
    table: ThroughputTable | None,
    reference_gpu_type: str,
) -> float:
    if not (math.isfinite(slo) and slo > 0):
        raise TraceError(f"{here}: field 9 (SLO) is {slo!r}; expected -1 (none) or a number > 0")
    if table is None:
        raise TraceError(
            f"{here}: field 9 (SLO) is {slo!r}, a multiple of the job's duration; converting "
            "it needs a throughput table (pass `table=`), or set the SLO to -1"
        )
    if job_class not in table.classes or reference_gpu_type not in table.gpu_types:
        raise TraceError(
            f"{here}: SLO of class {job_class!r} needs its steps/s on {reference_gpu_type}, "
            "which the throughput table does not have"
        )
    rate = table.steps_per_s(job_class, reference_gpu_type, num_gpus)
    if rate <= 0:
        raise TraceError(
            f"{here}: SLO of class {job_class!r} on {num_gpus} GPU(s) needs its steps/s on "
            f"{reference_gpu_type}, and the table says it cannot run there"
        )
    return slo * steps / rate
