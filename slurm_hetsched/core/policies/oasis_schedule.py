"""OASiS's dual subroutine (Alg. 2; notes/astraea-oasis.md section 11): a job's best schedule
under posted prices, the one with the largest payoff, utility at its completion minus the
prices of the GPU-slots it reserves.

Heterogeneous, with moves charged (notes section 14, items 5 and 7):

- In each slot the job runs on one configuration, a GPU type and a gang size it may take, or
  not at all. A configuration's cost in a slot is OASiS's greedy single-slot placement: its
  GPUs on the cheapest node of the type that has them free (else spread over the cheapest
  GPUs of the type, at the job's spread rate); its work is the job's rate there times the
  slot. (`slot_cost` is that greedy; tests check it against the integer programme.) Ours: a
  gang that would break a wholly free node is placed on a node in use with room
  (`_kept_whole`), and a whole-node placement pays its type's offer (`Market.offer`).
- The dynamic programme runs over slots with the work done so far (in units of the job's
  steps / granularity) as state, plus the configuration of the last slot and the changes made
  so far: starting, resuming after a pause or changing configuration costs `restart_s` of
  the slot's time, and a schedule makes at most `max_changes` changes (a first start is none;
  a running job staying where it is costs nothing). With no restart cost and no limit it is
  OASiS's DP_COST over per-slot workloads.
- Every end slot is tried (OASiS's enumeration of t-hat): the payoff is the utility at the
  moment within that slot the work is done, minus the prices (the job holds its GPUs to the
  slot's end). Work beyond the horizon continues on the last slot's configuration at the last
  slot's prices.
- Each stretch of slots on one configuration is then pinned to one of the placements its
  slots chose, the cheapest over the whole stretch, by the same rule (a job does not hop
  between nodes of one type). The schedule's price is what the programme counted: its
  options' costs in the horizon, its tail at the last slot's (at the offer for a whole
  node).

Pure: numbers in, a schedule out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slurm_hetsched.core.policies.hadar_alloc import JobView, Units
from slurm_hetsched.core.policies.oasis_market import Market, Option, Take
from slurm_hetsched.core.policies.oasis_programme import Programme, Tables


@dataclass(frozen=True, slots=True)
class Schedule:
    """A job's best schedule: per slot its GPUs (None: paused or done), and past the horizon
    `tail_slots` more slots on the last slot's GPUs. It completes at `completion_s`, within
    its last slot (`end_s`, when the GPUs it reserved are free again)."""

    takes: tuple[Take | None, ...]
    tail_slots: int
    completion_s: float
    utility: float
    price: float
    end_s: float

    @property
    def payoff(self) -> float:
        return self.utility - self.price


def slot_cost(
    job: JobView, size: int, column: int, units: Units, free: Sequence[int], price: Sequence[float]
) -> tuple[Take, float, float] | None:
    """OASiS's greedy single-slot placement of `size` GPUs of type `column`: the cheapest node
    with them all free, else the cheapest free GPUs of the type over several nodes.

    Returns (take, cost, rate), or None if the type has not enough free GPUs."""
    mine = [u for u in range(len(units.nodes)) if units.columns[u] == column and free[u] > 0]
    whole = [u for u in mine if free[u] >= size]
    if whole:
        best = min(whole, key=lambda u: (price[u], u))
        take: Take = ((best, size),)
    else:
        need, picked = size, []
        for u in sorted(mine, key=lambda u: (price[u], u)):
            count = min(need, int(free[u]))
            picked.append((u, count))
            need -= count
            if need == 0:
                break
        if need > 0:
            return None
        take = tuple(sorted(picked))
    rate = job.rate_on(units, take)
    if rate <= 0:
        return None
    return take, sum(price[u] * n for u, n in take), rate


def best_schedule(
    job: JobView,
    market: Market,
    *,
    granularity: int,
    max_changes: int,
    current: Take | None = None,
    tails: bool = True,
) -> Schedule | None:
    """The job's schedule of the largest payoff (utility minus price), or None if it cannot
    finish at all. `current`: the GPUs it runs on now (staying there costs no restart);
    `tails`: whether it may go on past the horizon."""
    # Fastest first: the programme keeps the first of equal payoffs.
    configs = sorted(
        ((size, c) for size, rates in job.sizes() for c, r in enumerate(rates) if r > 0),
        key=lambda sc: (-dict(job.sizes())[sc[0]][sc[1]], sc[0], sc[1]),
    )
    if not configs or job.steps <= 0:
        return None
    start = None
    if current is not None:
        key = (sum(n for _, n in current), market.units.columns[current[0][0]])
        start = configs.index(key) if key in configs else None
    options = _options(job, market, configs, current if start is not None else None)
    rates = config_rates(options)
    if max(rates, default=0.0) <= 0:
        return None
    unit = _unit_steps(job.steps, granularity, rates, market)
    total = math.ceil(job.steps / unit - 1e-9)
    tables = Tables.of(job, market, options, unit)
    plan = Programme(tables, total, max_changes, start, unit).best(job, market, options, tails)
    if plan is None:
        return None
    states, tail, completion = plan
    takes = _pinned(states, tail, options, market, current if start is not None else None)
    offered = sum(_offer(options, t, s).cost for t, s in enumerate(states) if s >= 2)
    if tail:  # past the horizon at the last slot's offer, as the programme counted it
        last = _offer(options, len(states) - 1, states[-1])
        offered += float(market.tail_costs(takes[-1] or last.take, tail, last.offered)[0])
    return _priced(job, market, takes, tail, completion, offered)


def _options(
    job: JobView, market: Market, configs: list[tuple[int, int]], current: Take | None
) -> list[list[Option | None]]:
    """Per slot, per configuration: its greedy placement (the current GPUs where the job runs
    on that configuration now and they are free). Vectorised over slots for the common case,
    a whole node with the GPUs free (`_kept_whole`); `slot_cost` for the rest."""
    units = market.units
    columns = np.array(units.columns, dtype=np.int64)
    rows: list[list[Option | None]] = [[None] * len(configs) for _ in range(market.slots)]
    for i, (size, column) in enumerate(configs):
        mine = np.flatnonzero(columns == column)
        if mine.size == 0:
            continue
        free = market.free[: market.horizon, mine]
        price = market.price[: market.horizon, mine]
        masked = np.where(free >= size, price, math.inf)
        best = np.argmin(masked, axis=1)
        placed = _kept_whole(free, price, best, size, np.array(units.free)[mine])
        rate = dict(job.sizes())[size][column]
        offered = market.offer is not None
        for t in range(market.slots):
            if math.isfinite(masked[t, best[t]]):
                unit = int(mine[placed[t]])
                each = market.offer[t, unit] if market.offer is not None else masked[t, best[t]]
                rows[t][i] = Option(((unit, size),), float(each) * size, rate, offered)
            elif free[t].sum() >= size:
                found = slot_cost(job, size, column, units, market.free[t], market.price[t])
                rows[t][i] = None if found is None else Option(*found)
    if current is not None:
        key = (sum(n for _, n in current), units.columns[current[0][0]])
        if all(market.free[0][u] >= n for u, n in current):
            cost = sum(float(market.price[0][u]) * n for u, n in current)
            rate = job.rate_on(units, current)
            rows[0][configs.index(key)] = Option(current, cost, rate)
    if market.free_now:  # ranked by price above, paid nothing
        rows[0] = [None if o is None else Option(o.take, 0.0, o.rate, o.offered)
                   for o in rows[0]]  # fmt: skip
    return rows


def _kept_whole(
    free: np.ndarray, price: np.ndarray, cheapest: np.ndarray, size: int, whole: np.ndarray
) -> np.ndarray:
    """Per slot, the node (column of `free`) a gang of `size` GPUs goes to: the `cheapest`
    with room, unless that node is wholly free and a node already in use has room; then the
    cheapest of those. Per-node prices rise with the node's own GPUs held, so the cheapest
    node is the emptiest, and small jobs would spread one to a node and leave no whole node
    for a gang (on a lightly loaded cluster, a 4-GPU job ran on K80s while 7 of 20 fast GPUs
    were busy). Where the scheduler packs it is not the job's cost: it pays its type's
    offer (`Market.offer`), the same on every node."""
    slots = np.arange(free.shape[0])
    in_use = np.where((free >= size) & (free < whole[None, :]), price, math.inf)
    packed = np.argmin(in_use, axis=1)
    breaks_whole = free[slots, cheapest] >= whole[cheapest]
    return np.where(breaks_whole & np.isfinite(in_use[slots, packed]), packed, cheapest)


def config_rates(options: list[list[Option | None]]) -> list[float]:
    """Each configuration's best rate over the slots (0: it never has room)."""
    return [
        max((row[i].rate for row in options if row[i] is not None), default=0.0)  # type: ignore[union-attr]
        for i in range(len(options[0]))
    ]


