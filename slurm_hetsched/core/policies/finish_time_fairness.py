"""Finish-time fairness (Themis' rho, Gavel section 4.2): minimize the worst finish-time ratio.

    rho_m(x) = (t_m + steps_m / throughput(m, x)) / (t_m + steps_m / throughput(m, X^isolated))
    minimize  max_m rho_m(x)  subject to the base constraints (constraints.py),

as Gavel's implementation defines it: t_m = now_s - arrival_s is the time since the job
arrived (Gavel's `times_since_start`; it also stands for the paper's t^isolated_m), and
X^isolated is the weighted equal split, each job w_m / sum(w) of every type (rates.equal_split;
the paper's "1/n of the cluster"). Jobs with 0 steps left are finished and left out of the
maximum. Since the equal split is feasible, the optimum is at most 1 (sharing incentive).

For a fixed rho, "rho_m(x) <= rho for all m" is linear: throughput(m, x) >= d_m(rho) with
demands d_m(rho) = steps_m / (rho * D_m - t_m), D_m the denominator. Gavel bisects on rho with
one LP per step (5.4 s at 2048 jobs with its cvxpy formulation). Two exact searches here:

By speed class (used when there are at most CLASS_SHARE classes per job, e.g. jobs drawn from
a profile table): jobs with proportional throughput rows and equal num_gpus are decided
together (speed_classes.py), so each feasibility LP has classes x types columns however many
jobs there are. Regula falsi (Illinois) on rho between the "every job alone on its fastest
type" bound and 1 (the equal split) brackets the optimum to TOL in a few warm-started LPs; one
more LP splits the classes' times among their jobs (should it fail, the per-job search runs).

Per job, otherwise: each LP,

    maximize tau  subject to  throughput(m, x) >= tau * d_m(rho)  (every m),  base constraints

(rate_lp.py, with the demands as weights), answers more than "feasible or not":
- its x is an allocation, so max_m rho_m(x) is an upper bound on the optimum;
- its dual values y on the demand rows give a lower bound: any demand vector d' can be met at
  most to a factor tau / (y . d') (y scaled to y . d(rho) = 1, the dual of the LP for d' is
  the same point rescaled), so no rho with y . d(rho) > tau is feasible. The next probe is the
  root of y . d(rho) = tau (a sum of decreasing hyperbolas: a scalar Newton solve).
That is a Newton step from below on the convex function rho -> 1 / tau(rho): it converges in a
few LPs (it is exact in one once the set of binding jobs is right), each warm-started from the
last basis. A geometric bisection step is taken whenever the bracket does not halve, so it
always terminates; it stops when the bracket is within TOL (relative).

`finish_time_fairness_perf` is heterogeneity-aware; `finish_time_fairness` is the agnostic
baseline (rates.rate_matrix: each job at its mean rate on every type it can run on). Backends:
"highs" (default, the searches above) and "cvxpy" (Gavel's one convex program, min max of
t_m + steps_m * inv_pos(throughput), solved by CLARABEL), which tests check agree.

Option `energy_slack` (energy.py): give up that fraction of the objective for the allocation
that draws the least power.

No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import cvxpy as cp
import numpy as np

from slurm_hetsched.core.model import Allocation, Problem
from slurm_hetsched.core.policies.base import EnergySlackPolicy
from slurm_hetsched.core.policies.constraints import base_constraints, clean_solution, solve_cvxpy
from slurm_hetsched.core.policies.energy import Floors
from slurm_hetsched.core.policies.lp import solve_highs
from slurm_hetsched.core.policies.rate_lp import RateRows, solve_rate_lp
from slurm_hetsched.core.policies.rates import best_rate, equal_split, rate_matrix, rates
from slurm_hetsched.core.policies.speed_classes import SpeedClasses
from slurm_hetsched.core.policies.symmetry import group_jobs
from slurm_hetsched.errors import SolverError

# The search stops when upper and lower bound on the optimal rho are this close (relative).
TOL = 1e-7
# A safeguard: the bracket halves at least every other LP, so this is never reached in
# practice; reaching it raises SolverError rather than returning an unproven allocation.
MAX_LPS = 200
# Jobs are decided over speed classes (speed_classes.py) when there are at most this many
# classes per job; otherwise per job.
CLASS_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class FinishTimes:
    """The constants of rho for one problem (rows are jobs).

    rho_m(x) = (elapsed_s_m + steps_m / rate_m(x)) / denominator_s_m, for jobs with steps left.
    """

    steps: np.ndarray  # (n_jobs,) steps remaining
    elapsed_s: np.ndarray  # (n_jobs,) t_m = now_s - arrival_s, >= 0
    denominator_s: np.ndarray  # (n_jobs,) t_m + steps_m / isolated rate
    left: np.ndarray  # (n_jobs,) bool: steps > 0

    @classmethod
    def of(cls, problem: Problem, throughput: np.ndarray, steps: np.ndarray) -> FinishTimes:
        elapsed = np.maximum(problem.now_s - problem.arrival_s, 0.0)
        isolated = rates(throughput, equal_split(problem))  # > 0: every job can run somewhere
        return cls(steps, elapsed, elapsed + steps / isolated, steps > 0)

    def rho(self, rate: np.ndarray) -> np.ndarray:
        """(n_left,) rho of each job with steps left, at the given (n_jobs,) steps/s."""
        left = self.left
        with np.errstate(divide="ignore"):
            finish = self.elapsed_s[left] + self.steps[left] / rate[left]
        return np.asarray(finish / self.denominator_s[left])

    def worst(self, rate: np.ndarray) -> float:
        """max_m rho_m (inf if a job with steps left has rate 0); 0 if every job is finished."""
        return float(self.rho(rate).max()) if self.left.any() else 0.0

    def demand(self, rho: float) -> np.ndarray:
        """(n_jobs,) steps/s each job needs for rho_m <= rho (0 for finished jobs); rho must
        exceed elapsed / denominator for every job with steps left."""
        slack = np.where(self.left, rho * self.denominator_s - self.elapsed_s, 1.0)
        return np.where(self.left, self.steps / slack, 0.0)

    def lower_bound(self, throughput: np.ndarray) -> float:
        """rho with every job alone on its fastest type: no allocation does better."""
        left = self.left
        best = best_rate(throughput)[left]
        return float(
            np.max((self.elapsed_s[left] + self.steps[left] / best) / self.denominator_s[left])
        )


def cut_root(
    times: FinishTimes, members: np.ndarray, y: np.ndarray, tau: float, start: float
) -> float:
    """The root of sum_i y_i * d_i(rho) = tau, for rho >= start where the sum is >= tau.

    Args:
        members: (n,) job index of each dual value (jobs with steps left).
        y: (n,) dual values > 0, scaled so that sum y * d(start) = 1.
        tau: the LP optimum at start.
        start: the probe; the root lies at or above it when tau <= 1.

    The sum is convex and decreasing in rho, so Newton's method from the left never
    overshoots. Returns `start` if there is nothing to solve.
    """
    steps = times.steps[members]
    denominator = times.denominator_s[members]
    elapsed = times.elapsed_s[members]
    rho = start
    for _ in range(100):
        slack = rho * denominator - elapsed
        value = float(np.sum(y * steps / slack)) - tau
        if value <= 0:
            break
        slope = -float(np.sum(y * steps * denominator / slack**2))
        step = -value / slope
        rho += step
        if step <= 1e-15 * rho:
            break
    return rho


class FinishTimeFairnessPerf(EnergySlackPolicy):
    """Heterogeneity-aware finish-time fairness: minimize the worst Themis rho.

    Constructor (base.EnergySlackPolicy): backend "highs" (fast) or "cvxpy"; solver: the
    cvxpy solver name (default CLARABEL); energy_slack: the worst rho may grow by this
    fraction for less power (energy.py).
    """

    name: ClassVar[str] = "finish_time_fairness_perf"
    description: ClassVar[str] = (
        "finish-time fairness (Themis) on throughputs: minimize the worst ratio of finish time "
        "to finish time on a 1/n share (needs steps)"
    )
    agnostic: ClassVar[bool] = False

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring. The objective is max_m rho_m under the returned x.

        Raises:
            InvalidProblemError: the problem has no `steps`; or energy_slack > 0 and it has
                no power data.
            SolverError: a solve did not end optimal (or the search did not converge).
        """
        if (empty := self._prologue(problem)) is not None:
            return empty
        steps = problem.require("steps", self.name)
        throughput = rate_matrix(problem, self.agnostic)
        times = FinishTimes.of(problem, throughput, steps)
        if not times.left.any():
            x, solve_s, solves = np.zeros((problem.n_jobs, problem.n_types)), 0.0, 0
        elif self.backend == "cvxpy":
            x, solve_s = self._solve_cvxpy(problem, throughput, times)
            solves = 1
        else:
            x, solve_s, solves = self._solve_highs(problem, throughput, times)
        x = clean_solution(problem, x, self.name)
        worst = times.worst(rates(throughput, x))
        if self.energy_slack > 0 and worst > 0:
            # rho_m <= (1 + slack) rho* is a rate floor per job: its demand at that rho.
            floor = times.demand((1 + self.energy_slack) * worst)
            x, more_s = self._least_power(problem, Floors.per_job(throughput, floor), x)
            worst, solve_s, solves = times.worst(rates(throughput, x)), solve_s + more_s, solves + 1
        return Allocation(
            job_ids=problem.job_ids,
            gpu_types=problem.gpu_types,
            x=x,
            objective=worst,
            solve_s=solve_s,
            policy=self.name,
            solves=solves,
        )

    def _solve_highs(
        self, problem: Problem, throughput: np.ndarray, times: FinishTimes
    ) -> tuple[np.ndarray, float, int]:
        classes = SpeedClasses.of(throughput, problem.num_gpus)
        if classes.groups.n_groups <= CLASS_SHARE * problem.n_jobs:
            found = self._solve_by_classes(problem, throughput, times, classes)
            if found is not None:
                return found
        return self._solve_by_jobs(problem, throughput, times)

    def _solve_by_classes(
        self, problem: Problem, throughput: np.ndarray, times: FinishTimes, classes: SpeedClasses
    ) -> tuple[np.ndarray, float, int] | None:
        """Bracketed root finding on rho over the speed-class LP, then one split LP; None if
        the split fails (the caller then solves per job)."""
        basis, solve_s, lps = None, 0.0, 0

        def slack(rho: float) -> tuple[float, np.ndarray]:
            """(t - 1 of the scaling LP at rho: >= 0 iff rho is feasible, the groups' times)."""
            nonlocal basis, solve_s, lps
            lp = classes.scaling_lp(classes.need(times.demand(rho)), problem.capacity)
            solution = solve_highs(
                lp,
                policy=self.name,
                n_jobs=problem.n_jobs,
                n_types=problem.n_types,
                warm_start=basis,
            )
            basis, solve_s, lps = solution.basis, solve_s + solution.solve_s, lps + 1
            return float(solution.columns[-1]) - 1.0, classes.aggregate(solution)

        low = times.lower_bound(throughput)
        f_low, total = slack(low)
        high, f_high, total_high = low, f_low, total
        if f_low < 0:
            # The equal split is feasible at rho = 1; a hair above it, for rounding.
            high = max(1.0, low) * (1 + 1e-6)
            f_high, total_high = slack(high)
            while f_high < 0 and lps < MAX_LPS:
                high *= 2
                f_high, total_high = slack(high)
            side = 0
            while high - low > TOL * high and lps < MAX_LPS:
                # Illinois: regula falsi that halves a stale end's value (superlinear).
                probe = high - f_high * (high - low) / (f_high - f_low)
                margin = 1e-3 * (high - low)
                probe = min(max(probe, low + margin), high - margin)
                f_probe, total = slack(probe)
                if f_probe >= 0:
                    high, f_high, total_high = probe, f_probe, total
                    f_low = f_low / 2 if side == 1 else f_low
                    side = 1
                else:
                    low, f_low = probe, f_probe
                    f_high = f_high / 2 if side == -1 else f_high
                    side = -1
            if f_high < 0 or high - low > TOL * high:
                return None
        split = classes.split(total_high, times.demand(high), self.name, problem.n_types)
        if split is None:
            return None
        x, split_s = split
        return x, solve_s + split_s, lps + 1

    def _solve_by_jobs(
        self, problem: Problem, throughput: np.ndarray, times: FinishTimes
    ) -> tuple[np.ndarray, float, int]:
        """The Newton search with the dual cut over per-job LPs (module docstring)."""
        groups = group_jobs(
            np.column_stack(
                [throughput, problem.num_gpus, times.steps, times.elapsed_s, times.denominator_s]
            )
        )
        rep = groups.representative
        gpus = problem.num_gpus[rep] * groups.size
        zeros = np.zeros(groups.n_groups)
        low = times.lower_bound(throughput)
        high, best_x = np.inf, None
        probe, gap, basis, solve_s = low, np.inf, None, 0.0
        for lps in range(1, MAX_LPS + 1):
            demand = times.demand(probe)[rep]
            scale = float(demand.max())
            solution = solve_rate_lp(
                RateRows(throughput[rep], gpus, problem.capacity, demand / scale, zeros),
                policy=self.name,
                n_jobs=problem.n_jobs,
                # Small LPs: each probe only changes the demands, so HiGHS restarts from the
                # last basis; large ones go through the GPU types' prices (rate_lp.py).
                warm_start=basis,
            )
            basis, solve_s = solution.basis, solve_s + solution.solve_s
            x_groups, tau, duals = solution.x, solution.t, solution.dual
            x = groups.expand(x_groups)
            reached = times.worst(rates(throughput, x))
            if reached < high:
                high, best_x = reached, x
            # The dual cut (module docstring). HiGHS's duals satisfy duals . (demand / scale) = 1,
            # so with y = duals / (duals . demand) the probe's LP optimum in the unscaled
            # demands is tau / (duals . demand); only an infeasible probe moves the lower bound.
            positive = np.flatnonzero((duals > 0) & times.left[rep])
            weight = float(duals @ demand)
            if positive.size and 0 < tau < weight:
                y = duals[positive] / weight
                low = max(low, cut_root(times, rep[positive], y, tau / weight, probe))
            if high - low <= TOL * high:
                assert best_x is not None
                return best_x, solve_s, lps
            # Newton from below; a geometric bisection step when the bracket did not halve.
            probe = low if high - low <= gap / 2 else float(np.sqrt(low * high))
            gap = high - low
        raise SolverError(
            self.name, f"no convergence in {MAX_LPS} LPs", problem.n_jobs, problem.n_types
        )

    def _solve_cvxpy(
        self, problem: Problem, throughput: np.ndarray, times: FinishTimes
    ) -> tuple[np.ndarray, float]:
        left = np.flatnonzero(times.left)
        x = cp.Variable(throughput.shape, nonneg=True)  # (n_jobs, n_types) time fractions
        rate = cp.sum(cp.multiply(throughput, x), axis=1)[left]  # steps/s of unfinished jobs
        finish = times.elapsed_s[left] + cp.multiply(times.steps[left], cp.inv_pos(rate))
        rho = cp.multiply(1.0 / times.denominator_s[left], finish)
        program = cp.Problem(cp.Minimize(cp.max(rho)), base_constraints(x, problem))
        solve_s = solve_cvxpy(program, self.name, problem, self.solver)
        return np.asarray(x.value), solve_s


class FinishTimeFairness(FinishTimeFairnessPerf):
    """Heterogeneity-agnostic finish-time fairness: every GPU type counts as the same."""

    name: ClassVar[str] = "finish_time_fairness"
    description: ClassVar[str] = (
        "finish-time fairness (Themis), heterogeneity-agnostic baseline: each job's rate taken "
        "as its mean over the types it can run on (needs steps)"
    )
    agnostic: ClassVar[bool] = True
