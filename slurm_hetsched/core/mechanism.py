"""The round mechanism (Gavel, OSDI'20, section 5): one round's placement from an allocation.

A policy says which fraction of time each job should spend on each GPU type (`Allocation.x`).
Rounds of fixed length realise it: each round, every (job, GPU type) entry gets the priority
allocation / share of the type's time received so far, jobs are chosen greedily in priority
order (one GPU type per job per round, capacity never exceeded), and the chosen jobs are placed
on nodes: the GPUs a job already holds are kept (lease extension), then the largest jobs first,
all GPUs on one node when one node can hold them, else spread over nodes of the one type.

`plan_round` decides a round; `record_round` adds the seconds each placed job actually ran. The
simulator and the controller both call exactly these two, so they keep identical state. This
module checks the inputs, runs the steps in order and turns their result into the `RoundPlan`
and the next `RoundState`; each step is a module of its own:
- core/round_options.py: `RoundOptions` (queue, type order, work conservation, moves) and the
  defaults (`GAVEL_MIN_RESET_INTERVAL_S`, `DEFAULT_RESTART_S`, ...), re-exported here;
- core/priorities.py: `compute_priorities` (re-exported here) and the reset rule;
- core/selection.py: the greedy walk, the per-type order and `type_speeds` (re-exported here);
- core/placement.py: the chosen jobs' GPUs on nodes;
- core/holding.py: amortized moves, the running jobs that stay (rules in core/amortize.py).

Pure: no I/O, no clock (the time is the snapshot's `now_s`); the only randomness (the
agnostic policies' shuffled type order) is drawn from the options' seed and the round number,
so the same inputs give the same plan. docs/mechanism.md describes the rules and the caller's
duties.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from slurm_hetsched.core.holding import hold_running, placed_at
from slurm_hetsched.core.memory_fit import misfits
from slurm_hetsched.core.model import (
    Allocation,
    ClusterSnapshot,
    GpuType,
    InvalidProblemError,
    Job,
    Placement,
    RoundPlan,
    RoundState,
)
from slurm_hetsched.core.model.frozen import index_of
from slurm_hetsched.core.placement import free_gpus, place_jobs, policy_placements, same_gpus
from slurm_hetsched.core.priorities import advance, compute_priorities
from slurm_hetsched.core.round_options import (
    DEFAULT_RESTART_S,
    DEFAULT_RESTART_SHARE,
    GAVEL_MIN_RESET_INTERVAL_S,
    MOVES,
    QUEUES,
    RoundOptions,
)
from slurm_hetsched.core.selection import (
    Walk,
    gpus_and_arrivals,
    runnable,
    type_speeds,
    walk_order,
)
from slurm_hetsched.core.throughput import ThroughputTable

__all__ = [
    "DEFAULT_RESTART_S",
    "DEFAULT_RESTART_SHARE",
    "GAVEL_MIN_RESET_INTERVAL_S",
    "MOVES",
    "QUEUES",
    "RoundOptions",
    "compute_priorities",
    "plan_round",
    "record_round",
    "type_speeds",
]

# `plan_round`'s default options (one shared, immutable instance, as a default argument is).
_DEFAULT_OPTIONS = RoundOptions()


def plan_round(
    allocation: Allocation,
    state: RoundState,
    snapshot: ClusterSnapshot,
    round_s: float,
    *,
    min_reset_interval_s: float = GAVEL_MIN_RESET_INTERVAL_S,
    options: RoundOptions = _DEFAULT_OPTIONS,
    table: ThroughputTable | None = None,
    catalog: Mapping[str, GpuType] | None = None,
    stints: Mapping[str, str] | None = None,
) -> tuple[RoundPlan, RoundState]:
    """Decide the next round: which jobs run, on which GPUs of which nodes.

    Args:
        allocation: the allocation to realise; its jobs must all be in `snapshot.jobs` (their
            `num_gpus` is read there). Space sharing (`pair_x` > 0) is not supported. An
            allocation with `placements` (ANDREAS, the exclusive baselines) is taken as it is:
            exactly those jobs run, on exactly those GPUs (checked against the free GPUs).
        state: the state `plan_round`/`record_round` returned last (or `RoundState.initial`).
        snapshot: the cluster now: `now_s`, the nodes (free GPUs = GPUs - `gpus_in_use` on
            available nodes; GPUs held by our own jobs must not count as in use) and the jobs.
        round_s: the round length in seconds, > 0.
        min_reset_interval_s: a changed allocation resets the received time only if at least
            this long has passed since the last reset (else the reset waits); 0 resets at
            every change.
        options: queue, type order, work conservation (`RoundOptions`).
        table: the throughput table: where each job can run (work conservation) and which
            types are fastest (the default per-type order). None: no filling, types by name.
        catalog: the site's GPU types: work conservation never fills a type with less memory
            than a job needs (`Job.mem_gib`, core/memory_fit.py). None: memory unknown.
        stints: job -> the one type it explores this round (core/explore.py): work
            conservation never fills another type with it, or the stint would never happen.

    Returns:
        The plan (keep / move / start / stop) and the next state: round + 1, this allocation,
        the new placements, received time re-indexed to the allocation's jobs and types (and
        reset if due). Nothing is added for the round itself: call `record_round` after it.

    Raises:
        InvalidProblemError: on a non-positive round length, a negative interval, duplicate
            node names, an allocated job missing from the snapshot, or an allocation that
            shares GPUs between pairs of jobs.
    """
    jobs = {job.key: job for job in snapshot.jobs}
    _check_inputs(allocation, snapshot, jobs, round_s, min_reset_interval_s)
    last_placements = state.placements
    state, reset = advance(allocation, state, snapshot.now_s, min_reset_interval_s)
    num_gpus, arrival = gpus_and_arrivals(allocation, jobs)
    priority = compute_priorities(allocation.x, state.received_s, round_s)
    free = free_gpus(snapshot.nodes, allocation.gpu_types)
    held: dict[str, str] = {}
    if allocation.placements is not None:  # the policy placed the jobs itself (ANDREAS)
        placed = policy_placements(allocation, free)
    else:
        order = walk_order(allocation.gpu_types, options, table, state.round + 1)
        fill = None
        if options.work_conserving and table is not None:
            fill = runnable(allocation, jobs, table) & (allocation.x <= 0)
            fill &= ~_never_fill(allocation, jobs, catalog, stints or {})
        walk = Walk(allocation, priority, state.deficit_s, num_gpus, order, fill, arrival)
        placed = place_jobs(walk.select(free), allocation, num_gpus, free, state.placements)
        if options.moves == "amortized":
            placed, held = hold_running(
                placed, walk, state, jobs, snapshot.now_s, free, round_s, options, table
            )

    keep: dict[str, Placement] = {}
    move: dict[str, Placement] = {}
    start: dict[str, Placement] = {}
    for job_id in sorted(placed):
        previous = state.placements.get(job_id)
        if previous is None:
            start[job_id] = placed[job_id]
        elif same_gpus(previous, placed[job_id]):
            keep[job_id] = previous
        else:
            move[job_id] = placed[job_id]
    stop = tuple(j for j in sorted(last_placements) if j not in placed and j in jobs)
    rows = index_of(allocation.job_ids)
    column = {t: k for k, t in enumerate(allocation.gpu_types)}
    at = (
        [rows[j] for j in placed],
        [column[placement.main_gpu_type()] for placement in placed.values()],
    )
    chosen_priority = dict(zip(placed, priority[at].tolist(), strict=True))
    best_priority = priority.max(axis=1, initial=0.0).tolist()
    plan = RoundPlan(
        round=state.round + 1,
        keep=keep,
        move=move,
        start=start,
        stop=stop,
        priority={
            job_id: chosen_priority.get(job_id, best_priority[m])
            for m, job_id in enumerate(allocation.job_ids)
        },
        reset=reset,
        held=held,
    )
    placements = {**keep, **move, **start}
    placed_at_s = {
        **{j: placed_at(state, j, snapshot.now_s, round_s) for j in keep},
        **dict.fromkeys([*move, *start], snapshot.now_s),
    }
    next_state = dataclasses.replace(
        state, round=plan.round, placements=placements, placed_at_s=placed_at_s
    )
    return plan, next_state


def _never_fill(
    allocation: Allocation,
    jobs: Mapping[str, Job],
    catalog: Mapping[str, GpuType] | None,
    stints: Mapping[str, str],
) -> np.ndarray:
    """(n_jobs, n_types) bool: where work conservation must not put a job although the table
    says its class runs there: a type too small for its memory need (core/memory_fit.py), one
    it was measured at 0 on, or, while it explores (core/explore.py), any type but its stint's."""
    types = allocation.gpu_types
    allocated = [jobs[job_id] for job_id in allocation.job_ids]
    never = (
        misfits(allocated, types, catalog)
        if catalog
        else np.zeros((len(allocated), len(types)), dtype=bool)
    )
    for row, job in enumerate(allocated):
        target = stints.get(job.key)
        measured = job.measured_steps_per_s
        if target is not None or measured:
            never[row] |= [
                measured.get(t) == 0 or (target is not None and t != target) for t in types
            ]
    return never


