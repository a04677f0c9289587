"""Astraea (Wang, Zhou, Han, Chen, Li, "Online Scheduling of Distributed Machine Learning Jobs
for Incentivizing Sharing in Multi-Tenant Systems", IEEE Trans. Computers 2022; seed
001_95d965660d9ddc28; notes/astraea-oasis.md sections 2-8, 14): Slurm accounts as tenants, each
running inside its own GPU quota for free and borrowing the pooled idle GPUs at posted prices.

Each round (a fixed-length period, `slot_s`; docs/policies.md, "astraea", has every step and
choice):

0. Running jobs inside their account's quota, and running jobs that cannot be checkpointed
   (`preempt=no`), stay where they are.
1. Own-quota pass, free: each other job of an account, in arrival order, takes the placement
   inside what is left of the quota where it is worth most (BatchSche alone on the quota).
   Borrowers' GPUs count as free: an account gets its quota back at the next round, the
   borrower moved off with the checkpoint protocol.
2. Sharing pass, paid (not `batchsche`): running borrowers, then the other jobs that can be
   checkpointed, in arrival order, take the GPUs still free at cluster-wide prices per type
   and slot, theta ** (held / capacity) - 1 over their run, when utility minus price beats
   what they have: their utility in their quota, or what they can expect waiting for it.
3. A borrower pays each round its GPUs' price of this slot, split among the owners of the
   type's idle GPUs by what each leaves idle (eq. (2)): `Allocation.payments`.

A job placed nowhere waits (`Allocation.waiting`, e.g. "price=3.1>utility=2.4") and is
offered again next round. theta per type is 1 + `bias` x the median job's worth per
GPU-slot on it, or the fixed `theta` option. Choices: docs/policies.md, "astraea". Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, Payment, Problem
from slurm_hetsched.core.policies.astraea_book import (
    Counts,
    Offer,
    TenantBook,
    counts_of,
    estimate_thetas,
    priced_out,
    tenant_allocation,
)
from slurm_hetsched.core.policies.astraea_pricing import LEAST_THETA
from slurm_hetsched.core.policies.drf import Speeds, gang
from slurm_hetsched.core.policies.hadar_alloc import capped, restart_seconds
from slurm_hetsched.core.policies.options import (
    MAX_UTILITY_OPTION,
    PolicyOption,
    checked,
    parse_count,
    parse_fraction,
    parse_non_negative,
    restart_option,
)
from slurm_hetsched.core.policies.yarn_cs import (
    Slices,
    arrival_order,
    can_stay,
    fits,
    free_table,
    placement_of,
    require_nodes,
    slices_of,
    take,
)
from slurm_hetsched.core.round_options import DEFAULT_RESTART_S
from slurm_hetsched.core.utility import UMAX_MAX
from slurm_hetsched.errors import ConfigError

DEFAULT_SLOT_S = 360.0  # the live controller's round
DEFAULT_HORIZON = 240  # slots priced one by one (a day at 6 minutes)
# theta - 1 is bias x the most a job is worth per GPU-slot: Astraea found underestimating it
# (80%) better than overestimating under load (its Fig. 11).
DEFAULT_BIAS = 0.8
EPSILON = 1e-9

Allowed = Callable[[Counts], bool]
Pricing = Callable[[Counts, int], float]


class Astraea:
    """Tenants run free inside their quota, then borrow idle GPUs at posted prices."""

    name: ClassVar[str] = "astraea"
    description: ClassVar[str] = (
        "Astraea: each account's jobs run free inside its GPU quota, then borrow the idle "
        "GPUs of others at cluster-wide posted prices paid to their owners (needs nodes, "
        "steps, account quotas)"
    )
    needs_nodes: ClassVar[bool] = True
    plans_ahead: ClassVar[bool] = True  # decide every round: prices and payments move
    shares: ClassVar[bool] = True  # the sharing pass (batchsche: none)
    options: ClassVar[Mapping[str, PolicyOption]] = MappingProxyType(
        {
            "slot_s": PolicyOption(
                f"seconds of one price slot, the round (default {DEFAULT_SLOT_S:g})",
                DEFAULT_SLOT_S,
                parse_non_negative,
            ),
            "horizon": PolicyOption(
                f"slots priced one by one (default {DEFAULT_HORIZON}); a longer run pays the "
                "last slot's price for the rest",
                DEFAULT_HORIZON,
                parse_count,
            ),
            "bias": PolicyOption(
                f"theta - 1 is this x the most a job is worth per GPU-slot (default "
                f"{DEFAULT_BIAS:g})",
                DEFAULT_BIAS,
                parse_fraction,
            ),
            "theta": PolicyOption(
                "a fixed price base for every GPU type, >= 2 (default 0: estimated each round "
                "from the jobs present, times bias)",
                0.0,
                parse_non_negative,
            ),
            "max_utility": MAX_UTILITY_OPTION,
            "restart_s": restart_option("a start or move"),
        }
    )

    def __init__(
        self,
        slot_s: float = DEFAULT_SLOT_S,
        horizon: int = DEFAULT_HORIZON,
        bias: float = DEFAULT_BIAS,
        max_utility: float = UMAX_MAX,
        restart_s: float = DEFAULT_RESTART_S,
        theta: float = 0.0,
    ) -> None:
        """Raises: ConfigError: an option out of its range."""
        self.slot_s = checked(self.name, self.options, "slot_s", slot_s)
        if not self.slot_s > 0:
            self.slot_s = DEFAULT_SLOT_S
        self.horizon = checked(self.name, self.options, "horizon", horizon)
        self.bias = checked(self.name, self.options, "bias", bias)
        self.max_utility = checked(self.name, self.options, "max_utility", max_utility)
        self.restart_s = checked(self.name, self.options, "restart_s", restart_s)
        self.theta = checked(self.name, self.options, "theta", theta)
        if 0 < self.theta < LEAST_THETA:
            raise ConfigError(f"{self.name}: theta must be 0 (estimated) or >= {LEAST_THETA:g}")

    def allocate(self, problem: Problem) -> Allocation:
        """The round's placements, waiting reasons and payments (module docstring).

        Raises:
            InvalidProblemError: the problem has jobs but no `nodes`, or no `steps`.
        """
        if problem.n_jobs == 0:
            return tenant_allocation(problem, {}, {}, {}, 0.0, self.name)
        require_nodes(problem, self.name)
        return _Round(problem, self).run(self.shares)


class BatchSche(Astraea):
    """Each account alone on its own quota: Astraea's own-quota pass only (the sharing
    incentive's yardstick; Zhang et al., MobiHoc'20, run per tenant as Astraea's paper does)."""

    name: ClassVar[str] = "batchsche"
    description: ClassVar[str] = (
        "BatchSche per tenant: each account's jobs only inside its own GPU quota, no "
        "borrowing (Astraea's baseline; needs nodes, steps, account quotas)"
    )
    shares: ClassVar[bool] = False
    needs_quotas: ClassVar[bool] = True  # with no account's quota, it runs nothing


