"""The LP with space sharing (packing.py): its columns, its solution check, and its solvers.

With pairs of jobs allowed to share GPUs, the time fractions are x (job alone, n_jobs x
n_types) and pair_x (pair together, n_pairs x n_types). `SharingLayout` lays them out as the
LP's columns (only the allowed entries) with the rows every such LP shares (each job's time,
each type's GPUs); `clean_shared` checks a solver's answer against those constraints as
constraints.clean_solution does without sharing; `solve_shared_rate_lp` (HiGHS, sparse) and
`solve_shared_rate_cvxpy` (plain cvxpy) solve "maximize t s.t. every job's rate >= weight * t"
over them; `pair_throughput` gives each pair's per-job steps/s where it may share.

No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from slurm_hetsched.core.model import Problem
from slurm_hetsched.core.policies.constraints import (
    base_constraints,
    check_feasible,
    drop_noise,
    solve_cvxpy,
)
from slurm_hetsched.core.policies.lp import INF, RowBlock, SparseLP, solve_highs, stack_rows


@dataclass(frozen=True, slots=True)
class SharingLayout:
    """The LP columns with space sharing: one per allowed (job alone, type), then one per
    allowed (pair, type); and the sparse rows every such LP shares.

    Attributes:
        pairs: (n_pairs, 2) job indices of each pair.
        solo: (rows, cols) of the x entries that get a column.
        shared: (pair index, type) of the pair_x entries that get a column.
        member: (n_jobs, n_cols) 1 where the column's time counts against the job's row.
        usage: (n_types, n_cols) GPUs the column uses per unit time.
    """

    n_jobs: int
    n_types: int
    pairs: np.ndarray
    solo: tuple[np.ndarray, np.ndarray]
    shared: tuple[np.ndarray, np.ndarray]
    member: sp.csr_matrix
    usage: sp.csr_matrix
    pair_gpus: np.ndarray  # (n_pairs,)
    pair_allowed: np.ndarray  # (n_pairs, n_types) bool

    @classmethod
    def of(cls, problem: Problem) -> SharingLayout:
        n, k = problem.n_jobs, problem.n_types
        if problem.packed is None:
            pairs, pair_tput = np.zeros((0, 2), dtype=np.int64), np.zeros((0, k, 2))
        else:
            pairs, pair_tput = problem.packed.pairs, problem.packed.throughput
        pair_gpus = problem.num_gpus[pairs[:, 0]].astype(float)
        pair_allowed = (
            (pair_tput[:, :, 0] > 0)
            & (pair_tput[:, :, 1] > 0)
            & (pair_gpus[:, None] <= problem.capacity[None, :])
        )
        sr, sc = np.nonzero(problem.runnable)
        pr, pc = np.nonzero(pair_allowed)
        ns, npairs = len(sr), len(pr)
        solo_cols, pair_cols = np.arange(ns), ns + np.arange(npairs)
        n_cols = ns + npairs
        member = sp.csr_matrix(
            (
                np.ones(ns + 2 * npairs),
                (
                    np.concatenate([sr, pairs[pr, 0], pairs[pr, 1]]),
                    np.concatenate([solo_cols, pair_cols, pair_cols]),
                ),
            ),
            shape=(n, n_cols),
        )
        usage = sp.csr_matrix(
            (
                np.concatenate([problem.num_gpus[sr].astype(float), pair_gpus[pr]]),
                (np.concatenate([sc, pc]), np.arange(n_cols)),
            ),
            shape=(k, n_cols),
        )
        return cls(n, k, pairs, (sr, sc), (pr, pc), member, usage, pair_gpus, pair_allowed)

    @property
    def n_cols(self) -> int:
        return int(self.member.shape[1])

    def rate_rows(self, solo_rate: np.ndarray, pair_rate: np.ndarray) -> sp.csr_matrix:
        """(n_jobs, n_cols) each job's rate per unit time of each column.

        Args:
            solo_rate: (n_jobs, n_types) alone.
            pair_rate: (n_pairs, n_types, 2) of the pair's first and second job.
        """
        (sr, sc), (pr, pc) = self.solo, self.shared
        ns, npairs = len(sr), len(pr)
        pair_cols = ns + np.arange(npairs)
        return sp.csr_matrix(
            (
                np.concatenate([solo_rate[sr, sc], pair_rate[pr, pc, 0], pair_rate[pr, pc, 1]]),
                (
                    np.concatenate([sr, self.pairs[pr, 0], self.pairs[pr, 1]]),
                    np.concatenate([np.arange(ns), pair_cols, pair_cols]),
                ),
            ),
            shape=(self.n_jobs, self.n_cols),
        )

    def unpack(self, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Column values -> (x (n_jobs, n_types), pair_x (n_pairs, n_types))."""
        (sr, sc), (pr, pc) = self.solo, self.shared
        x = np.zeros((self.n_jobs, self.n_types))
        x[sr, sc] = columns[: len(sr)]
        pair_x = np.zeros((len(self.pairs), self.n_types))
        pair_x[pr, pc] = columns[len(sr) : len(sr) + len(pr)]
        return x, pair_x

    def job_rates(
        self, x: np.ndarray, pair_x: np.ndarray, solo_rate: np.ndarray, pair_rate: np.ndarray
    ) -> np.ndarray:
        """(n_jobs,) each job's rate under x and pair_x."""
        rate = np.sum(solo_rate * x, axis=1)
        np.add.at(rate, self.pairs[:, 0], np.sum(pair_rate[:, :, 0] * pair_x, axis=1))
        np.add.at(rate, self.pairs[:, 1], np.sum(pair_rate[:, :, 1] * pair_x, axis=1))
        return np.asarray(rate)

    def time_used(self, x: np.ndarray, pair_x: np.ndarray) -> np.ndarray:
        """(n_jobs,) each job's total time fraction, alone and in pairs."""
        return self.job_rates(x, pair_x, np.ones_like(x), np.ones((*pair_x.shape, 2)))


