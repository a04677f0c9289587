"""The tick's part in learning online: which jobs explore this round (core/explore.py), their
rows kept on their stint's type, the stints carried from one round's plan to the next, and
what a change in learning is (it brings a new allocation, as an arrival does).

Pure: values of the round in, values out; the tick stores and runs them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from slurm_hetsched.core.explore import (
    ExploreSettings,
    Stint,
    after_round,
    next_stints,
    restrict_to_targets,
)
from slurm_hetsched.core.model import ClusterSnapshot, Problem, RoundPlan
from slurm_hetsched.core.ports import RoundRecord
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.throughput import ThroughputTable


def stints_now(
    last: RoundRecord | None,
    snapshot: ClusterSnapshot,
    capacity: Mapping[str, float],
    site: SiteData,
    settings: ExploreSettings,
) -> dict[str, Stint]:
    """Each exploring job's stint this round, from the last round's plan and what is measured."""
    return next_stints(
        snapshot.jobs,
        site.table,
        snapshot.gpu_types,
        capacity,
        site.gpu_types,
        stints_of(last),
        settings,
    )


def restricted(problem: Problem, targets: Mapping[str, str]) -> Problem:
    """The problem with each exploring job's row kept on its stint's type only."""
    if not targets:
        return problem
    throughput = restrict_to_targets(
        problem.throughput, problem.job_ids, problem.gpu_types, targets
    )
    return dataclasses.replace(problem, throughput=throughput)


def with_stints(
    plan: RoundPlan,
    stints: Mapping[str, Stint],
    snapshot: ClusterSnapshot,
    capacity: Mapping[str, float],
    site: SiteData,
) -> RoundPlan:
    """The plan with the stints kept in it, each counting one more round waited where the job
    was not placed although another type it could use had room after the plan."""
    if not stints:
        return plan
    after = after_round(
        stints,
        snapshot.jobs,
        plan.placements,
        _free_after(capacity, plan),
        site.table,
        snapshot.gpu_types,
        capacity,
        site.gpu_types,
    )
    return dataclasses.replace(plan, exploring={key: s.to_text() for key, s in after.items()})


def learning_signature(
    snapshot: ClusterSnapshot, targets: Mapping[str, str], table: ThroughputTable
) -> tuple[object, ...]:
    """What the jobs whose rows are estimates have learned, and where jobs explore: when it
    changes (a first measurement on a type, a stint's end), the allocation is recomputed."""
    estimated = any(t in table.estimated_types for t in snapshot.gpu_types)
    learned = tuple(
        (job.key, tuple(sorted(job.measured_steps_per_s)))
        for job in snapshot.jobs
        if estimated or table.is_prior(job.job_class)
    )
    return learned, tuple(sorted(targets.items()))


def stints_of(last: RoundRecord | None) -> dict[str, Stint]:
    """The stints the last round's plan kept (an unreadable entry is dropped)."""
    if last is None:
        return {}
    stints = {key: Stint.from_text(text) for key, text in last.plan.exploring.items()}
    return {key: stint for key, stint in stints.items() if stint is not None}


def targets_of(stints: Mapping[str, Stint]) -> dict[str, str]:
    """Job -> the type it explores."""
    return {key: stint.target for key, stint in stints.items()}


def _free_after(capacity: Mapping[str, float], plan: RoundPlan) -> dict[str, float]:
    """GPUs per type left free once the plan's jobs are placed."""
    free = dict(capacity)
    for placement in plan.placements.values():
        for piece in placement.slices:
            free[piece.gpu_type] = free.get(piece.gpu_type, 0.0) - piece.count
    return free
