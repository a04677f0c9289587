"""Space sharing (Gavel section 3.1, "_packed"): two jobs may share one set of GPUs.

The candidate pairs and their throughputs come with the problem (`Problem.packed`: from a
what-if file's `packed` keys, or from the throughput table's packed entries via
`packed_pairs_from_table`). A pair shares num_gpus GPUs of one type (both jobs have that many;
the problem rejects pairs with different counts), and each job of the pair runs at its pair
throughput there. The allocation has one time fraction per job alone (x, n_jobs x n_types) and
one per pair (pair_x, n_pairs x n_types), and the base constraints become (Gavel's, with the
scale factor of the pair, not of one job):

    x, pair_x >= 0;  x = 0 where the job cannot run, pair_x = 0 where either pair throughput
    is 0 or the type has fewer than num_gpus GPUs;
    sum_j x[m, j] + sum over pairs k holding m of sum_j pair_x[k, j] <= 1     (every job m)
    num_gpus @ x + pair_num_gpus @ pair_x <= capacity                       (every type)

A job's rate is sum_j T[m, j] x[m, j] + sum_{k holding m} sum_j T^pair[k, j, m] pair_x[k, j].

- `max_min_fairness_perf_packed` (Gavel: `max_min_fairness_packed`): max-min fairness over
  these rates, normalized as without sharing (a job's pair throughput divided by its own
  equal-share rate, times num_gpus; base.normalized_rate_matrix). Objective: the smallest
  weighted normalized rate.
- `min_total_duration_perf_packed` (Gavel: `min_total_duration_packed`): the makespan LP
  (makespan.py) over these rates; needs `steps`. Objective: the makespan x and pair_x imply.

A pair only helps when its combined normalized rate beats time slicing the two jobs; the LP
uses it exactly then, so sharing never makes the objective worse (Gavel section 4.4) and
leaves it unchanged when no pair is worth it. Without `packed` these are the policies without
sharing. The output reports pair shares in `Allocation.pairs` / `pair_x` (JSON: "packed").

Backends: "highs" (default: the LP over the sparse (job or pair, type) columns solved by
HiGHS directly) and "cvxpy", which tests check agree. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from slurm_hetsched.core.model import Allocation, PackedPairs, Problem
from slurm_hetsched.core.policies.base import (
    FEASIBILITY_TOL,
    NOISE,
    base_constraints,
    effective_throughput,
    empty_allocation,
    equal_share_rate,
    solve_cvxpy,
)
from slurm_hetsched.core.policies.lp import INF, RowBlock, SparseLP, solve_highs, stack_rows
from slurm_hetsched.core.policies.makespan import makespan_s
from slurm_hetsched.core.policies.max_min_fairness import check_backend
from slurm_hetsched.core.policies.options import NO_OPTIONS, PolicyOption
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.errors import SolverError


def packed_pairs_from_table(
    table: ThroughputTable,
    job_classes: Sequence[str],
    num_gpus: np.ndarray,
    gpu_types: Sequence[str],
) -> PackedPairs | None:
    """Every pair of jobs (a < b) with equal num_gpus whose classes the table lists together.

    Args:
        job_classes: (n_jobs,) each job's class in the table.
        num_gpus: (n_jobs,) GPUs per job.
        gpu_types: the problem's columns; a type the table lacks counts as "cannot share".

    Returns:
        The pairs and their (n_pairs, n_types, 2) throughputs, or None if there are none.
        Quadratic in the number of jobs: meant for what-if problems and benchmarks.
    """
    pairs, tput = [], []
    known = [t for t in gpu_types if t in table.gpu_types]
    for a in range(len(job_classes)):
        for b in range(a + 1, len(job_classes)):
            if num_gpus[a] != num_gpus[b]:
                continue
            found = table.packed_pair(job_classes[a], job_classes[b], int(num_gpus[a]), known)
            if found is None:
                continue
            row = np.zeros((len(gpu_types), 2))
            for i, t in enumerate(known):
                row[list(gpu_types).index(t)] = found[i]
            pairs.append((a, b))
            tput.append(row)
    if not pairs:
        return None
    return PackedPairs(pairs=np.array(pairs), throughput=np.array(tput))


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
    (as base.clean_solution does without sharing).

    Raises:
        SolverError: a constraint is violated by more than FEASIBILITY_TOL.
    """
    usage = problem.num_gpus @ x + layout.pair_gpus @ pair_x
    violation = max(
        float(-min(x.min(initial=0.0), pair_x.min(initial=0.0))),
        float((layout.time_used(x, pair_x) - 1).max(initial=0.0)),
        float(((usage - problem.capacity) / np.maximum(problem.capacity, 1)).max(initial=0.0)),
        float(np.abs(x[~problem.runnable]).max(initial=0.0)),
        float(np.abs(pair_x[~layout.pair_allowed]).max(initial=0.0)),
    )
    if violation > FEASIBILITY_TOL:
        raise SolverError(
            policy,
            f"solution violates constraints by {violation:.2g}",
            problem.n_jobs,
            problem.n_types,
        )
    x = np.clip(x, 0.0, 1.0)
    pair_x = np.clip(pair_x, 0.0, 1.0)
    return (
        np.where(problem.runnable & (x >= NOISE), x, 0.0),
        np.where(layout.pair_allowed & (pair_x >= NOISE), pair_x, 0.0),
    )


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


