"""One round, the same for the simulator and the live controller:
observe -> decide -> plan -> enact -> record (docs/architecture.md).

The tick holds no cluster-specific code: it talks to a `ClusterBackend` (a simulated cluster or
Slurm) and a `StateStore` (memory or SQLite) through the protocols of core/ports.py. Every
decision is here or in the core; every effect of a decision is in the backend.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from slurm_hetsched.core.mechanism import (
    GAVEL_MIN_RESET_INTERVAL_S,
    RoundOptions,
    plan_round,
    record_round,
)
from slurm_hetsched.core.model import Allocation, ClusterSnapshot, RoundState
from slurm_hetsched.core.policies.base import Policy, round_options_for
from slurm_hetsched.core.ports import ClusterBackend, Observation, RoundRecord, StateStore
from slurm_hetsched.core.problem import SiteData, build_problem


@dataclass(frozen=True, slots=True)
class TickSettings:
    """How rounds run.

    Attributes:
        round_s: the round length in seconds (Gavel: 360 in simulation).
        min_reset_interval_s: a new allocation resets the received time at most this often
            (docs/mechanism.md).
        round_options: queue order and work conservation of the round mechanism; the tick
            adapts them to its policy (`round_options_for`).
    """

    round_s: float = 360.0
    min_reset_interval_s: float = GAVEL_MIN_RESET_INTERVAL_S
    round_options: RoundOptions = field(default_factory=RoundOptions)


class Tick:
    """Runs rounds of one policy against one backend, keeping the round state in a store."""

    def __init__(
        self,
        policy: Policy,
        site: SiteData,
        backend: ClusterBackend,
        store: StateStore,
        settings: TickSettings | None = None,
    ) -> None:
        self.policy = policy
        self.site = site
        self.backend = backend
        self.store = store
        self.settings = settings or TickSettings()
        self.round_options = round_options_for(policy, self.settings.round_options)
        self.last_observation: Observation | None = None
        # Seconds each phase of the last round took (observe, decide, plan, enact, record):
        # measured only, never read by a decision.
        self.timings: dict[str, float] = {}

    def run_round(self) -> RoundRecord:
        """Observe the cluster, decide, plan, record the plan, enact it, record the outcome."""
        timer = _PhaseTimer()
        observation = self.backend.observe()
        self.last_observation = observation
        last = self.store.load()
        timer.lap("observe")
        snapshot = observation.snapshot
        state = self._state_after_last_round(last, observation)
        capacity = _capacity(snapshot)
        allocation, recomputed = self._decide(last, state, snapshot, capacity)
        timer.lap("decide")
        plan, state = plan_round(
            allocation,
            state,
            snapshot,
            self.settings.round_s,
            min_reset_interval_s=self.settings.min_reset_interval_s,
            options=self.round_options,
            table=self.site.table,
        )
        record = RoundRecord(
            round=plan.round,
            now_s=snapshot.now_s,
            allocation=allocation,
            recomputed=recomputed,
            capacity=capacity,
            plan=plan,
            state=state,
            snapshot=snapshot,
            ran_s=dict(observation.ran_s),
        )
        self.store.save_planned(record)  # written before any action is taken
        timer.lap("plan")
        report = self.backend.enact(plan)
        timer.lap("enact")
        record = dataclasses.replace(record, report=report)
        self.store.save_enacted(record)
        timer.lap("record")
        self.timings = timer.laps
        return record

    def _state_after_last_round(
        self, last: RoundRecord | None, observation: Observation
    ) -> RoundState:
        """The last round's state with the seconds its jobs actually ran added."""
        if last is None:
            return RoundState.initial(observation.snapshot.gpu_types)
        placed = last.state.placements
        ran = {job: s for job, s in observation.ran_s.items() if job in placed}
        return record_round(last.state, ran)

    def _decide(
        self,
        last: RoundRecord | None,
        state: RoundState,
        snapshot: ClusterSnapshot,
        capacity: Mapping[str, float],
    ) -> tuple[Allocation, bool]:
        """The allocation for this round: the last one, unless jobs or GPUs changed (Gavel
        recomputes on arrivals, completions and worker changes, not every round)."""
        jobs = tuple(sorted(job.key for job in snapshot.jobs))
        if (
            last is not None
            and tuple(sorted(last.allocation.job_ids)) == jobs
            and dict(last.capacity) == dict(capacity)
            and last.allocation.gpu_types == snapshot.gpu_types
        ):
            return last.allocation, False
        if not jobs:
            k = len(snapshot.gpu_types)
            empty = Allocation((), snapshot.gpu_types, np.zeros((0, k)), 0.0, 0.0, self.policy.name)
            return empty, True
        problem = build_problem(snapshot, self.site, running=state.placements)
        return self.policy.allocate(problem), True


class _PhaseTimer:
    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.laps[phase] = now - self._last
        self._last = now


def _capacity(snapshot: ClusterSnapshot) -> dict[str, float]:
    types = snapshot.gpu_types
    return {t: float(c) for t, c in zip(types, snapshot.capacity(types), strict=True)}
