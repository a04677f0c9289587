"""A job's admitted schedule under a reservation policy (OASiS): where it runs in each time slot
from now until it is planned to finish.

Slots are `slot_s` long on the problem's clock, slot k covering [k * slot_s, (k + 1) * slot_s).
A schedule is a few stretches of consecutive slots, each on one placement or paused; after
its last stretch the job is planned to be done. The policy that made it carries it from
round to round (`Allocation.reservations` -> `Problem.reservations`), so the live controller
keeps it in its store and a restart finds it again.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_hetsched.core.model.frozen import InvalidProblemError
from slurm_hetsched.core.model.placement import Placement


@dataclass(frozen=True, slots=True)
class Stretch:
    """Slots `first_slot` to `last_slot` (inclusive) on `placement`, or paused (None)."""

    first_slot: int
    last_slot: int
    placement: Placement | None


@dataclass(frozen=True, slots=True)
class Reservation:
    """An admitted job's schedule.

    Attributes:
        job_id: the job.
        slot_s: the slot length the schedule was made with.
        stretches: ascending, contiguous, non-empty; the job is planned done at the end of the
            last one.
        utility: what the job is worth at its planned completion.
        price: what its slots cost at the prices posted when it was admitted.
    """

    job_id: str
    slot_s: float
    stretches: tuple[Stretch, ...]
    utility: float = 0.0
    price: float = 0.0

    def __post_init__(self) -> None:
        if not self.stretches or self.slot_s <= 0:
            raise InvalidProblemError(f"reservation of {self.job_id}: no slots")
        for before, after in zip(self.stretches, self.stretches[1:], strict=False):
            if after.first_slot != before.last_slot + 1:
                raise InvalidProblemError(f"reservation of {self.job_id}: stretches not contiguous")
        if any(s.last_slot < s.first_slot for s in self.stretches):
            raise InvalidProblemError(f"reservation of {self.job_id}: an empty stretch")

    @property
    def first_slot(self) -> int:
        return self.stretches[0].first_slot

    @property
    def last_slot(self) -> int:
        return self.stretches[-1].last_slot

    @property
    def completion_s(self) -> float:
        """The end of its last slot: when it is planned to be done at the latest."""
        return (self.last_slot + 1) * self.slot_s

    def placement_at(self, slot: int) -> Placement | None:
        """Where it runs in `slot` (None: paused, or outside the schedule)."""
        for stretch in self.stretches:
            if stretch.first_slot <= slot <= stretch.last_slot:
                return stretch.placement
        return None

    def from_slot(self, slot: int) -> Reservation | None:
        """The schedule without the slots before `slot` (None if none is left)."""
        kept = tuple(
            Stretch(max(s.first_slot, slot), s.last_slot, s.placement)
            for s in self.stretches
            if s.last_slot >= slot
        )
        if not kept:
            return None
        return Reservation(self.job_id, self.slot_s, kept, self.utility, self.price)
