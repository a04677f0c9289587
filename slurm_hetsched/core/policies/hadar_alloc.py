"""Hadar's FIND_ALLOC (Sultana et al., Algorithm 2, lines 25-32; docs/policies.md, "hadar"): the
best way to give one job its W GPUs at the current prices, or none when no way pays.

The cluster is a list of units, one per (node, GPU type), each with its capacity and the GPUs
given out so far (`Units`). For a job, the candidates are, with its usable types sorted by its
speed on them (fastest first):

- for each type alone: the job packed on the fewest nodes of that type;
- for each prefix of the sorted types (the fastest type, the two fastest, ...): the job packed
  on the fewest nodes holding such GPUs, and the job spread over the cheapest such GPUs
  wherever they are.

A candidate on several types runs at W x the per-GPU rate of its slowest type (synchronous data
parallel: the problem's throughput at W GPUs of that type), and on several nodes at the
table's unconsolidated rate (`Problem.throughput_spread`): that slower rate is the
communication cost, paid in a later completion (less utility) and a longer hold of the GPUs
(more price). Its payoff is U_j(now + restart + steps / rate) - sum over its GPUs of price x
(restart + steps / rate), prices taken before the job is added (the paper's line 28). The
candidate with the largest payoff wins; the job is admitted only if that payoff is > 0. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from slurm_hetsched.core.model import GpuSlice, Placement, Problem
from slurm_hetsched.core.policies.hadar_prices import PriceBounds
from slurm_hetsched.core.utility import Utility


@dataclass(frozen=True, slots=True)
class Units:
    """The cluster's (node, GPU type) units: fixed names and capacities, and the GPUs given out
    so far (`used`, a tuple so a state can key a memo)."""

    nodes: tuple[str, ...]  # (n_units,) node name
    columns: tuple[int, ...]  # (n_units,) GPU type column of the problem
    capacity: tuple[int, ...]  # (n_units,) all GPUs of the type on the node
    free: tuple[int, ...]  # (n_units,) GPUs the scheduler may use there (the rest are taken)

    def prices(self, used: tuple[int, ...], bounds: PriceBounds) -> list[float]:
        """The price of one GPU-second on each unit, given `used`."""
        return [
            bounds.price(c, u, cap)
            for c, u, cap in zip(self.columns, used, self.capacity, strict=True)
        ]


@dataclass(frozen=True, slots=True)
class JobView:
    """What FIND_ALLOC needs of one job."""

    job_id: str
    num_gpus: int
    steps: float
    restart_s: float
    rate: tuple[float, ...]  # (n_types,) steps/s at num_gpus, consolidated; 0 = cannot run
    rate_spread: tuple[float, ...]  # (n_types,) the same spread over nodes
    utility: Utility
    arrival_s: float
    # Larger gangs the job may run with too (`Problem.allowed_gpus`, an elastic job): (GPUs,
    # rate, rate spread) each, ascending; () = exactly num_gpus.
    larger: tuple[tuple[int, tuple[float, ...], tuple[float, ...]], ...] = ()

    def sizes(self) -> list[tuple[int, tuple[float, ...]]]:
        """(GPUs, consolidated rate) of every gang size the job may take, smallest first."""
        return [(self.num_gpus, self.rate), *((n, rate) for n, rate, _ in self.larger)]

    def rate_on(self, units: Units, take: Sequence[tuple[int, int]]) -> float:
        """Steps/s on the GPUs `take` holds ((unit, GPUs) pairs): its slowest type's rate at
        that gang size, spread over nodes at the unconsolidated rate; 0 = cannot run there."""
        spread = len({units.nodes[u] for u, _ in take}) > 1
        rates = self.rate_spread if spread else self.rate
        count = sum(n for _, n in take)
        for size, rate, rate_spread in self.larger:
            if size == count:
                rates = rate_spread if spread else rate
        return min(rates[units.columns[u]] for u, _ in take)


@dataclass(frozen=True, slots=True)
class Offer:
    """One candidate allocation of a job and what it would pay.

    Attributes:
        take: (unit index, GPUs) pairs.
        rate: the job's steps/s there (`JobView.rate_on`).
        duration_s: restart + steps at that rate.
        utility: U_j at now + duration.
        price: the sum of its GPUs' prices over the duration.
    """

    take: tuple[tuple[int, int], ...]
    rate: float
    duration_s: float
    utility: float
    price: float

    @property
    def payoff(self) -> float:
        return self.utility - self.price


def find_alloc(
    job: JobView,
    units: Units,
    used: tuple[int, ...],
    bounds: PriceBounds,
    now_s: float,
    cache: dict[object, object] | None = None,
) -> Offer | None:
    """The job's best candidate at the prices of `used` (admitted or not), or None when it
    has no candidate at all (not enough free GPUs of types it can use).

    `cache`, kept by the caller for one `units` and `bounds`: the candidates depend only on
    `used`, the job's gang size and its types by speed, so jobs alike share them (a round of
    thousands of waiting jobs has a few dozen such shapes). An elastic job (`JobView.larger`)
    gets the best offer over all its gang sizes; on equal payoffs the smaller gang."""
    best: Offer | None = None
    for size, rate in job.sizes():
        usable = tuple(
            sorted((c for c, r in enumerate(rate) if r > 0), key=lambda c: (-rate[c], c))
        )
        key = (used, size, usable)
        found = None if cache is None else cache.get(key)
        if found is None:
            found = _candidates(size, usable, units, used, bounds)
            if cache is not None:
                cache[key] = found
        takes, prices = cast(_Candidates, found)
        for take in takes:
            offer = _offer(job, take, units, prices, now_s)
            if offer is not None and (best is None or offer.payoff > best.payoff):
                best = offer
    return best


_Candidates = tuple[list[tuple[tuple[int, int], ...]], list[float]]


def _candidates(
    need: int,
    usable: tuple[int, ...],
    units: Units,
    used: tuple[int, ...],
    bounds: PriceBounds,
) -> _Candidates:
    """The distinct candidate takes of a gang of `need` on types `usable` (fastest first) at
    `used`, and the units' prices there; no takes when the types hold too few free GPUs."""
    left = [c - u for c, u in zip(units.capacity, used, strict=True)]
    prices = units.prices(used, bounds)
    if sum(v for v, c in zip(left, units.columns, strict=True) if c in usable) < need:
        return [], prices
    takes: list[tuple[tuple[int, int], ...]] = []
    allowed_sets = [(c,) for c in usable] + [usable[:k] for k in range(2, len(usable) + 1)]
    for allowed in allowed_sets:
        for take in (
            _packed(need, allowed, units, left, prices),
            _cheapest(need, allowed, units, left, prices),
        ):
            if take is not None and take not in takes:
                takes.append(take)
    return takes, prices