def clean_shared(
    problem: Problem, layout: SharingLayout, x: np.ndarray, pair_x: np.ndarray, policy: str
) -> tuple[np.ndarray, np.ndarray]:
    """x and pair_x checked against the sharing constraints and cleaned of solver noise
    (as constraints.clean_solution does without sharing).

    Raises:
        SolverError: a constraint is violated by more than FEASIBILITY_TOL.
    """
    check_feasible(
        problem,
        policy,
        lowest=min(x.min(initial=0.0), pair_x.min(initial=0.0)),
        time_used=layout.time_used(x, pair_x),
        usage=problem.num_gpus @ x + layout.pair_gpus @ pair_x,
        outside=[x[~problem.runnable], pair_x[~layout.pair_allowed]],
    )
    return drop_noise(x, problem.runnable), drop_noise(pair_x, layout.pair_allowed)


def solve_shared_rate_lp(
    problem: Problem,
    layout: SharingLayout,
    rate: sp.csr_matrix,
    weight: np.ndarray,
    policy: str,
) -> tuple[np.ndarray, np.ndarray, float]:
    """maximize t s.t. rate @ c >= weight * t (per job), sharing constraints; HiGHS.

    Returns:
        (x, pair_x, solve seconds).
    """
    n_cols = layout.n_cols
    rate_block = RowBlock(
        sp.hstack([rate, sp.csr_matrix(-weight.reshape(-1, 1))], format="csr"),
        np.zeros(layout.n_jobs),
        np.full(layout.n_jobs, INF),
    )

    def with_t(matrix: sp.csr_matrix, upper: np.ndarray) -> RowBlock:
        padded = sp.hstack([matrix, sp.csr_matrix((matrix.shape[0], 1))], format="csr")
        return RowBlock(padded, np.full(matrix.shape[0], -INF), upper)

    lp = SparseLP(
        cost=np.r_[np.zeros(n_cols), 1.0],
        col_lower=np.r_[np.zeros(n_cols), -INF],
        col_upper=np.r_[np.ones(n_cols), INF],
        rows=stack_rows(
            [
                rate_block,
                with_t(layout.member, np.ones(layout.n_jobs)),
                with_t(layout.usage, problem.capacity),
            ]
        ),
        maximize=True,
    )
    solution = solve_highs(lp, policy=policy, n_jobs=problem.n_jobs, n_types=problem.n_types)
    x, pair_x = layout.unpack(solution.columns)
    return x, pair_x, solution.solve_s


def solve_shared_rate_cvxpy(
    problem: Problem,
    layout: SharingLayout,
    solo_rate: np.ndarray,
    pair_rate: np.ndarray,
    weight: np.ndarray,
    policy: str,
    solver: str,
) -> tuple[np.ndarray, np.ndarray, float]:
    """The same LP written plainly in cvxpy: maximize min_m rate_m / weight_m over jobs with
    weight > 0 (equivalent to maximize t s.t. rate >= weight * t)."""
    n, k = problem.n_jobs, problem.n_types
    x = cp.Variable((n, k), nonneg=True)  # (n_jobs, n_types) time alone
    rate: cp.Expression = cp.sum(cp.multiply(solo_rate, x), axis=1)  # (n_jobs,)
    # x >= 0, rows <= 1, capacity, x = 0 where the job cannot run; the pairs join the middle two.
    nonneg, time_rows, capacity_rows, blocked_x = base_constraints(x, problem)
    constraints = [nonneg, time_rows, capacity_rows, blocked_x]
    n_pairs = len(layout.pairs)
    pair_x = None
    if n_pairs:
        pair_x = cp.Variable((n_pairs, k), nonneg=True)  # (n_pairs, n_types) time shared
        cols = np.arange(n_pairs)
        first = sp.csr_matrix((np.ones(n_pairs), (layout.pairs[:, 0], cols)), shape=(n, n_pairs))
        second = sp.csr_matrix((np.ones(n_pairs), (layout.pairs[:, 1], cols)), shape=(n, n_pairs))
        rate = (
            rate
            + first @ cp.sum(cp.multiply(pair_rate[:, :, 0], pair_x), axis=1)
            + second @ cp.sum(cp.multiply(pair_rate[:, :, 1], pair_x), axis=1)
        )
        used = cp.sum(x, axis=1) + (first + second) @ cp.sum(pair_x, axis=1)
        gpus = problem.num_gpus.astype(float)
        blocked = (~layout.pair_allowed).astype(float)
        constraints = [
            nonneg,
            used <= 1,
            gpus @ x + layout.pair_gpus @ pair_x <= problem.capacity,
            blocked_x,
            cp.sum(cp.multiply(blocked, pair_x)) == 0,
        ]
    positive = np.flatnonzero(weight > 0)
    objective = cp.Maximize(cp.min(cp.multiply(1.0 / weight[positive], rate[positive])))
    program = cp.Problem(objective, constraints)
    solve_s = solve_cvxpy(program, policy, problem, solver)
    pair_value = np.zeros((n_pairs, k)) if pair_x is None else np.asarray(pair_x.value)
    return np.asarray(x.value), pair_value, solve_s


def pair_throughput(problem: Problem, layout: SharingLayout) -> np.ndarray:
    """(n_pairs, n_types, 2) steps/s of each job in each pair; 0 where the pair cannot share."""
    if problem.packed is None:
        return np.zeros((0, problem.n_types, 2))
    return np.where(layout.pair_allowed[:, :, None], problem.packed.throughput, 0.0)
