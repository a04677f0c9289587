"""The rate LP behind max-min fairness, water filling, makespan and finish-time fairness,
solved exactly at any size:

    maximize t <= t_max  s.t.  r_i(x) >= floor_i + weight_i t  (every row),  base constraints,

over rows that are jobs or groups of identical jobs, r_i(x) = sum_k a[i, k] x[i, k].

`rate_lp` builds it as sparse matrices for HiGHS; `solve_rate_lp` solves it. Up to
DIRECT_ROWS rows HiGHS gets the whole LP. Beyond, jobs with distinct throughputs make a large,
degenerate LP that a general solver takes seconds to minutes on (135 s at 100,000 jobs), yet
it has only a few coupling rows: one capacity row per GPU type. So it is solved through the
prices of those types (type_prices.py):

1. Estimate the prices and t: the same LP on a sample of the rows (one in SAMPLE_EVERY, with
   the capacities scaled to the sample's share of GPUs), solved the same way (recursively).
2. Fix every row whose cheapest response to those prices is clear by MARGIN (the prices or its
   demand would have to move that much, relatively, to change it). A fixed row's time
   fractions are affine in t, so together the fixed rows are two numbers per type: GPUs used
   at t = 0 and per unit of t, folded into the capacity rows.
3. Solve the LP of the remaining rows (those near a tie) with those capacity rows: HiGHS, small.
4. Certify: with that LP's prices and t, every fixed row's response must still be a cheapest
   one and feasible (type_prices.certify). Then the whole LP is solved: the fixed rows' duals
   (type_prices.response_duals) with the small LP's duals satisfy every dual constraint of
   the full LP with complementary slackness (a fixed row's capacity cost per unit of t equals
   its rate dual times its weight, so the t column's condition is the small LP's own). Rows
   that fail join the small LP, which is solved again.

Should that not settle within MAX_ROUNDS, or leave most rows in the small LP, or the sample
be infeasible, HiGHS gets the whole LP after all: the answer is exact either way.

No I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from slurm_hetsched.core.policies.constraints import base_rows
from slurm_hetsched.core.policies.lp import (
    INF,
    LpSolution,
    RowBlock,
    SparseLP,
    solve_highs,
    stack_rows,
)
from slurm_hetsched.core.policies.price_search import PriceEstimate, search_prices
from slurm_hetsched.core.policies.type_prices import Hulls, Responses, certify, response_duals
from slurm_hetsched.errors import SolverError

# Whole LPs up to this many rows go to HiGHS directly (its simplex takes ~10 ms at 500).
DIRECT_ROWS = 600
# Above this many rows, HiGHS's interior point method beats its simplex on a whole LP.
IPM_ROWS = 1000
# The price estimate comes from one row in this many.
SAMPLE_EVERY = 8
# From this many rows on, the search starts from a sample's prices (fewer passes over all).
SAMPLE_FROM_ROWS = 4096
# The sample's search stops at this box size, and the full search starts from this one.
SAMPLE_TOL = 1e-2
SAMPLE_RADIUS = 0.05
# The search from an earlier LP's prices (a hint) starts with a box of this size.
HINT_RADIUS = 0.1
# A row is fixed when its response would survive this relative change in prices, and a
# change of t by this share of t.
MARGIN = 0.002
# The status of an LP that the prices prove infeasible (it starts as HiGHS's does).
INFEASIBLE_FLOORS = "Infeasible: the rows without a weight cannot all keep their floors"
# A type with GPUs to spare gets this share of the highest price to choose responses with.
TOKEN_PRICE = 1e-3
# Rounds of "solve, certify, free the rows that fail" before the whole LP is solved instead.
MAX_ROUNDS = 6


@dataclass(frozen=True, slots=True)
class RateLP:
    """The LP `maximize t <= t_max s.t. r(x) >= floor + weight * t, base constraints`, and its
    layout.

    Columns are one x entry per runnable (row, type), then t. Rows are the n_rows rate rows,
    then the base rows (constraints.base_rows: n_rows row sums, then n_types capacities).
    """

    lp: SparseLP
    rows: np.ndarray  # (n_entries,) row of each x column
    cols: np.ndarray  # (n_entries,) GPU type of each x column
    shape: tuple[int, int]  # (n_rows, n_types)

    def unpack(self, solution: LpSolution) -> tuple[np.ndarray, float, np.ndarray]:
        """(x (n_rows, n_types), t, |dual| of each rate row (n_rows,))."""
        x = np.zeros(self.shape)
        x[self.rows, self.cols] = solution.columns[: len(self.rows)]
        t = float(solution.columns[len(self.rows)])
        return x, t, np.abs(solution.row_duals[: self.shape[0]])

    def prices(self, solution: LpSolution) -> np.ndarray:
        """(n_types,) |dual| of each capacity row: what one more GPU of the type is worth in t."""
        return np.asarray(np.abs(solution.row_duals[-self.shape[1] :]))


def rate_lp(
    a: np.ndarray,
    gpus_per_row: np.ndarray,
    capacity: np.ndarray,
    weight: np.ndarray,
    floor: np.ndarray,
    t_max: float = INF,
    t_usage: np.ndarray | None = None,
) -> RateLP:
    """Build the rate LP over rows that are jobs or groups of identical jobs.

    Args:
        a: (n_rows, n_types) normalized rate per unit time fraction; 0 = cannot run.
        gpus_per_row: (n_rows,) GPUs used per unit time fraction (num_gpus x group size).
        capacity: (n_types,) GPUs per type.
        weight: (n_rows,) >= 0; a row with weight 0 only keeps its floor.
        floor: (n_rows,) normalized rate each row must keep (may be negative).
        t_max: upper bound on t.
        t_usage: (n_types,) GPUs used per unit of t outside these rows (the fixed rows of
            solve_rate_lp), added to the capacity rows; none by default.
    """
    n_rows, n_types = a.shape
    rows, cols = np.nonzero(a > 0)
    n_entries = len(rows)
    entry = np.arange(n_entries)
    rate = sp.hstack(
        [
            sp.csr_matrix((a[rows, cols], (rows, entry)), shape=(n_rows, n_entries)),
            sp.csr_matrix(-np.asarray(weight, dtype=float).reshape(-1, 1)),
        ],
        format="csr",
    )
    base = base_rows(rows, cols, n_rows, gpus_per_row, capacity)
    t_column = np.zeros((base.n_rows, 1))
    if t_usage is not None:
        t_column[n_rows:, 0] = t_usage
    base = RowBlock(
        sp.hstack([base.matrix, sp.csr_matrix(t_column)], format="csr"), base.lower, base.upper
    )
    lp = SparseLP(
        cost=np.r_[np.zeros(n_entries), 1.0],
        col_lower=np.r_[np.zeros(n_entries), -INF],
        col_upper=np.r_[np.ones(n_entries), t_max],
        rows=stack_rows(
            [RowBlock(rate, np.asarray(floor, dtype=float), np.full(n_rows, INF)), base]
        ),
        maximize=True,
    )
    return RateLP(lp=lp, rows=rows, cols=cols, shape=(n_rows, n_types))


@dataclass(frozen=True, slots=True)
class RateSolution:
    """An optimal solution of the rate LP.

    Attributes:
        x: (n_rows, n_types) time fractions.
        t: optimal t.
        dual: (n_rows,) magnitude of each rate row's dual, from one optimal dual solution.
        prices: (n_types,) magnitude of each capacity row's dual, from the same.
        solve_s: HiGHS's seconds, summed over its solves.
        lps: HiGHS solves.
        method: how it was solved: "whole" (HiGHS on the whole LP), "prices" (through the
            types' prices, certified) or "no prices" (no type scarce: t is a row's ceiling).
        basis: the whole LP's optimal basis where HiGHS solved it whole (else None), to
            warm-start the next LP of the same shape.
    """

    x: np.ndarray
    t: float
    dual: np.ndarray
    prices: np.ndarray
    solve_s: float
    lps: int
    method: str
    basis: object = None


@dataclass(frozen=True, slots=True)
class RateRows:
    """The data of a rate LP (see rate_lp for each array)."""

    a: np.ndarray
    gpus: np.ndarray
    capacity: np.ndarray
    weight: np.ndarray
    floor: np.ndarray
    t_max: float = INF

    @property
    def n_rows(self) -> int:
        return int(self.a.shape[0])

    def take(self, rows: np.ndarray, capacity: np.ndarray) -> RateRows:
        return RateRows(
            self.a[rows], self.gpus[rows], capacity, self.weight[rows], self.floor[rows], self.t_max
        )


def solve_rate_lp(
    data: RateRows,
    *,
    policy: str,
    n_jobs: int,
    warm_start: object = None,
    prices: np.ndarray | None = None,
    direct: bool = False,
) -> RateSolution:
    """Solve the rate LP exactly (see the module docstring).

    Args:
        data: the LP.
        policy, n_jobs: for error messages.
        warm_start: RateSolution.basis of an earlier LP of the same shape (whole LPs only).
        prices: RateSolution.prices of an earlier, similar LP: the price search starts there
            (large LPs only).
        direct: always give HiGHS the whole LP.

    Raises:
        SolverError: the LP is infeasible or unbounded, or HiGHS fails.
    """
    if direct or data.n_rows <= DIRECT_ROWS:
        return _solve_whole(data, policy, n_jobs, warm_start)
    started = time.perf_counter()
    try:
        solution = _solve_by_prices(data, policy, n_jobs, prices)
    except SolverError as error:
        if error.status == INFEASIBLE_FLOORS:
            raise  # proved by the prices (_refuse_if_infeasible)
        solution = None
    if solution is not None:
        return solution
    whole = _solve_whole(data, policy, n_jobs, None)
    return replace(whole, solve_s=time.perf_counter() - started)


def _solve_whole(data: RateRows, policy: str, n_jobs: int, warm_start: object) -> RateSolution:
    lp = rate_lp(data.a, data.gpus, data.capacity, data.weight, data.floor, data.t_max)
    solution = solve_highs(
        lp.lp,
        policy=policy,
        n_jobs=n_jobs,
        n_types=lp.shape[1],
        warm_start=warm_start,
        method="ipm" if data.n_rows > IPM_ROWS and warm_start is None else "simplex",
    )
    x, t, dual = lp.unpack(solution)
    return RateSolution(
        x, t, dual, lp.prices(solution), solution.solve_s, 1, "whole", solution.basis
    )


def _solve_by_prices(
    data: RateRows,
    policy: str,
    n_jobs: int,
    hint: np.ndarray | None = None,
    lift: bool = True,
) -> RateSolution | None:
    """Steps 1-4 of the module docstring; None where the whole LP should be solved instead.
    `lift`: where no type is scarce, look for the x by lifting (see _without_prices)."""
    n_rows, n_types = data.a.shape
    ceiling = data.a.max(axis=1, initial=0.0)
    growing = data.weight > 0
    if not growing.any() or np.any(data.floor[~growing] > ceiling[~growing]):
        return None
    t_cap = min(
        data.t_max,
        float(np.min((ceiling[growing] - data.floor[growing]) / data.weight[growing])),
    )

    def refuse(prices: np.ndarray) -> None:
        _refuse_if_infeasible(data, prices, policy, n_jobs)

    estimate = _estimate(data, t_cap, hint, refuse)
    refuse(estimate.prices)
    if estimate.prices.max() <= 1e-9 * estimate.value / data.capacity.min():
        return _without_prices(data, t_cap, policy, n_jobs, lift)
    # The dual's flat stretch of t at the prices found; responses at prices that break ties.
    q = data.gpus[:, None] * estimate.prices[None, :]
    _, t_start, t_end, _ = Hulls.walk(data.a, q, rivals=False).dual(data.floor, data.weight, t_cap)
    q = data.gpus[:, None] * _breaking_ties(estimate.prices, data.capacity)[None, :]
    hulls = Hulls.walk(data.a, q)
    t_guess = hulls.fitting_t(data.floor, data.weight, data.gpus, data.capacity, (t_start, t_end))
    demand = data.floor + data.weight * t_guess
    responses = hulls.responses_at(demand, data.floor, data.weight)
    free = (
        (responses.margin < MARGIN)
        | (responses.t_room < MARGIN * max(abs(t_guess), abs(t_cap), 1e-12))
        | ~responses.reachable
    )
    lps, solve_s = 0, 0.0
    for _ in range(MAX_ROUNDS):
        if free.sum() > n_rows // 2:
            return None
        fixed = np.nonzero(~free)[0]
        kept = responses.take(fixed)
        at_zero, per_t = kept.usage(data.gpus[fixed], n_types)
        small_rows = np.nonzero(free)[0]
        small = data.take(small_rows, data.capacity - at_zero)
        lp = rate_lp(small.a, small.gpus, small.capacity, small.weight, small.floor, t_cap, per_t)
        solution = solve_highs(lp.lp, policy=policy, n_jobs=n_jobs, n_types=n_types)
        lps, solve_s = lps + 1, solve_s + solution.solve_s
        x_small, t, dual_small = lp.unpack(solution)
        prices = lp.prices(solution)
        q = data.gpus[:, None] * prices[None, :]
        demand = data.floor + data.weight * t
        passed = certify(kept, data.a[fixed], q[fixed], demand[fixed], t)
        if passed.all():
            x = np.zeros((n_rows, n_types))
            x[small_rows] = x_small
            x[fixed] = kept.x(t, n_types)
            dual = np.zeros(n_rows)
            dual[small_rows] = dual_small
            dual[fixed] = np.abs(response_duals(kept, data.a[fixed], q[fixed])[0])
            return RateSolution(x, t, dual, prices, solve_s, lps, "prices")
        free[fixed[~passed]] = True
    return None


def _breaking_ties(prices: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Prices for choosing responses: a type with price 0 (GPUs to spare) gets a token price,
    lower where the type has more GPUs. Rows that could use any of several such types for
    free would otherwise all tie, and all go to the small LP; with the token prices they
    spread by capacity and are fixed. The certificate still uses the LP's own prices, under
    which such a response costs nothing and passes; should the spread not fit, the small LP
    says so and the rows are re-chosen (or HiGHS gets the whole LP)."""
    spare = prices <= 1e-9 * prices.max(initial=0.0)
    if not spare.any() or spare.all():
        return prices
    token = (
        TOKEN_PRICE * float(prices.max()) * float(capacity.mean()) / np.maximum(capacity, 1e-300)
    )
    return np.where(spare, token, prices)


