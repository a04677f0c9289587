"""A linear program in sparse matrix form, solved by HiGHS directly (through highspy).

Why not cvxpy here: for the LPs of the max-min policies, cvxpy's compilation costs more than
HiGHS's solve (benchmarks/policies.py measures both). The policies build their constraint
matrices with scipy.sparse in a few vectorized calls and hand them to HiGHS as they are; the
plain cvxpy formulation stays available as each policy's `backend="cvxpy"`, and tests assert
that both give the same answer.

This module knows nothing about jobs or GPUs. It does no I/O (HiGHS's own output is silenced).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np
import scipy.sparse as sp

from slurm_hetsched.errors import SolverError

INF = highspy.kHighsInf


@dataclass(frozen=True, slots=True)
class RowBlock:
    """Rows `lower <= matrix @ columns <= upper` (use +-INF for a one-sided row).

    Attributes:
        matrix: (n_rows, n_cols) sparse coefficients.
        lower: (n_rows,) lower bounds.
        upper: (n_rows,) upper bounds.
    """

    matrix: sp.csr_matrix  # (n_rows, n_cols)
    lower: np.ndarray  # (n_rows,)
    upper: np.ndarray  # (n_rows,)

    @property
    def n_rows(self) -> int:
        return int(self.matrix.shape[0])


def stack_rows(blocks: Sequence[RowBlock]) -> RowBlock:
    """The blocks' rows one after the other, in order (all must have the same n_cols)."""
    return RowBlock(
        matrix=sp.vstack([b.matrix for b in blocks], format="csr"),
        lower=np.concatenate([b.lower for b in blocks]),
        upper=np.concatenate([b.upper for b in blocks]),
    )


@dataclass(frozen=True, slots=True)
class SparseLP:
    """optimize cost @ columns s.t. rows, col_lower <= columns <= col_upper.

    Attributes:
        cost: (n_cols,) objective coefficients.
        col_lower: (n_cols,) lower bounds.
        col_upper: (n_cols,) upper bounds.
        rows: the constraints.
        maximize: True to maximize, False to minimize.
    """

    cost: np.ndarray  # (n_cols,)
    col_lower: np.ndarray  # (n_cols,)
    col_upper: np.ndarray  # (n_cols,)
    rows: RowBlock
    maximize: bool


@dataclass(frozen=True, slots=True)
class LpSolution:
    """An optimal solution of a SparseLP.

    Attributes:
        columns: (n_cols,) primal values.
        row_duals: (n_rows,) dual values (HiGHS's sign convention; callers use magnitudes).
        objective: optimal objective value.
        solve_s: HiGHS's own run time, in seconds.
        basis: the optimal basis, to warm-start an LP of the same shape.
    """

    columns: np.ndarray  # (n_cols,)
    row_duals: np.ndarray  # (n_rows,)
    objective: float
    solve_s: float
    basis: Any


def solve_highs(
    lp: SparseLP,
    *,
    policy: str,
    n_jobs: int,
    n_types: int,
    warm_start: Any = None,
    method: str = "simplex",
) -> LpSolution:
    """Solve `lp` with HiGHS.

    Args:
        lp: the program.
        policy, n_jobs, n_types: for the error message only.
        warm_start: `LpSolution.basis` of an earlier LP with the same rows and columns.
        method: "simplex" (exact vertex duals, cheap warm starts; best for small LPs and
            sequences of similar ones) or "ipm" (interior point, then crossover to a vertex:
            several times faster on large degenerate LPs such as max-min over thousands of
            distinct jobs).

    Returns:
        The optimal solution.

    Raises:
        SolverError: HiGHS ended in any state but optimal (infeasible, unbounded, ...).
    """
    matrix = lp.rows.matrix.tocsc()
    model = highspy.HighsLp()
    model.num_col_ = int(matrix.shape[1])
    model.num_row_ = int(matrix.shape[0])
    model.col_cost_ = np.asarray(lp.cost, dtype=float)
    model.col_lower_ = np.asarray(lp.col_lower, dtype=float)
    model.col_upper_ = np.asarray(lp.col_upper, dtype=float)
    model.row_lower_ = np.asarray(lp.rows.lower, dtype=float)
    model.row_upper_ = np.asarray(lp.rows.upper, dtype=float)
    model.sense_ = highspy.ObjSense.kMaximize if lp.maximize else highspy.ObjSense.kMinimize
    model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    model.a_matrix_.num_col_ = model.num_col_
    model.a_matrix_.num_row_ = model.num_row_
    model.a_matrix_.start_ = matrix.indptr
    model.a_matrix_.index_ = matrix.indices
    model.a_matrix_.value_ = matrix.data
    highs = highspy.Highs()
    highs.silent()
    highs.setOptionValue("solver", method)
    highs.passModel(model)
    if warm_start is not None:
        highs.setBasis(warm_start)
    highs.run()
    status = highs.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise SolverError(policy, highs.modelStatusToString(status), n_jobs, n_types)
    solution = highs.getSolution()
    return LpSolution(
        columns=np.asarray(solution.col_value),
        row_duals=np.asarray(solution.row_dual),
        objective=float(highs.getInfo().objective_function_value),
        solve_s=float(highs.getRunTime()),
        basis=highs.getBasis(),
    )
