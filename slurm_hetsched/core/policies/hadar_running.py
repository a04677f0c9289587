"""Hadar's running jobs (docs/policies.md, "hadar", step 1): the price rule that preempts a job
worth nothing, and the moves to faster placements that pay for their restart (`upgrade`). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_hetsched.core.model import Placement, Problem
from slurm_hetsched.core.policies.hadar_alloc import JobView, Offer, Units, find_alloc, to_placement
from slurm_hetsched.core.policies.hadar_prices import PriceBounds


def priced_out(
    view: JobView,
    current: Placement,
    slots: list[tuple[int | None, int]],
    units: Units,
    bounds: PriceBounds,
    problem: Problem,
) -> bool:
    """The price rule for a running job: its utility at its projected completion on its
    GPUs does not pay for them at the lowest price (module docstring, step 1)."""
    spread = len(current.nodes) > 1
    rates = view.rate_spread if spread else view.rate
    rate = min(rates[problem.gpu_types.index(t)] for t in current.gpu_types)
    if rate <= 0:
        return True
    duration = view.steps / rate
    floor = sum(float(bounds.low[units.columns[u]]) * n for u, n in slots if u is not None)
    return view.utility.value(problem.now_s + duration, view.arrival_s) <= floor * duration


def upgrades(
    placements: dict[str, Placement],
    views: Mapping[int, JobView],
    problem: Problem,
    units: Units,
    bounds: PriceBounds,
    used: list[int],
) -> dict[str, Placement]:
    """The price rule's moves (`upgrade`): a running job moves to a faster placement when its
    payoff there, restart included, beats staying, at the prices with its own GPUs given
    back; biggest gains first, each seeing the moves before it. `used` is updated."""
    row = {job_id: m for m, job_id in enumerate(problem.job_ids)}
    unit_of = {(units.nodes[u], problem.gpu_types[c]): u for u, c in enumerate(units.columns)}
    gains: list[tuple[float, str]] = []
    for job_id, current in placements.items():
        gain = move_gain(views[row[job_id]], current, problem, units, bounds, used, unit_of)
        if gain is not None:
            gains.append((gain[0], job_id))
    moved: dict[str, Placement] = {}
    for _gain, job_id in sorted(gains, reverse=True):
        current = placements[job_id]
        found = move_gain(views[row[job_id]], current, problem, units, bounds, used, unit_of)
        if found is None:
            continue
        own = [(unit_of[(s.node, s.gpu_type)], s.count) for s in current.slices]
        for u, n in own:
            used[u] -= n
        for u, n in found[1].take:
            used[u] += n
        moved[job_id] = to_placement(job_id, found[1].take, units, problem.gpu_types)
    return moved


def move_gain(
    view: JobView,
    current: Placement,
    problem: Problem,
    units: Units,
    bounds: PriceBounds,
    used: list[int],
    unit_of: Mapping[tuple[str, str], int],
) -> tuple[float, Offer] | None:
    """The payoff a running job gains by moving to its best offer, and that offer; None when
    staying is as good or the offer is not faster than where it runs."""
    own = [(unit_of[(s.node, s.gpu_type)], s.count) for s in current.slices]
    without = list(used)
    for u, n in own:
        without[u] -= n
    offer = find_alloc(view, units, tuple(without), bounds, problem.now_s)
    if offer is None:
        return None
    rates = view.rate_spread if len(current.nodes) > 1 else view.rate
    rate_now = min(rates[problem.gpu_types.index(t)] for t in current.gpu_types)
    if rate_now <= 0:
        return None
    stay_s = view.steps / rate_now
    prices = units.prices(tuple(without), bounds)
    stay = view.utility.value(problem.now_s + stay_s, view.arrival_s) - stay_s * sum(
        prices[u] * n for u, n in own
    )
    faster = view.steps / (offer.duration_s - view.restart_s) > rate_now * (1 + 1e-9)
    if not faster or offer.payoff <= stay:
        return None
    return offer.payoff - stay, offer
