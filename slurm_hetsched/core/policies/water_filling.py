"""Hierarchical max-min fairness by water filling (Gavel section 4.3 and appendix A.1).

Plain max-min fairness stops at the smallest rate; water filling keeps raising every job that
is not a bottleneck until each one is (the result is Pareto efficient, and the vector of
rates is unique: the weighted leximin optimum). Two levels, as in Gavel and Hadoop: Slurm
accounts share the cluster in proportion to their weights, and inside an account jobs share
either fairly (by job weight) or FIFO (the earliest job takes the whole account weight until
it cannot grow, then the next one).

The water rises along a path. Every unfrozen job's rate grows at its weight at this level
(Gavel's "- t_m" increments over what earlier levels gave it), and a job stops growing, is
frozen, when it cannot grow any further. Its account then redistributes its weight. A job
stops for one of two reasons:
- it reaches its ceiling (all of its time on its best type). Where nothing else stops the
  water, these events follow from arithmetic alone. `Hierarchy.path` computes the whole
  piecewise-linear path of demands they produce, per account, with no solver;
- the cluster cannot serve more: a shared bottleneck, found by LPs.

Gavel solves one LP per level and one MILP to find the bottlenecks (160 s at 2048 jobs). With
jobs of distinct throughputs nearly every level ends at a ceiling event, so here the LPs only
search the path for the segment where demands stop being feasible. Each probe is an LP at a
breakpoint along the path's local direction (`_rise`); its optimum says whether the demands
there are feasible and estimates where they stop being so, which places the next probe
(Newton-like, with bisection when that does not halve the bracket). The LP along the segment
found,

    maximize s <= segment length  s.t.  r_m(x) >= demand_m(start) + direction_m s  (every m),
                                        base constraints,

gives the exact level and its dual values. Bottlenecks come from those duals, with no MILP:
if job m's row has a positive dual in an optimal dual solution, complementary slackness
makes it tight in every optimal primal solution, so m cannot grow while the others keep the
level, and m is frozen. A bottleneck with dual 0 (degenerate vertex) is simply found in a
later round, which gains nothing and freezes it. Every round freezes at least one job: the
duals of the growing rows sum to 1 (the dual constraint of s), or s reaches the segment end,
where a job hits its ceiling. tests/unit/core check the result against the reference
formulation (an exact test per job, and Gavel's MILP).

`max_min_fairness_water_filling` is the heterogeneity-agnostic variant. No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import cvxpy as cp
import numpy as np

from slurm_hetsched.core.model import AccountPolicy, Allocation, Problem
from slurm_hetsched.core.policies.base import (
    base_constraints,
    empty_allocation,
    normalized_rate_matrix,
    solve_cvxpy,
)
from slurm_hetsched.core.policies.lp import INF, solve_highs
from slurm_hetsched.core.policies.max_min_fairness import (
    check_backend,
    max_min_allocation,
    rate_lp,
)
from slurm_hetsched.core.policies.options import NO_OPTIONS, PolicyOption
from slurm_hetsched.core.policies.symmetry import JobGroups, group_jobs
from slurm_hetsched.errors import SolverError

# A rate-row dual counts as positive above this fraction of the largest active dual; exact
# simplex duals of rows that are not tight are 0 up to rounding (~1e-12 relative).
DUAL_TOL = 1e-6
# A job whose floor is within this relative distance of its ceiling cannot grow.
CEILING_TOL = 1e-9
# Floors are kept this much (relative) below what was reached, so that solver rounding never
# makes the next LP infeasible.
FLOOR_SLACK = 1e-9
# A probe counts as feasible down to this shortfall (solver tolerances are ~1e-9 here).
PROBE_TOL = 1e-9
# Path breakpoints closer than this (relative) are merged: a segment that short carries no
# information and would make its direction ill-conditioned.
TIME_TOL = 1e-12


@dataclass(frozen=True, slots=True)
class Path:
    """The demands of the unfrozen jobs as the water rises, if only ceilings stopped it.

    Demands are piecewise linear in the path parameter T (T = 0: the current floors); every
    breakpoint is a job reaching its ceiling. Per fair account, job m's demand is
    min(ceiling_m, floor_m + job_weight_m * phi_a(T)); per FIFO account, the job at the head
    grows at the account weight from its start until its ceiling.

    Attributes:
        times: (n_breakpoints,) sorted, from 0 to the last ceiling event.
    """

    times: np.ndarray
    floor: np.ndarray  # (n_jobs,)
    ceiling: np.ndarray  # (n_jobs,)
    # Per fair account: (member job indices, their job weights, T at its breakpoints, phi there).
    fair_curves: tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], ...]
    fifo_jobs: np.ndarray  # (n_fifo,) job indices
    fifo_start: np.ndarray  # (n_fifo,) T at which each becomes the head
    fifo_rate: np.ndarray  # (n_fifo,) its account's weight

    def demand(self, t: float) -> np.ndarray:
        """(n_jobs,) every job's demand at path parameter t (frozen jobs: their floor)."""
        demand = self.floor.copy()
        for members, job_weight, curve_t, curve_phi in self.fair_curves:
            phi = np.interp(t, curve_t, curve_phi)
            demand[members] = self.floor[members] + job_weight * phi
        grown = self.fifo_rate * np.maximum(t - self.fifo_start, 0.0)
        demand[self.fifo_jobs] = self.floor[self.fifo_jobs] + grown
        return np.asarray(np.minimum(demand, np.maximum(self.ceiling, self.floor)))

    def direction(self, start: int, end: int) -> np.ndarray:
        """(n_jobs,) growth rates on [times[start], times[end]], which must be one segment
        (demands are affine there)."""
        span = self.times[end] - self.times[start]
        return np.asarray((self.demand(self.times[end]) - self.demand(self.times[start])) / span)


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Accounts and their jobs: who grows how fast at each level.

    Attributes:
        account_weight: (n_accounts,) weight of each account.
        fifo: (n_accounts,) True where the account serves its jobs FIFO.
        members: per account, its job indices (FIFO accounts: in (arrival_s, job id) order).
        job_weight: (n_jobs,) the problem's job weights (used inside fair accounts).
        of_job: (n_jobs,) account index of each job.
        fifo_rank: (n_jobs,) position of each job in (arrival_s, job id) order.
    """

    account_weight: np.ndarray
    fifo: np.ndarray
    members: tuple[np.ndarray, ...]
    job_weight: np.ndarray
    of_job: np.ndarray
    fifo_rank: np.ndarray = field(repr=False)

    @classmethod
    def of(cls, problem: Problem) -> Hierarchy:
        names, of_job = np.unique(np.array(problem.job_accounts, dtype=str), return_inverse=True)
        of_job = of_job.reshape(-1)
        accounts = [problem.account(str(name)) for name in names]
        order = np.lexsort((np.array(problem.job_ids, dtype=str), problem.arrival_s))
        rank = np.empty(problem.n_jobs, dtype=np.int64)
        rank[order] = np.arange(problem.n_jobs)
        weights = np.array([a.weight for a in accounts])
        return cls(
            account_weight=weights / weights.sum(),  # only ratios matter; keeps duals O(1)
            fifo=np.array([a.policy is AccountPolicy.FIFO for a in accounts]),
            members=tuple(order[of_job[order] == a] for a in range(len(accounts))),
            job_weight=np.asarray(problem.weight, dtype=float),
            of_job=of_job,
            fifo_rank=rank,
        )

    def group_features(self) -> np.ndarray:
        """(n_jobs, 3) what sets jobs apart in the hierarchy (for symmetry.group_jobs)."""
        rank = np.where(self.fifo[self.of_job], self.fifo_rank, -1)
        return np.column_stack([self.of_job, self.job_weight, rank]).astype(float)

    def path(self, floor: np.ndarray, frozen: np.ndarray, ceiling: np.ndarray) -> Path:
        """The ceiling-event path from the current floors (see Path)."""
        fair_curves = []
        fifo_jobs, fifo_start, fifo_rate = [], [], []
        events = [np.zeros(1)]
        for account, members in enumerate(self.members):
            members = members[~frozen[members]]
            if members.size == 0:
                continue
            weight = self.account_weight[account]
            room = np.maximum(ceiling[members] - floor[members], 0.0)
            if self.fifo[account]:
                # The head grows at the account weight; the next starts when it saturates.
                ends = np.cumsum(room / weight)
                fifo_jobs.append(members)
                fifo_start.append(ends - room / weight)
                fifo_rate.append(np.full(members.size, weight))
                events.append(ends)
                continue
            # Fair: phi, the growth per unit job weight, rises at weight / (job weight still
            # growing); job m saturates when phi reaches room_m / job_weight_m.
            job_weight = self.job_weight[members]
            need = room / job_weight
            order = np.argsort(need, kind="stable")
            growing = np.cumsum(job_weight[order][::-1])[::-1]  # before each saturation
            curve_phi = np.r_[0.0, need[order]]
            curve_t = np.r_[0.0, np.cumsum(np.diff(curve_phi) * growing / weight)]
            fair_curves.append((members, job_weight, curve_t, curve_phi))
            events.append(curve_t[1:])
        times = np.unique(np.concatenate(events))
        keep = np.r_[True, np.diff(times) > TIME_TOL * max(float(times[-1]), 1.0)]
        return Path(
            times=times[keep],
            floor=floor,
            ceiling=ceiling,
            fair_curves=tuple(fair_curves),
            fifo_jobs=np.concatenate(fifo_jobs) if fifo_jobs else np.zeros(0, dtype=np.int64),
            fifo_start=np.concatenate(fifo_start) if fifo_start else np.zeros(0),
            fifo_rate=np.concatenate(fifo_rate) if fifo_rate else np.zeros(0),
        )


@dataclass(frozen=True, slots=True)
class Level:
    """One LP's result, per job.

    Attributes:
        x: (n_jobs, n_types) time fractions.
        t: the LP's optimal t.
        dual: (n_jobs,) magnitude of the dual of each job's rate row.
        solve_s: solver-reported seconds.
    """

    x: np.ndarray
    t: float
    dual: np.ndarray
    solve_s: float


class LevelSolver(Protocol):
    """Solves `maximize t <= t_max s.t. r(x) >= floor + weight * t, base constraints`.

    Returns None if that LP is infeasible, which only happens when the rows with weight 0
    cannot all keep their floors; any other failure raises SolverError.
    """

    def solve(self, floor: np.ndarray, weight: np.ndarray, t_max: float = INF) -> Level | None: ...


def _infeasible(error: SolverError) -> bool:
    return error.status.lower().startswith("infeasible")


class HighsLevels:
    """The LPs over groups of identical jobs, warm-started, solved by HiGHS directly."""

    def __init__(self, problem: Problem, a: np.ndarray, groups: JobGroups, policy: str) -> None:
        self._problem = problem
        self._groups = groups
        self._rep = groups.representative
        self._a = a[self._rep]
        self._gpus = problem.num_gpus[self._rep] * groups.size
        self._policy = policy
        self._basis: Any = None

    def solve(self, floor: np.ndarray, weight: np.ndarray, t_max: float = INF) -> Level | None:
        lp = rate_lp(
            self._a, self._gpus, self._problem.capacity, weight[self._rep], floor[self._rep], t_max
        )
        try:
            solution = solve_highs(
                lp.lp,
                policy=self._policy,
                n_jobs=self._problem.n_jobs,
                n_types=self._problem.n_types,
                warm_start=self._basis,
            )
        except SolverError as error:
            if _infeasible(error):
                return None
            raise
        self._basis = solution.basis
        x, t, dual = lp.unpack(solution)
        return Level(self._groups.expand(x), t, self._groups.expand(dual), solution.solve_s)


class CvxpyLevels:
    """The same LPs in plain cvxpy, one row per job. Floors, weights and the bound on t are
    parameters (DPP), so each program is compiled once and re-solved."""

    def __init__(self, problem: Problem, a: np.ndarray, policy: str, solver: str) -> None:
        self._problem = problem
        self._policy = policy
        self._solver = solver
        self._x = cp.Variable(a.shape, nonneg=True)  # (n_jobs, n_types) time fractions
        self._t = cp.Variable()
        self._floor = cp.Parameter(problem.n_jobs)
        self._weight = cp.Parameter(problem.n_jobs, nonneg=True)
        self._t_max = cp.Parameter()
        rate = cp.sum(cp.multiply(a, self._x), axis=1)  # (n_jobs,) normalized rates
        self._rate_rows = rate >= self._floor + cp.multiply(self._weight, self._t)
        rows = [self._rate_rows, *base_constraints(self._x, problem)]
        self._open = cp.Problem(cp.Maximize(self._t), rows)
        self._bounded = cp.Problem(cp.Maximize(self._t), [*rows, self._t <= self._t_max])

    def solve(self, floor: np.ndarray, weight: np.ndarray, t_max: float = INF) -> Level | None:
        self._floor.value = floor
        self._weight.value = weight
        program = self._open
        if np.isfinite(t_max):
            self._t_max.value = t_max
            program = self._bounded
        try:
            solve_s = solve_cvxpy(program, self._policy, self._problem, self._solver)
        except SolverError as error:
            if _infeasible(error):
                return None
            raise
        return Level(
            x=np.asarray(self._x.value),
            t=float(self._t.value),
            dual=np.abs(np.asarray(self._rate_rows.dual_value, dtype=float)),
            solve_s=solve_s,
        )


def water_fill(
    a: np.ndarray, hierarchy: Hierarchy, levels: LevelSolver, policy: str
) -> tuple[np.ndarray, float, int]:
    """Raise the water until every job is frozen (see the module docstring).

    Args:
        a: (n_jobs, n_types) normalized rate per unit time fraction; 0 = cannot run.
        hierarchy: accounts and weights.
        levels: the LP solver.
        policy: for error messages.

    Returns:
        (x (n_jobs, n_types) of the last LP, solver seconds summed, number of LPs solved).

    Raises:
        SolverError: an LP failed, or (numerically) a round froze no job.
    """
    n_jobs, n_types = a.shape
    ceiling = a.max(axis=1)  # (n_jobs,) all of a job's time on its best type
    floor = np.zeros(n_jobs)
    frozen = np.zeros(n_jobs, dtype=bool)
    solve_s, count = 0.0, 0

    def run(floor_: np.ndarray, weight: np.ndarray, t_max: float = INF) -> Level | None:
        nonlocal count, solve_s
        level = levels.solve(floor_, weight, t_max)
        count += 1
        solve_s += 0.0 if level is None else level.solve_s
        return level

    while not frozen.all():
        active = ~frozen
        path = hierarchy.path(floor, frozen, ceiling)
        level, top, at_breakpoint = _rise(path, active, run, policy, a.shape)
        reached = np.sum(a * level.x, axis=1)
        floor = np.where(active, np.minimum(path.demand(top), reached) * (1 - FLOOR_SLACK), floor)
        at_ceiling = active & (floor >= ceiling * (1 - CEILING_TOL - FLOOR_SLACK))
        newly = at_ceiling
        if not at_breakpoint:
            largest = level.dual[active].max(initial=0.0)
            newly = newly | (active & (level.dual > DUAL_TOL * largest) & (largest > 0))
        if not newly.any():
            raise SolverError(policy, "water filling found no bottleneck", n_jobs, n_types)
        frozen |= newly
    return level.x, solve_s, count


Runner = Callable[[np.ndarray, np.ndarray, float], "Level | None"]


def _rise(
    path: Path, active: np.ndarray, run: Runner, policy: str, shape: tuple[int, int]
) -> tuple[Level, float, bool]:
    """One round: how far along `path` the water rises.

    Returns:
        (the LP solved at the stop, the path parameter of the stop, True if the stop is a
        breakpoint of the path (a ceiling event) rather than a shared bottleneck).
    """

    def feasible(level: Level | None) -> Level:
        if level is None:  # the demands at a feasible point cannot be infeasible
            raise SolverError(policy, "infeasible water level", *shape)
        return level

    times = path.times
    last = len(times) - 1
    if last == 0:  # every unfrozen job is at its ceiling already
        return feasible(run(path.demand(0.0), active.astype(float), INF)), 0.0, True

    def probe(b: int) -> Level | None:
        """The LP at breakpoint b along the path's direction after b (before, at the end):
        t >= 0 iff the demands at b are feasible, and times[b] + t estimates where the water
        stops (exactly, within the segment). None: infeasible even with the growing jobs held
        back (the jobs already at their ceilings do not fit)."""
        s, e = (b, b + 1) if b < last else (b - 1, b)
        return run(path.demand(times[b]), path.direction(s, e), INF)

    top = probe(last)
    if top is not None and top.t >= -PROBE_TOL:
        return top, float(times[last]), True
    # Demands are feasible at times[start], not at times[end]. Probe at the breakpoint next to
    # the last estimate (Newton-like on a piecewise-linear path) while that halves the
    # bracket; bisect otherwise.
    start, end, at_start = 0, last, None
    estimate = times[last] + top.t if top is not None else times[last // 2]
    while end - start > 1:
        width = end - start
        middle = int(np.searchsorted(times, estimate))
        if not start < middle < end:
            middle = (start + end) // 2
        probed = probe(middle)
        if probed is not None and probed.t >= -PROBE_TOL:
            start, at_start = middle, probed
        else:
            end = middle
        estimate = times[(start + end) // 2]
        if probed is not None and end - start <= width // 2:
            estimate = times[middle] + probed.t
    span = times[end] - times[start]
    # The probe at `start` already is the LP along this segment; at 0 it was never probed.
    level = at_start or feasible(run(path.demand(times[start]), path.direction(start, end), span))
    if level.t >= span * (1 - 1e-12):
        return level, float(times[end]), True
    return level, float(times[start] + max(level.t, 0.0)), False


class MaxMinFairnessWaterFillingPerf:
    """Hierarchical (account, then job) max-min fairness by water filling, heterogeneity-aware."""

    name: ClassVar[str] = "max_min_fairness_water_filling_perf"
    description: ClassVar[str] = (
        "max-min fairness by water filling: raises every job that is not a bottleneck; "
        "accounts share by weight, fair or FIFO inside (Gavel hierarchical)"
    )
    options: ClassVar[Mapping[str, PolicyOption]] = NO_OPTIONS
    agnostic: ClassVar[bool] = False

    def __init__(self, backend: str = "highs", solver: str = "HIGHS") -> None:
        """Args: backend "highs" (fast, grouped) or "cvxpy"; solver: the cvxpy solver name.

        The cvxpy backend defaults to HiGHS too: bottleneck detection reads dual values, and a
        simplex solver's are exact where an interior-point solver's are only near zero.
        """
        check_backend(backend)
        self.backend = backend
        self.solver = solver

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring. Raises SolverError if an LP is not optimal."""
        if problem.n_jobs == 0:
            return empty_allocation(problem, self.name)
        a = normalized_rate_matrix(problem, self.agnostic)
        hierarchy = Hierarchy.of(problem)
        levels: LevelSolver
        if self.backend == "cvxpy":
            levels = CvxpyLevels(problem, a, self.name, self.solver)
        else:
            features = np.column_stack([a, problem.num_gpus, hierarchy.group_features()])
            levels = HighsLevels(problem, a, group_jobs(features), self.name)
        x, solve_s, solves = water_fill(a, hierarchy, levels, self.name)
        return max_min_allocation(problem, x, solve_s, self.name, self.agnostic, solves)


class MaxMinFairnessWaterFilling(MaxMinFairnessWaterFillingPerf):
    """Water filling, heterogeneity-agnostic: every GPU type counts as the same."""

    name: ClassVar[str] = "max_min_fairness_water_filling"
    description: ClassVar[str] = (
        "max-min fairness by water filling, heterogeneity-agnostic baseline (every throughput "
        "taken as 1 where the job can run)"
    )
    agnostic: ClassVar[bool] = True
