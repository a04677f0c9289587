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
    slots: list[tuple[int, int]],
    units: Units,
    bounds: PriceBounds,
    now_s: float,
) -> bool:
    """The price rule for a running job on `slots` ((unit, GPUs) pairs): its utility at its
    projected completion there does not pay for them at the lowest price (docs/policies.md,
    "hadar", step 1)."""
    rate = view.rate_on(units, slots)
    if rate <= 0:
        return True
    duration = view.steps / rate
    floor = sum(float(bounds.low[units.columns[u]]) * n for u, n in slots)
    return view.utility.value(now_s + duration, view.arrival_s) <= floor * duration


def upgrades(
    placements: dict[str, Placement],
    views: Mapping[int, JobView],
    problem: Problem,
    units: Units,
    bounds: PriceBounds,
    used: list[int],
    unit_of: Mapping[tuple[str, str], int],
) -> dict[str, Placement]:
    """The price rule's moves (`upgrade`): a running job moves to a faster placement when its
    payoff there, restart included, beats staying, at the prices with its own GPUs given
    back; biggest gains first, each seeing the moves before it. `used` is updated."""
    row = {job_id: m for m, job_id in enumerate(problem.job_ids)}
    own = {
        job_id: [(unit_of[(s.node, s.gpu_type)], s.count) for s in current.slices]
        for job_id, current in placements.items()
    }
    gains: list[tuple[float, str]] = []
    for job_id in placements:
        gain = move_gain(views[row[job_id]], own[job_id], units, bounds, used, problem.now_s)
        if gain is not None:
            gains.append((gain[0], job_id))
    moved: dict[str, Placement] = {}
    for _gain, job_id in sorted(gains, reverse=True):
        found = move_gain(views[row[job_id]], own[job_id], units, bounds, used, problem.now_s)
        if found is None:
            continue
        for u, n in own[job_id]:
            used[u] -= n
        for u, n in found[1].take:
            used[u] += n
        moved[job_id] = to_placement(job_id, found[1].take, units, problem.gpu_types)
    return moved


def move_gain(
    view: JobView,
    own: list[tuple[int, int]],
    units: Units,
    bounds: PriceBounds,
    used: list[int],
    now_s: float,
) -> tuple[float, Offer] | None:
    """The payoff a running job on `own` ((unit, GPUs) pairs) gains by moving to its best
    offer, and that offer; None when staying is as good or the offer is not faster."""
    without = list(used)
    for u, n in own:
        without[u] -= n
    offer = find_alloc(view, units, tuple(without), bounds, now_s)
    rate_now = view.rate_on(units, own)
    if offer is None or rate_now <= 0 or not offer.rate > rate_now * (1 + 1e-9):
        return None
    stay_s = view.steps / rate_now
    prices = units.prices(tuple(without), bounds)
    stay = view.utility.value(now_s + stay_s, view.arrival_s) - stay_s * sum(
        prices[u] * n for u, n in own
    )
    if offer.payoff <= stay:
        return None
    return offer.payoff - stay, offer
