"""How the ranks of one job agree at a step boundary; a single process agrees with itself.

A signal may reach one rank and not another, and the time-based decisions (periodic
checkpoint due, lease expired) are rank 0's; every rank must still take the same branch, or
a collective inside the training step would hang. So flags are OR-ed over all ranks at every
boundary. `slurm_hetsched.wrapper.torch.TorchCollective` implements this over
torch.distributed; other frameworks can implement the same four methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Collective(Protocol):
    """The few collective operations the job session needs."""

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    def any(self, flags: Sequence[bool]) -> list[bool]:
        """Element-wise OR of `flags` over all ranks (every rank passes the same length)."""
        ...

    def barrier(self) -> None: ...

    def broadcast_int(self, value: int) -> int:
        """Rank 0's `value` on every rank."""
        ...

    def all_gather(self, value: Any) -> list[Any]:
        """Every rank's (picklable) `value`, in rank order, on every rank."""
        ...


class LocalCollective:
    """The collective of a job with one process."""

    rank = 0
    world_size = 1

    def any(self, flags: Sequence[bool]) -> list[bool]:
        return list(flags)

    def barrier(self) -> None:
        pass

    def broadcast_int(self, value: int) -> int:
        return value

    def all_gather(self, value: Any) -> list[Any]:
        return [value]
