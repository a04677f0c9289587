"""The exact offline optimum of OASiS's problem on small instances: the most total utility any
scheduler that knows every job in advance could earn (OASiS's OPT, the denominator of its
competitive ratio; shared notes astraea-oasis.md sections 10 and 16).

The model (OASiS's own, with GPUs of several types instead of worker/PS servers):
- Time is cut into `n_slots` slots of `slot_s`; a job may run from the first slot that starts at
  or after its arrival (a round-based scheduler sees it there).
- In each slot a job is idle or runs on one node with its GPUs of one type (`num_gpus`, or one
  of its `other_counts`), at the rate of that type and count. It may change node, type and count
  between slots at no cost (OASiS's elastic jobs).
- Its steps are reached at the exact moment within a slot where the work done adds up to them;
  its utility is its `Utility` at that moment. The GPUs are held for the whole of that slot.
- A schedule is a job's choice for every slot from its arrival slot to its completion slot;
  choose at most one schedule per job so that no (node, GPU type, slot) holds more GPUs than
  it has, maximising the sum of the chosen schedules' utilities: a set-packing integer
  programme over enumerated schedules (the notes' form (14)-(18)), solved exactly by HiGHS
  (scipy.optimize.milp, relative gap 0).

Enumeration is exponential (up to (options + 1) ^ slots a job), so it is pruned, only safely:
a schedule ends at its completion (running on after it only costs capacity), a branch that
cannot complete within the horizon even at the job's fastest rate is cut, and a schedule is
dropped where idling one of its slots still completes no worse (it holds a strict superset of
that one's GPUs for no more utility: time-insensitive jobs have many). Jobs that cannot complete
within the horizon earn nothing. Instances with more than MAX_JOBS jobs, MAX_SLOTS slots or
MAX_SCHEDULES enumerated schedules are refused with InstanceTooLargeError.

Pure: an instance in, the optimum out.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from slurm_hetsched.core.model import Node
from slurm_hetsched.core.problem import table_rate
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.core.utility import Utility
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.traces import TraceJob

MAX_JOBS = 16
MAX_SLOTS = 16
MAX_SCHEDULES = 400_000  # columns of the integer programme, over all jobs
_MAX_VISITS = 5 * MAX_SCHEDULES  # partial schedules one job may explore
_TIME_EPS_S = 1e-9  # as the simulator: the last step may fall this close past a slot's end

# One slot of a schedule: idle (None), or (node, GPU type, GPUs) it runs on.
Step = tuple[str, str, int] | None


class InstanceTooLargeError(ConfigError):
    """An instance beyond the sizes the exact optimum enumerates (the module's limits)."""


@dataclass(frozen=True, slots=True)
class OptimumJob:
    """One job of an instance.

    Attributes:
        arrival_s: when it arrives (seconds from the start of slot 0).
        steps: the work to do (> 0).
        num_gpus: the GPUs it runs on.
        rates: GPU type -> steps/s on `num_gpus` GPUs of it (a type absent or at 0: not there).
        utility: what finishing is worth, measured from `arrival_s`.
        job_id: a name for results and messages.
        other_counts: other GPU counts it may run on instead (elastic jobs; the trace's
            `allowed_gpus`): count -> GPU type -> steps/s at that count.
    """

    arrival_s: float
    steps: float
    num_gpus: int
    rates: Mapping[str, float]
    utility: Utility
    job_id: str = ""
    other_counts: Mapping[int, Mapping[str, float]] = field(default_factory=dict)

    def options(self, nodes: Mapping[str, Mapping[str, int]]) -> list[tuple[Step, float]]:
        """Every (node, type, GPUs) it can run on in one slot, with its steps/s there."""
        counts = {self.num_gpus: self.rates, **self.other_counts}
        return [
            ((node, gpu_type, count), rate)
            for node, gpus in nodes.items()
            for gpu_type, capacity in gpus.items()
            for count, rates in counts.items()
            if count <= capacity and (rate := rates.get(gpu_type, 0.0)) > 0
        ]


@dataclass(frozen=True, slots=True)
class OptimumInstance:
    """Nodes (name -> GPU type -> GPUs), jobs, and the slots: `n_slots` of `slot_s` seconds."""

    nodes: Mapping[str, Mapping[str, int]]
    jobs: tuple[OptimumJob, ...]
    slot_s: float
    n_slots: int

    @property
    def horizon_s(self) -> float:
        return self.slot_s * self.n_slots


@dataclass(frozen=True, slots=True)
class Schedule:
    """One job's schedule: `steps[k]` is what it does in slot `first_slot + k`, up to and
    including the slot it completes in (at `completion_s`, worth `utility`)."""

    job: int  # its index in the instance's jobs
    first_slot: int
    steps: tuple[Step, ...]
    completion_s: float
    utility: float

    def uses(self) -> Iterator[tuple[str, str, int, int]]:
        """(node, GPU type, slot, GPUs) of every slot it runs in."""
        for k, step in enumerate(self.steps):
            if step is not None:
                yield step[0], step[1], self.first_slot + k, step[2]


class Optimum(NamedTuple):
    """The optimum: its total utility and the schedules chosen (one per job that earns)."""

    total_utility: float
    schedules: tuple[Schedule, ...]


def arrival_slot(job: OptimumJob, slot_s: float) -> int:
    """The first slot starting at or after the job's arrival."""
    return max(0, math.ceil(job.arrival_s / slot_s - 1e-9))


def check_size(instance: OptimumInstance) -> None:
    """InstanceTooLargeError (or ConfigError for a malformed instance) before any work."""
    if not (math.isfinite(instance.slot_s) and instance.slot_s > 0):
        raise ConfigError(f"slot_s is {instance.slot_s!r}; expected seconds > 0")
    if instance.n_slots < 1:
        raise ConfigError(f"n_slots is {instance.n_slots!r}; expected at least 1 slot")
    for job in instance.jobs:
        if not (job.steps > 0 and job.num_gpus >= 1 and job.arrival_s >= 0):
            raise ConfigError(f"job {job.job_id!r}: expected steps > 0, GPUs >= 1, arrival >= 0")
    if len(instance.jobs) > MAX_JOBS or instance.n_slots > MAX_SLOTS:
        raise InstanceTooLargeError(
            f"{len(instance.jobs)} jobs over {instance.n_slots} slots: the exact optimum "
            f"enumerates schedules, exponential in slots; at most {MAX_JOBS} jobs and "
            f"{MAX_SLOTS} slots"
        )


def job_schedules(
    instance: OptimumInstance, index: int, limit: int = MAX_SCHEDULES
) -> list[Schedule]:
    """Every undominated schedule of job `index` that completes within the horizon with
    positive utility (the module's pruning); InstanceTooLargeError past `limit` of them."""
    job = instance.jobs[index]
    slot_s, n_slots = instance.slot_s, instance.n_slots
    first = arrival_slot(job, slot_s)
    options = job.options(instance.nodes)
    if not options or first >= n_slots:
        return []
    fastest = max(rate for _, rate in options)
    found: list[Schedule] = []
    path: list[tuple[Step, float]] = []
    visits = [0]

    def visit(slot: int, work: float) -> None:
        visits[0] += 1
        if visits[0] > _MAX_VISITS:
            _too_large()
        left = job.steps - work
        if left > fastest * slot_s * (n_slots - slot) + 1e-9 * fastest:
            return  # cannot complete in time even at the fastest rate throughout
        path.append((None, 0.0))
        visit(slot + 1, work)
        path.pop()
        for step, rate in options:
            needed_s = left / rate
            path.append((step, rate))
            if needed_s <= slot_s + _TIME_EPS_S:
                _emit(slot * slot_s, min(needed_s, slot_s))
            else:
                visit(slot + 1, work + rate * slot_s)
            path.pop()

    def _too_large() -> None:
        raise InstanceTooLargeError(
            f"job {job.job_id or index!r} takes the instance past {MAX_SCHEDULES} schedules "
            f"(or {_MAX_VISITS} partial ones) over {n_slots} slots of {slot_s:g} s: the exact "
            "optimum enumerates them; fewer slots, nodes or jobs"
        )

    def _emit(last_start_s: float, last_s: float) -> None:
        completion_s = last_start_s + last_s
        value = job.utility.value(completion_s, job.arrival_s)
        if value <= 0 or _dominated(job, path, slot_s, last_start_s, value):
            return
        if len(found) >= limit:
            _too_large()
        steps = tuple(step for step, _ in path)
        found.append(Schedule(index, first, steps, completion_s, value))

    visit(first, 0.0)
    return found


def _dominated(
    job: OptimumJob,
    path: Sequence[tuple[Step, float]],
    slot_s: float,
    last_start_s: float,
    value: float,
) -> bool:
    """Whether idling one of the schedule's slots before its last still completes (within the
    last slot: less work never completes sooner) with utility no lower: that schedule holds a
    subset of this one's GPUs, so an optimum never needs this one."""
    last_rate = path[-1][1]
    before = sum(rate for _, rate in path[:-1]) * slot_s
    for step, rate in path[:-1]:
        if step is None:
            continue
        left = job.steps - (before - rate * slot_s)
        if left / last_rate <= slot_s + _TIME_EPS_S:
            end_s = last_start_s + min(left / last_rate, slot_s)
            if job.utility.value(end_s, job.arrival_s) >= value:
                return True
    return False


def offline_optimum(instance: OptimumInstance) -> Optimum:
    """The instance's optimum (module docstring), exact up to HiGHS's tolerances.

    Raises:
        InstanceTooLargeError: beyond MAX_JOBS, MAX_SLOTS or MAX_SCHEDULES.
        ConfigError: a malformed instance, or HiGHS failing to solve it.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    check_size(instance)
    columns: list[Schedule] = []
    for index in range(len(instance.jobs)):
        columns += job_schedules(instance, index, MAX_SCHEDULES - len(columns))
    if not columns:
        return Optimum(0.0, ())
    n_jobs = len(instance.jobs)
    cell_row: dict[tuple[str, str, int], int] = {}
    rows, cols, vals = [], [], []
    for col, schedule in enumerate(columns):
        rows.append(schedule.job)  # at most one schedule a job
        cols.append(col)
        vals.append(1.0)
        for node, gpu_type, slot, gpus in schedule.uses():
            row = cell_row.setdefault((node, gpu_type, slot), n_jobs + len(cell_row))
            rows.append(row)
            cols.append(col)
            vals.append(float(gpus))
    upper = np.ones(n_jobs + len(cell_row))
    for (node, gpu_type, _), row in cell_row.items():
        upper[row] = instance.nodes[node][gpu_type]
    matrix = coo_matrix((vals, (rows, cols)), shape=(len(upper), len(columns))).tocsr()
    utility = np.array([s.utility for s in columns])
    solved = milp(
        -utility,
        constraints=LinearConstraint(matrix, -np.inf, upper),
        integrality=np.ones(len(columns)),
        bounds=Bounds(0, 1),
        options={"mip_rel_gap": 0.0},
    )
    if solved.status != 0 or solved.x is None:
        raise ConfigError(f"HiGHS did not solve the offline optimum: {solved.message}")
    chosen = tuple(columns[c] for c in np.flatnonzero(solved.x > 0.5))
    return Optimum(float(sum(s.utility for s in chosen)), chosen)


def instance_from_trace(
    trace: Sequence[TraceJob],
    nodes: Sequence[Node],
    table: ThroughputTable,
    slot_s: float,
    n_slots: int,
) -> OptimumInstance:
    """The instance of a trace on nodes: each job's rates from the table at its GPU count on
    the nodes' types (and at its `allowed_gpus` as other counts), its own utility."""
    layout = {node.name: dict(node.gpus) for node in nodes}
    types_ = sorted({t for gpus in layout.values() for t in gpus})

    def rates(job: TraceJob, count: int) -> dict[str, float]:
        return {t: table_rate(table, job.job_class, t, count) for t in types_}

    jobs = tuple(
        OptimumJob(
            arrival_s=job.arrival_s,
            steps=float(job.total_steps),
            num_gpus=job.num_gpus,
            rates=rates(job, job.num_gpus),
            utility=job.the_utility(),
            job_id=job.job_id,
            other_counts={g: rates(job, g) for g in job.allowed_gpus if g != job.num_gpus},
        )
        for job in trace
    )
    return OptimumInstance(layout, jobs, slot_s, n_slots)
