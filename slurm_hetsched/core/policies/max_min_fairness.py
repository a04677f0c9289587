"""Max-min fairness (Gavel's LAS): maximize the smallest weighted normalized rate.

    maximize  min_m  r_m(x) / w_m,   r_m(x) = sum_j a[m, j] x[m, j]   (rates.normalized_rate_matrix)
    subject to the base constraints (constraints.py).

`max_min_fairness_perf` is heterogeneity-aware (a from the measured throughputs);
`max_min_fairness` is Gavel's agnostic baseline (every throughput 1 where the job can run).
Only the objective value is unique: a job that is not a bottleneck may get any rate above it
(water_filling.py lifts such jobs as high as they can go).

Two backends give the same optimum (tests/unit/core/policies assert it):
- "highs" (default): the rate LP (rate_lp.py) over groups of identical jobs (symmetry.py):
  HiGHS on the whole LP when it is small, through the GPU types' prices when it is large
  (type_prices.py); milliseconds at 2048 jobs, seconds at 100,000 distinct ones.
- "cvxpy": the plain formulation below, readable and solver-agnostic (default CLARABEL).

The rate LP is shared with water filling, makespan and finish-time fairness: maximize t
subject to r_m(x) >= floor_m + w_m t for every row, plus the base constraints.

Option `energy_slack` (energy.py): give up that fraction of the objective for the allocation
that draws the least power.

No I/O.
"""

from __future__ import annotations

from typing import ClassVar

import cvxpy as cp
import numpy as np

from slurm_hetsched.core.model import Allocation, Problem
from slurm_hetsched.core.policies.base import BACKENDS, EnergySlackPolicy, check_backend
from slurm_hetsched.core.policies.constraints import base_constraints, clean_solution, solve_cvxpy
from slurm_hetsched.core.policies.energy import Floors
from slurm_hetsched.core.policies.rate_lp import IPM_ROWS, RateLP, RateRows, rate_lp, solve_rate_lp
from slurm_hetsched.core.policies.rates import normalized_rate_matrix, normalized_rates
from slurm_hetsched.core.policies.symmetry import group_jobs

# BACKENDS and check_backend live in base.py, with every solver policy; still importable here.
__all__ = [
    "BACKENDS",
    "IPM_ROWS",
    "MaxMinFairness",
    "MaxMinFairnessPerf",
    "RateLP",
    "check_backend",
    "max_min_allocation",
    "rate_lp",
]


def max_min_allocation(
    problem: Problem, x: np.ndarray, solve_s: float, policy: str, agnostic: bool, solves: int = 1
) -> Allocation:
    """The Allocation of a solver's x, with the max-min objective: min_m rate_m / weight_m.

    Raises:
        SolverError: x is not feasible (constraints.clean_solution).
    """
    x = clean_solution(problem, x, policy)
    return Allocation(
        job_ids=problem.job_ids,
        gpu_types=problem.gpu_types,
        x=x,
        objective=float(np.min(normalized_rates(problem, x, agnostic) / problem.weight)),
        solve_s=solve_s,
        policy=policy,
        solves=solves,
    )


class MaxMinFairnessPerf(EnergySlackPolicy):
    """Heterogeneity-aware max-min fairness (Gavel's LAS), weighted and multi-GPU.

    Constructor (base.EnergySlackPolicy): backend "highs" (fast) or "cvxpy"; solver: the
    cvxpy solver name (default CLARABEL); energy_slack: the fraction of the max-min objective
    to give up for less power (energy.py; 0 = off).
    """

    name: ClassVar[str] = "max_min_fairness_perf"
    description: ClassVar[str] = (
        "max-min fairness (LAS) on throughputs: maximize the smallest weighted rate, "
        "normalized by each job's equal-share rate (Gavel)"
    )
    agnostic: ClassVar[bool] = False

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring.

        Raises:
            InvalidProblemError: energy_slack > 0 and the problem has no power data.
            SolverError: a solve is not optimal.
        """
        if (empty := self._prologue(problem)) is not None:
            return empty
        a = normalized_rate_matrix(problem, self.agnostic)
        if self.backend == "cvxpy":
            x, solve_s = self._solve_cvxpy(problem, a)
        else:
            x, solve_s = self._solve_highs(problem, a)
        allocation = max_min_allocation(problem, x, solve_s, self.name, self.agnostic)
        if self.energy_slack == 0:
            return allocation
        # Every job keeps (1 - slack) of the optimal min weighted rate.
        floor = (1 - self.energy_slack) * allocation.objective * problem.weight
        x, more_s = self._least_power(problem, Floors.per_job(a, floor), allocation.x)
        return max_min_allocation(problem, x, solve_s + more_s, self.name, self.agnostic, 2)

    def _solve_highs(self, problem: Problem, a: np.ndarray) -> tuple[np.ndarray, float]:
        groups = group_jobs(np.column_stack([a, problem.num_gpus, problem.weight]))
        rep = groups.representative
        solution = solve_rate_lp(
            RateRows(
                a=a[rep],
                gpus=problem.num_gpus[rep] * groups.size,
                capacity=problem.capacity,
                weight=problem.weight[rep],
                floor=np.zeros(groups.n_groups),
            ),
            policy=self.name,
            n_jobs=problem.n_jobs,
        )
        return groups.expand(solution.x), solution.solve_s

    def _solve_cvxpy(self, problem: Problem, a: np.ndarray) -> tuple[np.ndarray, float]:
        x = cp.Variable(a.shape, nonneg=True)  # (n_jobs, n_types) time fractions
        rate = cp.sum(cp.multiply(a / problem.weight[:, None], x), axis=1)  # (n_jobs,)
        program = cp.Problem(cp.Maximize(cp.min(rate)), base_constraints(x, problem))
        solve_s = solve_cvxpy(program, self.name, problem, self.solver)
        return np.asarray(x.value), solve_s


class MaxMinFairness(MaxMinFairnessPerf):
    """Heterogeneity-agnostic max-min fairness: every GPU type counts as the same."""

    name: ClassVar[str] = "max_min_fairness"
    description: ClassVar[str] = (
        "max-min fairness (LAS), heterogeneity-agnostic baseline: every throughput taken as 1 "
        "where the job can run"
    )
    agnostic: ClassVar[bool] = True