# At most this many work units per slot on the job's fastest configuration: bounds the state
# space of a long job; a configuration 16x slower than its fastest gets no work at all.
MOST_UNITS_PER_SLOT = 16


def _unit_steps(steps: float, granularity: int, rates: list[float], market: Market) -> float:
    """Steps per work unit: the job's steps / granularity, but no coarser than its slowest
    usable configuration's work in a slot, and no finer than MOST_UNITS_PER_SLOT per slot of
    its fastest; then a little finer, so that a slot of its fastest is whole units."""
    works = [r * market.slot_s for r in rates if r > 0]
    unit = min(steps / max(granularity, 1), min(works))
    # A whole number of units in a slot of the fastest: rounded there, its slots in the
    # horizon did less than its tail past the horizon (counted exactly), and a job paused
    # through the horizon to finish in the tail a slot cheaper.
    per_slot = min(math.ceil(max(works) / unit - 1e-9), MOST_UNITS_PER_SLOT)
    return max(works) / per_slot


def _pinned(
    states: list[int],
    tail: int,
    options: list[list[Option | None]],
    market: Market,
    current: Take | None,
) -> list[Take | None]:
    """Per slot the GPUs: each stretch of one configuration on one of the takes its slots
    chose that is free in all of them and as fast as the fastest of them (the last stretch
    also in the `tail` slots past the horizon): the current GPUs, else the cheapest over the
    stretch, unless that breaks a wholly free node and one in use fits: then the cheapest of
    those (`_kept_whole`'s rule). If none fits, slot by slot as the programme chose."""
    takes: list[Take | None] = [
        None if s < 2 else options[t][s - 2].take  # type: ignore[union-attr]
        for t, s in enumerate(states)
    ]
    t = 0
    while t < len(states):
        if states[t] < 2:
            t += 1
            continue
        end = t
        while end + 1 < len(states) and states[end + 1] == states[t]:
            end += 1
        slots = range(t, end + 1)
        chosen = [options[s][states[s] - 2] for s in slots]
        # As fast as the fastest slot the programme counted: a stretch pinned to GPUs spread
        # over nodes where it counted a whole node would fall behind its schedule.
        fastest = max(o.rate for o in chosen if o is not None)
        # The current GPUs are among them when the programme chose them (they are offered
        # in the first slot for their own configuration only).
        candidates = {o.take for o in chosen if o is not None}
        fits = [
            c
            for c in candidates
            if all(all(market.free[s][u] >= n for u, n in c) for s in slots)
            and _rate(options, slots, states, c) >= fastest
            and (end < len(states) - 1 or math.isfinite(market.tail_costs(c, tail)[0]))
        ]
        if fits:
            pick = min(fits, key=lambda c: (c != current, _cost(market, slots, c), c))
            in_use = [c for c in fits if not _wholly_free(market, t, c)]
            if pick != current and in_use and _wholly_free(market, t, pick):
                pick = min(in_use, key=lambda c: (_cost(market, slots, c), c))
            for s in slots:
                takes[s] = pick
        t = end + 1
    return takes


