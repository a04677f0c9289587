"""Reference formulations, written plainly (loops, cvxpy, no grouping, no duals) to check the
fast policies against. Only for small problems.

`reference_water_filling` follows Gavel's algorithm (paper section 4.3 / appendix A.1) with the
same level LP and weight redistribution as the policy, but finds bottlenecks the reference way:
- "per_job": job m is a bottleneck iff maximizing its rate alone, with every job kept at its
  level, cannot lift it (the definition);
- "milp": Gavel's mixed-integer program, maximizing how many jobs can exceed their level by
  a factor 1.0001 at once (solved with HiGHS instead of GLPK_MI).
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np

from slurm_hetsched.core.model import AccountPolicy, Problem
from slurm_hetsched.core.policies.base import base_constraints, normalized_rate_matrix

SOLVER = "HIGHS"


def _level_weights(problem: Problem, frozen: set[int]) -> np.ndarray:
    weights = np.zeros(problem.n_jobs)
    for name in sorted(set(problem.job_accounts)):
        account = problem.account(name)
        members = [
            m for m in range(problem.n_jobs) if problem.job_accounts[m] == name and m not in frozen
        ]
        if not members:
            continue
        if account.policy is AccountPolicy.FIFO:
            head = min(members, key=lambda m: (problem.arrival_s[m], problem.job_ids[m]))
            weights[head] = account.weight
        else:
            total = sum(problem.weight[m] for m in members)
            for m in members:
                weights[m] = account.weight * problem.weight[m] / total
    return weights


def _rates(a: np.ndarray, x: cp.Variable) -> cp.Expression:
    return cp.sum(cp.multiply(a, x), axis=1)


def reference_water_filling(
    problem: Problem, agnostic: bool = False, detect: str = "per_job"
) -> np.ndarray:
    """The water-filling normalized rates (n_jobs,) (unique, unlike x)."""
    a = normalized_rate_matrix(problem, agnostic)
    n = problem.n_jobs
    floor = np.zeros(n)
    frozen: set[int] = set()
    for _ in range(4 * n + 4):
        if len(frozen) == n:
            return floor
        weights = _level_weights(problem, frozen)
        weights = weights / weights.sum()
        x, t = cp.Variable(a.shape, nonneg=True), cp.Variable()
        level = cp.Problem(
            cp.Maximize(t),
            [_rates(a, x) >= floor + weights * t, *base_constraints(x, problem)],
        )
        level.solve(solver=SOLVER)
        assert level.status == cp.OPTIMAL, level.status
        active = [m for m in range(n) if m not in frozen]
        # Keep new floors a hair below the level (solver rounding must not make the next LP
        # infeasible); frozen floors stay as they are, or every level would free capacity.
        floor[active] = (floor[active] + weights[active] * t.value) * (1 - 1e-9)
        if detect == "per_job":
            found = {m for m in active if not _can_grow(problem, a, floor, m)}
        else:
            found = _milp_bottlenecks(problem, a, floor, active)
        frozen |= found
    raise AssertionError("reference water filling did not converge")


def _can_grow(problem: Problem, a: np.ndarray, floor: np.ndarray, m: int) -> bool:
    x = cp.Variable(a.shape, nonneg=True)
    rates = _rates(a, x)
    program = cp.Problem(cp.Maximize(rates[m]), [rates >= floor, *base_constraints(x, problem)])
    program.solve(solver=SOLVER)
    assert program.status == cp.OPTIMAL, program.status
    # Floors are kept 1e-9 below each level, which frees a little capacity: a job must grow
    # by more than that noise to count as not yet a bottleneck.
    return bool(program.value > floor[m] * (1 + 1e-6) + 1e-6)


def _milp_bottlenecks(
    problem: Problem, a: np.ndarray, floor: np.ndarray, active: list[int]
) -> set[int]:
    """Gavel's bottleneck MILP: z_m = 1 iff job m exceeds 1.0001 x its level.

    Gavel's relative margin alone never calls a job at level 0 a bottleneck (solver noise
    lifts it a hair above 0 every level), and with big-M rows the MILP tolerances let z = 1
    for a job up to ~1e-5 short of its level; so the margin here is at least 1e-4.
    """
    x = cp.Variable(a.shape, nonneg=True)
    z = cp.Variable(len(active), boolean=True)
    rates = _rates(a, x)
    big_m = float(a.max(axis=1).max()) * 2
    eps = 1e-5
    constraints = [rates >= floor, *base_constraints(x, problem)]
    for i, m in enumerate(active):
        level = max(floor[m] * 1.0001, floor[m] + 1e-4)
        constraints += [
            big_m * z[i] >= rates[m] - level + eps,
            big_m * (1 - z[i]) >= level - rates[m],
        ]
    program = cp.Problem(cp.Maximize(cp.sum(z)), constraints)
    program.solve(solver=SOLVER)
    assert program.status == cp.OPTIMAL, program.status
    return {m for i, m in enumerate(active) if z.value[i] < 0.5}


def reference_max_min(problem: Problem, agnostic: bool = False) -> float:
    """The max-min objective by a plain cvxpy LP."""
    a = normalized_rate_matrix(problem, agnostic)
    x = cp.Variable(a.shape, nonneg=True)
    program = cp.Problem(
        cp.Maximize(cp.min(_rates(a, x) / problem.weight)), base_constraints(x, problem)
    )
    program.solve(solver=SOLVER)
    assert program.status == cp.OPTIMAL
    return float(program.value)
