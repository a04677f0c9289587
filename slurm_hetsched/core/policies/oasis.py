"""OASiS (Bao, Peng, Wu, Li, "Online Job Scheduling in Distributed Machine Learning Clusters",
INFOCOM'18; seed 004_5ffbb9073c5ace4a; notes/astraea-oasis.md sections 9-12, 14): admission by
completion-time utility against posted prices per node, GPU type and time slot.

Each round (the slot of `slot_s` nearest the round, taken to start at the round; the horizon
is `horizon` slots from it):

1. The schedules admitted before (`Problem.reservations`) hold their GPUs in the horizon's
   slots; each (node, type, slot) is priced L (U/L)^(held/capacity) (oasis_prices.py, U and L
   estimated from the jobs present, times `bias`).
2. A job whose schedule ran out before it was done, or whose GPUs are gone (a drained node),
   is planned again from where it is and kept admitted (it was admitted once; stopping it
   would waste what it did).
3. Every other job without a schedule, in arrival order, gets its best schedule at the posted
   prices (oasis_schedule.py: per-slot configurations of GPU type and gang size, restarts
   charged, at most `max_changes` changes) and is admitted when its payoff, utility at
   completion minus price, is > 0: its schedule is reserved and the prices rise. A job not
   admitted waits (`Allocation.waiting`: "price=3.1>utility=2.4") and is tried again next
   round, when prices may have fallen.
4. Every admitted job runs this round where its schedule says (or is paused there). OASiS
   never revises a schedule, so one job's admission never moves another; ours: an admitted
   job paused now takes a schedule that finishes sooner at no higher price, when GPUs fell
   idle (a job done early), rather than wait for its slots.

The schedules go back in `Allocation.reservations`: the caller hands them to the next round
(the live controller keeps them in its store). Every choice the paper leaves open is in
docs/policies.md, "oasis". Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, InvalidProblemError, Placement, Problem
from slurm_hetsched.core.model.reservation import Reservation
from slurm_hetsched.core.policies.hadar_alloc import (
    JobView,
    capped,
    elastic_rates,
    job_view,
    restart_seconds,
    units_of,
)
from slurm_hetsched.core.policies.oasis_book import Book, current_slot, kept_reservations
from slurm_hetsched.core.policies.oasis_bound import payoff_bound, timespan, worth
from slurm_hetsched.core.policies.oasis_prices import PriceBounds, estimate_bounds
from slurm_hetsched.core.policies.oasis_schedule import Schedule, best_schedule
from slurm_hetsched.core.policies.options import (
    MAX_UTILITY_OPTION,
    PolicyOption,
    parse_count,
    parse_fraction,
    parse_non_negative,
    parse_seed,
    parse_slack,
    restart_option,
)
from slurm_hetsched.core.round_options import DEFAULT_RESTART_S
from slurm_hetsched.core.utility import UMAX_MAX

DEFAULT_SLOT_S = 360.0  # Gavel's round, the live controller's default round
DEFAULT_HORIZON = 48
DEFAULT_GRANULARITY = 100  # work units per job: 1% of it (notes section 14, item 11)
DEFAULT_MAX_CHANGES = 2
# U and L times this: both papers found underestimating them better than overestimating
# under load (notes section 14, item 10); 0.8 is the underestimate Astraea tried.
DEFAULT_BIAS = 0.8
# L is at least this x U. The paper's L (eq. (24)) is the least utility per GPU-slot of any job
# finishing at the horizon's end: ~0 for a time-critical sigmoid, which priced a GPU at ~0
# until its type was nearly full, so the first jobs took the fast GPUs whatever they were
# worth. Swept on benchmarks/oasis.py (docs/simulation.md): with prices per node 1e-9 -> 3e-4
# raised total utility at 32 jobs/h by 6-8%; with a type's offer at its load spread evenly
# (oasis_book.Book.market) 3e-5 was the one value ahead of every baseline at every rate
# (1e-4 and 3e-4 trailed at 4 jobs/h, 1e-4 led at 16 and 32).
DEFAULT_FLOOR = 3e-5


class Oasis:
    """OASiS: each job admitted when its utility pays for its best schedule's posted prices."""

    name: ClassVar[str] = "oasis"
    # Its schedules change a job's placement from slot to slot: decide every round.
    plans_ahead: ClassVar[bool] = True
    needs_nodes: ClassVar[bool] = True  # a `nodes` problem only (generic tests skip it)
    description: ClassVar[str] = (
        "OASiS: a job is admitted when its utility at completion exceeds the posted prices "
        "per node, GPU type and slot of its best schedule, which is then reserved (needs "
        "nodes, steps)"
    )
    options: ClassVar[Mapping[str, PolicyOption]] = MappingProxyType(
        {
            "slot_s": PolicyOption(
                f"seconds of one time slot: the round or a multiple (default {DEFAULT_SLOT_S:g})",
                DEFAULT_SLOT_S,
                parse_non_negative,
            ),
            "horizon": PolicyOption(
                f"slots priced ahead (default {DEFAULT_HORIZON}); work beyond them goes on "
                "at no less than the last slot's prices",
                DEFAULT_HORIZON,
                parse_count,
            ),
            "granularity": PolicyOption(
                f"work units per job in the dynamic programme (default {DEFAULT_GRANULARITY})",
                DEFAULT_GRANULARITY,
                parse_count,
            ),
            "max_changes": PolicyOption(
                "changes of GPU type or count (and resumptions) a schedule may make "
                f"(default {DEFAULT_MAX_CHANGES})",
                DEFAULT_MAX_CHANGES,
                parse_seed,
            ),
            "bias": PolicyOption(
                f"U and L are the estimates times this (default {DEFAULT_BIAS:g})",
                DEFAULT_BIAS,
                parse_fraction,
            ),
            "floor": PolicyOption(
                f"the least price L is at least this x U (default {DEFAULT_FLOOR:g}; the "
                "paper's own L is ~0 for time-critical utilities)",
                DEFAULT_FLOOR,
                parse_slack,
            ),
            "max_utility": MAX_UTILITY_OPTION,
            "restart_s": restart_option("a start, move or resize"),
        }
    )

    def __init__(
        self,
        slot_s: float = DEFAULT_SLOT_S,
        horizon: int = DEFAULT_HORIZON,
        granularity: int = DEFAULT_GRANULARITY,
        max_changes: int = DEFAULT_MAX_CHANGES,
        bias: float = DEFAULT_BIAS,
        max_utility: float = UMAX_MAX,
        restart_s: float = DEFAULT_RESTART_S,
        floor: float = DEFAULT_FLOOR,
        fixed_bounds: PriceBounds | None = None,
        within_horizon: bool = False,
    ) -> None:
        """Args: the options (see `options`); fixed_bounds: U and L per type to use instead
        of the estimates; within_horizon: every schedule completes within the horizon, no
        tail past it, and an arriving job pays for this slot's idle GPUs as for any (the
        paper's setting, where U and L are known and T ends every schedule: tests,
        evaluations)."""
        if not slot_s > 0:
            raise InvalidProblemError("oasis: slot_s must be > 0")
        if not bias > 0:
            raise InvalidProblemError("oasis: bias must be > 0")
        self.slot_s, self.horizon, self.granularity = float(slot_s), horizon, granularity
        self.max_changes, self.bias = max_changes, bias
        self.max_utility, self.restart_s = max_utility, restart_s
        self.floor, self.fixed_bounds = floor, fixed_bounds
        self.within_horizon = within_horizon
        # Ours: GPUs of this slot that no schedule holds are free to whoever is planned now
        # (unused they are lost; a job arriving later comes at the next round at the
        # earliest). The paper prices them as any others.
        self.idle_now_free = not within_horizon

    def allocate(self, problem: Problem) -> Allocation:
        """The round's placements and the schedules in force (module docstring).

        Raises:
            InvalidProblemError: the problem has no nodes or no steps.
        """
        if problem.n_jobs and not problem.nodes:
            raise InvalidProblemError("policy 'oasis' places jobs on nodes: give `nodes`")
        steps = problem.require("steps", self.name) if problem.n_jobs else np.zeros(0)
        restart = restart_seconds(problem, self.restart_s)
        larger = elastic_rates(problem)
        views = [
            job_view(problem, m, steps, restart, capped(problem.utility(m), self.max_utility),
                     larger)
            for m in range(problem.n_jobs)
        ]  # fmt: skip
        slot = current_slot(problem.now_s, self.slot_s)
        units = units_of(problem)
        horizon_end = problem.now_s + self.horizon * self.slot_s  # the book's, from now
        worths = [worth(v, self.slot_s, problem.now_s, horizon_end) for v in views]
        bounds = self.fixed_bounds or estimate_bounds(
            worths, problem.n_types, timespan(worths, self.horizon), max(int(sum(units.free)), 1),
            self.bias, self.floor,
        )  # fmt: skip
        book = Book(units, problem.gpu_types, bounds, slot, self.horizon, self.slot_s,
                    problem.now_s)  # fmt: skip
        kept, replan = kept_reservations(problem.reservations, problem.job_ids, slot, self.slot_s)
        for job_id, reservation in list(kept.items()):
            if book.fits(reservation):
                book.hold(reservation)
            else:  # its GPUs are gone (a drained node, a job outside our control)
                del kept[job_id]
                replan.append(job_id)
        waiting: dict[str, str] = {}
        by_id = {v.job_id: v for v in views}
        for job_id in replan:
            found = self._plan(by_id[job_id], book, problem, self.idle_now_free)
            if found is None:
                waiting[job_id] = "no-room-in-horizon"
                continue
            kept[job_id] = book.reservation(job_id, found)
            book.hold(kept[job_id])
        order = [int(i) for i in np.lexsort((np.arange(problem.n_jobs), problem.arrival_s))]
        admitted_before = [m for m in order if problem.job_ids[m] in kept]
        for m in order:
            job_id = problem.job_ids[m]
            if job_id in kept or job_id in waiting:
                continue
            bound, utility, least = payoff_bound(views[m], book)
            if bound <= 0:
                waiting[job_id] = (
                    "no-room-in-horizon"
                    if not math.isfinite(least)
                    else f"price={least:.3g}>utility={utility:.3g}"
                )
                continue
            found = self._plan(views[m], book, problem, self.idle_now_free)
            if found is None:
                waiting[job_id] = "no-room-in-horizon"
            elif found.payoff > 0:
                kept[job_id] = book.reservation(job_id, found)
                book.hold(kept[job_id])
            else:
                waiting[job_id] = f"price={found.price:.3g}>utility={found.utility:.3g}"
        # After the arrivals (they come first): a job admitted before that is paused now, or
        # runs on GPUs slower than some left idle in this slot, may take those. Not a job
        # planned to end past the horizon: its tail goes on at the last slot's configuration,
        # so a sooner schedule is rarely there to find, and a programme for each such job
        # each round costs as much as all the admissions.
        for m in admitted_before:
            job_id = problem.job_ids[m]
            reservation = kept[job_id]
            if reservation.completion_s > horizon_end:
                continue
            if _faster_idle(views[m], reservation.placement_at(slot), book):
                kept[job_id] = self._sooner(views[m], reservation, book, problem)
        if not book.busy_now():
            self._admit_on_idle(views, order, kept, waiting, book, problem)
        return _allocation(problem, kept, waiting, slot, self.name)

    def _admit_on_idle(
        self,
        views: list[JobView],
        order: list[int],
        kept: dict[str, Reservation],
        waiting: dict[str, str],
        book: Book,
        problem: Problem,
    ) -> None:
        """Ours: with no GPU reserved in this slot, the first job held for its price (arrival
        order) is admitted on its best schedule whatever its payoff, this slot's GPUs counted
        free. A job worth less than the floor price L of its run would otherwise wait on an
        idle cluster for ever; one job a round, so prices still decide between the others."""
        for m in order:
            job_id = problem.job_ids[m]
            if not waiting.get(job_id, "").startswith("price="):
                continue
            found = self._plan(views[m], book, problem, idle_now_free=True)
            if found is not None and found.takes and found.takes[0] is not None:
                kept[job_id] = book.reservation(job_id, found)
                book.hold(kept[job_id])
                del waiting[job_id]
                return

    def _sooner(
        self, view: JobView, reservation: Reservation, book: Book, problem: Problem
    ) -> Reservation:
        """An admitted job paused now or on GPUs slower than some idle now (ours; OASiS
        never revises a schedule): a schedule that finishes sooner at no higher price than
        its own, at the prices now and not counting GPUs of this slot that nobody reserved
        (unused, they are lost), replaces it.
        So GPUs that fell idle (a job done early) are not left idle while it waits for its
        slots or runs slower elsewhere (a move is charged its restart); no other job's
        schedule changes."""
        book.release(reservation)
        found = self._plan(view, book, problem, idle_now_free=True)
        if (
            found is not None
            and found.end_s < reservation.completion_s
            and found.price <= book.price_of(reservation) * (1 + 1e-9)
        ):
            reservation = book.reservation(view.job_id, found)
        book.hold(reservation)
        return reservation

    def _plan(
        self, view: JobView, book: Book, problem: Problem, idle_now_free: bool = False
    ) -> Schedule | None:
        running = problem.running.get(view.job_id)
        current = None if running is None else book.take_of(running)
        return best_schedule(
            view,
            book.market(idle_now_free),
            granularity=self.granularity,
            max_changes=self.max_changes,
            current=current,
            tails=not self.within_horizon,
        )