def _rate(options: list[list[Option | None]], slots: range, states: list[int], take: Take) -> float:
    for s in slots:
        option = options[s][states[s] - 2]
        if option is not None and option.take == take:
            return option.rate
    return 0.0  # never: every candidate is one of the stretch's options


def _offer(options: list[list[Option | None]], t: int, state: int) -> Option:
    option = options[t][state - 2]
    assert option is not None  # the programme runs only on configurations with an offer
    return option


def _wholly_free(market: Market, t: int, take: Take) -> bool:
    """Whether every unit of `take` has all its GPUs free in slot t."""
    return all(market.free[t][u] >= market.units.free[u] for u, _ in take)


def _cost(market: Market, slots: range, take: Take) -> float:
    return sum(float(market.price[s][u]) * n for s in slots for u, n in take)


def _priced(
    job: JobView,
    market: Market,
    takes: list[Take | None],
    tail: int,
    completion: float,
    price: float,
) -> Schedule:
    """The schedule with its utility at `completion` and its `price`, `tail` slots past the
    horizon on the last slot's GPUs. (Pinned GPUs are never slower than the programme
    counted, so the job completes then at the latest.)"""
    end = float(market.slot_ends[len(takes) - 1]) + tail * market.slot_s
    utility = job.utility.value(completion, job.arrival_s)
    return Schedule(tuple(takes), tail, completion, utility, price, end)
