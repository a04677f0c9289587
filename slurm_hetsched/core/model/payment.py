"""What a borrowing job pays for one round on GPUs outside its tenant's quota, and to whom
(Astraea's gain-as-you-contribute rule, eq. (2): split among the owners of the idle GPUs in
proportion to the idle GPUs each contributed)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_hetsched.core.model.frozen import EMPTY, InvalidProblemError, frozen_mapping, set_field

# The ledger entry of GPUs in no account's quota: the cluster's own pool. Parentheses are not
# valid in a Slurm account name, so no account can be mistaken for it.
POOL_OWNER = "(cluster)"


@dataclass(frozen=True, slots=True)
class Payment:
    """One borrowing job's charge for one round.

    Attributes:
        payer: the job's account.
        amount: what it pays for the round, >= 0 (posted prices x GPUs borrowed).
        period_s: the seconds the round covers (so a rate per hour can be shown).
        borrowed: GPU type -> GPUs it holds from the shared pool this round (all charged).
        shares: owner account (or POOL_OWNER) -> its part of `amount`; the parts sum to
            `amount` (no free riding: what borrowers pay is what owners receive). The payer
            may be among the owners (its own idle GPUs were in the pool: it pays itself).
        lent: owner -> the GPUs it lent the job this round, split as `shares` is (by
            contribution; fractions), summing to the GPUs borrowed.
    """

    payer: str
    amount: float
    period_s: float
    borrowed: Mapping[str, int] = field(default_factory=lambda: EMPTY)
    shares: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    lent: Mapping[str, float] = field(default_factory=lambda: EMPTY)

    def __post_init__(self) -> None:
        if not (self.amount >= 0 and math.isfinite(self.amount)):
            raise InvalidProblemError(f"payment of {self.payer!r}: amount {self.amount} < 0")
        if not self.period_s > 0:
            raise InvalidProblemError(f"payment of {self.payer!r}: period_s must be > 0")
        set_field(self, "borrowed", frozen_mapping(self.borrowed))
        set_field(self, "shares", frozen_mapping(self.shares))
        set_field(self, "lent", frozen_mapping(self.lent))

    @property
    def per_hour(self) -> float:
        """The charge as a rate per hour."""
        return self.amount * 3600.0 / self.period_s

    def lenders(self) -> tuple[str, ...]:
        """The owners paid, largest part first, then by name (an admin comment's order)."""
        return tuple(sorted(self.shares, key=lambda o: (-self.shares[o], o)))