def record_round(state: RoundState, ran_s: Mapping[str, float]) -> RoundState:
    """Add the seconds each placed job ran in the round `state` planned.

    Args:
        state: the state `plan_round` returned for the round that just ran.
        ran_s: job id -> wall-clock seconds it ran (not GPU-seconds; less than the round if it
            finished or failed early). A placed job left out ran 0 s.

    Returns:
        The state with each job's seconds added on the GPU types it was placed on, each
        type in proportion to the job's GPUs of that type.

    Raises:
        InvalidProblemError: for a job not placed in that round, or a negative or non-finite
            number of seconds.
    """
    rows = index_of(state.job_ids)
    column = index_of(state.gpu_types)
    received = np.array(state.received_s, copy=True)
    for job_id, seconds in ran_s.items():
        placement = state.placements.get(job_id)
        if placement is None:
            raise InvalidProblemError(
                f"job {job_id!r} reported {seconds} s in round {state.round} but was not placed "
                f"in it; placed: {sorted(state.placements)}"
            )
        if not (math.isfinite(seconds) and seconds >= 0):
            raise InvalidProblemError(
                f"job {job_id!r}: ran {seconds} s in round {state.round}; expected a finite "
                "number of seconds >= 0"
            )
        # Each type gets its share of the job's GPUs: a gang of 2 v100 and 1 k80 that ran
        # 300 s received 200 s of v100 and 100 s of k80.
        for gpu_type, count in placement.gpus_by_type().items():
            received[rows[job_id], column[gpu_type]] += seconds * count / placement.num_gpus
    return state.with_received_s(received)


# ----------------------------------------------------------------------------------------------
# Steps of plan_round


def _check_inputs(
    allocation: Allocation,
    snapshot: ClusterSnapshot,
    jobs: Mapping[str, Job],
    round_s: float,
    min_reset_interval_s: float,
) -> None:
    if not (math.isfinite(round_s) and round_s > 0):
        raise InvalidProblemError(f"round_s {round_s}: expected a round length > 0 seconds")
    if not min_reset_interval_s >= 0:
        raise InvalidProblemError(
            f"min_reset_interval_s {min_reset_interval_s}: expected >= 0 seconds"
        )
    names = [node.name for node in snapshot.nodes]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise InvalidProblemError(f"snapshot: node names appear twice: {twice}")
    if allocation.pair_x is not None and (allocation.pair_x > 0).any():
        raise InvalidProblemError(
            f"allocation of {allocation.policy!r} shares GPUs between pairs of jobs; the round "
            "mechanism places each job alone and cannot realise it; use a policy without "
            "space sharing (not `*_packed`)"
        )
    missing = [j for j in allocation.job_ids if j not in jobs]
    if missing:
        raise InvalidProblemError(
            f"allocation has jobs that are not in the snapshot: {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''}; recompute the allocation from this snapshot"
        )