def to_placement(
    job_id: str, take: tuple[tuple[int, int], ...], units: Units, gpu_types: tuple[str, ...]
) -> Placement:
    """The placement of a candidate: one slice per unit it takes GPUs from."""
    return Placement(
        job_id,
        tuple(GpuSlice(units.nodes[u], gpu_types[units.columns[u]], count) for u, count in take),
    )


def _offer(
    job: JobView,
    take: tuple[tuple[int, int], ...],
    units: Units,
    prices: list[float],
    now_s: float,
) -> Offer | None:
    rate = job.rate_on(units, take)
    if rate <= 0:
        return None
    duration = job.restart_s + job.steps / rate
    price = duration * sum(prices[u] * count for u, count in take)
    return Offer(take, rate, duration, job.utility.value(now_s + duration, job.arrival_s), price)


def _packed(
    need: int, allowed: tuple[int, ...], units: Units, left: list[int], prices: list[float]
) -> tuple[tuple[int, int], ...] | None:
    """The job on the fewest nodes: nodes by most free GPUs of the allowed types (a node that
    holds the whole job: the one with the fewest free, best fit), then the cheapest first;
    on a node, its cheapest units first."""
    by_node: dict[str, list[int]] = {}
    for u, (column, free) in enumerate(zip(units.columns, left, strict=True)):
        if free > 0 and column in allowed:
            by_node.setdefault(units.nodes[u], []).append(u)
    if not by_node:
        return None
    room = {node: sum(left[u] for u in members) for node, members in by_node.items()}
    cost = {node: min(prices[u] for u in members) for node, members in by_node.items()}
    whole = [node for node in by_node if room[node] >= need]
    if whole:
        order = sorted(whole, key=lambda n: (room[n], cost[n], n))[:1]
    else:
        order = sorted(by_node, key=lambda n: (-room[n], cost[n], n))
    return _take(need, [u for n in order for u in sorted(by_node[n], key=prices.__getitem__)], left)