class _Round:
    """One call: the GPUs left, the tenant book and the decisions so far."""

    def __init__(self, problem: Problem, policy: Astraea) -> None:
        self.problem = problem
        self.policy_name = policy.name
        self.slot_s = float(policy.slot_s)
        self.steps = problem.require("steps", policy.name)
        self.restart = restart_seconds(problem, policy.restart_s)
        self.utilities = [
            capped(problem.utility(m), policy.max_utility) for m in range(problem.n_jobs)
        ]
        self.speeds = Speeds(problem)
        self.left = free_table(problem)
        self.held_by_running = np.zeros_like(self.left)  # GPUs of running jobs not yet served
        for placement in problem.running.values():
            for n, t, count in slices_of(problem, placement):
                self.held_by_running[n, t] += count
        thetas = (
            [policy.theta] * problem.n_types
            if policy.theta
            else estimate_thetas(
                problem, self.speeds, self.steps, self.utilities, self.slot_s, policy.bias
            )
        )
        self.book = TenantBook(problem, thetas, int(policy.horizon))
        self.placed: dict[int, tuple[Offer, bool]] = {}  # row -> (offer, inside its quota)
        self.reasons: dict[int, str] = {}  # row -> why its last offer was not taken
        self.payments: dict[str, Payment] = {}
        self.preemptible = problem.preemptible or (True,) * problem.n_jobs

    def run(self, shares: bool) -> Allocation:
        order = [int(m) for m in arrival_order(self.problem)]
        self.order = order
        self._keep_running_inside(order)
        for m in order:
            if m not in self.placed:
                self._own_quota(m)
        if shares:
            running = [m for m in order if self._borrowing_now(m)]
            for m in running + [m for m in order if m not in running]:
                if self.preemptible[m]:  # a job that cannot move runs only in its quota
                    self._share(m)
        ids = self.problem.job_ids
        waiting = {ids[m]: self._why_waiting(m, shares) for m in order if m not in self.placed}
        placements = {
            ids[m]: placement_of(self.problem, ids[m], o.slices)
            for m, (o, _inside) in self.placed.items()
        }
        expected = sum(o.utility for o, _inside in self.placed.values())
        return tenant_allocation(
            self.problem, placements, waiting, self.payments, expected, self.policy_name
        )

    # -- step 0 and pass 1 ---------------------------------------------------------------

    def _keep_running_inside(self, order: list[int]) -> None:
        """Running jobs inside their quota (arrival order fills it) and running jobs that
        cannot be moved keep their GPUs (moving jobs up inside their quota, tried: more
        moves and borrowing, tenants' revenue below BatchSche's; docs/simulation.md)."""
        problem = self.problem
        for m in order:
            current = problem.running.get(problem.job_ids[m])
            if current is None or not can_stay(problem, m, current):
                continue
            slices = slices_of(problem, current)
            counts = counts_of(slices)
            account = problem.job_accounts[m]
            inside = all(self.book.remaining(account, t) >= g for t, g in counts)
            if not ((inside or not self.preemptible[m]) and fits(self.left, slices)):
                continue
            offer = self._offer(m, slices, moved=False, price=None)
            if offer is not None:
                self._commit(m, offer, inside)

    def _in_quota(self, account: str) -> Allowed:
        return lambda counts: all(self.book.remaining(account, t) >= g for t, g in counts)

    def _own_quota(self, m: int) -> None:
        """Pass 1: the job's placement inside its account's quota where it is worth most;
        taken when worth anything (free: nothing is priced or charged)."""
        account = self.problem.job_accounts[m]
        if account not in self.book.quota:
            return
        best = self._best(m, self._in_quota(account), None)
        if best is not None:  # even worth nothing now: its own GPUs are idle otherwise
            self._commit(m, best, True)

    # -- pass 2 ------------------------------------------------------------------------------

    def _borrowing_now(self, m: int) -> bool:
        job = self.problem.job_ids[m]
        return job in self.problem.running and not (m in self.placed and self.placed[m][1])

    def _share(self, m: int) -> None:
        """Pass 2: the job's best placement on the GPUs still free at the cluster's prices;
        taken when its payoff beats what it has (its utility in its quota, free)."""
        before = self.placed.get(m)
        if before is not None:
            self._release(m)
        account = self.problem.job_accounts[m]
        best = self._best(m, lambda counts: True, self.book.cluster_cost)
        later = None if before is not None else self._later_in_quota(m)
        floor = before[0].utility if before is not None else later[0] if later else 0.0
        if best is not None and best.payoff > floor + EPSILON:
            counts = counts_of(best.slices)
            self.payments[self.problem.job_ids[m]] = self.book.payment(
                account, counts, self.problem.gpu_types, self.slot_s
            )
            self._commit(m, best, False)
            if before is not None and before[1]:  # its quota is free: the account's next jobs
                self._refill(account)
            return
        if before is not None:
            self._commit(m, before[0], before[1])
            return
        if later is not None:  # it waits for its quota: the account's later jobs behind it
            self.book.expect_later(account, *later[1:])
        if best is not None:
            self.reasons[m] = (
                priced_out(best)
                if best.payoff <= 0
                else f"own-quota-later:{floor:.3g}>{best.utility:.3g}-{best.price:.3g}"
            )

    def _refill(self, account: str) -> None:
        """The account's jobs still without a place, in arrival order, take the quota a job
        that went borrowing left (pass 1 again for them: free)."""
        for m in self.order:
            if m not in self.placed and self.problem.job_accounts[m] == account:
                self._own_quota(m)

    def _later_in_quota(self, m: int) -> tuple[float, int, int, int, int] | None:
        """What a job with no room in its quota now can expect there: (its utility, type
        column, GPUs, start slot, slots) when it starts on the best type of its quota as soon
        as the account's jobs there, and those of its jobs waiting ahead of it, are expected
        to leave it room (ours: the paper compares with 0, and a borrower then pays more than
        finishing sooner is worth to it). None: no quota of a type it runs on."""
        problem, book = self.problem, self.book
        account = problem.job_accounts[m]
        gpus = int(problem.num_gpus[m])
        best: tuple[float, int, int, int, int] | None = None
        for t in np.flatnonzero(problem.throughput[m] > 0).tolist():
            wait = book.quota_free_in(account, t, gpus)
            rate = self.speeds.rate(m, t, gpus, spread=False)
            if wait is None or rate <= 0:
                continue
            run_s = float(self.restart[m]) + float(self.steps[m]) / rate
            done = problem.now_s + wait * self.slot_s + run_s
            utility = self.utilities[m].value(done, float(problem.arrival_s[m]))
            slots = max(math.ceil(run_s / self.slot_s - EPSILON), 1)
            if best is None or utility > best[0] + EPSILON:
                best = (utility, t, gpus, wait, slots)
        return best

    # -- offers ------------------------------------------------------------------------------

    def _best(self, m: int, allowed: Allowed, cost: Pricing | None) -> Offer | None:
        """The job's best offer over GPU types and gang sizes whose counts are `allowed`,
        priced by `cost(counts, slots)` (None: free); its current GPUs first (no move, no
        restart); ties: the first (fewer GPUs, then column order)."""
        problem = self.problem
        job = problem.job_ids[m]
        current = problem.running.get(job)
        candidates: list[tuple[Slices, bool]] = []
        if current is not None and can_stay(problem, m, current):
            slices = slices_of(problem, current)
            if fits(self.left, slices):
                candidates.append((slices, False))
        prefer = [] if current is None else [n for n, _t, _c in slices_of(problem, current)]
        for t in np.flatnonzero(problem.throughput[m] > 0).tolist():
            for gpus in problem.gpu_options(m):
                found = gang(self.left, self.held_by_running, t, gpus, prefer)
                if found is not None:
                    candidates.append((found, True))
        best: Offer | None = None
        for slices, moved in candidates:
            if not allowed(counts_of(slices)):
                continue
            offer = self._offer(m, slices, moved, cost)
            if offer is not None and (best is None or offer.payoff > best.payoff + EPSILON):
                best = offer
        return best

    def _offer(self, m: int, slices: Slices, moved: bool, price: Pricing | None) -> Offer | None:
        problem = self.problem
        spread = len({n for n, _t, _c in slices}) > 1
        gpus = sum(c for _n, _t, c in slices)
        rate = min(self.speeds.rate(m, t, gpus, spread) for _n, t, _c in slices)
        if rate <= 0:
            return None
        duration = (float(self.restart[m]) if moved else 0.0) + float(self.steps[m]) / rate
        slots = max(math.ceil(duration / self.slot_s - EPSILON), 1)
        utility = self.utilities[m].value(problem.now_s + duration, float(problem.arrival_s[m]))
        cost = 0.0 if price is None else float(price(counts_of(slices), slots))
        return Offer(slices, slots, utility, cost)

    def _commit(self, m: int, offer: Offer, inside: bool) -> None:
        take(self.left, offer.slices)
        for n, t, count in offer.slices:  # a running job's GPUs served: no longer spared
            self.held_by_running[n, t] -= min(count, int(self.held_by_running[n, t]))
        self.book.commit(self.problem.job_accounts[m], counts_of(offer.slices), offer.slots, inside)
        self.placed[m] = (offer, inside)

    def _release(self, m: int) -> None:
        offer, inside = self.placed.pop(m)
        take(self.left, tuple((n, t, -c) for n, t, c in offer.slices))
        self.book.release(
            self.problem.job_accounts[m], counts_of(offer.slices), offer.slots, inside
        )

    def _why_waiting(self, m: int, shares: bool) -> str:
        if m in self.reasons:
            return self.reasons[m]
        if not self.preemptible[m] or not shares:
            account = self.problem.job_accounts[m]
            return "own-quota-only" if account in self.book.quota else "no-quota"
        return f"no-room:{int(self.problem.num_gpus[m])}-GPUs"


__all__ = ["Astraea", "BatchSche"]
