"""Find the GPU types' prices that minimize the rate LP's Lagrangian dual (rate_lp.py).

The dual function L(p) = p @ capacity + Hulls.dual(...) is convex and piecewise linear in the
n_types prices, and its minimum is the LP's optimal t. Every evaluation gives a cut
L(p') >= L(p) + g @ (p' - p), g = capacity - GPUs the responses use. The search is a
cutting-plane method with a box step: the next point minimizes the cuts' maximum within a box
around the best point so far; the box doubles after a step that gains, and halves after one
that does not, until it is smaller than RADIUS_TOL of the prices. Each step costs one pass of
Hulls over the rows and a tiny LP (n_types + 1 columns, one row per cut) that HiGHS re-solves
from its last basis.

No I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import highspy
import numpy as np

from slurm_hetsched.core.policies.type_prices import Hulls

# The search stops when the box is this small relative to the largest price...
RADIUS_TOL = 1e-4
# ... or after this many evaluations per GPU type (it never came near in the benchmarks).
EVALS_PER_TYPE = 40
# The box grows by GROW after a step that gains, and shrinks by SHRINK after one that does not.
GROW = 2.0
SHRINK = 0.3
# A step counts as gaining when it realizes this share of the decrease the cuts predicted.
GAIN_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class PriceEstimate:
    """The best prices found, the t the dual picks there and the dual's value (>= the LP's
    optimal t).

    Attributes:
        prices: (n_types,).
        stretch: (first, last) t where the dual is maximal at those prices (Hulls.dual).
        value: L(prices).
        evals: dual evaluations made.
        radius: the box's final size relative to the largest price.
    """

    prices: np.ndarray
    stretch: tuple[float, float]
    value: float
    evals: int
    radius: float


def search_prices(
    a: np.ndarray,
    gpus: np.ndarray,
    capacity: np.ndarray,
    weight: np.ndarray,
    floor: np.ndarray,
    t_cap: float,
    start: np.ndarray | None = None,
    radius: float = 0.5,
    tolerance: float | None = None,
    on_growth: Callable[[np.ndarray], None] | None = None,
) -> PriceEstimate:
    """Minimize the dual over prices (see the module docstring); arrays as in rate_lp.

    Args:
        start: prices to start from; by default every type worth the same share of t.
        radius: the first box's size relative to the largest starting price.
        tolerance: stop when the box is this small relative to the largest price (default
            RADIUS_TOL).
        on_growth: called with the prices whenever they outgrow the bounds set so far (on an
            infeasible LP they run off to infinity: the caller may raise).
    """
    n_types = a.shape[1]
    inf = highspy.kHighsInf
    scale = max(abs(t_cap), 1e-12)
    tolerance = RADIUS_TOL if tolerance is None else tolerance
    even = scale / n_types / capacity  # every type worth the same share of t
    prices = even if start is None else np.asarray(start, dtype=float)
    # Prices this small against the even ones count as 0 (the LP is not short of GPUs).
    floor_price = 1e-9 * float(even.max())
    upper = 64 * np.maximum(scale / capacity, prices)
    master = highspy.Highs()
    master.silent()
    for k in range(n_types):
        master.addVar(0.0, float(upper[k]))
    master.addVar(-inf, inf)
    master.changeColCost(n_types, 1.0)
    columns = np.arange(n_types + 1, dtype=np.int32)

    def value(p: np.ndarray) -> tuple[float, tuple[float, float], np.ndarray]:
        hulls = Hulls.walk(a, gpus[:, None] * p[None, :], rivals=False)
        inner, t, t_end, x = hulls.dual(floor, weight, t_cap)
        return float(p @ capacity) + inner, (t, t_end), capacity - gpus @ x

    best_value, best_stretch, cut = value(prices)
    best = prices
    radius *= max(float(best.max()), floor_price)
    evals, predicted = 1, 0.0
    point, point_value, point_stretch = prices, best_value, best_stretch
    for _ in range(EVALS_PER_TYPE * n_types):
        master.addRow(float(point_value - cut @ point), inf, n_types + 1, columns, np.r_[-cut, 1.0])
        if evals > 1:
            if point_value < best_value - GAIN_SHARE * predicted:
                radius = GROW * radius
            else:
                radius *= SHRINK
        if point_value < best_value:
            best, best_value, best_stretch = point, point_value, point_stretch
        if radius <= tolerance * max(float(best.max()), floor_price):
            break
        low = np.maximum(best - radius, 0.0)
        high = np.minimum(best + radius, upper)
        master.changeColsBounds(n_types, columns[:n_types], low, high)
        master.run()
        solution = np.asarray(master.getSolution().col_value)
        predicted = best_value - float(solution[n_types])
        if predicted <= 1e-12 * max(abs(best_value), 1e-12):
            break  # the cuts admit nothing better in the box: best is the minimum
        point = solution[:n_types]
        # Prices are not bounded above: a box that holds the search back grows.
        if np.any(point >= upper * (1 - 1e-12)):
            upper = np.where(point >= upper * (1 - 1e-12), upper * 8, upper)
            if on_growth is not None:
                on_growth(point)
        point_value, point_stretch, cut = value(point)
        evals += 1
    return PriceEstimate(
        best, best_stretch, best_value, evals, radius / max(float(best.max()), floor_price)
    )
