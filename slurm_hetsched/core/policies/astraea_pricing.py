"""Astraea's posted prices, durations, payment split and fairness ratio (Wang et al., IEEE
Trans. Computers 2022, eq. (1), (2) and (8); notes/astraea-oasis.md sections 2, 3, 5.3, 8.2),
shared by the paper-faithful reference (astraea_reference.py) and the product's policy
(astraea.py), so the worked example checks the code the product runs.

- Price of one unit of a resource class (a worker slot, a PS slot; in the product one GPU of a
  type) for one slot, cluster-wide, with `used` of `capacity` units of the class taken in that
  slot: theta ** (used / capacity) - 1. It is 0 on an empty cluster and theta - 1 when the class
  is exhausted; theta - 1 at least the most any job is worth per unit-slot makes an exhausted
  class unprofitable for every job (section 5.3).
- A borrowing job's charge for a slot is split among the owners of that slot's idle units in
  proportion to the idle units each contributed (gain as you contribute, eq. (2)); the parts
  sum to the charge (no free riding).
- The revenue fairness ratio of a tenant: its share of the total revenue over its share of
  the quotas (1 = perfectly fair; no sharing gives exactly 1).

Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

# theta - 1 is at least this: the paper assumes theta - 1 >= 1 with utilities normalised to
# at least 1 per unit-slot (section 5.3).
LEAST_THETA = 2.0


def posted_price(theta: float, used: float, capacity: float) -> float:
    """theta ** (used / capacity) - 1: the price of one unit for one slot (eq. (8)).

    `used` is clipped to [0, capacity]; a class with no capacity is priced as exhausted."""
    if capacity <= 0:
        return theta - 1.0
    share = min(max(used / capacity, 0.0), 1.0)
    return float(theta**share - 1.0)


def theta_for(most_per_unit_slot: float, bias: float = 1.0) -> float:
    """The price base: 1 + bias x the most any job is worth per unit-slot, at least
    LEAST_THETA (section 5.3; bias < 1 underestimates it, which both papers found better under
    load)."""
    return max(1.0 + bias * max(most_per_unit_slot, 0.0), LEAST_THETA)


def duration_slots(work: float, rate_per_slot: float) -> int:
    """Slots a job needs for `work` at `rate_per_slot` (Alg. 4/5 line 3: ceil(E D M / (n D_w)),
    with rate_per_slot = n x D_w); a hair under a whole slot is that slot (float noise)."""
    if rate_per_slot <= 0:
        raise ValueError("rate_per_slot must be > 0")
    return max(math.ceil(work / rate_per_slot - 1e-9), 0)


def split_payment(amount: float, idle_by_owner: Mapping[str, float]) -> dict[str, float]:
    """`amount` split among the owners in proportion to their idle units (eq. (2)); owners
    with none get nothing. The parts sum to `amount` (the last owner gets the rounding rest).

    Raises:
        ValueError: amount > 0 but no owner has an idle unit (nobody lent what was bought).
    """
    owners = sorted(o for o, idle in idle_by_owner.items() if idle > 0)
    total = sum(idle_by_owner[o] for o in owners)
    if amount <= 0:
        return {}
    if total <= 0:
        raise ValueError(f"a payment of {amount:g} with no idle units to pay for")
    parts = {o: amount * idle_by_owner[o] / total for o in owners[:-1]}
    parts[owners[-1]] = amount - sum(parts.values())
    return parts


def quota_shares(quotas: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """Account -> its share of the quotas, the fairness ratio's denominator: the mean over
    GPU types (those any account owns) of its quota of the type over all accounts' quotas
    of it (section 8.2's mean of the worker and parameter-server shares, one term per
    type); 0 for an account without quota."""
    totals: dict[str, int] = {}
    for quota in quotas.values():
        for gpu_type, count in quota.items():
            totals[gpu_type] = totals.get(gpu_type, 0) + count
    owned = [t for t, n in totals.items() if n > 0]
    if not owned:
        return dict.fromkeys(quotas, 0.0)
    return {
        name: sum(quota.get(t, 0) / totals[t] for t in owned) / len(owned)
        for name, quota in quotas.items()
    }


def fairness_ratio(revenue: float, total_revenue: float, quota_share: float) -> float:
    """alpha_u = (g_u / total revenue) / (u's share of the quotas) (section 8.2; with two
    resource classes the share is the mean of the two shares). NaN when either share is 0
    (a tenant with no quota has no fair share to compare with)."""
    if total_revenue <= 0 or quota_share <= 0:
        return math.nan
    return (revenue / total_revenue) / quota_share


__all__ = [
    "LEAST_THETA",
    "duration_slots",
    "fairness_ratio",
    "posted_price",
    "quota_shares",
    "split_payment",
    "theta_for",
]
