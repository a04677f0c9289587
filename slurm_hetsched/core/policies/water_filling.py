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

Here: the rise (`water_fill`, `_rise`) and the policies. The accounts and the ceiling path
are in water_path.py, the LP of one level (HiGHS or cvxpy) in water_levels.py.

`max_min_fairness_water_filling` is the heterogeneity-agnostic variant. No I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, Problem
from slurm_hetsched.core.policies.base import SolverPolicy
from slurm_hetsched.core.policies.lp import INF
from slurm_hetsched.core.policies.max_min_fairness import max_min_allocation
from slurm_hetsched.core.policies.rates import normalized_rate_matrix
from slurm_hetsched.core.policies.symmetry import group_jobs
from slurm_hetsched.core.policies.water_levels import CvxpyLevels, HighsLevels, Level, LevelSolver
from slurm_hetsched.core.policies.water_path import TIME_TOL, Hierarchy, Path
from slurm_hetsched.errors import SolverError

__all__ = [
    "CEILING_TOL",
    "DUAL_TOL",
    "FLOOR_SLACK",
    "PROBE_TOL",
    "TIME_TOL",
    "CvxpyLevels",
    "Hierarchy",
    "HighsLevels",
    "Level",
    "LevelSolver",
    "MaxMinFairnessWaterFilling",
    "MaxMinFairnessWaterFillingPerf",
    "Path",
    "water_fill",
]

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


class MaxMinFairnessWaterFillingPerf(SolverPolicy):
    """Hierarchical (account, then job) max-min fairness by water filling, heterogeneity-aware.

    Constructor (base.SolverPolicy): backend "highs" (fast, grouped) or "cvxpy"; solver: the
    cvxpy solver name. The cvxpy backend defaults to HiGHS too: bottleneck detection reads
    dual values, and a simplex solver's are exact where an interior-point solver's are only
    near zero.
    """

    name: ClassVar[str] = "max_min_fairness_water_filling_perf"
    description: ClassVar[str] = (
        "max-min fairness by water filling: raises every job that is not a bottleneck; "
        "accounts share by weight, fair or FIFO inside (Gavel hierarchical)"
    )
    agnostic: ClassVar[bool] = False
    default_solver: ClassVar[str] = "HIGHS"

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring. Raises SolverError if an LP is not optimal."""
        if (empty := self._prologue(problem)) is not None:
            return empty
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
