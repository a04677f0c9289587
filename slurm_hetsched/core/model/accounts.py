"""Tenants of hierarchical policies: an `Account`'s weight and how it shares it among its jobs."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from slurm_hetsched.core.model.frozen import InvalidProblemError


class AccountPolicy(enum.Enum):
    """How an account shares its weight among its own jobs in hierarchical policies."""

    FAIR = "fair"  # in proportion to the jobs' weights
    FIFO = "fifo"  # all of it to the earliest unsatisfied job (arrival_s, then job id)


@dataclass(frozen=True, slots=True)
class Account:
    """A tenant in hierarchical policies: its weight and how it shares it inside."""

    name: str
    weight: float = 1.0
    policy: AccountPolicy = AccountPolicy.FAIR

    def __post_init__(self) -> None:
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise InvalidProblemError(f"account {self.name!r}: weight {self.weight} must be > 0")
