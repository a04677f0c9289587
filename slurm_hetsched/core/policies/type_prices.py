"""Each row's cheapest way to reach a rate when GPU types have prices: the arithmetic behind
solving the rate LP through the prices of the few GPU types (rate_lp.py).

Relax the capacity rows of the rate LP with prices p >= 0, one per GPU type. What is left
splits into one tiny problem per row i (a job or a group of identical jobs):

    minimize  sum_k q[i, k] x[i, k]   s.t.  sum_k a[i, k] x[i, k] >= d_i,  sum_k x[i, k] <= 1,
              x >= 0,                     with q[i, k] = gpus_i * p_k (price of its time on k)

whose answer lies on the lower convex hull of the points (0, 0) and (a[i, k], q[i, k]): the
row uses the type with the lowest price per unit of rate while one unit of time suffices, and
beyond that mixes the two types at the ends of a hull segment with all of its time. `Hulls`
walks those hulls for every row at once, in at most n_types vectorized passes: no solver.

From the hulls:
- `Hulls.dual` is the Lagrangian dual function of the rate LP at p, with a subgradient: its
  minimum over p is the LP's optimal t (rate_lp.py searches for it);
- `Hulls.responses` gives every row's response at a given t, affine in t while the row stays
  on its hull segment, and how far the prices or its demand may move before it leaves it;
- `certify` checks that responses fixed earlier are still cheapest and feasible under the
  prices and t of a solved LP: that, with the LP's optimality, proves the whole LP optimal.

No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# "No type": the hull's origin, or the near end of a segment that starts there.
ORIGIN = -1
# The dual's t-stretch where the weighted marginal costs sum to 1 within this is flat.
FLAT = 1e-6
# Reduced costs and time fractions are accepted this far (relative) past their bounds.
CERTIFY_TOL = 1e-9


@dataclass(frozen=True, slots=True)
class Responses:
    """Every row's cheapest response, as x(t) = base + slope * t on its hull segment.

    Attributes:
        near: (n_rows,) type at the segment's near end (ORIGIN: the segment starts at 0).
        far: (n_rows,) type at its far end (ORIGIN: the row needs no rate).
        base: (n_rows, 2) time fractions on (near, far) at t = 0, extrapolated.
        slope: (n_rows, 2) their change per unit of t.
        margin: (n_rows,) relative change of prices that could move the row to another
            segment (0 on a tie, inf where nothing can).
        t_room: (n_rows,) change of t that moves its demand to another segment.
        reachable: (n_rows,) False where the demand exceeds the row's best rate.
    """

    near: np.ndarray
    far: np.ndarray
    base: np.ndarray
    slope: np.ndarray
    margin: np.ndarray
    t_room: np.ndarray
    reachable: np.ndarray

    def take(self, rows: np.ndarray) -> Responses:
        return Responses(
            self.near[rows],
            self.far[rows],
            self.base[rows],
            self.slope[rows],
            self.margin[rows],
            self.t_room[rows],
            self.reachable[rows],
        )

    def x(self, t: float, n_types: int) -> np.ndarray:
        """(n_rows, n_types) time fractions at t."""
        x = np.zeros((len(self.near), n_types))
        share = self.base + self.slope * t
        for end, kind in enumerate((self.near, self.far)):
            used = np.nonzero(kind != ORIGIN)[0]
            x[used, kind[used]] += share[used, end]
        return x

    def usage(self, gpus: np.ndarray, n_types: int) -> tuple[np.ndarray, np.ndarray]:
        """GPUs used per type (n_types,) at t = 0 and per unit of t; gpus: (n_rows,)."""
        at_zero, per_t = np.zeros(n_types), np.zeros(n_types)
        for end, kind in enumerate((self.near, self.far)):
            used = kind != ORIGIN
            np.add.at(at_zero, kind[used], gpus[used] * self.base[used, end])
            np.add.at(per_t, kind[used], gpus[used] * self.slope[used, end])
        return at_zero, per_t


@dataclass(frozen=True, slots=True)
class Hulls:
    """The lower hulls of every row's (rate, price) points, walked from the origin.

    Vertex 0 is the origin; vertices 1..count[i] are types in increasing rate (and price per
    unit of rate along the way). Unused places hold rate inf; the arrays have as many columns
    as the longest hull needs (at least 2).

    Attributes:
        rate: (n_rows, width) rate at each vertex.
        cost: (n_rows, width) price at each vertex.
        kind: (n_rows, width) type of each vertex (ORIGIN for vertex 0 and unused).
        gap: (n_rows, width) at each vertex, how much steeper (relatively) the next
            best step from the previous vertex was: 0 on a tie, inf without a rival.
        count: (n_rows,) vertices after the origin.
        n_types: GPU types (columns of x).
    """

    rate: np.ndarray
    cost: np.ndarray
    kind: np.ndarray
    gap: np.ndarray
    count: np.ndarray
    n_types: int

    @classmethod
    def walk(cls, a: np.ndarray, q: np.ndarray, rivals: bool = True) -> Hulls:
        """The hulls of points (a[i, k], q[i, k]) for a (rates, 0 = cannot run) and q (prices);
        `rivals=False` skips the gaps (all inf), which only responses_at's margins read."""
        n_rows, n_types = a.shape
        rate = np.full((n_rows, n_types + 1), np.inf)
        rate[:, 0] = 0.0
        cost = np.zeros((n_rows, n_types + 1))
        kind = np.full((n_rows, n_types + 1), ORIGIN)
        gap = np.full((n_rows, n_types + 1), np.inf)
        count = np.zeros(n_rows, dtype=np.int64)
        here_a, here_q = np.zeros(n_rows), np.zeros(n_rows)
        ceiling = a.max(axis=1, initial=0.0)
        walking = np.nonzero(ceiling > 0)[0]
        for step in range(1, n_types + 1):
            whole = walking.size == n_rows  # the first step, usually: no copies
            rows_a = a if whole else a[walking]
            rows_q = q if whole else q[walking]
            from_a, from_q = here_a[walking, None], here_q[walking, None]
            ahead = rows_a > from_a * (1 + 1e-12)
            steep = np.divide(
                rows_q - from_q, rows_a - from_a, out=np.full(ahead.shape, np.inf), where=ahead
            )
            s1 = steep.min(axis=1)
            # The cheapest step; on a tie the faster type (it serves more before time runs out).
            best = np.argmax(np.where(steep <= s1[:, None], rows_a, -np.inf), axis=1)
            if rivals:
                steep[np.arange(len(walking)), best] = np.inf
                s2 = steep.min(axis=1)
                rival = np.divide(
                    s2 - s1,
                    np.maximum(np.abs(s2), 1e-300),
                    out=np.full(s2.shape, np.inf),
                    where=np.isfinite(s2),  # no rival: inf
                )
                gap[walking, step] = rival
            here_a[walking] = a[walking, best]
            here_q[walking] = q[walking, best]
            rate[walking, step] = here_a[walking]
            cost[walking, step] = here_q[walking]
            kind[walking, step] = best
            count[walking] = step
            # Every walk ends at the row's fastest type (its ceiling).
            walking = walking[here_a[walking] < ceiling[walking] * (1 - 1e-12)]
            if walking.size == 0:
                break
        # Keep only the columns some row uses (most hulls have a vertex or two).
        width = max(int(count.max(initial=0)) + 1, 2)
        return cls(
            rate[:, :width], cost[:, :width], kind[:, :width], gap[:, :width], count, n_types
        )

    def _slopes(self) -> np.ndarray:
        """(n_rows, n_types) price per unit of rate on segment j (vertex j to j + 1)."""
        valid = np.isfinite(self.rate[:, 1:])
        run = np.subtract(
            self.rate[:, 1:], self.rate[:, :-1], out=np.ones(valid.shape), where=valid
        )
        return np.asarray(
            np.divide(np.diff(self.cost, axis=1), run, out=np.zeros(valid.shape), where=valid)
        )

    def dual(
        self, floor: np.ndarray, weight: np.ndarray, t_cap: float
    ) -> tuple[float, float, float, np.ndarray]:
        """The Lagrangian dual function at these prices, less p @ capacity.

        max over t <= t_cap of  t - sum_i cost_i(floor_i + weight_i t),  cost_i the hull
        (0 for a demand <= 0). Each row's marginal cost rises at its hull's vertices, so the
        best t is where the weighted sum of marginal costs first reaches 1. At prices near the
        optimum that sum stays near 1 over a stretch of t (the function is flat there: which
        t the LP takes is for the capacities to say, see `fitting_t`).

        Returns:
            (that maximum, the first t attaining it, the end of the stretch where the sum is
            within FLAT of 1, (n_rows, n_types) the responses' x at the first t).
        """
        slopes = self._slopes()
        rise = np.diff(slopes, axis=1, prepend=0.0) * weight[:, None]
        starts = (self.rate[:, :-1] - floor[:, None]) / np.where(weight > 0, weight, 1.0)[:, None]
        events = (rise > 0) & np.isfinite(starts) & (weight[:, None] > 0)
        at, by = starts[events], rise[events]
        # Rows already past a vertex at every t (demand > 0 without weight) add nothing here.
        order = np.argsort(at, kind="stable")
        at, total = at[order], np.cumsum(by[order])
        first = int(np.searchsorted(total, 1.0 - FLAT))
        last = int(np.searchsorted(total, 1.0 + FLAT, side="right"))
        t = t_cap if first >= len(at) else min(t_cap, float(at[first]))
        t_end = t_cap if last >= len(at) else min(t_cap, float(at[last]))
        demand = floor + weight * t
        x, spent = self.spend(demand)
        return t - float(spent.sum()), t, t_end, x

    def fitting_t(
        self,
        floor: np.ndarray,
        weight: np.ndarray,
        gpus: np.ndarray,
        capacity: np.ndarray,
        span: tuple[float, float],
    ) -> float:
        """The t in `span` (dual's flat stretch) where the responses fill the first type,
        interpolating each type's GPUs linearly between the ends: the primal's estimate of t."""
        start, end = span
        if end <= start:
            return start
        used_start = gpus @ self.spend(floor + weight * start)[0]
        used_end = gpus @ self.spend(floor + weight * end)[0]
        grows = used_end > used_start * (1 + 1e-12)
        if not grows.any():
            return end
        share = (capacity[grows] - used_start[grows]) / (used_end[grows] - used_start[grows])
        return float(start + np.clip(share.min(), 0.0, 1.0) * (end - start))

    def spend(self, demand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """At each row's demand: (x (n_rows, n_types), the hull's price (n_rows,)); rows with
        demand <= 0 spend nothing."""
        n_rows, n_types = demand.shape[0], self.n_types
        index = np.arange(n_rows)
        segment = self._segment(demand)
        a0, a1 = self.rate[index, segment], self.rate[index, segment + 1]
        c0, c1 = self.cost[index, segment], self.cost[index, segment + 1]
        needs = (demand > 0) & (self.count > 0)
        share = np.where(needs, np.clip((demand - a0) / np.where(needs, a1 - a0, 1.0), 0, 1), 0.0)
        x = np.zeros((n_rows, n_types))
        far, near = self.kind[index, segment + 1], self.kind[index, segment]
        rows = np.nonzero(needs)[0]
        x[rows, far[rows]] += share[rows]
        mixed = rows[near[rows] != ORIGIN]
        x[mixed, near[mixed]] += 1 - share[mixed]
        return x, np.where(needs, c0 + share * (c1 - c0), 0.0)

    def _segment(self, demand: np.ndarray) -> np.ndarray:
        """(n_rows,) segment holding each demand (clipped to the last)."""
        below = (self.rate[:, 1:] < demand[:, None]).sum(axis=1)
        return np.asarray(np.minimum(below, np.maximum(self.count - 1, 0)))

    def responses_at(self, demand: np.ndarray, floor: np.ndarray, weight: np.ndarray) -> Responses:
        """Every row's response at `demand` (= floor + weight * t), affine in t."""
        n_rows = len(demand)
        index = np.arange(n_rows)
        segment = self._segment(demand)
        a0, a1 = self.rate[index, segment], self.rate[index, segment + 1]
        needs = (demand > 0) & (self.count > 0)
        near = np.where(needs & (segment > 0), self.kind[index, segment], ORIGIN)
        far = np.where(needs, self.kind[index, segment + 1], ORIGIN)
        span = np.where(needs, a1 - a0, 1.0)
        base, slope = np.zeros((n_rows, 2)), np.zeros((n_rows, 2))
        base[:, 1] = np.where(needs, (floor - a0) / span, 0.0)
        slope[:, 1] = np.where(needs, weight / span, 0.0)
        mixed = near != ORIGIN
        base[:, 0] = np.where(mixed, 1 - base[:, 1], 0.0)
        slope[:, 0] = np.where(mixed, -slope[:, 1], 0.0)
        # Margin: the closest rival step on the way, and how far t may move (in units of t)
        # before the demand leaves its segment.
        on_way = np.arange(self.gap.shape[1])[None, :] <= (segment + 1)[:, None]
        price_room = np.where(on_way, self.gap, np.inf).min(axis=1)
        per_t = np.where(weight > 0, weight, np.inf)
        end_room = np.where(np.isfinite(a1), (a1 - demand) / per_t, 0.0)
        start_room = np.where(mixed, (demand - a0) / per_t, np.inf)
        margin = np.where(needs, price_room, np.inf)
        t_room = np.where(needs, np.minimum(end_room, start_room), np.abs(demand) / per_t)
        t_room = np.where(weight > 0, t_room, np.inf)  # a demand that does not move with t
        reachable = ~needs | (demand <= a1 * (1 + 1e-12))
        return Responses(
            near, far, base, slope, margin, t_room, reachable & (needs | (demand <= 0))
        )


def response_duals(
    responses: Responses, a: np.ndarray, q: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(lambda, mu), (n_rows,) each: duals of each row's rate and time rows that price its
    response: lambda = price of one more unit of rate on its segment, mu = worth of its time
    (0 unless it mixes two types with all of its time)."""
    index = np.arange(a.shape[0])
    needs = responses.far != ORIGIN
    mixed = responses.near != ORIGIN
    far, near = np.maximum(responses.far, 0), np.maximum(responses.near, 0)
    far_a, far_q = a[index, far], q[index, far]
    near_a = np.where(mixed, a[index, near], 0.0)
    near_q = np.where(mixed, q[index, near], 0.0)
    lam = np.where(needs, (far_q - near_q) / np.where(needs, far_a - near_a, 1.0), 0.0)
    mu = np.where(mixed, lam * near_a - near_q, 0.0)
    return lam, mu


def certify(
    responses: Responses, a: np.ndarray, q: np.ndarray, demand: np.ndarray, t: float
) -> np.ndarray:
    """(n_rows,) bool: which responses are still cheapest and feasible under prices q at t.

    A row passes when its time fractions at t are within their bounds (its demand,
    floor + weight * t, is still on its segment) and its segment's duals (response_duals) are
    non-negative and leave no type with a positive reduced cost; a row that needed no rate
    passes while its demand stays <= 0.
    """
    lam, mu = response_duals(responses, a, q)
    share = responses.base + responses.slope * t
    needs = responses.far != ORIGIN
    scale = np.maximum(lam * a.max(axis=1, initial=0.0), q.max(axis=1, initial=0.0))
    slack = CERTIFY_TOL * np.maximum(scale, 1e-300)
    reduced = np.where(a > 0, lam[:, None] * a - mu[:, None] - q, -np.inf)
    priced = (reduced.max(axis=1, initial=-np.inf) <= slack) & (np.minimum(lam, mu) >= -slack)
    time_used = np.where(responses.near == ORIGIN, share[:, 1], 1.0)
    in_bounds = (share.min(axis=1) >= -CERTIFY_TOL) & (time_used <= 1 + CERTIFY_TOL)
    idle = demand <= CERTIFY_TOL * np.maximum(a.max(axis=1, initial=0.0), 1e-300)
    return np.asarray(responses.reachable & np.where(needs, priced & in_bounds, idle))
