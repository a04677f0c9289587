"""The ports the round tick needs, as protocols: a cluster to observe and act on, a clock and a
store for the round state (docs/architecture.md, "One tick for simulation and live").

The simulator implements them with a simulated cluster, a simulated clock and memory; the live
controller with Slurm, the system clock and SQLite. The tick (rounds/tick.py) sees only
these protocols, so both decide with exactly the same code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from slurm_hetsched.core.model import Allocation, ClusterSnapshot, RoundPlan, RoundState


@dataclass(frozen=True, slots=True)
class Observation:
    """What the cluster reports at the start of a round.

    Attributes:
        snapshot: the cluster now: nodes (GPUs held by managed jobs NOT counted as in use)
            and the managed jobs that still have work (arrived, not finished).
        ran_s: job -> wall-clock seconds it held its GPUs during the round that just ended,
            for the jobs placed in that round (a job that finished mid-round: until it
            finished). Fed to `record_round`, so received time counts the same in both.
        finished: jobs that finished since the last observation.
        not_running: jobs the last round placed that do not run there now, by what the
            cluster reports (requeued meanwhile, a move that failed half-way, pending again
            after a controller or slurmctld restart): the round state forgets their
            placements, so the round plans them like any job that waits.
    """

    snapshot: ClusterSnapshot
    ran_s: Mapping[str, float] = field(default_factory=dict)
    finished: tuple[str, ...] = ()
    not_running: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EnactReport:
    """What the cluster did with a plan: the jobs whose action failed, with the reason.

    A failed job keeps what it had (it was never left held or cancelled by the failure); the
    next round sees it as it is.
    """

    failed: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """One round as recorded: when, what was decided and what happened.

    Attributes:
        round: the round's index (1 for the first).
        now_s: the round's start on the clock.
        allocation: the allocation the round realised.
        recomputed: True when the policy was solved this round (jobs or nodes changed).
        capacity: free GPUs per type the allocation was computed for (a change recomputes).
        plan: the round's actions.
        state: the round state after planning (what the next round starts from).
        report: the enactment's outcome, or None before enactment.
        snapshot: what the round observed (journaled live, so the simulator's tick can replay
            the round and must plan the same), or None.
        ran_s: the observation's seconds run per job in the round before (journaled with the
            snapshot: together they are everything the tick read from the cluster).
        not_running: the observation's `not_running` (journaled for the replay too).
    """

    round: int
    now_s: float
    allocation: Allocation
    recomputed: bool
    capacity: Mapping[str, float]
    plan: RoundPlan
    state: RoundState
    report: EnactReport | None = None
    snapshot: ClusterSnapshot | None = None
    ran_s: Mapping[str, float] = field(default_factory=dict)
    not_running: tuple[str, ...] = ()


ObservationT = TypeVar("ObservationT", bound=Observation)


class ClusterBackend(Protocol[ObservationT]):
    """A cluster the tick can observe and change.

    A backend may observe more than the tick decides on (live: Slurm's own view of each job):
    its observation type extends `Observation`, and the tick hands the very value `observe`
    returned back to `enact`, so a backend never acts on a view of the cluster that a later
    observation replaced.
    """

    def observe(self) -> ObservationT:
        """The cluster now, and what ran since the last observation."""
        ...

    def enact(self, plan: RoundPlan, observed: ObservationT) -> EnactReport:
        """Carry out a round plan made from `observed`: leave `keep`, move `move`, start
        `start`, stop `stop`."""
        ...


class Clock(Protocol):
    """Seconds on the cluster's clock: simulated (jumps) or the system's (rounds/clocks.py).
    Both drivers read time only through one of these."""

    def now(self) -> float: ...

    def sleep_until(self, t_s: float) -> None:
        """Return once `now() >= t_s` (live: sleep; simulated: jump)."""
        ...


class StateStore(Protocol):
    """Where the round state survives between rounds (and, live, restarts)."""

    def load(self) -> RoundRecord | None:
        """The last round recorded, or None before the first."""
        ...

    def save_planned(self, record: RoundRecord) -> None:
        """Record a planned round before any of its actions is taken."""
        ...

    def save_enacted(self, record: RoundRecord) -> None:
        """Record the round again with its enactment report."""
        ...
