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
would make the price 0 and the ratio infinite). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slurm_hetsched.core.model import Problem
from slurm_hetsched.core.utility import Utility

# U_min is kept at least this fraction of U_max, so the exponent's base stays finite when
# one job's utility per GPU-second is tiny next to another's.
MIN_PRICE_RATIO = 1e-9


@dataclass(frozen=True, slots=True)
class PriceBounds:
    """U_min^r and U_max^r per GPU type (problem column order), utility per GPU-second."""

    low: np.ndarray  # (n_types,)
    high: np.ndarray  # (n_types,)

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
) -> PriceBounds:
    """U_min and U_max per type over the problem's jobs (waiting and running: the paper's
    "based on the cluster's workload"), from each job's remaining `steps` and the seconds
    `restart_s` a new allocation costs it (part of every run it could have); `utilities`: the
    jobs' utilities as the policy counts them (None: the problem's)."""
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
    return PriceBounds(low=low, high=high)
