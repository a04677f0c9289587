"""Max-min fairness (Gavel's LAS): maximize the smallest weighted normalized rate.

    maximize  min_m  r_m(x) / w_m,   r_m(x) = sum_j a[m, j] x[m, j]   (rates.normalized_rate_matrix)
    subject to the base constraints (constraints.py).

`max_min_fairness_perf` is heterogeneity-aware (a from the measured throughputs);
`max_min_fairness` is Gavel's agnostic baseline (every throughput 1 where the job can run).
Only the objective value is unique: a job that is not a bottleneck may get any rate above it
(water_filling.py lifts such jobs as high as they can go).

Two backends give the same optimum (tests/unit/core/policies assert it):
- "highs" (default): the LP built as sparse matrices over groups of identical jobs
  (symmetry.py) and solved by HiGHS directly; milliseconds at 2048 jobs.
- "cvxpy": the plain formulation below, readable and solver-agnostic (default CLARABEL).

`rate_lp` builds the LP shared with water filling: maximize t subject to
r_m(x) >= floor_m + w_m t for every row, plus the base constraints.

Option `energy_slack` (energy.py): give up that fraction of the objective for the allocation
that draws the least power.

No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from slurm_hetsched.core.model import Allocation, Problem
from slurm_hetsched.core.policies.base import BACKENDS, EnergySlackPolicy, check_backend
from slurm_hetsched.core.policies.constraints import (
    base_constraints,
    base_rows,
    clean_solution,
    solve_cvxpy,
)
from slurm_hetsched.core.policies.energy import Floors
from slurm_hetsched.core.policies.lp import (
    INF,
    LpSolution,
    RowBlock,
    SparseLP,
    solve_highs,
    stack_rows,
)
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

# Above this many (groups of) jobs, HiGHS's interior point method beats its simplex on the
# max-min LP (measured in benchmarks/policies.py: 3 s instead of 27 s at 8192 distinct jobs).
IPM_ROWS = 1000


@dataclass(frozen=True, slots=True)
class RateLP:
    """The LP `maximize t <= t_max s.t. r(x) >= floor + weight * t, base constraints`, and its
    layout.

    Columns are one x entry per runnable (row, type), then t. Rows are the n_rows rate rows,
    then the base rows (constraints.base_rows).
    """

    lp: SparseLP
    rows: np.ndarray  # (n_entries,) row of each x column
    cols: np.ndarray  # (n_entries,) GPU type of each x column
    shape: tuple[int, int]  # (n_rows, n_types)

    def unpack(self, solution: LpSolution) -> tuple[np.ndarray, float, np.ndarray]:
        """(x (n_rows, n_types), t, |dual| of each rate row (n_rows,))."""
        x = np.zeros(self.shape)
        x[self.rows, self.cols] = solution.columns[: len(self.rows)]
        t = float(solution.columns[len(self.rows)])
        return x, t, np.abs(solution.row_duals[: self.shape[0]])


def rate_lp(
    a: np.ndarray,
    gpus_per_row: np.ndarray,
    capacity: np.ndarray,
    weight: np.ndarray,
    floor: np.ndarray,
    t_max: float = INF,
) -> RateLP:
    """Build the max-min LP over rows that are jobs or groups of identical jobs.

    Args:
        a: (n_rows, n_types) normalized rate per unit time fraction; 0 = cannot run.
        gpus_per_row: (n_rows,) GPUs used per unit time fraction (num_gpus x group size).
        capacity: (n_types,) GPUs per type.
        weight: (n_rows,) >= 0; a row with weight 0 only keeps its floor.
        floor: (n_rows,) normalized rate each row must keep (may be negative).
        t_max: upper bound on t.
    """
    n_rows, n_types = a.shape
    rows, cols = np.nonzero(a > 0)
    n_entries = len(rows)
    entry = np.arange(n_entries)
    rate = sp.hstack(
        [
            sp.csr_matrix((a[rows, cols], (rows, entry)), shape=(n_rows, n_entries)),
            sp.csr_matrix(-np.asarray(weight, dtype=float).reshape(-1, 1)),
        ],
        format="csr",
    )
    base = base_rows(rows, cols, n_rows, gpus_per_row, capacity)
    base = RowBlock(
        sp.hstack([base.matrix, sp.csr_matrix((base.n_rows, 1))]), base.lower, base.upper
    )
    lp = SparseLP(
        cost=np.r_[np.zeros(n_entries), 1.0],
        col_lower=np.r_[np.zeros(n_entries), -INF],
        col_upper=np.r_[np.ones(n_entries), t_max],
        rows=stack_rows(
            [RowBlock(rate, np.asarray(floor, dtype=float), np.full(n_rows, INF)), base]
        ),
        maximize=True,
    )
    return RateLP(lp=lp, rows=rows, cols=cols, shape=(n_rows, n_types))


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
        lp = rate_lp(
            a[rep],
            problem.num_gpus[rep] * groups.size,
            problem.capacity,
            problem.weight[rep],
            np.zeros(groups.n_groups),
        )
        solution = solve_highs(
            lp.lp,
            policy=self.name,
            n_jobs=problem.n_jobs,
            n_types=problem.n_types,
            method="ipm" if groups.n_groups > IPM_ROWS else "simplex",
        )
        x_groups, _, _ = lp.unpack(solution)
        return groups.expand(x_groups), solution.solve_s

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
