"""OASiS's posted prices (Bao et al., INFOCOM'18, eq. (22)-(26); notes/astraea-oasis.md
section 10): the price of one GPU of a type on a node for one slot, rising exponentially with
the GPUs of that type on that node already reserved in that slot,

    p(used) = L (U / L) ** (used / capacity),

so p(0) = L (any job may start on an empty cluster) and p(capacity) = U (no job pays for an
exhausted GPU: U is the most any job is worth per GPU-slot). Each GPU type is one of OASiS's
resource types, with its own U and L:

- U_type = max over jobs that can run on the type of (utility at their fastest completion) /
  (their GPUs): OASiS's (23), with a GPU per worker.
- L_type = 1 / (4 eta) x min over those jobs of (utility at the horizon's end) / (GPU-slots of
  their cheapest run on the type), with 1 / eta = min over all jobs of (GPU-slots of their
  cheapest run) / (horizon slots x all GPUs): OASiS's (24)-(26). It keeps the prices of an
  empty cluster's whole horizon (the dual's start) at most a quarter of what one job is worth,
  as the 2-alpha proof needs.

The live policy estimates both from the jobs it sees and scales them by `bias` (< 1: both
papers found that underestimating beats overestimating under load). alpha = max(1,
max over types of ln(U / L)) is the competitive ratio's factor (Theorem 4). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# A type no job can pay for at its horizon's end still gets a positive floor price: L must be
# > 0 for the exponential, and this far below U it never decides an admission.
LOWEST_RATIO = 1e-9


@dataclass(frozen=True, slots=True)
class PriceBounds:
    """U and L per GPU type column (`upper`, `lower`; 0 < lower <= upper)."""

    upper: tuple[float, ...]
    lower: tuple[float, ...]

    def price(self, column: int, used: float, capacity: float) -> float:
        """The price of one GPU-slot of type `column` with `used` of `capacity` GPUs taken."""
        low, high = self.lower[column], self.upper[column]
        share = min(max(used / capacity, 0.0), 1.0) if capacity > 0 else 1.0
        return float(low * (high / low) ** share)

    @property
    def alpha(self) -> float:
        """Theorem 4's alpha: max(1, max over types of ln(U / L))."""
        return max([1.0, *(math.log(h / lo) for h, lo in zip(self.upper, self.lower, strict=True))])


@dataclass(frozen=True, slots=True)
class JobWorth:
    """What the bounds need of one job.

    Attributes:
        gpus: its smallest gang (GPUs in one slot).
        best_utility: its utility at its fastest completion.
        late_utility: its utility at the horizon's end.
        gpu_slots: per type column, the fewest GPU-slots its run needs there (inf: cannot).
    """

    gpus: int
    best_utility: float
    late_utility: float
    gpu_slots: tuple[float, ...]


def estimate_bounds(
    jobs: Sequence[JobWorth],
    n_types: int,
    horizon_slots: int,
    total_gpus: int,
    bias: float = 1.0,
    floor: float = LOWEST_RATIO,
) -> PriceBounds:
    """U and L per type from `jobs` (OASiS's (23)-(26)), both times `bias`; L at least
    `floor` x U (the paper's own L with the default; the policy's `floor` option raises it).

    A type no job can use gets the bounds of the others (its price never matters)."""
    uppers: list[float | None] = []
    lowers: list[float | None] = []
    runs = [min(j.gpu_slots) for j in jobs if math.isfinite(min(j.gpu_slots, default=math.inf))]
    eta_inverse = min(runs, default=1.0) / max(horizon_slots * total_gpus, 1)
    eta_inverse = min(eta_inverse, 1.0)
    for column in range(n_types):
        able = [j for j in jobs if math.isfinite(j.gpu_slots[column])]
        if not able:
            uppers.append(None)
            lowers.append(None)
            continue
        upper = max(j.best_utility / j.gpus for j in able)
        lower = min(j.late_utility / j.gpu_slots[column] for j in able) * eta_inverse / 4.0
        uppers.append(upper)
        lowers.append(lower)
    known = [u for u in uppers if u is not None and u > 0]
    default_upper = max(known, default=1.0)
    upper_values = [u if u is not None and u > 0 else default_upper for u in uppers]
    lower_values = []
    for estimate, upper in zip(lowers, upper_values, strict=True):
        least = upper * max(floor, LOWEST_RATIO)
        lower_values.append(min(max(estimate or 0.0, least), upper))
    return PriceBounds(
        upper=tuple(u * bias for u in upper_values),
        lower=tuple(lo * bias for lo in lower_values),
    )
