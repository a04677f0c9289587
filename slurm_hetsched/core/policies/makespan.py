"""Minimum makespan (Gavel's `min_total_duration`): finish every job as early as possible.

Gavel minimizes max_m steps_m / throughput(m, x) by bisection on the makespan M over LP
feasibility (appendix A.1; its code stops at 5% precision). The same optimum is one LP: with
tau = 1 / M,

    maximize  tau  subject to  throughput(m, x) >= tau * steps_m  (every job m),
                               the base constraints (constraints.py),

because throughput(m, x) >= steps_m / M for all m is exactly "makespan <= M". So the makespan
is exact, with one solve. `min_total_duration_perf` is heterogeneity-aware;
`min_total_duration` is the agnostic baseline (rates.rate_matrix: every type a job can run on
counts at the job's mean rate, so its steps keep their units).

Needs `steps`. Jobs with 0 steps left do not constrain anything (they may still get time).
Only the makespan is unique: a job that does not set it may get any rate above
steps_m / makespan. The reported objective is the makespan the returned allocation implies,
max_m steps_m / throughput(m, x) in seconds (0 if every job is finished).

Two backends give the same optimum: "highs" (default; the rate LP of rate_lp.py with
the steps as weights, over groups of identical jobs) and "cvxpy".

Option `energy_slack` (energy.py): give up that fraction of the objective for the allocation
that draws the least power.

No I/O.
"""

from __future__ import annotations

from typing import ClassVar

import cvxpy as cp
import numpy as np

from slurm_hetsched.core.model import Allocation, Problem
from slurm_hetsched.core.policies.base import EnergySlackPolicy
from slurm_hetsched.core.policies.constraints import base_constraints, clean_solution, solve_cvxpy
from slurm_hetsched.core.policies.energy import Floors
from slurm_hetsched.core.policies.rate_lp import RateRows, RateSolution, solve_rate_lp
from slurm_hetsched.core.policies.rates import rate_matrix, rates
from slurm_hetsched.core.policies.symmetry import JobGroups, group_jobs


def makespan_s(steps: np.ndarray, rate: np.ndarray) -> float:
    """max over jobs with steps left of steps / rate, in seconds (inf if such a job has rate
    0); 0 if every job is finished.

    Args:
        steps: (n_jobs,) steps remaining.
        rate: (n_jobs,) steps/s (rates.rates).
    """
    left = steps > 0
    if not left.any():
        return 0.0
    with np.errstate(divide="ignore"):
        return float(np.max(steps[left] / rate[left]))


def solve_makespan_lp(
    throughput: np.ndarray,
    num_gpus: np.ndarray,
    capacity: np.ndarray,
    steps: np.ndarray,
    *,
    policy: str,
) -> tuple[RateSolution, JobGroups]:
    """The minimum-makespan rate LP over jobs with `steps` left (all > 0 for some job), alike
    jobs solved as one row: the solution by group and the groups (`groups.expand` gives per
    job time fractions; `solution.prices` are the types' capacity duals, hadar's type values).

    Raises:
        SolverError: HiGHS did not end optimal.
    """
    # Steps scaled to at most 1 keep tau near the throughputs' magnitude (conditioning).
    weight = steps / steps.max()
    groups = group_jobs(np.column_stack([throughput, num_gpus, weight]))
    rep = groups.representative
    solution = solve_rate_lp(
        RateRows(
            a=throughput[rep],
            gpus=num_gpus[rep] * groups.size,
            capacity=capacity,
            weight=weight[rep],
            floor=np.zeros(groups.n_groups),
        ),
        policy=policy,
        n_jobs=len(steps),
    )
    return solution, groups


class MinTotalDurationPerf(EnergySlackPolicy):
    """Heterogeneity-aware minimum makespan, as one LP.

    Constructor (base.EnergySlackPolicy): backend "highs" (fast) or "cvxpy"; solver: the
    cvxpy solver name (default CLARABEL); energy_slack: the makespan may grow by this fraction
    for less power (energy.py).
    """

    name: ClassVar[str] = "min_total_duration_perf"
    description: ClassVar[str] = (
        "minimum makespan on throughputs: finish all jobs as early as possible, one LP "
        "(needs steps)"
    )
    agnostic: ClassVar[bool] = False

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring.

        Raises:
            InvalidProblemError: the problem has no `steps`; or energy_slack > 0 and it has
                no power data.
            SolverError: the solve did not end optimal.
        """
        if (empty := self._prologue(problem)) is not None:
            return empty
        steps = problem.require("steps", self.name)
        throughput = rate_matrix(problem, self.agnostic)
        solves = 0
        if not np.any(steps > 0):
            x, solve_s = np.zeros((problem.n_jobs, problem.n_types)), 0.0
        elif self.backend == "cvxpy":
            x, solve_s = self._solve_cvxpy(problem, throughput, steps)
            solves = 1
        else:
            x, solve_s = self._solve_highs(problem, throughput, steps)
            solves = 1
        x = clean_solution(problem, x, self.name)
        makespan = makespan_s(steps, rates(throughput, x))
        if self.energy_slack > 0 and makespan > 0:
            # Every job with steps left finishes within (1 + slack) x the optimal makespan.
            floor = steps / ((1 + self.energy_slack) * makespan)
            x, more_s = self._least_power(problem, Floors.per_job(throughput, floor), x)
            makespan, solve_s, solves = makespan_s(steps, rates(throughput, x)), solve_s + more_s, 2
        return Allocation(
            job_ids=problem.job_ids,
            gpu_types=problem.gpu_types,
            x=x,
            objective=makespan,
            solve_s=solve_s,
            policy=self.name,
            solves=solves,
        )

    def _solve_highs(
        self, problem: Problem, throughput: np.ndarray, steps: np.ndarray
    ) -> tuple[np.ndarray, float]:
        solution, groups = solve_makespan_lp(
            throughput, problem.num_gpus, problem.capacity, steps, policy=self.name
        )
        return groups.expand(solution.x), solution.solve_s

    def _solve_cvxpy(
        self, problem: Problem, throughput: np.ndarray, steps: np.ndarray
    ) -> tuple[np.ndarray, float]:
        x = cp.Variable(throughput.shape, nonneg=True)  # (n_jobs, n_types) time fractions
        tau = cp.Variable()  # 1 / makespan, with steps scaled to at most 1
        rate = cp.sum(cp.multiply(throughput, x), axis=1)  # (n_jobs,) steps/s
        program = cp.Problem(
            cp.Maximize(tau), [rate >= tau * (steps / steps.max()), *base_constraints(x, problem)]
        )
        solve_s = solve_cvxpy(program, self.name, problem, self.solver)
        return np.asarray(x.value), solve_s


class MinTotalDuration(MinTotalDurationPerf):
    """Heterogeneity-agnostic minimum makespan: every GPU type counts as the same."""

    name: ClassVar[str] = "min_total_duration"
    description: ClassVar[str] = (
        "minimum makespan, heterogeneity-agnostic baseline: each job's rate taken as its mean "
        "over the types it can run on (needs steps)"
    )
    agnostic: ClassVar[bool] = True
