"""What every policy shares: the policy interface, normalisation, and the base constraints.

The base constraints on the time-fraction matrix x (n_jobs, n_types) are written here once, in
both forms the policies use:
- `base_constraints(x, problem)` for a cvxpy formulation;
- `base_rows(...)` as sparse rows for HiGHS (see lp.py);
and they say the same thing: x >= 0; each row sums to <= 1 (a job is in one place at a time);
num_gpus-weighted column sums <= capacity; x = 0 where the job cannot run (throughput 0, or a
type with fewer GPUs than the job needs).

Normalisation (Gavel, OSDI 2020): a job's rate is judged against the rate it
would get from an equal share of every type, X^equal_j = capacity_j / total capacity, so
`normalized_rate_matrix` gives a[m, j] = num_gpus[m] * T[m, j] / equal_share_rate[m]. Under the
weighted equal split (each job w_m / sum(w) of every type's GPUs) every job has normalized
rate / weight = total capacity / sum(w); that is the sharing-incentive baseline.

No I/O.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from slurm_hetsched.core.model import Allocation, Problem
from slurm_hetsched.core.policies.lp import INF, RowBlock
from slurm_hetsched.errors import SolverError

# A returned solution may violate a constraint by this much (solver tolerances are ~1e-7);
# anything worse is reported as a solver failure rather than returned.
FEASIBILITY_TOL = 1e-5
# Time fractions below this are solver noise, not decisions (1e-7 of a day is 9 ms).
NOISE = 1e-7


class Policy(Protocol):
    """A policy: a name, a one-line description, and a pure `allocate`."""

    name: ClassVar[str]
    description: ClassVar[str]

    def allocate(self, problem: Problem) -> Allocation:
        """The allocation for `problem`.

        Raises:
            InvalidProblemError: the problem lacks a field this policy needs.
            SolverError: the solver did not reach an optimal solution.
        """
        ...


def effective_throughput(problem: Problem, agnostic: bool) -> np.ndarray:
    """(n_jobs, n_types) steps/s where the job can run, 0 elsewhere.

    With `agnostic`, every runnable entry is 1.0: Gavel's heterogeneity-agnostic baselines
    see every GPU type as the same.
    """
    if agnostic:
        return problem.runnable.astype(float)
    return np.where(problem.runnable, problem.throughput, 0.0)


def equal_share_rate(problem: Problem, throughput: np.ndarray) -> np.ndarray:
    """(n_jobs,) steps/s each job gets from time fractions capacity_j / total capacity.

    Args:
        problem: for the capacities.
        throughput: (n_jobs, n_types) the throughputs to judge by (see effective_throughput).
    """
    return np.asarray(throughput @ (problem.capacity / problem.capacity.sum()))


def normalized_rate_matrix(problem: Problem, agnostic: bool = False) -> np.ndarray:
    """(n_jobs, n_types) a[m, j]: job m's normalized rate per unit of time fraction on type j.

    A job's normalized rate under x is sum_j a[m, j] * x[m, j] = num_gpus * rate / equal-share
    rate; the num_gpus factor (Gavel's scale factor) makes a job on k GPUs count k times.
    Zero where the job cannot run.
    """
    throughput = effective_throughput(problem, agnostic)
    if problem.n_jobs == 0:
        return throughput
    equal = equal_share_rate(problem, throughput)
    return np.asarray(problem.num_gpus[:, None] * throughput / equal[:, None])


def normalized_rates(problem: Problem, x: np.ndarray, agnostic: bool = False) -> np.ndarray:
    """(n_jobs,) each job's normalized rate under x (n_jobs, n_types); weights not applied."""
    return np.asarray(np.sum(normalized_rate_matrix(problem, agnostic) * x, axis=1))


def base_constraints(x: cp.Variable, problem: Problem) -> list[cp.Constraint]:
    """The base constraints for a cvxpy variable x of shape (n_jobs, n_types), nonneg."""
    blocked = (~problem.runnable).astype(float)
    return [
        x >= 0,
        cp.sum(x, axis=1) <= 1,
        problem.num_gpus.astype(float) @ x <= problem.capacity,
        # One scalar row instead of one per entry: x >= 0, so a zero sum zeroes every entry.
        cp.sum(cp.multiply(blocked, x)) == 0,
    ]


def base_rows(
    rows: np.ndarray,
    cols: np.ndarray,
    n_rows: int,
    gpus_per_row: np.ndarray,
    capacity: np.ndarray,
) -> RowBlock:
    """The base constraints as sparse rows over the runnable entries only.

    Only runnable (row, type) entries get a column, which is how x = 0 elsewhere is encoded;
    the caller sets the columns' bounds to [0, 1].

    Args:
        rows: (n_entries,) row (job or job group) of each column.
        cols: (n_entries,) GPU type of each column.
        n_rows: number of jobs or job groups.
        gpus_per_row: (n_rows,) GPUs one unit of time fraction of that row uses: num_gpus,
            times the group size when a row stands for several identical jobs.
        capacity: (n_types,) GPUs per type.

    Returns:
        n_rows row-sum rows (<= 1) followed by n_types capacity rows (<= capacity), over the
        n_entries columns.
    """
    n_entries, n_types = len(rows), len(capacity)
    entry = np.arange(n_entries)
    row_sums = sp.csr_matrix((np.ones(n_entries), (rows, entry)), shape=(n_rows, n_entries))
    usage = sp.csr_matrix((gpus_per_row[rows], (cols, entry)), shape=(n_types, n_entries))
    return RowBlock(
        matrix=sp.vstack([row_sums, usage], format="csr"),
        lower=np.full(n_rows + n_types, -INF),
        upper=np.concatenate([np.ones(n_rows), capacity]),
    )


def solve_cvxpy(program: cp.Problem, policy: str, problem: Problem, solver: str) -> float:
    """Solve a cvxpy program; return its reported compile + solve seconds.

    Raises:
        SolverError: the status is anything but optimal (never an allocation from an
            infeasible, unbounded or inaccurate solve).
    """
    try:
        program.solve(solver=solver)
    except cp.error.SolverError as exc:
        raise SolverError(policy, f"solver error: {exc}", problem.n_jobs, problem.n_types) from exc
    if program.status != cp.OPTIMAL:
        raise SolverError(policy, str(program.status), problem.n_jobs, problem.n_types)
    stats = program.solver_stats
    return float(program.compilation_time or 0.0) + float(stats.solve_time or 0.0)


def clean_solution(problem: Problem, x: np.ndarray, policy: str) -> np.ndarray:
    """A solver's x (n_jobs, n_types), checked feasible and cleaned of solver noise.

    Entries are clipped to [0, 1], set to 0 where the job cannot run, and entries below
    NOISE (a few milliseconds of a day) are set to 0; that only removes noise, because
    violations beyond FEASIBILITY_TOL raise instead.

    Raises:
        SolverError: x violates a base constraint by more than FEASIBILITY_TOL.
    """
    x = np.asarray(x, dtype=float).reshape(problem.n_jobs, problem.n_types)
    usage = problem.num_gpus @ x
    violation = max(
        float(-x.min(initial=0.0)),
        float((x.sum(axis=1) - 1).max(initial=0.0)),
        float(((usage - problem.capacity) / np.maximum(problem.capacity, 1)).max(initial=0.0)),
        float(np.abs(x[~problem.runnable]).max(initial=0.0)),
    )
    if violation > FEASIBILITY_TOL:
        raise SolverError(
            policy,
            f"solution violates constraints by {violation:.2g}",
            problem.n_jobs,
            problem.n_types,
        )
    x = np.clip(x, 0.0, 1.0)
    return np.where(problem.runnable & (x >= NOISE), x, 0.0)


def empty_allocation(problem: Problem, policy: str) -> Allocation:
    """The allocation of a problem without jobs (no solver call)."""
    return Allocation(
        job_ids=(),
        gpu_types=problem.gpu_types,
        x=np.zeros((0, problem.n_types)),
        objective=0.0,
        solve_s=0.0,
        policy=policy,
        solves=0,
    )
