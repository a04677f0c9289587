"""The simulated cluster with HadarE's forking: a `ClusterBackend` whose jobs run as copies.

Each trace job may run as several copies (core/fork_rounds.py says how many and which: beyond
a job's first, only on GPUs that no job's first copy needs, unless forking is free): the
snapshot shows the policy one ordinary job per copy (key `JOB#i`; a job that cannot fork keeps
its own key and runs exactly as on sim/cluster.py's `SimulatedCluster`), and the backend is the
job tracker. At `enact` it gives each copy the policy placed a step budget for the round; at
the next `observe` it adds up what the copies did, counts it toward the job's total (x the
step efficiency in an averaged round) and ends the job, once the total is reached, at the
moment its last copy finished.

Time in a round, per copy: its restart when newly placed on a job that has run (it loads the
consolidated checkpoint), the averaging overhead when the round has more than one copy, then
its budget at its steps/s, then idle (paused) until the round ends. Busy time (intervals,
utilisation) is the first three; the copy holds its GPUs the whole round (`ran_s`), as a
paused copy does live. A copy placed but not started (`plan_round` leaves it out) is reported
as not running, so the round state forgets its placement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from slurm_hetsched.core.costs import Interval
from slurm_hetsched.core.fork_rounds import (
    Demand,
    ForkSettings,
    copies_allowed,
    offer_copies,
    plan_round,
)
from slurm_hetsched.core.model import ClusterSnapshot, Job, Node, Placement, RoundPlan
from slurm_hetsched.core.ports import EnactReport, Observation
from slurm_hetsched.core.problem import placement_rate, table_rate
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.rounds.clocks import SimClock
from slurm_hetsched.sim.cluster import SimulationError
from slurm_hetsched.sim.restart_costs import restart_s_of
from slurm_hetsched.sim.traces import TraceJob

_STEPS_EPS = 1e-6  # as sim/cluster.py: below this many steps a job is done


def copy_key(job_id: str, index: int) -> str:
    """The key of copy `index` (1, 2, ...) of a forked job."""
    return f"{job_id}#{index}"


@dataclass(slots=True)
class _Copy:
    key: str
    placement: Placement | None = None
    begin_s: float = 0.0
    restart_s: float = 0.0  # this round
    overhead_s: float = 0.0  # this round
    budget: float = 0.0  # raw steps this round
    rate: float = 0.0
    started: bool = False  # placed and given a budget this round
    attained_gpu_s: float = 0.0


@dataclass(slots=True)
class ForkedJob:
    """One trace job as the forking cluster tracks it (what `sim.run.sim_result` reads, and
    the tracker's own figures)."""

    trace: TraceJob
    steps_left: float
    restart_s: float
    node_rates: tuple[float, ...]  # steps/s on the nodes its copies may use, fastest first
    copies: dict[str, _Copy]
    exposed: tuple[str, ...] = ()
    credit: float = 1.0  # this round's worth of a raw step
    start_s: float | None = None
    end_s: float | None = None
    has_run: bool = False
    preemptions: int = 0
    moves: int = 0
    restart_gpu_s: float = 0.0
    gpu_s: dict[str, float] = field(default_factory=dict)
    raw_steps: float = 0.0  # steps trained by all copies
    averaged_rounds: int = 0  # rounds run with more than one copy
    copy_rounds: int = 0  # copies started, summed over rounds
    overhead_gpu_s: float = 0.0  # averaging overhead actually spent x GPUs
    not_started: int = 0  # copies placed but not worth starting, summed over rounds


@dataclass(frozen=True, slots=True)
class ForkStats:
    """What forking did in a run, over all jobs."""

    copy_rounds: int
    averaged_rounds: int
    overhead_gpu_s: float
    raw_steps: float
    credited_steps: float
    not_started: int

    @property
    def lost_steps(self) -> float:
        """Steps trained that did not count (the efficiency's toll)."""
        return self.raw_steps - self.credited_steps


class ForkingCluster:
    """A `ClusterBackend` that replays a trace on fixed nodes, forking jobs into copies.

    Args:
        trace: the jobs; arrivals from the trace's start (0).
        nodes: the cluster's nodes.
        table: steps/s per job class, GPU type and count (the truth).
        clock: the simulation's clock, shared with the driver.
        round_s: the round length (a copy's budget fits in it).
        fork: the forking knobs.
        restart_overhead_s: a job's restart cost when neither its trace nor
            `restart_s_by_class` gives one.
        restart_s_by_class: job class -> restart cost in seconds.
        forked: the ids of the jobs that may fork; None: every job.
    """

    def __init__(
        self,
        trace: Sequence[TraceJob],
        nodes: Sequence[Node],
        table: ThroughputTable,
        clock: SimClock,
        round_s: float,
        fork: ForkSettings,
        restart_overhead_s: float = 10.0,
        restart_s_by_class: Mapping[str, float] | None = None,
        *,
        forked: frozenset[str] | None = None,
    ) -> None:
        by_class = dict(restart_s_by_class or {})
        for name, cost in {"default": restart_overhead_s, **by_class}.items():
            if not (math.isfinite(cost) and cost >= 0):
                raise SimulationError(f"restart overhead {cost!r} ({name}): expected >= 0 s")
        self.nodes = tuple(Node(n.name, n.gpus, available=n.available) for n in nodes)
        self.table = table
        self.clock = clock
        self.round_s = round_s
        self.fork = fork
        self.jobs: dict[str, ForkedJob] = {}
        for job in trace:
            rates = sorted((r for r in self._node_rates(job) if r > 0), reverse=True)
            may_fork = forked is None or job.job_id in forked
            n = copies_allowed(fork.max_copies if may_fork else 1, len(rates))
            keys = [job.job_id] if n == 1 else [copy_key(job.job_id, i) for i in range(1, n + 1)]
            self.jobs[job.job_id] = ForkedJob(
                job,
                float(job.total_steps),
                restart_s_of(job.restart_s, job.job_class, by_class, restart_overhead_s),
                tuple(rates[:n]),
                {key: _Copy(key) for key in keys},
            )
        if len(self.jobs) != len(trace):
            raise SimulationError("the trace has duplicate job ids")
        self._pending = sorted(
            self.jobs.values(), key=lambda j: (j.trace.arrival_s, j.trace.job_id)
        )
        self._next_pending = 0
        self._active: dict[str, ForkedJob] = {}
        self.intervals: list[Interval] = []
        self.finish_times: list[float] = []

    # -- ClusterBackend ------------------------------------------------------------------------

    def observe(self) -> Observation:
        """Settle the round that just ran; report the copies each job offers this round."""
        now = self.clock.now()
        ran_s, finished, not_running = self._settle(now)
        while (
            self._next_pending < len(self._pending)
            and self._pending[self._next_pending].trace.arrival_s <= now
        ):
            state = self._pending[self._next_pending]
            self._active[state.trace.job_id] = state
            self._next_pending += 1
        offered = offer_copies(
            {j: Demand(s.steps_left, s.node_rates, self.round_s - s.restart_s, s.trace.num_gpus)
             for j, s in self._active.items()},
            sum(sum(n.gpus.values()) for n in self.nodes if n.available),
            self.fork,
        )  # fmt: skip
        jobs = [c for j in sorted(self._active) for c in self._offer(self._active[j], offered[j])]
        snapshot = ClusterSnapshot(now_s=now, nodes=self.nodes, jobs=tuple(jobs))
        return Observation(
            snapshot=snapshot, ran_s=ran_s, finished=finished, not_running=not_running
        )

    def enact(self, plan: RoundPlan, observed: Observation | None = None) -> EnactReport:
        """Place the copies as planned and give each job's copies their budgets."""
        now = self.clock.now()
        placed = {**plan.keep, **plan.move, **plan.start}
        offered = {key: job for job in self._active.values() for key in job.exposed}
        unknown = sorted(key for key in placed if key not in offered)
        if unknown:
            raise SimulationError(f"round {plan.round} placed copies not offered: {unknown}")
        for job in self._active.values():
            offers: dict[str, tuple[float, float]] = {}
            for key in job.exposed:
                copy, new = job.copies[key], placed.get(key)
                copy.started, copy.budget = False, 0.0
                copy.restart_s = copy.overhead_s = 0.0
                if new is None:
                    if copy.placement is not None:
                        job.preemptions += 1  # stopped while the job has work
                    copy.placement = None
                    continue
                if copy.placement is None or key not in plan.keep:
                    if copy.placement is not None:
                        job.preemptions += 1
                        job.moves += 1
                    copy.restart_s = job.restart_s if job.has_run else 0.0
                copy.placement, copy.begin_s = new, now
                copy.rate = self._rate(job.trace, new)
                offers[key] = (copy.rate, self.round_s - copy.restart_s)
            if offers:
                self._budget(job, offers, now)
        return EnactReport()

    # -- for the driver ------------------------------------------------------------------------

    @property
    def active(self) -> int:
        """Jobs arrived and not finished."""
        return len(self._active)

    @property
    def running(self) -> int:
        """Copies placed now."""
        return sum(
            1 for j in self._active.values() for c in j.copies.values() if c.placement is not None
        )

    def next_arrival_s(self) -> float | None:
        """When the next job arrives, or None if every job has arrived."""
        if self._next_pending >= len(self._pending):
            return None
        return self._pending[self._next_pending].trace.arrival_s

    @property
    def done(self) -> bool:
        """Every job arrived and finished."""
        return not self._active and self.next_arrival_s() is None

    def job_states(self) -> Mapping[str, ForkedJob]:
        return self.jobs

    def stats(self) -> ForkStats:
        """What forking did, over all jobs so far."""
        jobs = self.jobs.values()
        return ForkStats(
            copy_rounds=sum(j.copy_rounds for j in jobs),
            averaged_rounds=sum(j.averaged_rounds for j in jobs),
            overhead_gpu_s=sum(j.overhead_gpu_s for j in jobs),
            raw_steps=sum(j.raw_steps for j in jobs),
            credited_steps=sum(float(j.trace.total_steps) - j.steps_left for j in jobs),
            not_started=sum(j.not_started for j in jobs),
        )

    # -- the tracker -----------------------------------------------------------------------------

    def _offer(self, job: ForkedJob, n: int) -> list[Job]:
        """The job's `n` copies offered this round, each with its share of the raw steps still
        needed; copies no longer offered lose their placement."""
        keys = list(job.copies)
        if len(keys) > 1:
            # The copies kept are those on the fastest nodes now (the paper's last round: the
            # fastest finish), so that the policy can leave them where they are.
            keys.sort(key=lambda k: -self._rate_now(job, job.copies[k]))
        job.exposed = tuple(keys[:n])
        for key in keys[n:]:
            job.copies[key].placement = None
        need = job.steps_left if n == 1 else job.steps_left / self.fork.efficiency
        base = job.trace.to_job(steps_remaining=need / n, restart_s=job.restart_s)
        total = float(job.trace.total_steps) / len(keys)
        return [
            base.with_attained(job.copies[key].attained_gpu_s)
            if len(keys) == 1
            else replace(
                base,
                key=key,
                total_steps=total,
                attained_gpu_s=job.copies[key].attained_gpu_s,
            )
            for key in job.exposed
        ]

    def _budget(self, job: ForkedJob, offers: dict[str, tuple[float, float]], now: float) -> None:
        planned = plan_round(job.steps_left, offers, self.fork)
        job.credit = planned.credit
        for key in offers:
            copy = job.copies[key]
            copy.budget = planned.budgets[key]
            copy.started = copy.budget > 0
            copy.overhead_s = planned.overhead_s if copy.started else 0.0
        started = len(planned.running)
        job.not_started += len(offers) - started
        if started:
            job.copy_rounds += started
            job.averaged_rounds += started > 1
            job.has_run = True
            if job.start_s is None:
                job.start_s = now

    def _settle(self, now: float) -> tuple[dict[str, float], tuple[str, ...], tuple[str, ...]]:
        """Run every started copy from its round's start to now; count each job's steps."""
        ran_s: dict[str, float] = {}
        finished: list[str] = []
        not_running: list[str] = []
        for job_id in sorted(self._active):
            job = self._active[job_id]
            placed = [c for c in job.copies.values() if c.placement is not None]
            if not placed:
                continue
            raw, ends = 0.0, []
            for copy in placed:
                if not copy.started:
                    not_running.append(copy.key)
                    copy.placement = None
                    continue
                steps, busy_end = self._run_copy(job, copy, now)
                raw += steps
                ends.append(busy_end)
            job.raw_steps += raw
            job.steps_left = max(0.0, job.steps_left - job.credit * raw)
            if job.steps_left <= _STEPS_EPS:
                job.steps_left = 0.0
                job.end_s = max(ends, default=now)
            end = now if job.end_s is None else job.end_s
            for copy in placed:
                if copy.started:  # held its GPUs until now, or until the job ended
                    ran_s[copy.key] = max(0.0, end - copy.begin_s)
                    copy.started, copy.budget = False, 0.0
                    copy.restart_s = copy.overhead_s = 0.0
                    copy.begin_s = now
            if job.end_s is not None:
                finished.extend(job.exposed)
                self.finish_times.append(job.end_s)
                for copy in job.copies.values():
                    copy.placement = None
                del self._active[job_id]
        return ran_s, tuple(finished), tuple(not_running)

    def _run_copy(self, job: ForkedJob, copy: _Copy, now: float) -> tuple[float, float]:
        """Raw steps the copy trained in its round up to now, and when its work ended (or
        now); its busy time recorded."""
        placement = copy.placement
        assert placement is not None  # started copies are placed
        work_s = copy.restart_s + copy.overhead_s + copy.budget / copy.rate
        spent = min(max(0.0, now - copy.begin_s), work_s)
        training = max(0.0, spent - copy.restart_s - copy.overhead_s)
        steps = min(copy.budget, copy.rate * training)
        restart = min(spent, copy.restart_s)
        overhead = min(spent - restart, copy.overhead_s)
        gpus = placement.num_gpus
        job.restart_gpu_s += restart * gpus
        job.overhead_gpu_s += overhead * gpus
        copy.attained_gpu_s += spent * gpus
        begin, end = copy.begin_s, copy.begin_s + spent
        for piece in placement.slices:
            job.gpu_s[piece.gpu_type] = job.gpu_s.get(piece.gpu_type, 0.0) + spent * piece.count
            if spent > 0:
                self.intervals.append(
                    Interval(job.trace.job_id, piece.node, piece.gpu_type, piece.count, begin, end)
                )
        return steps, end

    def _node_rates(self, job: TraceJob) -> list[float]:
        """The job's steps/s on each node, at its best type there with room for the job."""
        return [
            max(
                (
                    table_rate(self.table, job.job_class, t, job.num_gpus)
                    for t, n in node.gpus.items()
                    if n >= job.num_gpus
                ),
                default=0.0,
            )
            for node in self.nodes
        ]

    def _rate_now(self, job: ForkedJob, copy: _Copy) -> float:
        """The copy's steps/s where it is placed; 0 when it is not."""
        if copy.placement is None:
            return 0.0
        return placement_rate(self.table, job.trace.job_class, copy.placement)

    def _rate(self, job: TraceJob, placement: Placement) -> float:
        rate = placement_rate(self.table, job.job_class, placement)
        if not rate > 0:
            raise SimulationError(
                f"job {job.job_id!r} ({job.job_class}) was placed on "
                f"{'+'.join(placement.gpu_types)}, where the throughput table says it cannot run"
            )
        return rate
