"""What keeps hadar's batch short (docs/policies.md, "hadar", "finishing the batch"): our
additions to the paper's per-round rule, both measured on the Hadar scenario
(benchmarks/hadar.py).

- Critical jobs (`critical`): the payoff order runs short jobs first, so a job whose own run
  is nearly as long as the whole remaining batch would start late and finish last, alone. A
  waiting job whose remaining run at its best rate is at least `critical` x the batch's
  horizon (the longer of the remaining work over all GPUs and the longest remaining run)
  starts before the others, longest first.
- Preferred types: idle GPUs go first to the jobs whose cheapest type, in the types' values
  (hadar_prices.type_values), they are; only what is left goes to the others. Without it the
  first job in the payoff order takes whatever GPU frees, and fast GPUs go to jobs they hardly
  speed up.

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from slurm_hetsched.core.policies.hadar_alloc import JobView, Offer, Units, find_alloc
from slurm_hetsched.core.policies.hadar_prices import PriceBounds

# Costs within this relative margin of a job's cheapest count as cheapest (float ties).
PREFERENCE_MARGIN = 1e-9


def best_run_s(view: JobView) -> float:
    """The job's remaining run at its best rate (consolidated), in seconds; 0 when it has no
    steps left or no type to run on."""
    fastest = max(view.rate, default=0.0)
    return view.steps / fastest if fastest > 0 and view.steps > 0 else 0.0


def critical_jobs(
    views: Mapping[int, JobView], waiting: Iterable[int], gpus: int, threshold: float
) -> list[int]:
    """The waiting rows (of `views`, every job waiting or running) whose best run is at least
    `threshold` x the batch's horizon on `gpus` GPUs, longest first, equal ones in the order
    of `waiting` (module docstring); none when `threshold` is 0."""
    if threshold <= 0 or gpus <= 0:
        return []
    runs = {m: best_run_s(v) for m, v in views.items()}
    work = sum(views[m].num_gpus * run for m, run in runs.items()) / gpus
    horizon = max([work, *runs.values()])
    if horizon <= 0:
        return []
    critical = [m for m in waiting if runs.get(m, 0.0) > 0 and runs[m] >= threshold * horizon]
    return sorted(critical, key=lambda m: -runs[m])


def admit_critical(
    views: Mapping[int, JobView],
    waiting: list[int],
    units: Units,
    used: list[int],
    bounds: PriceBounds,
    now_s: float,
    threshold: float,
) -> dict[int, Offer]:
    """The critical jobs among the `waiting` rows, each on its best offer at the prices of
    `used` (updated in place) whenever it is still worth something: waiting for prices to
    fall would delay the whole batch, so the admission rule does not hold them back."""
    admitted: dict[int, Offer] = {}
    for m in critical_jobs(views, waiting, sum(units.capacity), threshold):
        offer = find_alloc(views[m], units, tuple(used), bounds, now_s)
        if offer is None or offer.utility <= 0:
            continue
        admitted[m] = offer
        for u, count in offer.take:
            used[u] += count
    return admitted


def on_preferred_types(view: JobView, offer: Offer, units: Units, bounds: PriceBounds) -> bool:
    """Whether the offer's slowest type is one of the job's cheapest per step in the types'
    values (`PriceBounds.cost_per_step`); always true without values."""
    if bounds.values is None:
        return True
    cheapest = min(bounds.cost_per_step(c, r) for c, r in enumerate(view.rate) if r > 0)
    worst = max(
        bounds.cost_per_step(units.columns[u], view.rate[units.columns[u]]) for u, _ in offer.take
    )
    return worst <= cheapest * (1 + PREFERENCE_MARGIN)
