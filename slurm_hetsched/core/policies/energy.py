"""Trading a policy's objective for energy: the second stage of the `energy_slack` option.

A policy with energy_slack s > 0 first solves as usual, to its optimum. Its objective within
the slack is then a set of linear rows over x (`Floors`, built by each policy):

- max-min fairness:        r_m(x) >= (1 - s) t* w_m        for every job m;
- makespan:                rate_m(x) >= steps_m / ((1 + s) M*)   for every job with steps;
- finish-time fairness:    rate_m(x) >= d_m((1 + s) rho*)  (the demands of rho <= (1 + s) rho*);
- max total throughput:    sum_m r_m(x) >= (1 - s) R*;

and the stage solves

    minimize  sum_{m, j} num_gpus_m (busy_w_j - idle_w_j) x[m, j]   subject to those rows and
              the base constraints (constraints.py),

the GPUs' power above idle. The cluster's power is that plus constants: every GPU's idle power
and the nodes' base power (a node is powered whatever its jobs). So it minimizes the energy
cost per hour (power x PUE x price; with a price of 0 it still minimizes power) among the
allocations within the slack. Every job is then held at about its floor, on the types where
that floor costs the least power: work the slack allows to wait, waits.

The LP is solved over groups of interchangeable jobs (symmetry.py: jobs with equal rows, floors
and GPU counts), as the max-min LP is. Should the solver's answer draw more power than the
first stage's (tolerances only; the first stage's x is feasible for the second), the first
stage's x is kept, so the option never raises the energy cost.

No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from slurm_hetsched.core.costs import EnergyModel
from slurm_hetsched.core.model import InvalidProblemError, Problem
from slurm_hetsched.core.policies.constraints import (
    base_constraints,
    base_rows,
    clean_solution,
    solve_cvxpy,
)
from slurm_hetsched.core.policies.lp import INF, RowBlock, SparseLP, solve_highs, stack_rows
from slurm_hetsched.core.policies.symmetry import JobGroups, group_jobs
from slurm_hetsched.core.policies.value_lp import floor_rows

# Above this many groups of jobs, HiGHS's interior point method (as max_min_fairness.IPM_ROWS).
IPM_ROWS = 1000


@dataclass(frozen=True, slots=True)
class Floors:
    """The policy's objective held within the slack, as rows over x (n_jobs, n_types).

    Attributes:
        rate: (n_jobs, n_types) rate per unit of time fraction, for the per-job rows.
        floor: (n_jobs,) rate[m] . x[m] >= floor[m] where floor[m] > 0 (0 = no row).
        total_value, total_floor: one row sum(total_value * x) >= total_floor (None = none).
    """

    rate: np.ndarray
    floor: np.ndarray
    total_value: np.ndarray | None = None
    total_floor: float = 0.0

    @classmethod
    def per_job(cls, rate: np.ndarray, floor: np.ndarray) -> Floors:
        return cls(rate, np.maximum(floor, 0.0))

    @classmethod
    def total(cls, value: np.ndarray, floor: float) -> Floors:
        return cls(np.zeros_like(value), np.zeros(value.shape[0]), value, max(floor, 0.0))

    def allowed(self, problem: Problem) -> np.ndarray:
        """(n_jobs, n_types) bool: the entries that count towards a row (others stay 0)."""
        useful = (self.rate > 0) & (self.floor > 0)[:, None]
        if self.total_value is not None and self.total_floor > 0:
            useful |= self.total_value > 0
        return np.asarray(problem.runnable & useful)

    def features(self, problem: Problem) -> np.ndarray:
        """(n_jobs, n_features) everything the LP sees of a job (for symmetry.group_jobs)."""
        total = self.total_value if self.total_value is not None else np.zeros_like(self.rate)
        return np.column_stack(
            [self.rate, self.floor, total, problem.num_gpus, self.allowed(problem)]
        )


def require_energy(problem: Problem, policy: str) -> EnergyModel:
    """The problem's energy model, if it knows every GPU type.

    Raises:
        InvalidProblemError: no energy model, or one without some type's busy_w / idle_w.
    """
    model = problem.energy
    if model is None:
        raise InvalidProblemError(
            f"policy {policy!r} with energy_slack > 0 needs power data: the problem has no "
            "energy model (give busy_w and idle_w for every GPU type, e.g. in `gpu_types`)"
        )
    missing = [t for t in problem.gpu_types if t not in model.busy_w]
    if missing:
        raise InvalidProblemError(
            f"policy {policy!r} with energy_slack > 0 needs busy_w and idle_w for every GPU "
            f"type; missing for {missing}"
        )
    return model


def extra_power_w(problem: Problem, model: EnergyModel) -> np.ndarray:
    """(n_jobs, n_types) watts job m adds over idle per unit of time fraction on type j."""
    types_ = problem.gpu_types
    busy_over_idle = model.busy_array(types_) - model.idle_array(types_)
    return np.asarray(problem.num_gpus[:, None] * busy_over_idle[None, :])


def gpu_power_w(problem: Problem, model: EnergyModel, x: np.ndarray) -> float:
    """Watts the problem's GPUs draw under x: idle power of all, plus busy over idle."""
    idle = float(problem.capacity @ model.idle_array(problem.gpu_types))
    return idle + float(np.sum(extra_power_w(problem, model) * x))


