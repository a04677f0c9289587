"""Throughput per unit cost, optionally with SLOs (Gavel's
`max_sum_throughput_normalized_by_cost_perf[_SLOs]`, section 4.2).

    maximize  sum_m sum_j  x[m, j] * a[m, j] / (num_gpus_m * price_j)
    subject to the base constraints (constraints.py)
               and, for the _SLOs variant, throughput(m, x) >= required_m for the SLOs it meets,

with a the normalized rates (rates.normalized_rate_matrix; throughput.py says why rates are
normalized) and price_j the price of one GPU-hour of type j (Problem.price_per_hour, from the
shipped data/gpu_types.toml or the site's override). Each unit of a job's time on type j
earns its normalized rate per dollar there, so jobs go to the types where they make the most
progress per dollar, as capacity allows.

This is the sum of per-job throughput-per-dollar that Gavel's code and policy name optimize.
The paper writes the ratio of sums, total throughput / total cost, a linear-fractional
program; that ratio does not change when every x is scaled, so its optimum runs only the
single most cost-efficient (job, type) entries and leaves every other job without GPUs.

SLOs (`slo_s`, seconds from arrival; inf = none; needs `steps`): job m meets its SLO at rate
required_m = steps_m / (deadline_m - now_s), deadline_m = arrival_s + slo_s. A job with a due
date (`due_s`) and no SLO has the due date as its deadline (option `due_dates_as_slos`, on by
default; off: due dates are ignored), so jobs are given the rate that finishes them on time.
The policy
1. reports as unmet each SLO that no allocation meets even with the job alone: its deadline
   has passed, or required_m exceeds its rate with all its time on its fastest type;
2. solves the LP with all the other SLOs as rate floors: the usual case, one LP;
3. if those are infeasible together, picks a largest set of SLOs that can all be met, with a
   small MILP (binary z_m, throughput(m, x) >= required_m z_m, base constraints, maximize
   sum z; HiGHS through cvxpy), then solves the LP with those floors.
So every SLO that can be met is met, and when not all can, as many as possible are.
`Allocation.unmet_slos` lists the jobs whose SLO the returned allocation does not meet (to a
relative 1e-6); jobs with an unmet SLO still share the cluster by the objective.

Backends "highs" (default) and "cvxpy" give the same optimum (value_lp.maximize_value).

No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

import cvxpy as cp
import numpy as np

from slurm_hetsched.core.model import Allocation, InvalidProblemError, Problem
from slurm_hetsched.core.policies.base import SolverPolicy
from slurm_hetsched.core.policies.constraints import (
    NOISE,
    base_constraints,
    clean_solution,
    solve_cvxpy,
)
from slurm_hetsched.core.policies.options import PolicyOption, parse_flag
from slurm_hetsched.core.policies.rates import best_rate, normalized_rate_matrix, rate_matrix, rates
from slurm_hetsched.core.policies.value_lp import maximize_value
from slurm_hetsched.errors import SolverError

# An SLO counts as met when the job's rate is within this (relative) of its required rate.
SLO_TOL = 1e-6


def value_per_cost(problem: Problem, policy: str) -> np.ndarray:
    """(n_jobs, n_types) normalized rate per dollar-per-hour of the GPUs used.

    Raises:
        InvalidProblemError: the problem has no prices, or a type's price is not > 0.
    """
    price = problem.require("price_per_hour", policy)
    bad = np.flatnonzero(~(price > 0))
    if bad.size:
        t = problem.gpu_types[bad[0]]
        raise InvalidProblemError(
            f"GPU type {t!r}: price_per_hour {price[bad[0]]} must be > 0 for policy {policy!r}"
        )
    per_gpu_hour = problem.num_gpus[:, None] * price[None, :]
    return np.asarray(normalized_rate_matrix(problem) / per_gpu_hour)


def deadlines_s(problem: Problem, due_dates: bool) -> np.ndarray:
    """(n_jobs,) each job's completion deadline on the problem's clock; inf = none.

    An SLO gives arrival_s + slo_s; with `due_dates`, a job without an SLO but with a due date
    has the due date as its deadline.
    """
    deadline = np.full(problem.n_jobs, np.inf)
    if due_dates and problem.due_s is not None:
        deadline = np.where(np.isnan(problem.due_s), np.inf, problem.due_s)
    if problem.slo_s is not None:
        deadline = np.where(np.isfinite(problem.slo_s), problem.arrival_s + problem.slo_s, deadline)
    return np.asarray(deadline)


def required_rates(
    problem: Problem, policy: str, due_dates: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(required steps/s (n_jobs,), has_slo (n_jobs,) bool) from the deadlines and `steps`.

    required is 0 for jobs without a deadline (deadlines_s) or with no steps left, inf where
    the deadline is not after now_s.

    Raises:
        InvalidProblemError: some job has a deadline but the problem has no `steps`.
    """
    deadline = deadlines_s(problem, due_dates)
    has_slo = np.isfinite(deadline)
    if not has_slo.any():
        return np.zeros(problem.n_jobs), has_slo
    steps = problem.require("steps", policy)
    remaining_s = np.where(has_slo, deadline, 0.0) - problem.now_s
    ahead = remaining_s > 0
    required = np.where(ahead, steps / np.where(ahead, remaining_s, 1.0), np.inf)
    return np.where(has_slo & (steps > 0), required, 0.0), has_slo


