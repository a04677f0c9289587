"""One round's tenant book for astraea (docs/policies.md, "astraea"): each account's quota of
each GPU type and what of it its own jobs use, the pool (GPUs in no account's quota), the GPUs
held per type in each slot ahead, and from those the posted prices, the cost of a candidate
and what a borrowing job pays and to whom.

Prices are Astraea's, cluster-wide per GPU type and slot: theta ** (held / capacity) - 1
(astraea_pricing.py), each of a job's GPUs priced at the GPUs held with the job's GPUs before
it (`gang_price`; the paper prices the whole gang at the occupancy before the job, which
makes the first borrower of an idle type pay nothing however many GPUs it takes). Pure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from slurm_hetsched.core.model import POOL_OWNER, Allocation, Payment, Placement, Problem
from slurm_hetsched.core.policies.astraea_pricing import posted_price, split_payment, theta_for
from slurm_hetsched.core.policies.drf import Speeds, with_waiting
from slurm_hetsched.core.policies.yarn_cs import Slices
from slurm_hetsched.core.utility import Utility

# A candidate: (type column, GPUs) pairs.
Counts = tuple[tuple[int, int], ...]


class TenantBook:
    """Quotas, own use, the pool and the GPUs held per slot for one round."""

    def __init__(self, problem: Problem, thetas: Sequence[float], horizon: int) -> None:
        """Args: thetas: the price base per type column; horizon: slots priced one by one
        (a run longer than that pays the last slot's price for the rest)."""
        n_types = problem.n_types
        self.thetas = tuple(float(t) for t in thetas)
        self.horizon = max(int(horizon), 1)
        self.capacity = np.asarray(problem.capacity, dtype=float)
        column = {t: c for c, t in enumerate(problem.gpu_types)}
        self.quota: dict[str, np.ndarray] = {}
        for name, account in sorted(problem.accounts.items()):
            row = np.zeros(n_types)
            for gpu_type, count in account.quota.items():
                if gpu_type in column:  # a type the cluster has none of now: nothing to own
                    row[column[gpu_type]] = count
            if row.any():
                self.quota[name] = row
        owned = sum(self.quota.values(), np.zeros(n_types))
        self.pool = np.maximum(self.capacity - owned, 0.0)
        self.own_used = {name: np.zeros(n_types) for name in self.quota}
        self.held = np.zeros((n_types, self.horizon))
        # Each account's GPUs held inside its quota in each slot ahead: when its quota frees.
        self.own_held = {name: np.zeros((n_types, self.horizon)) for name in self.quota}

    def remaining(self, account: str, column: int) -> float:
        """GPUs of the type left in the account's quota now (0 without a quota)."""
        if account not in self.quota:
            return 0.0
        return float(self.quota[account][column] - self.own_used[account][column])

    def quota_free_in(self, account: str, column: int, gpus: int) -> int | None:
        """Slots from now until `gpus` GPUs of the type are free in the account's quota, as
        its jobs there are expected to end, at most the horizon (not within it: at its end at
        the soonest); None: the quota has not that many."""
        if account not in self.quota or self.quota[account][column] < gpus:
            return None
        free = self.quota[account][column] - self.own_held[account][column]
        slots = np.flatnonzero(free >= gpus)
        return int(slots[0]) if slots.size else self.horizon

    def expect_later(self, account: str, column: int, gpus: int, start: int, slots: int) -> None:
        """A job of the account waiting for its quota is expected to take `gpus` of it from
        slot `start` for `slots` slots: the account's later jobs wait behind it."""
        self.own_held[account][column, start : start + slots] += gpus

    def cluster_cost(self, counts: Counts, slots: int) -> float:
        """What `counts` held for `slots` slots from now costs: this slot's price every slot,
        what a borrower pays each round while prices hold. (Pricing later slots at the GPUs
        already committed there priced them as if no job were to come, and borrowers paid
        more than they had reckoned: docs/simulation.md.)"""
        return slots * _cost(counts, 1, self.held, self.capacity, self.thetas)

    def commit(self, account: str, counts: Counts, slots: int, in_quota: bool) -> None:
        """Hold `counts` for `slots` slots from now (inside the account's quota or not)."""
        _hold(self.held, counts, slots, +1)
        if in_quota:
            for column, gpus in counts:
                self.own_used[account][column] += gpus
            _hold(self.own_held[account], counts, slots, +1)

    def release(self, account: str, counts: Counts, slots: int, in_quota: bool) -> None:
        """Undo `commit` with the same arguments."""
        _hold(self.held, counts, slots, -1)
        if in_quota:
            for column, gpus in counts:
                self.own_used[account][column] -= gpus
            _hold(self.own_held[account], counts, slots, -1)

    def idle_by_owner(self, column: int) -> dict[str, float]:
        """Who lends the type's idle GPUs now: each account's quota its own jobs leave idle,
        and the pool (eq. (2)'s contributions; borrowers do not reduce them)."""
        idle = {
            name: float(quota[column] - self.own_used[name][column])
            for name, quota in self.quota.items()
        }
        idle[POOL_OWNER] = float(self.pool[column])
        return {owner: gpus for owner, gpus in idle.items() if gpus > 0}

    def payment(
        self, payer: str, counts: Counts, gpu_types: Sequence[str], period_s: float
    ) -> Payment:
        """What a job borrowing `counts` pays for this round at the prices posted before it
        (so its own report never moves its price), split per type among the idle owners."""
        amount = 0.0
        shares: dict[str, float] = {}
        lent: dict[str, float] = {}
        borrowed: dict[str, int] = {}
        for column, gpus in counts:
            price = gang_price(
                self.thetas[column], float(self.held[column, 0]), gpus, float(self.capacity[column])
            )
            borrowed[gpu_types[column]] = borrowed.get(gpu_types[column], 0) + gpus
            amount += price
            owners = self.idle_by_owner(column) or {POOL_OWNER: 1.0}
            for owner, part in split_payment(price, owners).items():
                shares[owner] = shares.get(owner, 0.0) + part
            for owner, part in split_payment(float(gpus), owners).items():
                lent[owner] = lent.get(owner, 0.0) + part
        return Payment(payer, amount, period_s, borrowed, shares, lent)


@dataclass(frozen=True, slots=True)
class Offer:
    """A job on one placement: its GPUs ((node, type, count) slices), the slots they are held
    and what it is worth there."""

    slices: Slices
    slots: int
    utility: float
    price: float

    @property
    def payoff(self) -> float:
        return self.utility - self.price


def priced_out(offer: Offer) -> str:
    """The waiting reason of a job whose best borrowing offer does not pay."""
    return f"price={offer.price:.3g}>utility={offer.utility:.3g}"


def tenant_allocation(
    problem: Problem,
    placements: Mapping[str, Placement],
    waiting: Mapping[str, str],
    payments: Mapping[str, Payment],
    expected: float,
    policy: str,
) -> Allocation:
    """The allocation of `placements`, with `waiting` and (when any) `payments`."""
    allocation = with_waiting(problem, placements, waiting, expected, policy)
    if not payments:
        return allocation
    return dataclasses.replace(allocation, payments=dict(payments))


def estimate_thetas(
    problem: Problem,
    speeds: Speeds,
    steps: np.ndarray,
    utilities: Sequence[Utility],
    slot_s: float,
    bias: float,
) -> list[float]:
    """Per type: 1 + bias x the median of what the jobs present are worth per GPU-slot there
    (each job's utility at its fastest run on the type over the GPU-slots of that run).

    Ours: the paper's sufficient condition (section 5.3) takes the most any job is worth, so
    that an exhausted type pays for no job; one short valuable job then sets prices that no
    other job can pay on a type a third full, and borrowing stops (docs/simulation.md,
    "Astraea evaluation": 1.008x BatchSche's utility with it, 1.03x with the median). The
    GPUs themselves still bound what is given out."""
    thetas = []
    for t in range(problem.n_types):
        worths: list[float] = []
        for m in np.flatnonzero(problem.throughput[:, t] > 0).tolist():
            gpus = int(problem.num_gpus[m])
            rate = speeds.rate(m, t, gpus, spread=False)
            if rate <= 0:
                continue
            duration = float(steps[m]) / rate
            slots = max(math.ceil(duration / slot_s - 1e-9), 1)
            worth = utilities[m].value(problem.now_s + duration, float(problem.arrival_s[m]))
            worths.append(worth / (gpus * slots))
        thetas.append(theta_for(float(np.median(worths)) if worths else 0.0, bias))
    return thetas


def gang_price(theta: float, held: float, gpus: int, capacity: float) -> float:
    """One slot of `gpus` GPUs of a type with `held` of its `capacity` already taken: each
    GPU at the occupancy with the gang's GPUs before it."""
    return sum(posted_price(theta, held + i, capacity) for i in range(gpus))


def counts_of(slices: Sequence[tuple[int, int, int]]) -> Counts:
    """(type column, GPUs) pairs of a placement's (node, type, count) slices."""
    by_type: dict[int, int] = {}
    for _node, column, count in slices:
        by_type[column] = by_type.get(column, 0) + count
    return tuple(sorted(by_type.items()))


def _cost(
    counts: Counts,
    slots: int,
    held: np.ndarray,
    capacity: np.ndarray,
    thetas: Sequence[float],
) -> float:
    horizon = held.shape[1]
    inside = min(slots, horizon)
    total = 0.0
    for column, gpus in counts:
        theta, cap = thetas[column], float(capacity[column])
        prices = [gang_price(theta, float(h), gpus, cap) for h in held[column, :inside]]
        total += sum(prices) + max(slots - horizon, 0) * prices[-1] if prices else 0.0
    return total


def _hold(held: np.ndarray, counts: Counts, slots: int, sign: int) -> None:
    for column, gpus in counts:
        held[column, : min(slots, held.shape[1])] += sign * gpus


__all__ = [
    "Counts",
    "Offer",
    "TenantBook",
    "counts_of",
    "estimate_thetas",
    "gang_price",
    "priced_out",
    "tenant_allocation",
]
