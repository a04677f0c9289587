"""The rate LP solved through the prices of the GPU types (steps 1-4 of rate_lp.py's
docstring): the price search, the rows fixed to their cheapest responses, the small LP of the
rest, the certificate; and the cases around it (no type scarce, an infeasible LP).

No I/O.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from slurm_hetsched.core.policies.lp import solve_highs
from slurm_hetsched.core.policies.price_search import PriceEstimate, search_prices
from slurm_hetsched.core.policies.rate_lp_model import RateRows, RateSolution, rate_lp
from slurm_hetsched.core.policies.type_prices import Hulls, certify, response_duals
from slurm_hetsched.errors import SolverError

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
# The small LP goes to HiGHS's interior point method above this many rows.
SMALL_IPM_ROWS = 1000
# Rounds of "solve, certify, free the rows that fail" before the whole LP is solved instead.
MAX_ROUNDS = 6


def solve_by_prices(
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
    # Responses at prices that break ties, t from the dual's flat stretch at the prices found.
    q = data.gpus[:, None] * _breaking_ties(estimate.prices, data.capacity)[None, :]
    hulls = Hulls.walk(data.a, q)
    t_guess = hulls.fitting_t(data.floor, data.weight, data.gpus, data.capacity, estimate.stretch)
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
        # Interior point (then crossover to a vertex, whose duals the certificate reads) for
        # large small LPs: twice as fast on these degenerate ones.
        method = "ipm" if len(small_rows) > SMALL_IPM_ROWS else "simplex"
        solution = solve_highs(lp.lp, policy=policy, n_jobs=n_jobs, n_types=n_types, method=method)
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
        solution = solve_by_prices(lifted, policy, n_jobs, lift=False)
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
