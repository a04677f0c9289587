"""Moves that pay for themselves: when the round mechanism keeps a running job where it is.

Every move of a running job, to other GPUs or off them, costs it a restart: its checkpoint,
requeue and restore, `restart_s` seconds without progress (measured live per job; per job
class in simulation). Gavel's mechanism does not count it and, when GPUs are scarce, swaps
jobs in and out every round. Under `RoundOptions(moves="amortized")` the mechanism first plans
the round as Gavel does, then keeps each running job that plan would move or stop where it is
(on its GPUs, if they are still free) for the first reason that holds:

1. no gain: the plan moves it to GPUs where it runs faster, but the move does not pay:
   staying put finishes it sooner (or, when its remaining steps are unknown, does more work
   over one residence) than restarting there. A faster move that pays goes ahead at once: the
   job itself gains more than its restart costs.
2. residence: otherwise (a stop, or a move to GPUs no faster), it has stayed on its GPUs less
   than `min_residence_s` = restart_s * (1 - share) / share, so a restart now would take more
   than `share` of its time there (share 0.1: it stays at least 9 restart costs). The
   allocation is still realised, over longer windows: the priorities keep the account, and
   the job behind catches up once the residence is over.
3. finishing: it would finish on its GPUs within that residence, so the restart would cost it
   more than share / (1 - share) of the work it has left (and it would give its GPUs back soon
   anyway).

A stop or a move to slower GPUs that neither rule prevents goes ahead: it gives the job's
GPUs to others, as the allocation asks, and its restart is paid for by the residence before.
docs/mechanism.md ("Moves that pay for themselves") explains the rules with numbers.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slurm_hetsched.core.model import Job, Placement
from slurm_hetsched.core.problem import placement_rate
from slurm_hetsched.core.throughput import ThroughputTable, UnknownJobClassError


def restart_cost_s(job: Job, default_s: float) -> float:
    """What one move costs `job`, in seconds: its own estimate, else the default."""
    return default_s if job.restart_s is None else float(job.restart_s)


def min_residence_s(restart_s: float, share: float) -> float:
    """The shortest stay on one set of GPUs for which a restart of `restart_s` takes at most
    `share` of the job's time: restart_s / (residence + restart_s) <= share."""
    return restart_s * (1.0 - share) / share


@dataclass(frozen=True, slots=True)
class MoveCase:
    """One running job the plain plan would move or stop, as the rules see it.

    Attributes:
        stayed_s: seconds since its current placement began (restart time included).
        restart_s: what a move costs it, seconds without progress.
        rate_now: its steps/s on its current GPUs (0 when unknown).
        rate_next: its steps/s on the GPUs the plan gives it, or None when the plan stops it.
        steps_remaining: steps it has left, or None when unknown.
        round_s: the round length (the shortest a job can stay anywhere).
    """

    stayed_s: float
    restart_s: float
    rate_now: float
    rate_next: float | None
    steps_remaining: float | None
    round_s: float


def hold_reason(case: MoveCase, share: float) -> str | None:
    """Why the job stays where it is this round, or None if the plan's move or stop goes on.

    The rules are the module's. The reason starts with the rule's name (`no gain`,
    `residence`, `finishing`: the admin comment shows only that), then the figures for the
    log, e.g. "residence: stayed 120 of 270 s".
    """
    residence = min_residence_s(case.restart_s, share)
    if case.rate_next is not None and case.rate_next > case.rate_now > 0:
        if move_pays(case, residence):
            return None
        speedup = case.rate_next / case.rate_now
        return f"no gain: a {case.restart_s:.0f} s restart for {speedup:.2f}x"
    if case.stayed_s < residence:
        return f"residence: stayed {case.stayed_s:.0f} of {residence:.0f} s"
    left_s = _time_left_s(case.steps_remaining, case.rate_now)
    if left_s is not None and left_s <= residence:
        return f"finishing: done in {left_s:.0f} s"
    return None


def move_pays(case: MoveCase, residence_s: float) -> bool:
    """Whether moving to faster GPUs gains more than the restart costs.

    With the remaining steps known: the job finishes sooner there, restart included
    (restart_s + left / rate_next < left / rate_now). Unknown: over the time it will stay at
    least (one residence, or one round if longer), it does more work there (rate_next *
    (stay - restart_s) > rate_now * stay).
    """
    assert case.rate_next is not None
    if case.steps_remaining is not None:
        there_s = case.restart_s + case.steps_remaining / case.rate_next
        return there_s < case.steps_remaining / case.rate_now
    stay_s = max(residence_s, case.round_s)
    return case.rate_next * (stay_s - case.restart_s) > case.rate_now * stay_s


def move_rates(
    job: Job, current: Placement, proposed: Placement | None, table: ThroughputTable | None
) -> tuple[float, float | None]:
    """Steps/s of `job` on its current GPUs and on the proposed ones (None: a stop), on one
    scale: its own measurements where it has them, else the table's figures scaled by the
    ratio of measured to table steps/s on a type where it has both (a job measured only where
    it runs would otherwise be compared in its own steps against the table's). 0: unknown."""
    table_now = _table_rate(job, current, table)
    if proposed is None:
        measured = job.measured_steps_per_s.get(current.gpu_types[0])
        return (float(measured) if measured and measured > 0 else table_now), None
    table_next = _table_rate(job, proposed, table)
    measured_now = job.measured_steps_per_s.get(current.gpu_types[0])
    measured_next = job.measured_steps_per_s.get(proposed.gpu_types[0])
    scale = 1.0
    if measured_now and measured_now > 0 and table_now > 0:
        scale = measured_now / table_now
    elif measured_next and measured_next > 0 and table_next > 0:
        scale = measured_next / table_next
    now = float(measured_now) if measured_now and measured_now > 0 else table_now * scale
    after = float(measured_next) if measured_next and measured_next > 0 else table_next * scale
    return now, after


def _table_rate(job: Job, placement: Placement, table: ThroughputTable | None) -> float:
    """The table's steps/s of `job` on `placement` (spread when on several nodes); 0 when the
    table cannot say."""
    if table is None:
        return 0.0
    try:
        rate = placement_rate(table, job.job_class, placement)
    except (UnknownJobClassError, KeyError, ValueError):
        return 0.0
    return float(rate) if math.isfinite(rate) and rate > 0 else 0.0


def _time_left_s(steps_remaining: float | None, rate: float) -> float | None:
    if steps_remaining is None or rate <= 0:
        return None
    return steps_remaining / rate
