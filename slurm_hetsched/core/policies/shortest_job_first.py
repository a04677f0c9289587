"""Shortest job first: the job that can finish first gets its fastest GPU type (Gavel 4.2).

Gavel writes the policy as `minimize_x min_m steps_m / throughput(m, x)`, which is not a convex
program and says nothing about the other jobs. Its optimum is plain: the job s with the
smallest steps_m / throughput(m, X^fastest) runs all the time on its fastest type. This
policy requires exactly that, and serves the others in order of that duration with FIFO's LP
(fifo.order_value: the same objective, the order by duration instead of arrival), so no GPU
idles while a job could use it:

    maximize  sum_m  c_m * num_gpus_m * throughput(m, x) / throughput(m, X^fastest)
    subject to  throughput(s, x) >= throughput(s, X^fastest),  the base constraints,
    c_m = M - rank_m,  rank by (steps_m / throughput(m, X^fastest), arrival_s, job id).

(Without the constraint the LP could move s to a slower type where that lets later jobs gain
more than s loses, as FIFO does; Gavel's objective rules that out for the shortest job.)

Needs `steps`. Jobs with 0 steps left are finished: they get no time and no rank. The
objective is Gavel's: the smallest steps_m / throughput(m, x) over unfinished jobs (seconds),
0 if every job is finished.

No I/O.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, Problem
from slurm_hetsched.core.policies.base import SolverPolicy
from slurm_hetsched.core.policies.constraints import clean_solution
from slurm_hetsched.core.policies.fifo import order_value
from slurm_hetsched.core.policies.rates import best_rate, rate_matrix, rates
from slurm_hetsched.core.policies.value_lp import maximize_value


def duration_order(problem: Problem, steps: np.ndarray, throughput: np.ndarray) -> np.ndarray:
    """(n_jobs,) position in order of the time to finish on the fastest type, from 0; -1 for a
    finished job (steps 0). Ties go by arrival_s, then job id."""
    unfinished = steps > 0
    duration = np.where(unfinished, steps / best_rate(throughput), np.inf)
    order = np.lexsort((np.array(problem.job_ids, dtype=str), problem.arrival_s, duration))
    rank = np.empty(problem.n_jobs, dtype=np.int64)
    rank[order] = np.arange(problem.n_jobs)
    return np.where(unfinished, rank, -1)


class ShortestJobFirstPerf(SolverPolicy):
    """Heterogeneity-aware shortest job first: shortest job on its fastest type, then the next.

    Constructor (base.SolverPolicy): backend "highs" (fast) or "cvxpy"; solver: the cvxpy
    solver name (default HIGHS).
    """

    name: ClassVar[str] = "shortest_job_first_perf"
    description: ClassVar[str] = (
        "shortest job first on throughputs: jobs in order of time to finish on their fastest "
        "type each get their fastest GPU types (needs steps)"
    )
    default_solver: ClassVar[str] = "HIGHS"

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring.

        Raises:
            InvalidProblemError: the problem has no `steps`.
            SolverError: the solve did not end optimal.
        """
        if (empty := self._prologue(problem)) is not None:
            return empty
        steps = problem.require("steps", self.name)
        throughput = rate_matrix(problem)
        rank = duration_order(problem, steps, throughput)
        value = order_value(problem, throughput, rank)
        if not np.any(value > 0):  # every job is finished
            x, solve_s = np.zeros((problem.n_jobs, problem.n_types)), 0.0
        else:
            # The shortest job at its best rate (a hair below: solver rounding).
            floor = np.where(rank == 0, best_rate(throughput) * (1 - 1e-9), 0.0)
            x, solve_s = maximize_value(
                problem, value, self.backend, self.solver, self.name, throughput, floor
            )
        x = clean_solution(problem, x, self.name)
        return Allocation(
            job_ids=problem.job_ids,
            gpu_types=problem.gpu_types,
            x=x,
            objective=shortest_duration_s(steps, rates(throughput, x)),
            solve_s=solve_s,
            policy=self.name,
            solves=int(np.any(value > 0)),
        )


def shortest_duration_s(steps: np.ndarray, rate: np.ndarray) -> float:
    """min over unfinished jobs of steps / rate (inf for an unfinished job with rate 0); 0 if
    every job is finished."""
    unfinished = steps > 0
    if not unfinished.any():
        return 0.0
    with np.errstate(divide="ignore"):
        return float(np.min(steps[unfinished] / rate[unfinished]))
