"""The rate LP behind max-min fairness, water filling, makespan and finish-time fairness,
solved exactly at any size:

    maximize t <= t_max  s.t.  r_i(x) >= floor_i + weight_i t  (every row),  base constraints,

over rows that are jobs or groups of identical jobs, r_i(x) = sum_k a[i, k] x[i, k].

`rate_lp` (rate_lp_model.py) builds it as sparse matrices for HiGHS; `solve_rate_lp` solves
it. Up to DIRECT_ROWS rows HiGHS gets the whole LP. Beyond, jobs with distinct throughputs
make a large, degenerate LP that a general solver takes seconds to minutes on (135 s at
100,000 jobs), yet it has only a few coupling rows: one capacity row per GPU type. So it is
solved through the prices of those types (by_prices.py, with type_prices.py and
price_search.py):

1. Prices: minimize the LP's Lagrangian dual over the types' prices (price_search.py); from
   SAMPLE_FROM_ROWS rows on, starting from the prices of a sample of the rows, and in a
   sequence of similar LPs (water filling) from the last LP's prices.
2. Fix every row whose cheapest response to those prices is clear by MARGIN (the prices, or
   t, would have to move that much, relatively, to change it). A fixed row's time fractions
   are affine in t, so together the fixed rows are two numbers per type: GPUs used at t = 0
   and per unit of t, folded into the capacity rows.
3. Solve the LP of the remaining rows (those near a tie) with those capacity rows: HiGHS, small.
4. Certify: with that LP's prices and t, every fixed row's response must still be a cheapest
   one and feasible (type_prices.certify). Then the whole LP is solved: the fixed rows' duals
   (type_prices.response_duals) with the small LP's duals satisfy every dual constraint of
   the full LP with complementary slackness (a fixed row's capacity cost per unit of t equals
   its rate dual times its weight, so the t column's condition is the small LP's own). Rows
   that fail join the small LP, which is solved again.

Around it: where no type is scarce (every price 0) t is the lowest row ceiling and a second
rate LP finds an x that fits; an LP whose weightless rows cannot keep their floors is proved
infeasible by the prices. Should anything not settle (MAX_ROUNDS rounds, most rows near a
tie), HiGHS gets the whole LP after all: the answer is exact either way.

No I/O.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from slurm_hetsched.core.policies.by_prices import INFEASIBLE_FLOORS, solve_by_prices
from slurm_hetsched.core.policies.lp import solve_highs
from slurm_hetsched.core.policies.rate_lp_model import RateLP, RateRows, RateSolution, rate_lp
from slurm_hetsched.errors import SolverError

# Whole LPs up to this many rows go to HiGHS directly (its simplex takes ~10 ms at 500).
DIRECT_ROWS = 600
# Above this many rows, HiGHS's interior point method beats its simplex on a whole LP.
IPM_ROWS = 1000


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
        solution = solve_by_prices(data, policy, n_jobs, prices)
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


__all__ = ["IPM_ROWS", "RateLP", "RateRows", "RateSolution", "rate_lp", "solve_rate_lp"]