def least_power(
    problem: Problem,
    floors: Floors,
    first: np.ndarray,
    *,
    policy: str,
    backend: str,
    solver: str,
) -> tuple[np.ndarray, float]:
    """The least-power x that keeps `floors`, or `first` if that draws no more.

    Args:
        problem: with an energy model for every type (require_energy).
        floors: the policy's objective within the slack.
        first: (n_jobs, n_types) the first stage's x (feasible for the floors).
        policy, backend ("highs" or "cvxpy"), solver (cvxpy's): as the policy's.

    Returns:
        (x cleaned by constraints.clean_solution, solve seconds).

    Raises:
        SolverError: the LP did not end optimal.
    """
    model = require_energy(problem, policy)
    power = extra_power_w(problem, model)
    allowed = floors.allowed(problem)
    if not allowed.any():
        return np.zeros_like(first), 0.0  # nothing to keep: no GPU time is needed
    if backend == "cvxpy":
        x, solve_s = _solve_cvxpy(problem, floors, power, allowed, policy, solver)
    else:
        x, solve_s = _solve_highs(problem, floors, power, policy)
    x = clean_solution(problem, x, policy)
    if gpu_power_w(problem, model, x) > gpu_power_w(problem, model, first):
        return first, solve_s
    return x, solve_s


def _solve_highs(
    problem: Problem, floors: Floors, power: np.ndarray, policy: str
) -> tuple[np.ndarray, float]:
    groups = group_jobs(floors.features(problem))
    lp, rows, cols = _group_lp(problem, floors, power, groups)
    solution = solve_highs(
        lp,
        policy=policy,
        n_jobs=problem.n_jobs,
        n_types=problem.n_types,
        method="ipm" if groups.n_groups > IPM_ROWS else "simplex",
    )
    x_groups = np.zeros((groups.n_groups, problem.n_types))
    x_groups[rows, cols] = solution.columns
    return groups.expand(x_groups), solution.solve_s


def _group_lp(
    problem: Problem, floors: Floors, power: np.ndarray, groups: JobGroups
) -> tuple[SparseLP, np.ndarray, np.ndarray]:
    """The LP over one x row per group (its representative's), and its columns' (row, type).

    Each row is scaled to a bound of 1 (floors of different jobs differ by orders of
    magnitude); the objective is in kW.
    """
    rep, size = groups.representative, groups.size
    rows, cols = np.nonzero(floors.allowed(problem)[rep])
    blocks = [base_rows(rows, cols, len(rep), problem.num_gpus[rep] * size, problem.capacity)]
    floor = floors.floor[rep]
    if np.any(floor > 0):
        scale = np.where(floor > 0, floor, 1.0)
        blocks.insert(0, floor_rows(rows, cols, floors.rate[rep] / scale[:, None], floor / scale))
    if floors.total_value is not None and floors.total_floor > 0:
        value = floors.total_value[rep] * size[:, None] / floors.total_floor
        total = sp.csr_matrix(value[rows, cols].reshape(1, -1))
        blocks.insert(0, RowBlock(total, np.ones(1), np.full(1, INF)))
    lp = SparseLP(
        cost=(power[rep] * size[:, None])[rows, cols] / 1000.0,
        col_lower=np.zeros(len(rows)),
        col_upper=np.ones(len(rows)),
        rows=stack_rows(blocks),
        maximize=False,
    )
    return lp, rows, cols


def _solve_cvxpy(
    problem: Problem,
    floors: Floors,
    power: np.ndarray,
    allowed: np.ndarray,
    policy: str,
    solver: str,
) -> tuple[np.ndarray, float]:
    x = cp.Variable(power.shape, nonneg=True)  # (n_jobs, n_types) time fractions
    blocked = (~allowed).astype(float)
    constraints = [*base_constraints(x, problem), cp.sum(cp.multiply(blocked, x)) == 0]
    floored = np.flatnonzero(floors.floor > 0)
    if floored.size:
        rate = cp.sum(cp.multiply(floors.rate, x), axis=1)
        constraints.append(rate[floored] >= floors.floor[floored])
    if floors.total_value is not None and floors.total_floor > 0:
        constraints.append(cp.sum(cp.multiply(floors.total_value, x)) >= floors.total_floor)
    program = cp.Problem(cp.Minimize(cp.sum(cp.multiply(power / 1000.0, x))), constraints)
    solve_s = solve_cvxpy(program, policy, problem, solver)
    return np.asarray(x.value), solve_s
