"""Tenants of hierarchical policies: an `Account`'s weight and how it shares it among its jobs."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_hetsched.core.model.frozen import EMPTY, InvalidProblemError, frozen_mapping, set_field


class AccountPolicy(enum.Enum):
    """How an account shares its weight among its own jobs in hierarchical policies."""

    FAIR = "fair"  # in proportion to the jobs' weights
    FIFO = "fifo"  # all of it to the earliest unsatisfied job (arrival_s, then job id)


@dataclass(frozen=True, slots=True)
class Account:
    """A tenant: its weight and how it shares it inside (hierarchical policies), and the GPUs
    it owns (`quota`: GPU type -> count; the tenant policies, astraea and its baselines; an
    account with none only borrows)."""

    name: str
    weight: float = 1.0
    policy: AccountPolicy = AccountPolicy.FAIR
    quota: Mapping[str, int] = field(default_factory=lambda: EMPTY)

    def __post_init__(self) -> None:
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise InvalidProblemError(f"account {self.name!r}: weight {self.weight} must be > 0")
        quota = {}
        for gpu_type, count in dict(self.quota).items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise InvalidProblemError(
                    f"account {self.name!r}: quota of {gpu_type!r} must be a whole number >= 0, "
                    f"not {count!r}"
                )
            if count:
                quota[str(gpu_type)] = count
        set_field(self, "quota", frozen_mapping(quota))


def accounts_with(quotas: Mapping[str, Mapping[str, int]]) -> dict[str, Account]:
    """Accounts (weight 1, fair) owning `quotas`: {account: {GPU type: GPUs}}."""
    return {name: Account(name, quota=dict(quota)) for name, quota in sorted(quotas.items())}
