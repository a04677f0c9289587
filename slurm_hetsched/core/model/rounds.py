"""The round mechanism's values: `RoundState`, what it carries from one round to the next, and
`RoundPlan`, one round's actions (keep, move, start, stop). The mechanism itself is
`core.mechanism`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

import numpy as np

from slurm_hetsched.core.model.allocation import Allocation
from slurm_hetsched.core.model.frozen import (
    EMPTY,
    InvalidProblemError,
    copy_with,
    frozen_array,
    frozen_mapping,
    index_of,
    set_field,
)
from slurm_hetsched.core.model.placement import Placement


@dataclass(frozen=True, slots=True)
class RoundState:
    """What the round mechanism remembers between rounds; it takes one and returns the next.

    Attributes:
        round: index of the last round planned (0 before the first).
        job_ids: row order of `received_s`.
        gpu_types: column order of `received_s`.
        received_s: (n_jobs, n_types) seconds each job ran on each type since the last
            allocation reset (Gavel's time-so-far; the priority is allocation / share received).
        allocation: the allocation the rounds currently realise, or None before the first.
        placements: job id -> its current placement (jobs not running are absent).
        deficit_s: (n_jobs, n_types) Gavel's deficit: seconds each job should have received on
            each type by its allocation minus what it received, summed over the periods
            between resets (a tie-breaker between equal priorities); default zeros.
        last_reset_s: when `received_s` was last reset, on the snapshot's clock; None before
            the first reset.
        reset_pending: the allocation changed since the last reset, and the reset waits for
            the minimum interval between resets (docs/mechanism.md).
        placed_at_s: job id -> when its current placement began (it started or moved there),
            on the snapshot's clock: how long it has stayed, for amortized moves. A placed
            job missing here is taken as placed at the last round.
    """

    round: int
    job_ids: tuple[str, ...]
    gpu_types: tuple[str, ...]
    received_s: np.ndarray  # (n_jobs, n_types) seconds
    allocation: Allocation | None = None
    placements: Mapping[str, Placement] = field(default_factory=lambda: EMPTY)
    deficit_s: np.ndarray = None  # type: ignore[assignment]  # (n_jobs, n_types) s; default 0
    last_reset_s: float | None = None
    reset_pending: bool = False
    placed_at_s: Mapping[str, float] = field(default_factory=lambda: EMPTY)

    def __post_init__(self) -> None:
        shape = (len(self.job_ids), len(self.gpu_types))
        set_field(self, "received_s", frozen_array(self.received_s, float, "received_s", shape))
        deficit = np.zeros(shape) if self.deficit_s is None else self.deficit_s
        set_field(self, "deficit_s", frozen_array(deficit, float, "deficit_s", shape))
        set_field(self, "placements", frozen_mapping(self.placements))
        set_field(
            self,
            "placed_at_s",
            frozen_mapping({j: t for j, t in self.placed_at_s.items() if j in self.placements}),
        )
        known = index_of(self.job_ids) if self.placements else EMPTY
        for job_id, placement in self.placements.items():
            if job_id not in known or placement.job_id != job_id:
                raise InvalidProblemError(
                    f"round state: placement of {placement.job_id!r} filed under {job_id!r}; "
                    "expected a job of `job_ids` filed under its own id"
                )

    def with_received_s(self, received_s: np.ndarray) -> RoundState:
        """This state with `received_s` replaced (checked); the rest was checked when this
        state was made, so it is copied as it is (the rounds add what ran every round)."""
        shape = (len(self.job_ids), len(self.gpu_types))
        received = frozen_array(received_s, float, "received_s", shape)
        return copy_with(self, _STATE_FIELDS, "received_s", received)

    @classmethod
    def initial(cls, gpu_types: Iterable[str]) -> RoundState:
        """The state before the first round: no jobs, nothing received, nothing placed."""
        types_ = tuple(gpu_types)
        return cls(round=0, job_ids=(), gpu_types=types_, received_s=np.zeros((0, len(types_))))


_STATE_FIELDS = tuple(f.name for f in fields(RoundState))


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """One round's actions, as differences from the last round, for the enactor.

    Every job placed this round is in exactly one of `keep`, `move` and `start`.

    Attributes:
        round: the round's index (1 for the first).
        keep: job -> its placement, the same GPUs as last round (lease extension: leave it).
        move: job -> its new placement; it ran last round elsewhere (checkpoint, then place).
        start: job -> its placement; it did not run last round.
        stop: jobs that ran last round, are still in the snapshot, and are not placed now
            (checkpoint and hold), sorted.
        priority: job of the allocation -> the priority it was chosen with, or its highest
            priority over GPU types if not placed (for logs and the admin comment).
        reset: True when this round reset the received time (a new allocation took effect).
        set_aside: job -> why the round left it out: the policy failed with it (the round went
            on without it). Never placed, kept or stopped; the cluster hands it back.
        held: job -> why it stays on its GPUs although the plain mechanism would have moved or
            stopped it (amortized moves, docs/mechanism.md); such a job is also in `keep`.
        exploring: job of a class in no table -> its exploration stint this round, as
            `core.explore.Stint.to_text` writes it ('k80;0;': the type it is to be measured on,
            rounds waited, types given up).
    """

    round: int
    keep: Mapping[str, Placement] = field(default_factory=lambda: EMPTY)
    move: Mapping[str, Placement] = field(default_factory=lambda: EMPTY)
    start: Mapping[str, Placement] = field(default_factory=lambda: EMPTY)
    stop: tuple[str, ...] = ()
    priority: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    reset: bool = False
    set_aside: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    held: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    exploring: Mapping[str, str] = field(default_factory=lambda: EMPTY)

    def __post_init__(self) -> None:
        for name in ("keep", "move", "start", "priority", "set_aside", "held", "exploring"):
            set_field(self, name, frozen_mapping(getattr(self, name)))
        set_field(self, "stop", tuple(self.stop))

    @property
    def placements(self) -> dict[str, Placement]:
        """Every job placed this round (keep, move and start), by job id, sorted."""
        merged = {**self.keep, **self.move, **self.start}
        return {job_id: merged[job_id] for job_id in sorted(merged)}
