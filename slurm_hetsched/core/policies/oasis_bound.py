"""Cheap figures of a job for OASiS before any dynamic programme: what the price bounds need of
it (`worth`, `timespan`) and an upper bound on its payoff at the posted prices
(`payoff_bound`), enough to leave most held jobs waiting every round without a programme.
Pure."""

from __future__ import annotations

import math

import numpy as np

from slurm_hetsched.core.policies.hadar_alloc import JobView
from slurm_hetsched.core.policies.oasis_book import Book
from slurm_hetsched.core.policies.oasis_prices import JobWorth
from slurm_hetsched.core.utility_values import utility_values


def timespan(worths: list[JobWorth], horizon: int) -> int:
    """OASiS's T in slots: the horizon, or the longest job's shortest run if longer (eq.
    (26)'s eta assumes every job fits in T)."""
    runs = [min(w.gpu_slots) / w.gpus for w in worths if math.isfinite(min(w.gpu_slots))]
    return max(horizon, math.ceil(max(runs, default=0.0)))


def worth(view: JobView, slot_s: float, now_s: float, horizon_end_s: float) -> JobWorth:
    """What the price bounds need of a job (oasis_prices.JobWorth)."""
    fastest = max((max(rates) * 1.0 for _, rates in view.sizes()), default=0.0)
    best = view.utility.value(now_s + view.steps / fastest, view.arrival_s) if fastest > 0 else 0.0
    slots = []
    for column in range(len(view.rate)):
        runs = [
            size * math.ceil(view.steps / (rates[column] * slot_s) - 1e-9)
            for size, rates in view.sizes()
            if rates[column] > 0
        ]
        slots.append(float(min(runs)) if runs and view.steps > 0 else math.inf)
    return JobWorth(
        gpus=view.num_gpus,
        best_utility=best,
        late_utility=view.utility.value(horizon_end_s, view.arrival_s),
        gpu_slots=tuple(slots),
    )


def payoff_bound(view: JobView, book: Book) -> tuple[float, float, float]:
    """An upper bound on the job's payoff, cheap enough for every waiting job every round: for
    each configuration and end slot, its utility when done within that slot minus the least
    price of the whole slots its run needs among those before (its GPUs the cheapest of the
    type over all nodes, no restart, no limit on changes; past the horizon the last slot's
    least price: the true schedule can only cost more or end later). Returns (bound, utility,
    least price) at the best configuration and end slot."""
    best = (-math.inf, 0.0, math.inf)
    ends = book.slot_ends
    for size, rates in view.sizes():
        for column, rate in enumerate(rates):
            if rate <= 0:
                continue
            needed = math.ceil(view.steps / (rate * book.slot_s) - 1e-9)
            # Done within its last slot: the run's part of that slot, not the slot's end.
            early = needed * book.slot_s - view.steps / rate
            least, cheapest = book.least_prices(column, size)
            if needed <= book.slots:
                t = np.arange(needed - 1, book.slots)
                prices = least[t, needed]
            else:  # past the horizon: every slot, then at least the last slot's price
                t = np.array([book.slots - 1])
                prices = least[t, book.slots] + (needed - book.slots) * cheapest[-1]
            extra = max(needed - book.slots, 0)
            when = ends[t] + extra * book.slot_s - early
            worths = utility_values(view.utility, when, view.arrival_s)
            payoff = np.where(np.isfinite(prices), worths - prices, -math.inf)
            at = int(np.argmax(payoff))
            if payoff[at] > best[0]:
                best = (float(payoff[at]), float(worths[at]), float(prices[at]))
    return best
