"""Maximum total throughput (Gavel's `max_sum_throughput_perf`, section 4.2).

    maximize  sum_m r_m(x),   r_m(x) = sum_j a[m, j] x[m, j]   (rates.normalized_rate_matrix)
    subject to the base constraints (constraints.py).

Throughputs of different jobs count steps of different models (a language model makes 100
steps/s where ResNet-50 makes 2), so the sum is over normalized rates, as in max-min fairness:
a job's steps/s divided by its rate on an equal share of every type, times its GPUs. Gavel's
code sums raw steps/s, which hands the cluster to whichever model counts the most steps per
second. On one GPU type, a job's normalized rate is num_gpus x (its time fraction) x (total
GPUs), so the policy keeps every GPU busy whenever jobs can use it.

The objective is the sum of normalized rates. Backends "highs" (default) and "cvxpy" give the
same optimum (value_lp.maximize_value). The allocation is not unique.

Option `energy_slack` (energy.py): give up that fraction of the objective for the allocation
that draws the least power.

No I/O.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, Problem
from slurm_hetsched.core.policies.base import EnergySlackPolicy
from slurm_hetsched.core.policies.constraints import clean_solution
from slurm_hetsched.core.policies.energy import Floors
from slurm_hetsched.core.policies.rates import normalized_rate_matrix
from slurm_hetsched.core.policies.value_lp import maximize_value


class MaxSumThroughputPerf(EnergySlackPolicy):
    """Heterogeneity-aware maximum total (normalized) throughput.

    Constructor (base.EnergySlackPolicy): backend "highs" (fast) or "cvxpy"; solver: the
    cvxpy solver name (default HIGHS); energy_slack: the fraction of the total to give up for
    less power (energy.py).
    """

    name: ClassVar[str] = "max_sum_throughput_perf"
    description: ClassVar[str] = (
        "maximum total throughput: maximize the sum of the jobs' normalized rates (each job's "
        "steps/s over its equal-share rate)"
    )
    default_solver: ClassVar[str] = "HIGHS"

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring.

        Raises:
            InvalidProblemError: energy_slack > 0 and the problem has no power data.
            SolverError: a solve is not optimal.
        """
        if (empty := self._prologue(problem)) is not None:
            return empty
        value = normalized_rate_matrix(problem)
        x, solve_s = maximize_value(problem, value, self.backend, self.solver, self.name)
        x = clean_solution(problem, x, self.name)
        solves = 1
        if self.energy_slack > 0:
            total = (1 - self.energy_slack) * float(np.sum(value * x))
            x, more_s = self._least_power(problem, Floors.total(value, total), x)
            solve_s, solves = solve_s + more_s, 2
        return Allocation(
            job_ids=problem.job_ids,
            gpu_types=problem.gpu_types,
            x=x,
            objective=float(np.sum(value * x)),
            solve_s=solve_s,
            policy=self.name,
            solves=solves,
        )
