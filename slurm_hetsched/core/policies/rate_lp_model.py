"""The rate LP behind max-min fairness, water filling, makespan and finish-time fairness:
its data (`RateRows`), its sparse matrices for HiGHS (`rate_lp`) and its solution
(`RateSolution`). How it is solved: rate_lp.py.

    maximize t <= t_max  s.t.  r_i(x) >= floor_i + weight_i t  (every row),  base constraints,

over rows that are jobs or groups of identical jobs, r_i(x) = sum_k a[i, k] x[i, k].

No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from slurm_hetsched.core.policies.lp import INF, LpSolution, RowBlock, SparseLP


@dataclass(frozen=True, slots=True)
class RateLP:
    """The LP `maximize t <= t_max s.t. r(x) >= floor + weight * t, base constraints`, and its
    layout.

    Columns are one x entry per runnable (row, type), then t. Rows are the n_rows rate rows,
    then the base rows (constraints.base_rows: n_rows row sums, then n_types capacities).
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

    def prices(self, solution: LpSolution) -> np.ndarray:
        """(n_types,) |dual| of each capacity row: what one more GPU of the type is worth in t."""
        return np.asarray(np.abs(solution.row_duals[-self.shape[1] :]))


def rate_lp(
    a: np.ndarray,
    gpus_per_row: np.ndarray,
    capacity: np.ndarray,
    weight: np.ndarray,
    floor: np.ndarray,
    t_max: float = INF,
    t_usage: np.ndarray | None = None,
) -> RateLP:
    """Build the rate LP over rows that are jobs or groups of identical jobs.

    Args:
        a: (n_rows, n_types) normalized rate per unit time fraction; 0 = cannot run.
        gpus_per_row: (n_rows,) GPUs used per unit time fraction (num_gpus x group size).
        capacity: (n_types,) GPUs per type.
        weight: (n_rows,) >= 0; a row with weight 0 only keeps its floor.
        floor: (n_rows,) normalized rate each row must keep (may be negative).
        t_max: upper bound on t.
        t_usage: (n_types,) GPUs used per unit of t outside these rows (the fixed rows of
            solve_rate_lp), added to the capacity rows; none by default.
    """
    n_rows, n_types = a.shape
    rows, cols = np.nonzero(a > 0)
    n_entries = len(rows)
    # Column-wise, directly: x column (i, k) has a[i, k] in rate row i, 1 in row-sum row
    # n_rows + i and gpus_i in capacity row 2 n_rows + k; the t column has -weight in the rate
    # rows and t_usage in the capacity rows. (scipy's stacking cost more than HiGHS's solve on
    # the small LPs a simulation makes thousands of.) Same rows as base_rows' layout.
    weight = np.asarray(weight, dtype=float)
    t_rows = np.nonzero(weight)[0]
    t_values = -weight[t_rows]
    if t_usage is not None:
        used = np.nonzero(t_usage)[0]
        t_rows = np.r_[t_rows, 2 * n_rows + used]
        t_values = np.r_[t_values, np.asarray(t_usage, dtype=float)[used]]
    indices = np.empty((n_entries, 3), dtype=np.int32)
    indices[:, 0], indices[:, 1], indices[:, 2] = rows, n_rows + rows, 2 * n_rows + cols
    values = np.empty((n_entries, 3))
    values[:, 0], values[:, 1] = a[rows, cols], 1.0
    values[:, 2] = np.asarray(gpus_per_row, dtype=float)[rows]
    matrix = sp.csc_matrix(
        (
            np.r_[values.ravel(), t_values],
            np.r_[indices.ravel(), t_rows].astype(np.int32),
            np.r_[np.arange(0, 3 * n_entries + 1, 3), 3 * n_entries + len(t_rows)],
        ),
        shape=(2 * n_rows + n_types, n_entries + 1),
    )
    lp = SparseLP(
        cost=np.r_[np.zeros(n_entries), 1.0],
        col_lower=np.r_[np.zeros(n_entries), -INF],
        col_upper=np.r_[np.ones(n_entries), t_max],
        rows=RowBlock(
            matrix,  # column-wise: what solve_highs hands HiGHS
            np.r_[np.asarray(floor, dtype=float), np.full(n_rows + n_types, -INF)],
            np.r_[np.full(n_rows, INF), np.ones(n_rows), np.asarray(capacity, dtype=float)],
        ),
        maximize=True,
    )
    return RateLP(lp=lp, rows=rows, cols=cols, shape=(n_rows, n_types))


@dataclass(frozen=True, slots=True)
class RateSolution:
    """An optimal solution of the rate LP.

    Attributes:
        x: (n_rows, n_types) time fractions.
        t: optimal t.
        dual: (n_rows,) magnitude of each rate row's dual, from one optimal dual solution.
        prices: (n_types,) magnitude of each capacity row's dual, from the same.
        solve_s: HiGHS's seconds, summed over its solves.
        lps: HiGHS solves.
        method: how it was solved: "whole" (HiGHS on the whole LP), "prices" (through the
            types' prices, certified) or "no prices" (no type scarce: t is a row's ceiling).
        basis: the whole LP's optimal basis where HiGHS solved it whole (else None), to
            warm-start the next LP of the same shape.
    """

    x: np.ndarray
    t: float
    dual: np.ndarray
    prices: np.ndarray
    solve_s: float
    lps: int
    method: str
    basis: object = None


@dataclass(frozen=True, slots=True)
class RateRows:
    """The data of a rate LP (see rate_lp for each array)."""

    a: np.ndarray
    gpus: np.ndarray
    capacity: np.ndarray
    weight: np.ndarray
    floor: np.ndarray
    t_max: float = INF

    @property
    def n_rows(self) -> int:
        return int(self.a.shape[0])

    def take(self, rows: np.ndarray, capacity: np.ndarray) -> RateRows:
        return RateRows(
            self.a[rows], self.gpus[rows], capacity, self.weight[rows], self.floor[rows], self.t_max
        )
