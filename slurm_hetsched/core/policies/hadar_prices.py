"""Hadar's posted prices (Sultana et al., eq. (5)-(7); docs/policies.md, "hadar"): one price per
GPU of each type on each node, rising exponentially with the share of that node's GPUs of the
type already given out.

    k_h^r(gamma) = U_min^r * (U_max^r / U_min^r) ** (gamma_h^r / c_h^r)

The paper's bounds are per unit of resource and time slot; we price in utility per GPU-second
(continuous time, so the policy needs no round length), and read them as densities:

- U_max^r = max_j U_j(now + t_min_j) / (W_j * t_min_j): the most any job could pay for one
  GPU-second (its whole utility over its shortest run), so a full node prices every job out;
- U_min^r = 1 / (4 eta) * min_j U_j(now + t_max_j) / (W_j * t_max_j): a quarter of the least
  any job earns per GPU-second (finishing at its slowest rate), so an empty node admits any job.

t_min_j / t_max_j are the job's remaining run on its fastest / slowest type; only jobs that can
run on type r count for r's bounds; a job whose utility is 0 there does not lower U_min (it
would make the price 0 and the ratio infinite).

With those bounds alone every type costs the same per GPU-second, so each job takes the
fastest GPUs it can get, whether they speed it up 4x or 1.2x. `type_values` (ours, option
`type_values=fluid`) weighs each type by what one of its GPU-seconds is worth to the whole
queue: the capacity duals of the fluid makespan LP over the remaining work (Gavel's
`min_total_duration_perf`, rate_lp.py), scaled so the most valuable type is 1. Both bounds of
type r are multiplied by its value, so a job finds a type cheap in proportion to how much that
type speeds it up beside the others: comparative advantage, as Gavel's LP allocates. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slurm_hetsched.core.model import Problem
from slurm_hetsched.core.policies.makespan import solve_makespan_lp
from slurm_hetsched.core.utility import Utility
from slurm_hetsched.errors import SolverError

# U_min is kept at least this fraction of U_max, so the exponent's base stays finite when
# one job's utility per GPU-second is tiny next to another's.
MIN_PRICE_RATIO = 1e-9
# A type the fluid LP leaves idle has dual 0; its value is kept at this fraction of the most
# valuable type's, so its prices stay positive and ordered by use.
MIN_TYPE_VALUE = 1e-3


@dataclass(frozen=True, slots=True)
class PriceBounds:
    """U_min^r and U_max^r per GPU type (problem column order), utility per GPU-second."""

    low: np.ndarray  # (n_types,)
    high: np.ndarray  # (n_types,)
    values: np.ndarray | None = None  # (n_types,) the types' values (type_values), or None

    def cost_per_step(self, column: int, rate: float) -> float:
        """What one step costs a job running at `rate` steps/s on a GPU of type `column`, in
        the types' values (1 for every type without them): how much the job would rather
        run there than elsewhere."""
        value = 1.0 if self.values is None else float(self.values[column])
        return value / rate if rate > 0 else np.inf

    def price(self, column: int, used: float, capacity: float) -> float:
        """k = U_min (U_max / U_min) ** (used / capacity): the price of one more GPU-second
        of type `column` on a node that has `capacity` of them, `used` already given out."""
        low, high = float(self.low[column]), float(self.high[column])
        share = min(1.0, used / capacity) if capacity > 0 else 1.0
        return float(low * (high / low) ** share)


def price_bounds(
    problem: Problem,
    steps: np.ndarray,
    restart_s: np.ndarray,
    eta: float = 1.0,
    utilities: Sequence[Utility] | None = None,
    values: np.ndarray | None = None,
) -> PriceBounds:
    """U_min and U_max per type over the problem's jobs (waiting and running: the paper's
    "based on the cluster's workload"), from each job's remaining `steps` and the seconds
    `restart_s` a new allocation costs it (part of every run it could have); `utilities`: the
    jobs' utilities as the policy counts them (None: the problem's); `values`: the types'
    values (type_values), which scale both bounds of each type (None: all types alike)."""
    n_types = problem.n_types
    low = np.full(n_types, np.inf)
    high = np.zeros(n_types)
    rates = problem.throughput  # a gang across types needs no type to hold all its GPUs
    for m in range(problem.n_jobs):
        usable = rates[m] > 0
        if not usable.any() or steps[m] <= 0:
            continue
        gpus = float(problem.num_gpus[m])
        t_min = restart_s[m] + steps[m] / rates[m][usable].max()
        t_max = restart_s[m] + steps[m] / rates[m][usable].min()
        utility = problem.utility(m) if utilities is None else utilities[m]
        arrival = float(problem.arrival_s[m])
        best = utility.value(problem.now_s + t_min, arrival) / (gpus * t_min)
        worst = utility.value(problem.now_s + t_max, arrival) / (gpus * t_max)
        high[usable] = np.maximum(high[usable], best)
        if worst > 0:
            low[usable] = np.minimum(low[usable], worst / (4.0 * eta))
    # Types no job can use, or only jobs worth nothing: any finite pair will do.
    high = np.where(high > 0, high, 1.0)
    low = np.where(np.isfinite(low), low, high * MIN_PRICE_RATIO)
    low = np.clip(low, high * MIN_PRICE_RATIO, high)
    if values is None:
        return PriceBounds(low=low, high=high)
    return PriceBounds(low=low * values, high=high * values, values=values)


def type_values(problem: Problem, steps: np.ndarray) -> np.ndarray:
    """Each GPU type's value per GPU-second to the queue, the most valuable 1 (module
    docstring): the capacity duals of the fluid makespan LP over every job's remaining
    `steps` at its gang size (problem.throughput). All 1 when no type is scarce (the LP's
    makespan is one job's own run) or the LP fails: the paper's prices then."""
    ones = np.ones(problem.n_types)
    rates = problem.throughput
    live = (steps > 0) & (rates > 0).any(axis=1)
    if not live.any():
        return ones
    try:
        solution, _ = solve_makespan_lp(
            rates[live],
            problem.num_gpus[live].astype(float),
            problem.capacity,
            steps[live],
            policy="hadar",
        )
    except SolverError:
        return ones
    prices = np.asarray(solution.prices, dtype=float)
    if not np.isfinite(prices).all() or prices.max() <= 0:
        return ones
    values: np.ndarray = np.maximum(prices / prices.max(), MIN_TYPE_VALUE)
    return values
