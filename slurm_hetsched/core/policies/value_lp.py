"""The LP `maximize sum(value * x)` over the base constraints, with optional rate floors.

Shared by the linear policies (FIFO, shortest job first, max total throughput, cost) and the
energy stage's floors: `value_lp` builds it as sparse rows over the allowed (row, type)
entries (`floor_rows`: the per-row rate floors), and `maximize_value` solves it with HiGHS
directly or, written plainly, with cvxpy.

No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from slurm_hetsched.core.model import Problem
from slurm_hetsched.core.policies.constraints import base_constraints, base_rows, solve_cvxpy
from slurm_hetsched.core.policies.lp import (
    INF,
    LpSolution,
    RowBlock,
    SparseLP,
    solve_highs,
    stack_rows,
)


@dataclass(frozen=True, slots=True)
class ValueLP:
    """The LP `maximize sum(value * x)` s.t. rate floors and the base constraints, and its
    layout.

    Columns are one x entry per allowed (row, type). Rows are the floor rows (if any), then
    the base rows (base_rows).
    """

    lp: SparseLP
    rows: np.ndarray  # (n_entries,) row of each column
    cols: np.ndarray  # (n_entries,) GPU type of each column
    shape: tuple[int, int]  # (n_rows, n_types)

    def unpack(self, solution: LpSolution) -> np.ndarray:
        """x, shape (n_rows, n_types)."""
        x = np.zeros(self.shape)
        x[self.rows, self.cols] = solution.columns
        return x


def floor_rows(
    rows: np.ndarray, cols: np.ndarray, floor_rate: np.ndarray, floor: np.ndarray
) -> RowBlock:
    """Rows sum_j floor_rate[m, j] x[m, j] >= floor[m], one per m with floor[m] > 0.

    Args:
        rows, cols: (n_entries,) the (row, type) of each column, as for base_rows.
        floor_rate: (n_rows, n_types) rate per unit of time fraction.
        floor: (n_rows,) the rate each row must reach (0 = no row).
    """
    floored = np.flatnonzero(floor > 0)
    position = np.full(len(floor), -1)
    position[floored] = np.arange(len(floored))
    keep = position[rows] >= 0
    matrix = sp.csr_matrix(
        (floor_rate[rows[keep], cols[keep]], (position[rows[keep]], np.flatnonzero(keep))),
        shape=(len(floored), len(rows)),
    )
    return RowBlock(matrix, floor[floored], np.full(len(floored), INF))


def value_lp(
    value: np.ndarray,
    allowed: np.ndarray,
    gpus_per_row: np.ndarray,
    capacity: np.ndarray,
    floor_rate: np.ndarray | None = None,
    floor: np.ndarray | None = None,
) -> ValueLP:
    """Build `maximize sum_mj value[m, j] x[m, j]` over the allowed entries, subject to the
    base constraints and, where floor[m] > 0, sum_j floor_rate[m, j] x[m, j] >= floor[m].

    Args:
        value: (n_rows, n_types) objective coefficients.
        allowed: (n_rows, n_types) bool; only these entries get a column (x = 0 elsewhere).
        gpus_per_row: (n_rows,) GPUs used per unit of time fraction.
        capacity: (n_types,) GPUs per type.
        floor_rate: (n_rows, n_types) steps/s, for the floors.
        floor: (n_rows,) the rate each row must reach (0 = no floor row).
    """
    n_rows, n_types = value.shape
    rows, cols = np.nonzero(allowed)
    n_entries = len(rows)
    blocks = [base_rows(rows, cols, n_rows, gpus_per_row, capacity)]
    if floor is not None and floor_rate is not None and np.any(floor > 0):
        blocks.insert(0, floor_rows(rows, cols, floor_rate, floor))
    lp = SparseLP(
        cost=value[rows, cols],
        col_lower=np.zeros(n_entries),
        col_upper=np.ones(n_entries),
        rows=stack_rows(blocks),
        maximize=True,
    )
    return ValueLP(lp=lp, rows=rows, cols=cols, shape=(n_rows, n_types))


def maximize_value(
    problem: Problem,
    value: np.ndarray,
    backend: str,
    solver: str,
    policy: str,
    floor_rate: np.ndarray | None = None,
    floor: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """Solve `maximize sum(value * x)` over the base constraints, with optional rate floors.

    Args:
        problem: for the base constraints.
        value: (n_jobs, n_types) objective coefficients; entries <= 0 get no time (x = 0).
        backend: "highs" (value_lp solved by HiGHS directly) or "cvxpy" (with `solver`).
        policy: for error messages.
        floor_rate: (n_jobs, n_types) steps/s, and floor: (n_jobs,) steps/s; where
            floor[m] > 0, job m must reach sum_j floor_rate[m, j] x[m, j] >= floor[m].

    Returns:
        (x (n_jobs, n_types) as the solver returned it, solve seconds).

    Raises:
        SolverError: the solve did not end optimal (status "infeasible" when floors cannot
            all be met).
    """
    allowed = problem.runnable & (value > 0)
    if backend == "cvxpy":
        x = cp.Variable(value.shape, nonneg=True)  # (n_jobs, n_types) time fractions
        blocked = (~allowed).astype(float)
        constraints = [*base_constraints(x, problem), cp.sum(cp.multiply(blocked, x)) == 0]
        if floor is not None and floor_rate is not None and np.any(floor > 0):
            floored = np.flatnonzero(floor > 0)
            rate = cp.sum(cp.multiply(floor_rate, x), axis=1)
            constraints.append(rate[floored] >= floor[floored])
        program = cp.Problem(cp.Maximize(cp.sum(cp.multiply(value, x))), constraints)
        solve_s = solve_cvxpy(program, policy, problem, solver)
        return np.asarray(x.value), solve_s
    lp = value_lp(
        value, allowed, problem.num_gpus.astype(float), problem.capacity, floor_rate, floor
    )
    solution = solve_highs(lp.lp, policy=policy, n_jobs=problem.n_jobs, n_types=problem.n_types)
    return lp.unpack(solution), solution.solve_s