def _faster_idle(view: JobView, placement: Placement | None, book: Book) -> bool:
    """Whether a whole gang of the job fits now on a node's idle GPUs of a type faster for
    it than its GPUs now (any type when `placement` is None: paused)."""
    now_rate = 0.0
    if placement is not None:
        take = book.take_of(placement)
        now_rate = math.inf if take is None else view.rate_on(book.units, take)
    idle = book.idle_now()
    return any(
        idle.get(column, 0) >= size and rate > now_rate
        for size, rates in view.sizes()
        for column, rate in enumerate(rates)
    )


def _allocation(
    problem: Problem,
    reservations: dict[str, Reservation],
    waiting: dict[str, str],
    slot: int,
    policy: str,
) -> Allocation:
    x = np.zeros((problem.n_jobs, problem.n_types))
    row = {job: m for m, job in enumerate(problem.job_ids)}
    column = {t: c for c, t in enumerate(problem.gpu_types)}
    placements: dict[str, Placement] = {}
    for job_id, reservation in reservations.items():
        placement = reservation.placement_at(slot)
        if placement is None:
            waiting[job_id] = "paused-by-schedule"
            continue
        placements[job_id] = placement
        for gpu_type, count in placement.gpus_by_type().items():
            x[row[job_id], column[gpu_type]] = count / placement.num_gpus
    return Allocation(
        job_ids=problem.job_ids,
        gpu_types=problem.gpu_types,
        x=x,
        objective=sum(r.utility for r in reservations.values()),
        solve_s=0.0,
        policy=policy,
        solves=0,
        placements=placements,
        waiting=waiting,
        reservations=reservations,
    )


__all__ = ["Oasis", "PriceBounds", "payoff_bound", "timespan", "worth"]
