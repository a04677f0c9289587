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
    """An upper bound on the job's payoff, cheap enough for every waiting job every round,
    whatever configurations its schedule mixes. A slot's price as a function of the steps it
    does is at least the lower convex hull of its configurations' (steps in the slot, least
    price there: `Book.least_prices`) and (0, 0); the least price of all the job's steps in
    the slots up to an end slot is then the cheapest hull segments first (no restart). For
    each end slot: its utility at that slot's start minus that price; past the horizon: its
    utility at the horizon's end minus the price of the segments cheaper per step than the
    last slot's cheapest configuration, the rest at that (a tail never pays less). Returns
    (bound, utility, least price) at the best end."""
    slot_s, slots = book.slot_s, book.slots
    configs = [
        (rate * slot_s, book.least_prices(column, size))
        for size, rates in view.sizes()
        for column, rate in enumerate(rates)
        if rate > 0
    ]
    if not configs or view.steps <= 0:
        return (-math.inf, 0.0, math.inf)
    slope, length, owner = _segments(configs, slots)
    if slope.size == 0:  # no room in any slot of the horizon, nor so past it
        return (-math.inf, 0.0, math.inf)
    order = np.argsort(slope, kind="stable")
    slope, length, owner = slope[order], length[order], owner[order]
    ends = book.slot_ends
    # Row e: the segments of the slots up to e, cheapest first.
    usable = np.where(owner[None, :] <= np.arange(slots)[:, None], length[None, :], 0.0)
    done = np.cumsum(usable, axis=1)
    spent = np.cumsum(usable * slope[None, :], axis=1)
    full = np.minimum((done < view.steps - 1e-9).sum(axis=1), slope.size - 1)
    rows = np.arange(slots)
    before_done = np.where(full > 0, done[rows, full - 1], 0.0)
    before_spent = np.where(full > 0, spent[rows, full - 1], 0.0)
    prices = before_spent + (view.steps - before_done) * slope[full]
    prices = np.where(done[:, -1] >= view.steps - 1e-9, prices, math.inf)
    worths = utility_values(view.utility, ends - slot_s, view.arrival_s)
    payoff = np.where(np.isfinite(prices), worths - prices, -math.inf)
    at = int(np.argmax(payoff))
    best = (float(payoff[at]), float(worths[at]), float(prices[at]))
    tail = min(float(least[-1]) / work for work, least in configs)
    if math.isfinite(tail):
        cheaper = np.where(slope < tail, length, 0.0)
        inside = min(float(cheaper.sum()), view.steps)
        price = _fill(inside, slope, cheaper) + (view.steps - inside) * tail
        worth = view.utility.value(float(ends[-1]), view.arrival_s)
        if worth - price > best[0]:
            best = (worth - price, worth, price)
    return best


def _segments(
    configs: list[tuple[float, np.ndarray]], slots: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each slot's lower hull of (0, 0) and its configurations' (steps, price) as segments:
    (price per step, steps, slot) arrays. At once over slots: a configuration is a vertex of
    a slot's hull unless it lies on or above a chord between a point left of it (the origin
    too) and one right of it."""
    works = sorted({work for work, _ in configs})
    w = np.array([0.0, *works])
    p = np.full((slots, w.size), math.inf)
    p[:, 0] = 0.0
    for work, prices in configs:  # one point per amount of work: the least price
        k = 1 + works.index(work)
        p[:, k] = np.minimum(p[:, k], prices[:slots])
    vertex = np.isfinite(p)
    with np.errstate(invalid="ignore"):
        for i in range(1, w.size - 1):
            for a in range(i):
                for b in range(i + 1, w.size):
                    chord = p[:, a] + (p[:, b] - p[:, a]) * (w[i] - w[a]) / (w[b] - w[a])
                    vertex[:, i] &= ~(np.isfinite(chord) & (p[:, i] >= chord))
    # Each vertex but the origin closes a segment from the vertex before it.
    index = np.arange(w.size)
    last = np.maximum.accumulate(np.where(vertex, index[None, :], -1), axis=1)
    before = np.concatenate([np.zeros((slots, 1), dtype=np.int64), last[:, :-1]], axis=1)
    closes = vertex & (index[None, :] > 0)
    rows, cols = np.nonzero(closes)
    starts = before[rows, cols]
    lengths = w[cols] - w[starts]
    slopes = (p[rows, cols] - p[rows, starts]) / lengths
    return slopes, lengths, rows.astype(np.int64)


def _fill(steps: float, slope: np.ndarray, length: np.ndarray) -> float:
    """The least price of `steps` over segments sorted by price per step (`slope`), each at
    most `length` steps; inf if they hold fewer."""
    done = np.cumsum(length)
    if done.size == 0 or done[-1] < steps - 1e-9:
        return math.inf if steps > 1e-9 else 0.0
    full = min(int(np.searchsorted(done, steps, side="left")), done.size - 1)
    before = float(done[full - 1]) if full else 0.0
    return float((slope[:full] * length[:full]).sum()) + (steps - before) * float(slope[full])
