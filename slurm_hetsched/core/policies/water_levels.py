"""The LP of one water level (water_filling.py), solved by HiGHS or cvxpy.

    maximize t <= t_max  s.t.  r(x) >= floor + weight * t  (every job),  base constraints,

with r(x) the normalized rates. `HighsLevels` solves it over groups of identical jobs
(symmetry.py), each LP warm-started from the last basis; `CvxpyLevels` writes it plainly, one
row per job, as a parametrized program compiled once. Both return a `Level`: x, t and the
magnitude of each job's rate-row dual (the bottleneck test reads it), or None when the LP is
infeasible.

No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import cvxpy as cp
import numpy as np

from slurm_hetsched.core.model import Problem
from slurm_hetsched.core.policies.constraints import base_constraints, solve_cvxpy
from slurm_hetsched.core.policies.lp import INF
from slurm_hetsched.core.policies.rate_lp import RateRows, solve_rate_lp
from slurm_hetsched.core.policies.symmetry import JobGroups
from slurm_hetsched.errors import SolverError


@dataclass(frozen=True, slots=True)
class Level:
    """One LP's result, per job.

    Attributes:
        x: (n_jobs, n_types) time fractions.
        t: the LP's optimal t.
        dual: (n_jobs,) magnitude of the dual of each job's rate row.
        solve_s: solver-reported seconds.
    """

    x: np.ndarray
    t: float
    dual: np.ndarray
    solve_s: float


class LevelSolver(Protocol):
    """Solves `maximize t <= t_max s.t. r(x) >= floor + weight * t, base constraints`.

    Returns None if that LP is infeasible, which only happens when the rows with weight 0
    cannot all keep their floors; any other failure raises SolverError.
    """

    def solve(self, floor: np.ndarray, weight: np.ndarray, t_max: float = INF) -> Level | None: ...


def _infeasible(error: SolverError) -> bool:
    return error.status.lower().startswith("infeasible")


class HighsLevels:
    """The LPs over groups of identical jobs (rate_lp.solve_rate_lp): small ones by HiGHS
    warm-started from the last basis, large ones through the GPU types' prices."""

    def __init__(self, problem: Problem, a: np.ndarray, groups: JobGroups, policy: str) -> None:
        self._problem = problem
        self._groups = groups
        self._rep = groups.representative
        self._a = a[self._rep]
        self._gpus = problem.num_gpus[self._rep] * groups.size
        self._policy = policy
        self._basis: Any = None
        self._prices: np.ndarray | None = None  # the last LP's, to start the next search

    def solve(self, floor: np.ndarray, weight: np.ndarray, t_max: float = INF) -> Level | None:
        data = RateRows(
            self._a, self._gpus, self._problem.capacity, weight[self._rep], floor[self._rep], t_max
        )
        try:
            solution = solve_rate_lp(
                data,
                policy=self._policy,
                n_jobs=self._problem.n_jobs,
                warm_start=self._basis,
                prices=self._prices,
            )
        except SolverError as error:
            if _infeasible(error):
                return None
            raise
        self._basis = solution.basis
        self._prices = solution.prices
        return Level(
            self._groups.expand(solution.x),
            solution.t,
            self._groups.expand(solution.dual),
            solution.solve_s,
        )


class CvxpyLevels:
    """The same LPs in plain cvxpy, one row per job. Floors, weights and the bound on t are
    parameters (DPP), so each program is compiled once and re-solved."""

    def __init__(self, problem: Problem, a: np.ndarray, policy: str, solver: str) -> None:
        self._problem = problem
        self._policy = policy
        self._solver = solver
        self._x = cp.Variable(a.shape, nonneg=True)  # (n_jobs, n_types) time fractions
        self._t = cp.Variable()
        self._floor = cp.Parameter(problem.n_jobs)
        self._weight = cp.Parameter(problem.n_jobs, nonneg=True)
        self._t_max = cp.Parameter()
        rate = cp.sum(cp.multiply(a, self._x), axis=1)  # (n_jobs,) normalized rates
        self._rate_rows = rate >= self._floor + cp.multiply(self._weight, self._t)
        rows = [self._rate_rows, *base_constraints(self._x, problem)]
        self._open = cp.Problem(cp.Maximize(self._t), rows)
        self._bounded = cp.Problem(cp.Maximize(self._t), [*rows, self._t <= self._t_max])

    def solve(self, floor: np.ndarray, weight: np.ndarray, t_max: float = INF) -> Level | None:
        self._floor.value = floor
        self._weight.value = weight
        program = self._open
        if np.isfinite(t_max):
            self._t_max.value = t_max
            program = self._bounded
        try:
            solve_s = solve_cvxpy(program, self._policy, self._problem, self._solver)
        except SolverError as error:
            if _infeasible(error):
                return None
            raise
        return Level(
            x=np.asarray(self._x.value),
            t=float(self._t.value),
            dual=np.abs(np.asarray(self._rate_rows.dual_value, dtype=float)),
            solve_s=solve_s,
        )
