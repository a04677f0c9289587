"""Amortized moves in a round: the running jobs the plain plan would move or stop that stay.

`hold_running` takes the plain plan of a round (greedy walk and placement), asks the rules of
core/amortize.py for each running job it would move or stop, pins those a rule holds on their
GPUs, and chooses the rest of the round again, by the same walk, on the GPUs left. Only the
plain plan's moves and stops are undone, so a round never interrupts more running jobs than
the plain plan. `placed_at` is when a job's current placement began (its residence).
docs/mechanism.md, "Moves that pay for themselves".

Pure: the time is the snapshot's.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_hetsched.core.amortize import MoveCase, hold_reason, move_rates, restart_cost_s
from slurm_hetsched.core.model import Job, Placement, RoundState
from slurm_hetsched.core.model.frozen import index_of
from slurm_hetsched.core.placement import fits, place_jobs, same_gpus, without
from slurm_hetsched.core.round_options import RoundOptions
from slurm_hetsched.core.selection import Walk
from slurm_hetsched.core.throughput import ThroughputTable


def hold_running(
    placed: dict[str, Placement],
    walk: Walk,
    state: RoundState,
    jobs: Mapping[str, Job],
    now_s: float,
    free: Mapping[str, Mapping[str, int]],
    round_s: float,
    options: RoundOptions,
    table: ThroughputTable | None,
) -> tuple[dict[str, Placement], dict[str, str]]:
    """Amortized moves (core/amortize.py): the running jobs the plain plan `placed` would move
    or stop stay on their GPUs when a rule says so; the rest of the round is chosen again, by
    the same walk, on the GPUs left. Only the plain plan's moves and stops are undone and every
    job it kept stays, so a round never interrupts more running jobs than the plain plan.

    `jobs` are the snapshot's by id, `now_s` its time.

    Returns the placements and job -> why it was held.
    """
    allocation = walk.allocation
    rows = index_of(allocation.job_ids)
    kept = {
        j: p
        for j, p in placed.items()
        if j in state.placements and same_gpus(state.placements[j], p)
    }
    left = without(free, kept.values())
    held: dict[str, str] = {}
    for job_id, current in sorted(state.placements.items()):
        if job_id in kept or not _may_stay(walk, rows[job_id], current, jobs[job_id], left):
            continue
        job = jobs[job_id]
        rate_now, rate_next = move_rates(job, current, placed.get(job_id), table)
        case = MoveCase(
            stayed_s=now_s - placed_at(state, job_id, now_s, round_s),
            restart_s=restart_cost_s(job, options.restart_s),
            rate_now=rate_now,
            rate_next=rate_next,
            steps_remaining=job.steps_remaining,
            round_s=round_s,
        )
        reason = hold_reason(case, options.restart_share)
        if reason is not None:
            held[job_id] = reason
            left = without(left, [current])
    if not held:
        return placed, {}
    pinned = {**kept, **{j: state.placements[j] for j in held}}
    again = walk.select(left, frozenset(rows[j] for j in pinned))
    return {**pinned, **place_jobs(again, allocation, walk.num_gpus, left, state.placements)}, held


def _may_stay(
    walk: Walk, row: int, current: Placement, job: Job, left: Mapping[str, Mapping[str, int]]
) -> bool:
    """A running job can be held on its GPUs: they are all still free, it uses as many GPUs as
    then, and the allocation gives it time on that type (or lets it fill idle GPUs there)."""
    gpu_type = current.gpu_types[0]
    column = (
        walk.allocation.gpu_types.index(gpu_type) if gpu_type in walk.allocation.gpu_types else -1
    )
    if column < 0 or current.num_gpus != job.num_gpus or len(current.gpu_types) != 1:
        return False
    wanted = walk.allocation.x[row, column] > 0 or (
        walk.fill is not None and bool(walk.fill[row, column])
    )
    return wanted and fits(current, left)


def placed_at(state: RoundState, job_id: str, now_s: float, round_s: float) -> float:
    """When the job's current placement began; a state that does not know (recorded before
    amortized moves) counts it from the last round, the shortest stay it can have had."""
    return state.placed_at_s.get(job_id, now_s - round_s)