def _cheapest(
    need: int, allowed: tuple[int, ...], units: Units, left: list[int], prices: list[float]
) -> tuple[tuple[int, int], ...] | None:
    """The job on the cheapest GPUs of the allowed types, wherever they are."""
    order = sorted(
        (
            u
            for u, (c, free) in enumerate(zip(units.columns, left, strict=True))
            if free > 0 and c in allowed
        ),
        key=lambda u: (prices[u], -left[u], u),
    )
    return _take(need, order, left)


def _take(need: int, order: list[int], left: list[int]) -> tuple[tuple[int, int], ...] | None:
    take: list[tuple[int, int]] = []
    for u in order:
        if need <= 0:
            break
        count = min(need, left[u])
        take.append((u, count))
        need -= count
    return tuple(sorted(take)) if need <= 0 else None


def restart_seconds(problem: Problem, default: float) -> np.ndarray:
    if problem.restart_s is None:
        return np.full(problem.n_jobs, default)
    return np.where(np.isnan(problem.restart_s), default, problem.restart_s)


def units_of(problem: Problem) -> Units:
    nodes, columns, capacity, free = [], [], [], []
    column = {t: c for c, t in enumerate(problem.gpu_types)}
    for node in problem.nodes:
        for gpu_type, count in sorted(node.gpus.items()):
            if gpu_type not in column or count <= 0:
                continue
            nodes.append(node.name)
            columns.append(column[gpu_type])
            capacity.append(int(count))
            free.append(int(node.free_gpus(gpu_type)))
    return Units(tuple(nodes), tuple(columns), tuple(capacity), tuple(free))


def capped(utility: Utility, most: float) -> Utility:
    """The utility counted at most `most` (`max_utility`: utilities are the users' own word)."""
    if utility.max_utility <= most:
        return utility
    return dataclasses.replace(utility, max_utility=most)


def job_view(
    problem: Problem,
    m: int,
    steps: np.ndarray,
    restart: np.ndarray,
    utility: Utility | None = None,
    rates_by_size: dict[int, np.ndarray] | None = None,
) -> JobView:
    """Job row `m` as FIND_ALLOC sees it; `rates_by_size` (`elastic_rates`) gives the rates
    of the larger gangs an elastic job may take."""
    # Not `problem.runnable`: a gang across types may take fewer GPUs of a type than it needs.
    rate = problem.throughput[m]
    spread = (
        rate
        if problem.throughput_spread is None
        else np.minimum(rate, problem.throughput_spread[m])
    )
    # A larger gang loses to spreading what the job's own size loses (no table has more).
    loss = np.divide(spread, rate, out=np.ones_like(rate, dtype=float), where=rate > 0)
    larger = tuple(
        (
            size,
            tuple(float(v) for v in rates_by_size[size][m]),
            tuple(float(v) for v in rates_by_size[size][m] * loss),
        )
        for size in problem.gpu_options(m)
        if rates_by_size is not None and size > int(problem.num_gpus[m])
    )
    return JobView(
        job_id=problem.job_ids[m],
        num_gpus=int(problem.num_gpus[m]),
        steps=float(steps[m]),
        restart_s=float(restart[m]),
        rate=tuple(float(v) for v in rate),
        rate_spread=tuple(float(v) for v in spread),
        utility=problem.utility(m) if utility is None else utility,
        arrival_s=float(problem.arrival_s[m]),
        larger=larger,
    )


def elastic_rates(problem: Problem) -> dict[int, np.ndarray] | None:
    """Every job's rates at each larger gang size some job may take (`Problem.rates_at`), or
    None when no job is elastic."""
    if problem.allowed_gpus is None:
        return None
    sizes = {
        n
        for m in range(problem.n_jobs)
        for n in problem.gpu_options(m)
        if n > int(problem.num_gpus[m])
    }
    return {n: problem.rates_at(n) for n in sorted(sizes)}
