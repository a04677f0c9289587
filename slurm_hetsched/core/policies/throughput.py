"""Maximum total throughput (Gavel's `max_sum_throughput_perf`, section 4.2).

    maximize  sum_m r_m(x),   r_m(x) = sum_j a[m, j] x[m, j]   (base.normalized_rate_matrix)
    subject to the base constraints (base.py).

Throughputs of different jobs count steps of different models (a language model makes 100
steps/s where ResNet-50 makes 2), so the sum is over normalized rates, as in max-min fairness:
a job's steps/s divided by its rate on an equal share of every type, times its GPUs. Gavel's
code sums raw steps/s, which hands the cluster to whichever model counts the most steps per
second. On one GPU type, a job's normalized rate is num_gpus x (its time fraction) x (total
GPUs), so the policy keeps every GPU busy whenever jobs can use it.

The objective is the sum of normalized rates. Backends "highs" (default) and "cvxpy" give the
same optimum (base.maximize_value). The allocation is not unique.

No I/O.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, Problem
from slurm_hetsched.core.policies.base import (
    clean_solution,
    empty_allocation,
    maximize_value,
    normalized_rate_matrix,
)
from slurm_hetsched.core.policies.max_min_fairness import check_backend


class MaxSumThroughputPerf:
    """Heterogeneity-aware maximum total (normalized) throughput."""

    name: ClassVar[str] = "max_sum_throughput_perf"
    description: ClassVar[str] = (
        "maximum total throughput: maximize the sum of the jobs' normalized rates (each job's "
        "steps/s over its equal-share rate)"
    )

    def __init__(self, backend: str = "highs", solver: str = "HIGHS") -> None:
        """Args: backend "highs" (fast) or "cvxpy"; solver: the cvxpy solver name."""
        check_backend(backend)
        self.backend = backend
        self.solver = solver

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring. Raises SolverError if the solve is not optimal."""
        if problem.n_jobs == 0:
            return empty_allocation(problem, self.name)
        value = normalized_rate_matrix(problem)
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