def _refuse_if_infeasible(data: RateRows, prices: np.ndarray, policy: str, n_jobs: int) -> None:
    """Raise SolverError(INFEASIBLE_FLOORS) if these prices prove the LP infeasible.

    t is unbounded below, so rows with a weight can always drop their demand to 0: the LP is
    infeasible exactly when the rows without one cannot all keep their floors. Prices p prove
    that when those rows' cheapest responses cost more than the GPUs are worth: any x keeping
    the floors pays at least that, and no x within the capacities pays more than p @ capacity.
    On an infeasible LP the price search runs off along such a ray."""
    fixed = data.weight <= 0
    if not fixed.any() or float(prices.max(initial=0.0)) <= 0:
        return
    q = data.gpus[fixed, None] * prices[None, :]
    hulls = Hulls.walk(data.a[fixed], q, rivals=False)
    floor = data.floor[fixed]
    ceiling = data.a[fixed].max(axis=1, initial=0.0)
    if np.any(floor > ceiling * (1 + 1e-9)):
        raise SolverError(policy, INFEASIBLE_FLOORS, n_jobs, data.a.shape[1])
    _, cost = hulls.spend(np.minimum(floor, ceiling))
    worth = float(prices @ data.capacity)
    if float(cost.sum()) > worth * (1 + 1e-7) + 1e-12:
        raise SolverError(policy, INFEASIBLE_FLOORS, n_jobs, data.a.shape[1])


