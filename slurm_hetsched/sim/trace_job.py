"""One job of a trace (`TraceJob`, with the checks of its fields) and the rules of a whole
trace: at least one job, ids unique. Every trace format parses into these records."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from slurm_hetsched.core.jobspec import MEM_GIB_MAX
from slurm_hetsched.core.model import Job
from slurm_hetsched.core.utility import (
    Utility,
    UtilityFieldError,
    default_utility,
    utility_fields,
    utility_from_fields,
)
from slurm_hetsched.errors import TraceError
from slurm_hetsched.sim.restart_costs import MAX_RESTART_S, is_restart_s


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace.

    Attributes:
        job_id: unique within the trace; the file's `id`, else the job's 0-based position.
        arrival_s: submission time, seconds from the trace's start (>= 0).
        job_class: key into the throughput table.
        num_gpus: GPUs the job uses at once, all of one type (Gavel's scale factor), >= 1.
        total_steps: training steps of the whole job, >= 1.
        weight: priority weight (> 0; Gavel's priority_weight).
        account: Slurm account (tenant); "" for none.
        due_s: due date, seconds from the trace's start, or None.
        tardiness_weight: cost per second late; 0 without a due date.
        slo_s: completion-time objective, seconds from arrival, or None.
        allowed_gpus: GPU counts the job may run with, ascending, starting at num_gpus (a
            placement policy such as ANDREAS chooses); () = num_gpus only.
        restart_s: what one move costs the job (seconds without progress, 0 to a day), or
            None for the simulation's default (sim/restart_costs.py). Gavel's format has none.
        mem_gib: GPU memory one GPU of the job needs (GiB, as the job spec's `mem=`), or None;
            GPU types with less are ruled out for it (core/memory_fit.py).
        utility: what finishing is worth to the job (core/utility.py; the record's `utility`,
            `umax`, `target_s`, `sharp`), or None: its due date and tardiness weight read as
            one. It must be one those fields can give with the job's due date and tardiness
            weight (the due date of a shape that reads none is set to the job's).
        source: the file (or other origin) the job came from, for messages only.
        line: its line in `source` (1-based), or None; for messages only.
    """

    job_id: str
    arrival_s: float
    job_class: str
    num_gpus: int
    total_steps: int
    weight: float = 1.0
    account: str = ""
    due_s: float | None = None
    tardiness_weight: float = 0.0
    slo_s: float | None = None
    allowed_gpus: tuple[int, ...] = ()
    restart_s: float | None = None
    mem_gib: float | None = None
    utility: Utility | None = None
    source: str = field(default="", compare=False)
    line: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        checks = (
            (self.job_id != "", "id", self.job_id, "a non-empty string"),
            (self.job_class != "", "class", self.job_class, "a non-empty job class"),
            (_finite(self.arrival_s) and self.arrival_s >= 0, "arrival_s", self.arrival_s,
             "seconds >= 0 from the trace's start"),
            (self.num_gpus >= 1, "num_gpus", self.num_gpus, "a whole number >= 1"),
            (self.total_steps >= 1, "steps", self.total_steps, "a whole number >= 1"),
            (_finite(self.weight) and self.weight > 0, "weight", self.weight, "a number > 0"),
            (self.due_s is None or (_finite(self.due_s) and self.due_s >= self.arrival_s),
             "due_s", self.due_s, f"none or seconds >= arrival_s ({self.arrival_s})"),
            (_finite(self.tardiness_weight) and self.tardiness_weight >= 0, "tardiness_weight",
             self.tardiness_weight, "a number >= 0"),
            (self.slo_s is None or (_finite(self.slo_s) and self.slo_s > 0), "slo_s",
             self.slo_s, "none or seconds > 0 after arrival"),
            (not self.allowed_gpus or (self.allowed_gpus[0] == self.num_gpus
             and list(self.allowed_gpus) == sorted(set(self.allowed_gpus))), "allowed_gpus",
             list(self.allowed_gpus), f"distinct ascending counts from num_gpus ({self.num_gpus})"),
            (self.restart_s is None or is_restart_s(self.restart_s), "restart_s", self.restart_s,
             f"none or seconds from 0 to {MAX_RESTART_S:.0f} (a day)"),
            (self.mem_gib is None or (_finite(self.mem_gib) and 0 < self.mem_gib <= MEM_GIB_MAX),
             "mem_gib", self.mem_gib, f"none or GiB above 0 up to {MEM_GIB_MAX:g}"),
        )  # fmt: skip
        for ok, key, value, expected in checks:
            if not ok:
                raise TraceError(f"{self.where}: {key} is {value!r}; expected {expected}")
        if self.utility is not None:
            object.__setattr__(self, "utility", self._written_utility(self.utility))

    def _written_utility(self, utility: Utility) -> Utility:
        """`utility` as the trace's fields give it back with this job's due date and
        tardiness weight (so that writing and reading keep it); TraceError if they cannot."""
        try:
            written = utility_from_fields(
                *utility_fields(utility), self.due_s, self.tardiness_weight
            )
        except UtilityFieldError as exc:
            raise TraceError(f"{self.where}: {exc}") from None
        if utility.kind in ("sigmoid", "linear") or utility.target_s is not None:
            utility = dataclasses.replace(utility, due_s=written.due_s)  # it reads no due date
        if utility != written:
            raise TraceError(
                f"{self.where}: utility is {utility!r}; expected one the fields utility, umax, "
                f"target_s and sharp give with the job's due_s ({self.due_s!r}) and "
                f"tardiness_weight ({self.tardiness_weight!r})"
            )
        return written

    def the_utility(self) -> Utility:
        """Its utility: its own, or its due date and tardiness weight read as one."""
        if self.utility is not None:
            return self.utility
        return default_utility(self.due_s, self.tardiness_weight)

    @property
    def where(self) -> str:
        """Where the job came from, e.g. "t.csv, line 4 (job '3')"."""
        place = self.source or "trace"
        if self.line is not None:
            place += f", line {self.line}"
        return f"{place} (job {self.job_id!r})"

    def to_job(
        self, *, steps_remaining: float | None = None, restart_s: float | None = None
    ) -> Job:
        """The core's `Job` for this record (key = job_id); by default nothing run yet and the
        record's own restart cost, else the steps left and the cost a simulation knows."""
        return Job(
            key=self.job_id,
            job_class=self.job_class,
            num_gpus=self.num_gpus,
            steps_remaining=float(self.total_steps) if steps_remaining is None else steps_remaining,
            total_steps=float(self.total_steps),
            weight=self.weight,
            account=self.account,
            arrival_s=self.arrival_s,
            due_s=self.due_s,
            tardiness_weight=self.tardiness_weight,
            slo_s=self.slo_s,
            allowed_gpus=self.allowed_gpus,
            restart_s=self.restart_s if restart_s is None else restart_s,
            mem_gib=self.mem_gib,
            utility=self.utility,
        )


Trace = tuple[TraceJob, ...]


def to_jobs(trace: Iterable[TraceJob]) -> tuple[Job, ...]:
    """`TraceJob.to_job` for each job, in trace order."""
    return tuple(job.to_job() for job in trace)


def finish_trace(jobs: list[TraceJob], source: str) -> Trace:
    """The parsed jobs as a Trace; TraceError if there are none or two share an id."""
    if not jobs:
        raise TraceError(f"{source}: no jobs; expected at least one job line")
    seen: dict[str, TraceJob] = {}
    for job in jobs:
        if job.job_id in seen:
            raise TraceError(
                f"{job.where}: id {job.job_id!r} is also on line {seen[job.job_id].line}; "
                "expected unique ids"
            )
        seen[job.job_id] = job
    return tuple(jobs)


def _finite(value: float) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
