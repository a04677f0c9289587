"""Exploration: a job whose speed on some GPU types is an estimate (a class no table knows, or
types the table has no measured column for) is given short stints on those types, so that its
row is measured early instead of guessed (docs/throughput.md, "Learning and exploration").

While a job explores, its throughput row in the problem keeps only the type it is to be
measured on next (the others are 0 for that round), so the policy can give it GPUs of that
type only; the round mechanism then moves it there like any other move, and the move is counted
as one. A stint ends as soon as the job has a measurement on the type: the next type follows.

Bounded: only types the job could use (the prior gives them a rate and the cluster has
`num_gpus` of them) and not measured yet are explored, most promising first. A stint is given
up after the job waited `rounds_per_type` rounds for its type while it ran elsewhere or another
type it could use had room (a round it could have run elsewhere), so exploration costs a job
at most that many rounds per type, however busy the type is. A round it waits in a full
cluster costs nothing and counts nothing. The stints are kept in the round plan
(`RoundPlan.exploring`), so the count survives a restart of the controller.

Pure: jobs and numbers in, a mapping out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from slurm_hetsched.core.memory_fit import too_small
from slurm_hetsched.core.model import GpuType, Job, Placement
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.core.throughput.prior import estimated_entries


@dataclass(frozen=True, slots=True)
class ExploreSettings:
    """How exploration goes.

    Attributes:
        enabled: False: no stints (a class in no table is only learned where it happens to run).
        rounds_per_type: a stint is given up after the job waited this many rounds for its type
            while another type it could use had room.
    """

    enabled: bool = True
    rounds_per_type: int = 3


@dataclass(frozen=True, slots=True)
class Stint:
    """A job's exploration now: the type it is to be measured on, how many rounds it waited
    for it while it could have run elsewhere, and the types it gave up on."""

    target: str
    waited: int = 0
    skipped: tuple[str, ...] = ()

    def to_text(self) -> str:
        """'k80;1;p100' (target; rounds waited; skipped types): how a round plan keeps it."""
        return f"{self.target};{self.waited};{','.join(self.skipped)}"

    @classmethod
    def from_text(cls, text: str) -> Stint | None:
        """The stint `to_text` wrote; None for anything else (the journal is read back)."""
        parts = text.split(";")
        if len(parts) != 3 or not parts[0] or not parts[1].isdigit():
            return None
        skipped = tuple(t for t in parts[2].split(",") if t)
        return cls(parts[0], int(parts[1]), skipped)


def usable_types(
    job: Job,
    table: ThroughputTable,
    gpu_types: Sequence[str],
    capacity: Mapping[str, float],
    catalog: Mapping[str, GpuType],
) -> list[str]:
    """The types the job could use (a rate, `num_gpus` of them, the memory it needs, not
    measured at 0), most promising first by the table's rate, ties by name."""
    row = table.row(job.job_class, job.num_gpus, gpu_types)
    small = too_small(job.mem_gib, gpu_types, catalog)
    measured = job.measured_steps_per_s
    usable = sorted(
        (-float(rate), t)
        for rate, t, misfit in zip(row.tolist(), gpu_types, small.tolist(), strict=True)
        if rate > 0 and capacity.get(t, 0.0) >= job.num_gpus and not misfit and measured.get(t) != 0
    )
    return [t for _, t in usable]


def candidate_types(
    job: Job,
    table: ThroughputTable,
    gpu_types: Sequence[str],
    capacity: Mapping[str, float],
    catalog: Mapping[str, GpuType],
) -> list[str]:
    """Of the types the job could use, those whose steps/s for it are an estimate (every one
    for a class in no table, the estimated columns for another), in `usable_types` order; []
    when it could use fewer than two types (nothing to choose between)."""
    estimated = estimated_entries(table, job.job_class, gpu_types)
    if not estimated:
        return []
    usable = usable_types(job, table, gpu_types, capacity, catalog)
    if len(usable) < 2:
        return []
    return [t for t in usable if t in estimated]


def next_stints(
    jobs: Sequence[Job],
    table: ThroughputTable,
    gpu_types: Sequence[str],
    capacity: Mapping[str, float],
    catalog: Mapping[str, GpuType],
    previous: Mapping[str, Stint],
    settings: ExploreSettings,
) -> dict[str, Stint]:
    """Job key -> its stint this round, for every job exploring: the first type it could use
    that is neither measured nor given up; a stint it waited too long for is given up."""
    if not settings.enabled:
        return {}
    stints: dict[str, Stint] = {}
    for job in jobs:
        candidates = candidate_types(job, table, gpu_types, capacity, catalog)
        last = previous.get(job.key)
        skipped = set(last.skipped) if last is not None else set()
        if last is not None and last.waited >= settings.rounds_per_type:
            skipped.add(last.target)
        open_types = [
            t for t in candidates if t not in job.measured_steps_per_s and t not in skipped
        ]
        if not open_types:
            continue
        target = open_types[0]
        waited = last.waited if last is not None and last.target == target else 0
        stints[job.key] = Stint(target, waited, tuple(sorted(skipped)))
    return stints


def after_round(
    stints: Mapping[str, Stint],
    jobs: Sequence[Job],
    placed: Mapping[str, Placement],
    free_after: Mapping[str, float],
    table: ThroughputTable,
    gpu_types: Sequence[str],
    capacity: Mapping[str, float],
    catalog: Mapping[str, GpuType],
) -> dict[str, Stint]:
    """The stints with one more round waited for each job the plan did not put on its stint's
    type although it could have run elsewhere: it was placed on another type (work
    conservation fills idle GPUs), or another type it could use had `num_gpus` GPUs left free
    after the plan. A job waiting in a full cluster counts nothing."""
    by_key = {job.key: job for job in jobs}
    out = dict(stints)
    for key, stint in stints.items():
        job = by_key.get(key)
        if job is None:
            continue
        placement = placed.get(key)
        if placement is not None:
            if stint.target in placement.gpu_types:
                continue  # on its type: measured there next round
            out[key] = Stint(stint.target, stint.waited + 1, stint.skipped)
            continue
        usable = usable_types(job, table, gpu_types, capacity, catalog)
        others = [t for t in usable if t != stint.target]
        if any(free_after.get(t, 0.0) >= job.num_gpus for t in others):
            out[key] = Stint(stint.target, stint.waited + 1, stint.skipped)
    return out


def restrict_to_targets(
    throughput: np.ndarray,
    job_ids: Sequence[str],
    gpu_types: Sequence[str],
    targets: Mapping[str, str],
) -> np.ndarray:
    """`throughput` (n_jobs, n_types) with each exploring job's row kept on its target only."""
    if not targets:
        return throughput
    out = np.array(throughput, dtype=float, copy=True)
    column = {t: i for i, t in enumerate(gpu_types)}
    for row, key in enumerate(job_ids):
        target = targets.get(key)
        if target is not None and target in column:
            keep = out[row, column[target]]
            out[row] = 0.0
            out[row, column[target]] = keep
    return out