def _estimate(
    data: RateRows,
    t_cap: float,
    hint: np.ndarray | None,
    on_growth: Callable[[np.ndarray], None],
) -> PriceEstimate:
    """Step 1: the prices minimizing the dual; from the hint, or a sample's prices where rows
    are many, or every type worth the same."""
    n_rows = data.n_rows
    start, radius = None, 0.5
    if hint is not None and float(np.max(hint, initial=0.0)) > 0:
        start, radius = np.asarray(hint, dtype=float), HINT_RADIUS
    elif n_rows >= SAMPLE_FROM_ROWS:
        rows = np.random.default_rng(0).choice(n_rows, n_rows // SAMPLE_EVERY, replace=False)
        share = float(data.gpus[rows].sum() / data.gpus.sum())
        rough = search_prices(
            data.a[rows],
            data.gpus[rows],
            data.capacity * share,
            data.weight[rows],
            data.floor[rows],
            t_cap,
            tolerance=SAMPLE_TOL,
        )
        start, radius = rough.prices * share, SAMPLE_RADIUS
    return search_prices(
        data.a,
        data.gpus,
        data.capacity,
        data.weight,
        data.floor,
        t_cap,
        start,
        radius,
        on_growth=on_growth,
    )


def _without_prices(
    data: RateRows, t_cap: float, policy: str, n_jobs: int, lift: bool
) -> RateSolution | None:
    """The LP when no GPU type is scarce: t is the lowest ceiling of a growing row (t_cap),
    and an x must reach every demand there. It comes from another rate LP that lifts each row
    from that demand towards its ceiling, all by the same share s of the room between them
    (rows already at their ceiling stay): s >= 0 means the demands fit. That LP has scarce
    types unless every row fits at its ceiling (s = 1), where each row takes its best type.
    None where neither works out."""
    n_types = data.a.shape[1]
    demand = data.floor + data.weight * t_cap
    ceiling = data.a.max(axis=1)
    room = np.maximum(ceiling - demand, 0.0)
    room = np.where(room > 1e-9 * np.maximum(ceiling, 1e-300), room, 0.0)
    if lift and room.any():
        lifted = RateRows(data.a, data.gpus, data.capacity, room, demand, 1.0)
        solution = _solve_by_prices(lifted, policy, n_jobs, lift=False)
        if solution is None or solution.t < -1e-9:
            return None
        x = solution.x
    else:
        x, _ = Hulls.walk(data.a, np.zeros_like(data.a), rivals=False).spend(demand)
        if np.any(data.gpus @ x > data.capacity * (1 + 1e-12)):
            return None
    # The dual: the growing rows whose ceiling sets t_cap carry t's (sum of dual x weight = 1).
    at_top = (data.weight > 0) & (demand >= ceiling * (1 - 1e-9))
    dual = np.where(at_top, 1.0, 0.0)
    dual /= max(float(data.weight @ dual), 1e-300)
    return RateSolution(x, t_cap, dual, np.zeros(n_types), 0.0, 0, "no prices")


__all__ = ["RateLP", "RateRows", "RateSolution", "Responses", "rate_lp", "solve_rate_lp"]
