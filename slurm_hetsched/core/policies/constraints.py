"""The base constraints on the time fractions x, and the check of a solver's x against them.

The base constraints on x (n_jobs, n_types) are written here once, in both forms the policies
use:
- `base_constraints(x, problem)` for a cvxpy formulation;
- `base_rows(...)` as sparse rows for HiGHS (see lp.py);
and they say the same thing: x >= 0; each row sums to <= 1 (a job is in one place at a time);
num_gpus-weighted column sums <= capacity; x = 0 where the job cannot run (throughput 0, or a
type with fewer GPUs than the job needs).

A solver's answer comes back through the same place: `solve_cvxpy` accepts only an optimal
status, and `clean_solution` accepts only an x within FEASIBILITY_TOL of the constraints and
removes the solver's noise. `check_feasible` and `drop_noise` are that check and that cleaning
on their own, for the constraints with space sharing (sharing.py).

No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from slurm_hetsched.core.model import Problem
from slurm_hetsched.core.policies.lp import INF, RowBlock
from slurm_hetsched.errors import SolverError

# A returned solution may violate a constraint by this much (solver tolerances are ~1e-7);
# anything worse is reported as a solver failure rather than returned.
FEASIBILITY_TOL = 1e-5
# Time fractions below this are solver noise, not decisions (1e-7 of a day is 9 ms).
NOISE = 1e-7


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
    check_feasible(
        problem,
        policy,
        lowest=x.min(initial=0.0),
        time_used=x.sum(axis=1),
        usage=problem.num_gpus @ x,
        outside=[x[~problem.runnable]],
    )
    return drop_noise(x, problem.runnable)


def check_feasible(
    problem: Problem,
    policy: str,
    *,
    lowest: float,
    time_used: np.ndarray,
    usage: np.ndarray,
    outside: Sequence[np.ndarray],
) -> None:
    """Raise unless a solution keeps the base constraints to within FEASIBILITY_TOL.

    Args:
        lowest: the smallest time fraction (or 0): must not be below 0.
        time_used: (n_jobs,) each job's total time fraction: must not exceed 1.
        usage: (n_types,) GPUs used per type: must not exceed the capacity (relative).
        outside: time fractions that must be 0 (where the job or pair cannot run).

    Raises:
        SolverError: a constraint is violated by more than FEASIBILITY_TOL.
    """
    violation = max(
        float(-lowest),
        float((time_used - 1).max(initial=0.0)),
        float(((usage - problem.capacity) / np.maximum(problem.capacity, 1)).max(initial=0.0)),
        *(float(np.abs(values).max(initial=0.0)) for values in outside),
    )
    if violation > FEASIBILITY_TOL:
        raise SolverError(
            policy,
            f"solution violates constraints by {violation:.2g}",
            problem.n_jobs,
            problem.n_types,
        )


def drop_noise(x: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """x clipped to [0, 1], with 0 where not `allowed` and where below NOISE."""
    x = np.clip(x, 0.0, 1.0)
    return np.where(allowed & (x >= NOISE), x, 0.0)