def most_slos(
    problem: Problem, throughput: np.ndarray, floor: np.ndarray, policy: str
) -> np.ndarray:
    """(n_jobs,) bool: a largest set of the floors (floor > 0) that can be met together.

    A MILP: binary z_m per floor, throughput(m, x) >= floor_m z_m, base constraints,
    maximize sum z (HiGHS's branch and bound through cvxpy).

    Raises:
        SolverError: the MILP did not end optimal.
    """
    floored = np.flatnonzero(floor > 0)
    x = cp.Variable(throughput.shape, nonneg=True)  # (n_jobs, n_types) time fractions
    z = cp.Variable(len(floored), boolean=True)  # 1 = that SLO is met
    rate = cp.sum(cp.multiply(throughput, x), axis=1)
    program = cp.Problem(
        cp.Maximize(cp.sum(z)),
        [*base_constraints(x, problem), rate[floored] >= cp.multiply(floor[floored], z)],
    )
    solve_cvxpy(program, policy, problem, "HIGHS")
    chosen = np.zeros(problem.n_jobs, dtype=bool)
    chosen[floored[np.asarray(z.value) > 0.5]] = True
    return chosen


class MaxSumThroughputNormalizedByCostPerf(SolverPolicy):
    """Heterogeneity-aware throughput per unit cost: jobs on their best types per dollar.

    Constructor (base.SolverPolicy): backend "highs" (fast) or "cvxpy"; solver: the cvxpy
    solver name for the LPs (default HIGHS; the SLO selection MILP always uses HiGHS).
    """

    name: ClassVar[str] = "max_sum_throughput_normalized_by_cost_perf"
    description: ClassVar[str] = (
        "throughput per cost: maximize the jobs' normalized rates per dollar of GPU time "
        "(needs GPU prices)"
    )
    slos: ClassVar[bool] = False
    # GPUs the cost policy leaves unallocated are unallocated to save money: the round
    # mechanism must not fill them (docs/mechanism.md).
    fills_idle_gpus: ClassVar[bool] = False
    default_solver: ClassVar[str] = "HIGHS"
    due_dates_as_slos: bool = False

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring. The objective is sum(value * x), normalized rate per
        dollar-per-hour.

        Raises:
            InvalidProblemError: no prices (or a price <= 0); SLOs without `steps`.
            SolverError: a solve did not end optimal.
        """
        if (empty := self._prologue(problem)) is not None:
            return empty
        value = value_per_cost(problem, self.name)
        if not self.slos:
            x, solve_s = maximize_value(problem, value, self.backend, self.solver, self.name)
            return self._allocation(problem, value, x, solve_s, 1, None)
        throughput = rate_matrix(problem)
        required, has_slo = required_rates(problem, self.name, self.due_dates_as_slos)
        meetable = required <= best_rate(throughput) * (1 + 1e-9)  # inf (missed) is not
        floor = np.where(has_slo & meetable, required, 0.0)
        solves = 1
        try:
            x, solve_s = self._solve(problem, value, throughput, floor)
        except SolverError as error:
            if not error.status.lower().startswith("infeasible"):
                raise
            floor = np.where(most_slos(problem, throughput, floor, self.name), floor, 0.0)
            x, solve_s = self._solve(problem, value, throughput, floor)
            solves = 3
        x = clean_solution(problem, x, self.name)
        rate = rates(throughput, x)
        finite = np.isfinite(required)  # inf: the deadline has passed
        slack = np.where(finite, SLO_TOL * np.where(finite, required, 0.0), 0.0)
        unmet = has_slo & ~(rate >= required - slack - NOISE * throughput.sum(axis=1))
        ids = tuple(problem.job_ids[i] for i in np.flatnonzero(unmet))
        return self._allocation(problem, value, x, solve_s, solves, ids)

    def _solve(
        self, problem: Problem, value: np.ndarray, throughput: np.ndarray, floor: np.ndarray
    ) -> tuple[np.ndarray, float]:
        return maximize_value(
            problem, value, self.backend, self.solver, self.name, floor_rate=throughput, floor=floor
        )

    def _allocation(
        self,
        problem: Problem,
        value: np.ndarray,
        x: np.ndarray,
        solve_s: float,
        solves: int,
        unmet: tuple[str, ...] | None,
    ) -> Allocation:
        x = clean_solution(problem, x, self.name)
        return Allocation(
            job_ids=problem.job_ids,
            gpu_types=problem.gpu_types,
            x=x,
            objective=float(np.sum(value * x)),
            solve_s=solve_s,
            policy=self.name,
            solves=solves,
            unmet_slos=unmet,
        )


class MaxSumThroughputNormalizedByCostPerfSLOs(MaxSumThroughputNormalizedByCostPerf):
    """Throughput per unit cost that meets every SLO it can and reports the others."""

    name: ClassVar[str] = "max_sum_throughput_normalized_by_cost_perf_SLOs"
    description: ClassVar[str] = (
        "throughput per cost subject to SLOs: meets every SLO that can be met (as many as "
        "possible together) and lists the others in unmet_slos (needs prices; SLOs need steps)"
    )
    slos: ClassVar[bool] = True
    options: ClassVar[Mapping[str, PolicyOption]] = MappingProxyType(
        {
            "due_dates_as_slos": PolicyOption(
                description=(
                    "true/false: a job with a due date but no slo_s must finish by its due "
                    "date (needs steps)"
                ),
                default=True,
                parse=parse_flag,
            )
        }
    )

    def __init__(
        self, backend: str = "highs", solver: str = "HIGHS", due_dates_as_slos: bool = True
    ) -> None:
        """Args: as the policy without SLOs; due_dates_as_slos: take `due_s` as the deadline
        of a job that has no `slo_s`."""
        super().__init__(backend, solver)
        self.due_dates_as_slos = parse_flag(due_dates_as_slos)