class _Packed:
    """Shared by the packed policies: the layout, both backends, the Allocation."""

    name: ClassVar[str]
    options: ClassVar[Mapping[str, PolicyOption]] = NO_OPTIONS

    def __init__(self, backend: str = "highs", solver: str = "CLARABEL") -> None:
        """Args: backend "highs" (fast) or "cvxpy"; solver: the cvxpy solver name."""
        check_backend(backend)
        self.backend = backend
        self.solver = solver

    def _solve(
        self,
        problem: Problem,
        layout: SharingLayout,
        solo_rate: np.ndarray,
        pair_rate: np.ndarray,
        weight: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, float]:
        if self.backend == "cvxpy":
            x, pair_x, solve_s = solve_shared_rate_cvxpy(
                problem, layout, solo_rate, pair_rate, weight, self.name, self.solver
            )
        else:
            rate = layout.rate_rows(solo_rate, pair_rate)
            x, pair_x, solve_s = solve_shared_rate_lp(problem, layout, rate, weight, self.name)
        x, pair_x = clean_shared(problem, layout, x, pair_x, self.name)
        return x, pair_x, solve_s

    def _allocation(
        self,
        problem: Problem,
        layout: SharingLayout,
        x: np.ndarray,
        pair_x: np.ndarray,
        objective: float,
        solve_s: float,
        solves: int = 1,
    ) -> Allocation:
        return Allocation(
            job_ids=problem.job_ids,
            gpu_types=problem.gpu_types,
            x=x,
            objective=objective,
            solve_s=solve_s,
            policy=self.name,
            solves=solves,
            pairs=tuple((problem.job_ids[a], problem.job_ids[b]) for a, b in layout.pairs),
            pair_x=pair_x,
        )


def pair_throughput(problem: Problem, layout: SharingLayout) -> np.ndarray:
    """(n_pairs, n_types, 2) steps/s of each job in each pair; 0 where the pair cannot share."""
    if problem.packed is None:
        return np.zeros((0, problem.n_types, 2))
    return np.where(layout.pair_allowed[:, :, None], problem.packed.throughput, 0.0)


class MaxMinFairnessPerfPacked(_Packed):
    """Heterogeneity-aware max-min fairness with space sharing (pairs of jobs on one GPU)."""

    name: ClassVar[str] = "max_min_fairness_perf_packed"
    description: ClassVar[str] = (
        "max-min fairness on throughputs with space sharing: pairs of jobs may share GPUs, at "
        "their pair throughputs (Problem.packed)"
    )

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring. Raises SolverError if the solve is not optimal."""
        if problem.n_jobs == 0:
            return empty_allocation(problem, self.name)
        layout = SharingLayout.of(problem)
        throughput = effective_throughput(problem, agnostic=False)
        scale = problem.num_gpus / equal_share_rate(problem, throughput)  # (n_jobs,)
        solo = scale[:, None] * throughput
        pair = pair_throughput(problem, layout) * scale[layout.pairs][:, None, :]
        x, pair_x, solve_s = self._solve(problem, layout, solo, pair, problem.weight)
        level = layout.job_rates(x, pair_x, solo, pair) / problem.weight
        return self._allocation(problem, layout, x, pair_x, float(level.min()), solve_s)


class MaxMinFairnessPacked(MaxMinFairnessPerfPacked):
    """Gavel's name for max_min_fairness_perf_packed."""

    name: ClassVar[str] = "max_min_fairness_packed"
    description: ClassVar[str] = "Gavel's name for max_min_fairness_perf_packed (same policy)"


class MinTotalDurationPerfPacked(_Packed):
    """Heterogeneity-aware minimum makespan with space sharing."""

    name: ClassVar[str] = "min_total_duration_perf_packed"
    description: ClassVar[str] = (
        "minimum makespan on throughputs with space sharing: pairs of jobs may share GPUs, at "
        "their pair throughputs (needs steps)"
    )

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring.

        Raises:
            InvalidProblemError: the problem has no `steps`.
            SolverError: the solve did not end optimal.
        """
        if problem.n_jobs == 0:
            return empty_allocation(problem, self.name)
        steps = problem.require("steps", self.name)
        layout = SharingLayout.of(problem)
        solo = effective_throughput(problem, agnostic=False)
        pair = pair_throughput(problem, layout)
        if not np.any(steps > 0):
            x = np.zeros((problem.n_jobs, problem.n_types))
            pair_x = np.zeros((len(layout.pairs), problem.n_types))
            return self._allocation(problem, layout, x, pair_x, 0.0, 0.0, solves=0)
        x, pair_x, solve_s = self._solve(problem, layout, solo, pair, steps / steps.max())
        objective = makespan_s(steps, layout.job_rates(x, pair_x, solo, pair))
        return self._allocation(problem, layout, x, pair_x, objective, solve_s)


class MinTotalDurationPacked(MinTotalDurationPerfPacked):
    """Gavel's name for min_total_duration_perf_packed."""

    name: ClassVar[str] = "min_total_duration_packed"
    description: ClassVar[str] = "Gavel's name for min_total_duration_perf_packed (same policy)"
