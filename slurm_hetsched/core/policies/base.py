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

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from slurm_hetsched.core.mechanism import RoundOptions
from slurm_hetsched.core.model import Allocation, Problem
from slurm_hetsched.core.policies.lp import (
    INF,
    LpSolution,
    RowBlock,
    SparseLP,
    solve_highs,
    stack_rows,
)
from slurm_hetsched.core.policies.options import PolicyOption
from slurm_hetsched.errors import SolverError

# A returned solution may violate a constraint by this much (solver tolerances are ~1e-7);
# anything worse is reported as a solver failure rather than returned.
FEASIBILITY_TOL = 1e-5
# Time fractions below this are solver noise, not decisions (1e-7 of a day is 9 ms).
NOISE = 1e-7


class Policy(Protocol):
    """A policy: a name, a one-line description, the options it accepts (options.py; each
    is also a keyword argument of its constructor), and a pure `allocate`."""

    name: ClassVar[str]
    description: ClassVar[str]
    options: ClassVar[Mapping[str, PolicyOption]]

    def allocate(self, problem: Problem) -> Allocation:
        """The allocation for `problem`.

        Raises:
            InvalidProblemError: the problem lacks a field this policy needs.
            SolverError: the solver did not reach an optimal solution.
        """
        ...


def round_options_for(policy: Policy, options: RoundOptions) -> RoundOptions:
    """The round mechanism's options under `policy` (docs/mechanism.md), from the site's.

    - A heterogeneity-agnostic policy (`agnostic = True`) walks the per-type queues in a
      random order each round (Gavel: such a policy must not favour a type by walking it
      first).
    - Work conservation stays on unless the policy leaves GPUs idle on purpose: FIFO (Gavel
      never fills under FIFO), the cost policies (an idle GPU costs nothing) and any policy
      with `energy_slack` > 0 (an idle GPU draws less power). They say so with
      `fills_idle_gpus = False` (or their `energy_slack`).
    """
    agnostic = bool(getattr(policy, "agnostic", False))
    fills = bool(getattr(policy, "fills_idle_gpus", True))
    if float(getattr(policy, "energy_slack", 0.0) or 0.0) > 0:
        fills = False
    return dataclasses.replace(
        options,
        shuffle=options.shuffle or agnostic,
        work_conserving=options.work_conserving and fills,
    )


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


# ----------------------------------------------------------------------------------------------
# Shared by the policies on steps and seconds (FIFO, shortest job first, makespan, finish-time
# fairness) and the linear ones (throughput, cost).


def rate_matrix(problem: Problem, agnostic: bool = False) -> np.ndarray:
    """(n_jobs, n_types) steps/s for the policies whose objective is in steps or seconds.

    Heterogeneity-aware: the measured throughput where the job can run, 0 elsewhere. With
    `agnostic`, every type a job can run on counts as the same: each runnable entry is the
    job's mean throughput over those types. Gavel's agnostic baselines take every entry as 1,
    which changes nothing for scale-free objectives (max-min, FIFO) but would turn steps into
    seconds for makespan and finish-time fairness; the mean keeps the units, so on a
    homogeneous cluster an agnostic policy gives exactly the aware answer (Gavel section 4.4).
    """
    throughput = np.where(problem.runnable, problem.throughput, 0.0)
    if not agnostic or problem.n_jobs == 0:
        return throughput
    mean = throughput.sum(axis=1) / np.maximum(problem.runnable.sum(axis=1), 1)
    return np.where(problem.runnable, mean[:, None], 0.0)


def best_rate(throughput: np.ndarray) -> np.ndarray:
    """(n_jobs,) steps/s with all of a job's time on its fastest type (Gavel's X^fastest).

    Args:
        throughput: (n_jobs, n_types) from rate_matrix (0 where the job cannot run). A job
            can always spend all its time on a type it can run on: such a type has at least
            num_gpus GPUs.
    """
    return np.asarray(throughput.max(axis=1, initial=0.0))


def equal_split(problem: Problem) -> np.ndarray:
    """(n_jobs, n_types) the weighted equal split: Gavel's X^isolated ("1/n of the cluster").

    Job m gets w_m / sum(w) of every type's GPUs where it can run, that is time fraction
    share_m * capacity_j / num_gpus_m; a row summing to more than 1 is scaled down to 1. It is
    always feasible.
    """
    share = problem.weight / problem.weight.sum()
    x = share[:, None] * problem.capacity[None, :] / problem.num_gpus[:, None]
    x = np.where(problem.runnable, x, 0.0)
    return np.asarray(x / np.maximum(x.sum(axis=1, keepdims=True), 1.0))


def rates(throughput: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(n_jobs,) steps/s of each job under x: sum_j throughput[m, j] * x[m, j]."""
    return np.asarray(np.sum(throughput * x, axis=1))


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


def fifo_order(problem: Problem) -> np.ndarray:
    """(n_jobs,) each job's position in arrival order (arrival_s, then job id), from 0."""
    order = np.lexsort((np.array(problem.job_ids, dtype=str), problem.arrival_s))
    rank = np.empty(problem.n_jobs, dtype=np.int64)
    rank[order] = np.arange(problem.n_jobs)
    return rank
