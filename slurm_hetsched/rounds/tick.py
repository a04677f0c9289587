"""One round, the same for the simulator and the live controller:
observe -> decide -> plan -> enact -> record (docs/architecture.md).

The tick holds no cluster-specific code: it talks to a `ClusterBackend` (a simulated cluster or
Slurm) and a `StateStore` (memory or SQLite) through the protocols of core/ports.py. Every
decision is here or in the core; every effect of a decision is in the backend.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic

import numpy as np

from slurm_hetsched.core.explore import ExploreSettings
from slurm_hetsched.core.mechanism import (
    GAVEL_MIN_RESET_INTERVAL_S,
    RoundOptions,
    plan_round,
    record_round,
)
from slurm_hetsched.core.memory_fit import gives_time_where_too_small, too_small
from slurm_hetsched.core.model import Allocation, ClusterSnapshot, Job, Placement, RoundState
from slurm_hetsched.core.model.frozen import index_of
from slurm_hetsched.core.policies.base import Policy, round_options_for
from slurm_hetsched.core.ports import (
    ClusterBackend,
    Observation,
    ObservationT,
    RoundRecord,
    StateStore,
)
from slurm_hetsched.core.problem import SiteData, build_problem, table_rate
from slurm_hetsched.errors import HetschedError
from slurm_hetsched.rounds.exploring import (
    learning_signature,
    restricted,
    stints_now,
    stints_of,
    targets_of,
    with_stints,
)


@dataclass(frozen=True, slots=True)
class TickSettings:
    """How rounds run.

    Attributes:
        round_s: the round length in seconds (Gavel: 360 in simulation).
        min_reset_interval_s: a new allocation resets the received time at most this often
            (docs/mechanism.md).
        round_options: queue order and work conservation of the round mechanism; the tick
            adapts them to its policy (`round_options_for`).
        explore: stints of a class in no table on the types it could use (core/explore.py).
    """

    round_s: float = 360.0
    min_reset_interval_s: float = GAVEL_MIN_RESET_INTERVAL_S
    round_options: RoundOptions = field(default_factory=RoundOptions)
    explore: ExploreSettings = field(default_factory=ExploreSettings)


class Tick(Generic[ObservationT]):
    """Runs rounds of one policy against one backend, keeping the round state in a store."""

    def __init__(
        self,
        policy: Policy,
        site: SiteData,
        backend: ClusterBackend[ObservationT],
        store: StateStore,
        settings: TickSettings | None = None,
    ) -> None:
        self.policy = policy
        self.site = site
        self.backend = backend
        self.store = store
        self.settings = settings or TickSettings()
        self.round_options = round_options_for(policy, self.settings.round_options)
        # A policy that places gangs across GPU types (hadar) also sees the jobs no single
        # type has room for, when the types they run on have room together.
        self.mixes_types = bool(getattr(policy, "mixes_types", False))
        self.last_observation: ObservationT | None = None
        # Seconds each phase of the last round took (observe, decide, plan, enact, record):
        # measured only, never read by a decision.
        self.timings: dict[str, float] = {}
        # Every (job, GPU type) stint given so far (core/explore.py): reported, never read
        # by a decision.
        self.explored: set[tuple[str, str]] = set()

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
        stints = stints_now(last, snapshot, capacity, self.site, self.settings.explore)
        targets = targets_of(stints)
        allocation, recomputed, set_aside = self._decide(last, state, snapshot, capacity, targets)
        timer.lap("decide")
        plan, next_state = plan_round(
            allocation,
            state,
            _without(snapshot, set_aside, state.placements),
            self.settings.round_s,
            min_reset_interval_s=self.settings.min_reset_interval_s,
            options=self.round_options,
            table=self.site.table,
            catalog=self.site.gpu_types,
            stints=targets,
        )
        if set_aside:
            plan = dataclasses.replace(plan, set_aside=set_aside)
        plan = with_stints(plan, stints, snapshot, capacity, self.site)
        self.explored.update(targets.items())
        state = next_state
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
            not_running=tuple(observation.not_running),
        )
        self.store.save_planned(record)  # written before any action is taken
        timer.lap("plan")
        report = self.backend.enact(plan, observation)
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
        state = record_round(last.state, ran)
        running = _running_now(state.placements, observation)
        if len(running) == len(state.placements):
            return state
        return dataclasses.replace(state, placements=running)

    def _decide(
        self,
        last: RoundRecord | None,
        state: RoundState,
        snapshot: ClusterSnapshot,
        capacity: Mapping[str, float],
        targets: Mapping[str, str],
    ) -> tuple[Allocation, bool, dict[str, str]]:
        """The allocation for this round: the last one, unless jobs or GPUs changed (Gavel
        recomputes on arrivals, completions and worker changes, not every round) or a job
        whose row is an estimate learned a type or moved on to another stint
        (rounds/exploring.py); and the jobs set aside because the policy failed with them."""
        table = self.site.table
        # A reservation policy's schedules place jobs slot by slot: it decides every round.
        plans_ahead = bool(getattr(self.policy, "plans_ahead", False))
        if (
            last is not None
            and not plans_ahead
            and _same_jobs(last.allocation, snapshot)
            and dict(last.capacity) == dict(capacity)
            and last.allocation.gpu_types == snapshot.gpu_types
            # a job's memory need grew (core/memory_fit.py): its time there is void
            and not gives_time_where_too_small(last.allocation, snapshot.jobs, self.site.gpu_types)
            and (
                last.snapshot is None
                or learning_signature(last.snapshot, targets_of(stints_of(last)), table)
                == learning_signature(snapshot, targets, table)
            )
        ):
            return last.allocation, False, {}

        # Validation first: a job no GPU type has room for right now waits this round (GPUs
        # of jobs outside our control, drained nodes); it is no failure and nobody's fault.
        fits: dict[tuple[str, int, float | None], bool] = {}  # by class, GPUs, memory need
        for job in snapshot.jobs:
            key = (job.job_class, job.num_gpus, job.mem_gib)
            if key not in fits:
                fits[key] = self._fits(job, snapshot, capacity)
        fitting = tuple(j for j in snapshot.jobs if fits[(j.job_class, j.num_gpus, j.mem_gib)])

        reservations = None if last is None else last.allocation.reservations

        def solve(subset: tuple[Job, ...]) -> Allocation:
            if not subset:
                k = len(snapshot.gpu_types)
                return Allocation(
                    (), snapshot.gpu_types, np.zeros((0, k)), 0.0, 0.0, self.policy.name
                )
            part = dataclasses.replace(snapshot, jobs=subset)
            problem = build_problem(
                part,
                self.site,
                running=state.placements,
                mixed_gangs=self.mixes_types,
                reservations=reservations,
            )
            return self.policy.allocate(restricted(problem, targets))

        allocation, set_aside = allocate_setting_aside(fitting, solve)
        return allocation, True, set_aside

    def _fits(self, job: Job, snapshot: ClusterSnapshot, capacity: Mapping[str, float]) -> bool:
        """Whether some GPU type has `job.num_gpus` free GPUs, enough memory and can run its
        class (for a policy that mixes types: such types together), a class the table does
        not know being left to the policy, which reports it."""
        small = too_small(job.mem_gib, snapshot.gpu_types, self.site.gpu_types)
        try:
            room = [
                capacity.get(t, 0.0)
                for i, t in enumerate(snapshot.gpu_types)
                if not small[i] and table_rate(self.site.table, job.job_class, t, job.num_gpus) > 0
            ]
        except HetschedError:
            return True
        if self.mixes_types:
            return sum(room) >= job.num_gpus
        return any(free >= job.num_gpus for free in room)


# At most this many jobs are set aside in one round: more failures than that are not one
# job's input but the solver or the cluster, and the round fails as a whole.
MAX_SET_ASIDE = 8


def allocate_setting_aside(
    jobs: Sequence[Job], solve: Callable[[tuple[Job, ...]], Allocation]
) -> tuple[Allocation, dict[str, str]]:
    """`solve(jobs)`, or, if the policy fails, the same without the jobs it fails with.

    A failing job is found by halving: the half that fails alone is searched until one job
    fails alone; if each half solves alone, the failure needs jobs of both and the newest
    job is taken out. A job that fails alone is only blamed if another job solves alone, so
    a solver that fails on everything fails the round instead of emptying the queue.

    Returns:
        the allocation of the jobs kept, and job -> why it was set aside.

    Raises:
        the policy's first error, when no single job can be blamed or more than
        MAX_SET_ASIDE jobs would be.
    """
    try:
        return solve(tuple(jobs)), {}
    except Exception as exc:  # any failure of the policy: find the job that causes it
        first = exc
    rest = list(jobs)
    set_aside: dict[str, str] = {}
    while len(set_aside) < MAX_SET_ASIDE:
        culprit = _isolate(rest, solve)
        if culprit is None:
            break
        job, reason = culprit
        set_aside[job.key] = reason
        rest.remove(job)
        try:
            return solve(tuple(rest)), set_aside
        except Exception:
            continue
    raise first


def _isolate(
    jobs: list[Job], solve: Callable[[tuple[Job, ...]], Allocation]
) -> tuple[Job, str] | None:
    """A job the policy fails with, and its error; None if it cannot be pinned on one."""

    def error(subset: list[Job]) -> str | None:
        try:
            solve(tuple(subset))
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    group = list(jobs)
    why = error(group) if len(group) == 1 else None
    while len(group) > 1:
        half = len(group) // 2
        first, second = group[:half], group[half:]
        if (why := error(first)) is not None:
            group = first
        elif (why := error(second)) is not None:
            group = second
        else:  # only together: take the newest job out
            newest = max(group, key=lambda j: (j.arrival_s, j.key))
            return newest, "the policy fails with this job and the others together"
    (job,) = group
    if why is None:
        return None
    others = [j for j in jobs if j is not job][:2]
    if others and all(error([other]) is not None for other in others):
        return None  # every job fails alone: the solver, not this job
    return job, f"the policy fails with this job alone ({why[:160]})"


def _same_jobs(allocation: Allocation, snapshot: ClusterSnapshot) -> bool:
    """Whether the snapshot's jobs are the allocation's (job ids are unique in both)."""
    ids = index_of(allocation.job_ids)  # the same mapping while the allocation stays
    return len(snapshot.jobs) == len(ids) and all(job.key in ids for job in snapshot.jobs)


def _running_now(
    placements: Mapping[str, Placement], observation: Observation
) -> dict[str, Placement]:
    """The last round's placements that still hold: not reported as not running, and on GPUs
    the snapshot still offers (a drained or vanished node, or GPUs taken by a job outside our
    control, ends a placement), so a job whose move failed or whose node left is re-planned
    instead of being counted twice."""
    free = {
        (node.name, t): node.free_gpus(t) for node in observation.snapshot.nodes for t in node.gpus
    }
    gone = set(observation.not_running)
    present = {job.key for job in observation.snapshot.jobs}
    kept: dict[str, Placement] = {}
    for key in sorted(placements):
        if key in gone or key not in present:
            continue
        slices = placements[key].slices
        if all(free.get((s.node, s.gpu_type), 0) >= s.count for s in slices):
            for s in slices:
                free[(s.node, s.gpu_type)] -= s.count
            kept[key] = placements[key]
    return kept


def _without(
    snapshot: ClusterSnapshot, set_aside: Mapping[str, str], placements: Mapping[str, Placement]
) -> ClusterSnapshot:
    """The snapshot without the jobs set aside; the GPUs such a job ran on last round stay
    busy, since it keeps running where it is."""
    if not set_aside:
        return snapshot
    busy: dict[tuple[str, str], int] = {}
    for key in set_aside:
        placement = placements.get(key)
        for part in placement.slices if placement is not None else ():
            busy[(part.node, part.gpu_type)] = busy.get((part.node, part.gpu_type), 0) + part.count
    nodes = tuple(
        dataclasses.replace(
            node,
            gpus_in_use={
                t: min(n, node.gpus_in_use.get(t, 0) + busy.get((node.name, t), 0))
                for t, n in node.gpus.items()
            },
        )
        for node in snapshot.nodes
    )
    jobs = tuple(job for job in snapshot.jobs if job.key not in set_aside)
    return dataclasses.replace(snapshot, nodes=nodes, jobs=jobs)


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
