"""HadarE's step partitioning (Sultana et al., section V, the job tracker): a forked job's
remaining steps split among its running copies in proportion to their nodes' throughput for
the job, so that the copies finish their budgets together. Pure.

Budgets are whole steps that add up exactly to the steps left (largest remainders get the odd
steps, ties to the earlier copy), and a copy that cannot run (throughput 0) gets none. The
shares are computed exactly (fractions of the rates as given), so float rounding can never
make the budgets add up to one step more or less.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction


def step_budgets(remaining: int, rates: Mapping[str, float]) -> dict[str, int]:
    """Each copy's steps this round: `remaining` split in proportion to `rates` (copy ->
    steps/s on its node).

    Raises:
        ValueError: `remaining` is negative, a rate is negative or not finite, or no copy can
            run while steps are left.
    """
    if remaining < 0:
        raise ValueError(f"remaining steps must be >= 0, not {remaining}")
    for copy, rate in rates.items():
        if not math.isfinite(rate) or rate < 0:
            raise ValueError(f"copy {copy!r}: rate {rate} is not a number >= 0")
    total = sum(rates.values())
    if remaining == 0:
        return {copy: 0 for copy in rates}
    if total <= 0:
        raise ValueError(f"{remaining} steps left but no copy can run (every rate is 0)")
    exact_total = sum(Fraction(rate) for rate in rates.values())
    shares = {copy: remaining * Fraction(rate) / exact_total for copy, rate in rates.items()}
    budgets = {copy: math.floor(share) for copy, share in shares.items()}
    left = remaining - sum(budgets.values())
    order = sorted(
        (copy for copy in rates if rates[copy] > 0),
        key=lambda c: (-(shares[c] - budgets[c]), list(rates).index(c)),
    )
    for copy in order[:left]:
        budgets[copy] += 1
    return budgets
