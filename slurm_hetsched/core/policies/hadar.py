"""Hadar (Sultana et al., IPDPS'24 and its journal extension; seed 000_221d4d20c7e37640):
gang-scheduled jobs on GPUs of several types and nodes at once, admitted by posted prices.

Each call (the tick recomputes on arrivals, completions and changes of the free GPUs):

1. Running jobs keep their GPUs (incremental allocation), unless the price rule preempts
   them: a job whose utility at its projected completion there no longer pays for its GPUs at
   the lowest price a GPU has (U_min, hadar_prices.py), which in practice means its utility
   fell to 0 (a missed hard deadline, a linear utility past its target). A running job whose
   GPUs are no longer all free (a drained node) waits with the others.
2. Critical jobs (ours, `critical`; hadar_batch.py): a waiting job whose own run is nearly as
   long as the whole remaining batch starts on its best offer first.
3. The other waiting jobs, in arrival order (then row order), are allocated on the GPUs left by
   Algorithm 2 (DP_allocation) read as maximising the total payoff, utility minus price, of
   the jobs admitted (notes/hadar.md section 9, item 1), a job FIND_ALLOC cannot place being
   skipped rather than ending the search (item 2): exactly, over include/skip decisions with
   the cluster's use as memo key, up to `exact_jobs` waiting jobs; beyond that greedily (each
   job in order is admitted when its best payoff at the current prices is > 0, the online
   primal-dual rule the DP refines).
4. A job admitted gets FIND_ALLOC's best candidate (hadar_alloc.py): several types and nodes
   possible. Every new allocation, a first start as well as a restart after a preemption or a
   drained node, costs the job its restart-cost estimate (`Problem.restart_s`, else the
   policy's `restart_s`) in its projected duration, so in its utility and its price.
5. Idle GPUs go to the jobs not admitted still worth something (`fill_idle`), first to those
   preferring their types; prices weigh each type by its value (`type_values`, hadar_prices).
6. A job not admitted waits; `Allocation.waiting` says why (its admin comment shows it).

Every choice the paper leaves open is in docs/policies.md, "hadar". Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, InvalidProblemError, Placement, Problem
from slurm_hetsched.core.policies.hadar_alloc import (
    JobView,
    Offer,
    Units,
    capped,
    elastic_rates,
    find_alloc,
    job_view,
    restart_seconds,
    to_placement,
    units_of,
)
from slurm_hetsched.core.policies.hadar_batch import admit_critical, on_preferred_types
from slurm_hetsched.core.policies.hadar_prices import PriceBounds, price_bounds, type_values
from slurm_hetsched.core.policies.hadar_running import priced_out, upgrades
from slurm_hetsched.core.policies.options import (
    PolicyOption,
    parse_choice,
    parse_flag,
    parse_fraction,
    parse_non_negative,
    parse_seed,
)
from slurm_hetsched.core.round_options import DEFAULT_RESTART_S
from slurm_hetsched.core.utility import UMAX_MAX

# Up to this many waiting jobs the dynamic programme is exact (2^n include/skip paths at
# worst, fewer with the memo): 12 takes well under a second on a 60-GPU cluster.
DEFAULT_EXACT_JOBS = 12
ORDERS = ("payoff", "arrival")
TYPE_VALUES = ("fluid", "none")
# A waiting job whose own run is this share of the batch's horizon starts first (hadar_batch):
# on the Hadar scenario 0.5 to 0.95 all finish within 1.2 h of each other, 0.7 soonest
# (docs/policies.md).
DEFAULT_CRITICAL = 0.7


class Hadar:
    """Hadar: gangs across GPU types and nodes, admitted when utility exceeds posted prices."""

    name: ClassVar[str] = "hadar"
    description: ClassVar[str] = (
        "Hadar: gangs across GPU types and nodes, admitted when their utility exceeds posted "
        "exponential prices per node and type; running jobs keep their GPUs (needs nodes, steps)"
    )
    options: ClassVar[Mapping[str, PolicyOption]] = MappingProxyType(
        {
            "exact_jobs": PolicyOption(
                f"waiting jobs up to which the allocation is exact (default {DEFAULT_EXACT_JOBS})",
                DEFAULT_EXACT_JOBS,
                parse_seed,
            ),
            "eta": PolicyOption(
                "eta, scaling the lowest price U_min = 1/(4 eta) x the least utility per "
                "GPU-second (default 1)",
                1.0,
                parse_non_negative,
            ),
            "order": PolicyOption(
                "beyond exact_jobs, the order the greedy admits waiting jobs in: arrival, or "
                "payoff (largest first; default)",
                "payoff",
                parse_choice(*ORDERS),
            ),
            "fill_idle": PolicyOption(
                "give the GPUs the prices leave idle to jobs not admitted that are still worth "
                "something (default true; false: the paper's admission rule alone)",
                True,
                parse_flag,
            ),
            "upgrade": PolicyOption(
                "move a running job to a faster placement when its payoff there, restart "
                "included, beats staying (default true; false: running jobs stay)",
                True,
                parse_flag,
            ),
            "type_values": PolicyOption(
                "weigh each GPU type's prices by its value to the queue, the fluid makespan "
                "LP's duals (fluid; default), or price all types alike as the paper (none)",
                "fluid",
                parse_choice(*TYPE_VALUES),
            ),
            "critical": PolicyOption(
                "a waiting job whose run at its best rate is at least this share of the "
                f"batch's remaining horizon starts first (default {DEFAULT_CRITICAL:g}; "
                "0: never)",
                DEFAULT_CRITICAL,
                parse_fraction,
            ),
            "max_utility": PolicyOption(
                "the most any job's utility counts for (default 1e6, the spec's own bound): "
                "utilities are self-declared, so a site can stop umax= from buying priority",
                UMAX_MAX,
                parse_non_negative,
            ),
            "restart_s": PolicyOption(
                f"seconds a new allocation costs a job whose own estimate is unknown "
                f"(default {DEFAULT_RESTART_S:g})",
                DEFAULT_RESTART_S,
                parse_non_negative,
            ),
        }
    )
    needs_nodes: ClassVar[bool] = True
    # Gives a job GPUs of several types at once (rounds/tick.py: `Problem.mixed_gangs`).
    mixes_types: ClassVar[bool] = True

    def __init__(
        self,
        exact_jobs: int = DEFAULT_EXACT_JOBS,
        eta: float = 1.0,
        restart_s: float = DEFAULT_RESTART_S,
        order: str = "payoff",
        fill_idle: bool = True,
        upgrade: bool = True,
        max_utility: float = UMAX_MAX,
        type_values: str = "fluid",
        critical: float = DEFAULT_CRITICAL,
    ) -> None:
        if not max_utility > 0:
            raise InvalidProblemError(f"hadar: max_utility {max_utility} must be > 0")
        self.max_utility = max_utility
        self.fill_idle = fill_idle
        self.upgrade = upgrade
        if order not in ORDERS or type_values not in TYPE_VALUES or not 0 <= critical <= 1:
            raise InvalidProblemError(
                f"hadar: order {order!r} (one of {list(ORDERS)}), type_values {type_values!r} "
                f"(one of {list(TYPE_VALUES)}), critical {critical} (0 to 1)"
            )
        self.order, self.type_values, self.critical = order, type_values, critical
        if exact_jobs < 0 or not eta > 0 or not restart_s >= 0:
            raise InvalidProblemError(
                f"hadar: exact_jobs {exact_jobs} (>= 0), eta {eta} (> 0), restart_s "
                f"{restart_s} (>= 0)"
            )
        self.exact_jobs = exact_jobs
        self.eta = eta
        self.restart_s = restart_s

    def allocate(self, problem: Problem) -> Allocation:
        """The round's placements (module docstring).

        Raises:
            InvalidProblemError: the problem has no nodes or no steps.
        """
        if problem.n_jobs and not problem.nodes:
            raise InvalidProblemError("policy 'hadar' places jobs on nodes: give `nodes`")
        steps = problem.require("steps", self.name) if problem.n_jobs else np.zeros(0)
        restart = restart_seconds(problem, self.restart_s)
        utilities = [capped(problem.utility(m), self.max_utility) for m in range(problem.n_jobs)]
        values = type_values(problem, steps) if self.type_values == "fluid" else None
        bounds = price_bounds(problem, steps, restart, self.eta, utilities, values)
        units = units_of(problem)
        # GPUs given out per unit: at first those the scheduler may not use (jobs outside
        # our control, an unavailable node), then the running jobs that stay.
        used = [cap - free for cap, free in zip(units.capacity, units.free, strict=True)]
        unit_of = {(units.nodes[u], problem.gpu_types[c]): u for u, c in enumerate(units.columns)}
        placements: dict[str, Placement] = {}
        waiting: dict[str, str] = {}
        larger = elastic_rates(problem)
        views = {
            m: job_view(problem, m, steps, restart, utilities[m], larger)
            for m in range(problem.n_jobs)
        }
        queue: list[int] = []
        for m in _arrival_order(problem):
            job_id = problem.job_ids[m]
            current = problem.running.get(job_id)
            if current is None:
                queue.append(m)
                continue
            found = [(unit_of.get((s.node, s.gpu_type)), s.count) for s in current.slices]
            slots = [(u, n) for u, n in found if u is not None]
            if len(slots) < len(found) or any(used[u] + n > units.capacity[u] for u, n in slots):
                queue.append(m)  # its GPUs are gone: it waits with the others
                continue
            if priced_out(views[m], slots, units, bounds, problem.now_s):
                waiting[job_id] = "preempted:utility=0"
                continue
            placements[job_id] = current
            for u, n in slots:
                used[u] += n
        if self.upgrade:
            moved = upgrades(placements, views, problem, units, bounds, used, unit_of)
            placements.update(moved)
        critical = admit_critical(views, queue, units, used, bounds, problem.now_s, self.critical)
        for m, offer in critical.items():
            job_id = problem.job_ids[m]
            placements[job_id] = to_placement(job_id, offer.take, units, problem.gpu_types)
        queue = [m for m in queue if problem.job_ids[m] not in placements]
        search = _Search(problem, units, bounds, [views[m] for m in queue])
        chosen, payoff = search.best(
            tuple(used), exact=len(queue) <= self.exact_jobs, by_payoff=self.order == "payoff"
        )
        after = list(used)
        for admitted in chosen.values():
            for u, count in admitted.take:
                after[u] += count
        if self.fill_idle:
            chosen = {
                **chosen,
                **search.fill([v for v in search.jobs if v.job_id not in chosen], after),
            }
        for view in search.jobs:
            if view.job_id in chosen:
                take = chosen[view.job_id].take
                placements[view.job_id] = to_placement(view.job_id, take, units, problem.gpu_types)
            elif view.job_id not in waiting:
                waiting[view.job_id] = search.reason(view, tuple(after))
        return _allocation(problem, placements, waiting, payoff, self.name)


class _Search:
    """Algorithm 2 over the waiting jobs: exact (memoised include/skip) or greedy."""

    def __init__(
        self, problem: Problem, units: Units, bounds: PriceBounds, jobs: list[JobView]
    ) -> None:
        self.problem, self.units, self.bounds, self.jobs = problem, units, bounds, jobs
        self.memo: dict[tuple[int, tuple[int, ...]], tuple[float, tuple[tuple[int, Offer], ...]]]
        self.memo = {}
        self.cache: dict[object, object] = {}  # find_alloc's candidates by shape

    def best(
        self, used: tuple[int, ...], exact: bool, by_payoff: bool = False
    ) -> tuple[dict[str, Offer], float]:
        """The admitted jobs' offers and their total payoff."""
        if exact:
            payoff, picks = self._exact(0, used)
        else:
            payoff, picks = self._greedy(used, by_payoff)
        return {self.jobs[i].job_id: offer for i, offer in picks}, payoff

    def _offer(self, i: int, used: tuple[int, ...]) -> Offer | None:
        offer = find_alloc(
            self.jobs[i], self.units, used, self.bounds, self.problem.now_s, self.cache
        )
        return offer if offer is not None and offer.payoff > 0 else None

    def _exact(self, i: int, used: tuple[int, ...]) -> tuple[float, tuple[tuple[int, Offer], ...]]:
        if i >= len(self.jobs) or self._is_full(used):
            return 0.0, ()
        key = (i, used)
        known = self.memo.get(key)
        if known is not None:
            return known
        result = self._exact(i + 1, used)  # skip job i
        offer = self._offer(i, used)
        if offer is not None:
            rest, picks = self._exact(i + 1, _after(used, offer))
            if offer.payoff + rest >= result[0]:
                result = (offer.payoff + rest, ((i, offer), *picks))
        self.memo[key] = result
        return result

    def _greedy(
        self, used: tuple[int, ...], by_payoff: bool
    ) -> tuple[float, tuple[tuple[int, Offer], ...]]:
        total, picks = 0.0, []
        order = list(range(len(self.jobs)))
        if by_payoff:
            # Largest payoff at the prices before this round's admissions first (the
            # knapsack greedy's order); jobs with no offer last, then arrival order.
            first = [self._offer(i, used) for i in order]
            order.sort(key=lambda i: -first[i].payoff if first[i] is not None else math.inf)  # type: ignore[union-attr]
        for i in order:
            if self._is_full(used):
                break
            offer = self._offer(i, used)
            if offer is not None:
                total += offer.payoff
                picks.append((i, offer))
                used = _after(used, offer)
        return total, tuple(picks)

    def fill(self, jobs: list[JobView], used: list[int]) -> dict[str, Offer]:
        """Work conservation (`fill_idle`, our addition to the paper): the GPUs the prices
        left idle go to the jobs not admitted that are still worth something (utility > 0),
        largest payoff first, each on its best candidate at the current prices: first to the
        jobs whose best candidate lies on their preferred types (hadar_batch.py), then to the
        rest; `used` is updated in place."""
        offers = {
            v.job_id: find_alloc(
                v, self.units, tuple(used), self.bounds, self.problem.now_s, self.cache
            )
            for v in jobs
        }
        order = sorted(
            (v for v in jobs if offers[v.job_id] is not None),
            key=lambda v: -offers[v.job_id].payoff,  # type: ignore[union-attr]
        )
        filled: dict[str, Offer] = {}
        for preferred_only in (True, False):
            for view in order:
                if self._is_full(tuple(used)):
                    break
                if view.job_id in filled:
                    continue
                offer = find_alloc(
                    view, self.units, tuple(used), self.bounds, self.problem.now_s, self.cache
                )
                if offer is None or offer.utility <= 0:
                    continue
                if preferred_only and not on_preferred_types(view, offer, self.units, self.bounds):
                    continue
                filled[view.job_id] = offer
                for u, count in offer.take:
                    used[u] += count
        return filled

    def _is_full(self, used: tuple[int, ...]) -> bool:
        return all(u >= c for u, c in zip(used, self.units.capacity, strict=True))

    def reason(self, view: JobView, used: tuple[int, ...]) -> str:
        """Why the job waits, at the prices after this round's admissions (`used`): its best
        offer's price and utility there (`price=3.1>=utility=2.4`), or that no GPUs it can use
        are left (`no-room:4-GPUs,utility=100`); one word, as the admin comment shows it."""
        offer = find_alloc(view, self.units, used, self.bounds, self.problem.now_s, self.cache)
        if offer is None:
            utility = view.utility.value(self.problem.now_s, view.arrival_s)
            return f"no-room:{view.num_gpus}-GPUs,utility={utility:.3g}"
        sign = ">=" if offer.payoff <= 0 else "<"
        return f"price={offer.price:.3g}{sign}utility={offer.utility:.3g}"


def _after(used: tuple[int, ...], offer: Offer) -> tuple[int, ...]:
    out = list(used)
    for u, count in offer.take:
        out[u] += count
    return tuple(out)


def _arrival_order(problem: Problem) -> list[int]:
    return [int(m) for m in np.lexsort((np.arange(problem.n_jobs), problem.arrival_s))]


def _allocation(
    problem: Problem,
    placements: dict[str, Placement],
    waiting: dict[str, str],
    payoff: float,
    policy: str,
) -> Allocation:
    x = np.zeros((problem.n_jobs, problem.n_types))
    row = {job: m for m, job in enumerate(problem.job_ids)}
    column = {t: c for c, t in enumerate(problem.gpu_types)}
    for job_id, placement in placements.items():
        for gpu_type, count in placement.gpus_by_type().items():
            x[row[job_id], column[gpu_type]] = count / placement.num_gpus
    return Allocation(
        job_ids=problem.job_ids,
        gpu_types=problem.gpu_types,
        x=x,
        objective=payoff if math.isfinite(payoff) else 0.0,
        solve_s=0.0,
        policy=policy,
        solves=0,
        placements=placements,
        waiting=waiting,
    )
