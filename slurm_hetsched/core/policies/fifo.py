"""FIFO: jobs in arrival order get their fastest GPU types (Gavel section 4.2).

    maximize  sum_m  c_m * num_gpus_m * throughput(m, x) / throughput(m, X^fastest)
    subject to the base constraints (constraints.py),

with c_m = M - rank_m, rank_m the job's position in arrival order (arrival_s, then job id)
and M the number of jobs, so earlier jobs weigh more. `fifo_perf` is heterogeneity-aware;
`fifo` is the agnostic baseline, for which every type a job can run on is its fastest, so it
only decides who runs, not where.

One change to Gavel's objective: the num_gpus factor (as Gavel's multi-GPU max-min does).
Without it a job on 8 GPUs earns per GPU an eighth of its weight, and a slightly later
single-GPU job would take its place (at 2048 jobs the weights of the first few hundred jobs
differ by less than 8x). With it, a GPU-second is worth the weight of the job using it times
its speed there relative to its fastest type (<= 1); so while a job still has time left, no
later job uses any of its fastest types (moving that time to it would raise the objective),
and the first job always runs all the time. What the weights still allow is Gavel's
heterogeneity-aware trade: a job may run on a slower type when that lets later jobs gain more
than it loses (e.g. it is 10% slower there and a later job can only run on its fastest type).

`order_value` is shared with shortest job first (same LP, another order). Two backends give
the same optimum (value_lp.maximize_value): "highs" (default, a sparse LP solved by HiGHS
directly) and "cvxpy".

No I/O.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, Problem
from slurm_hetsched.core.policies.base import SolverPolicy
from slurm_hetsched.core.policies.constraints import clean_solution
from slurm_hetsched.core.policies.rates import best_rate, fifo_order, rate_matrix
from slurm_hetsched.core.policies.value_lp import maximize_value


def order_value(problem: Problem, throughput: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """(n_jobs, n_types) the objective coefficients: (M - rank) * num_gpus * T / T_fastest.

    Args:
        throughput: (n_jobs, n_types) steps/s (rate_matrix).
        rank: (n_jobs,) position in the service order from 0; -1 = not served (value 0).
    """
    best = best_rate(throughput)
    weight = np.where(rank >= 0, problem.n_jobs - rank, 0).astype(float)
    speed = throughput / np.where(best > 0, best, 1.0)[:, None]
    return np.asarray((weight * problem.num_gpus)[:, None] * speed)


class FifoPerf(SolverPolicy):
    """Heterogeneity-aware FIFO: in arrival order, each job on its fastest types.

    Constructor (base.SolverPolicy): backend "highs" (fast) or "cvxpy"; solver: the cvxpy
    solver name (default HIGHS).
    """

    name: ClassVar[str] = "fifo_perf"
    description: ClassVar[str] = (
        "FIFO on throughputs: jobs in arrival order get their fastest GPU types (Gavel's "
        "arrival-weighted LP)"
    )
    agnostic: ClassVar[bool] = False
    default_solver: ClassVar[str] = "HIGHS"
    # The round mechanism leaves GPUs idle rather than run jobs out of arrival order on
    # them (Gavel's code skips FIFO's priority-0 entries): docs/mechanism.md.
    fills_idle_gpus: ClassVar[bool] = False

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring. The objective is the LP's: sum over jobs of (M - rank) x
        num_gpus x (rate / fastest rate). Raises SolverError if the solve is not optimal."""
        if (empty := self._prologue(problem)) is not None:
            return empty
        value = order_value(problem, rate_matrix(problem, self.agnostic), fifo_order(problem))
        x, solve_s = maximize_value(problem, value, self.backend, self.solver, self.name)
        x = clean_solution(problem, x, self.name)
        return Allocation(
            job_ids=problem.job_ids,
            gpu_types=problem.gpu_types,
            x=x,
            objective=float(np.sum(value * x)),
            solve_s=solve_s,
            policy=self.name,
        )


class Fifo(FifoPerf):
    """Heterogeneity-agnostic FIFO: jobs in arrival order, on any type they can run on."""

    name: ClassVar[str] = "fifo"
    description: ClassVar[str] = (
        "FIFO, heterogeneity-agnostic baseline: jobs in arrival order, every GPU type they can "
        "run on taken as equally fast"
    )
    agnostic: ClassVar[bool] = True
