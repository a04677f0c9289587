"""The simulated cluster: a `ClusterBackend` over a trace, on a clock that jumps.

Jobs arrive at their trace times, run at the throughput table's steps/s on the GPUs the plan
gives them (a gang across types at its slowest type's: core.problem.placement_rate), and
finish at the exact moment their last step runs (mid-round). A job placed on other GPUs than
before (a move, or a restart after a stop) first pays its own restart cost: it
holds its GPUs but makes no progress. A job's cost is its trace's `restart_s`, else its class's,
else the run's default (sim/restart_costs.py); the snapshot reports it as `Job.restart_s`, as
the live controller reports what it measured. That is everything the simulation adds; every
decision is the tick's (rounds/tick.py), exactly as on Slurm.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_hetsched.core.costs import Interval
from slurm_hetsched.core.model import ClusterSnapshot, GpuSlice, Job, Node, Placement, RoundPlan
from slurm_hetsched.core.ports import EnactReport, Observation
from slurm_hetsched.core.problem import placement_rate, table_rate
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.errors import HetschedError
from slurm_hetsched.rounds.clocks import SimClock
from slurm_hetsched.sim.restart_costs import restart_s_of
from slurm_hetsched.sim.traces import TraceJob

# Below this many steps a job is done: floating-point residue of steps = rate x seconds.
_STEPS_EPS = 1e-6


class SimulationError(HetschedError, RuntimeError):
    """The simulation reached a state it cannot go on from (a bug or a bad plan)."""


@dataclass(slots=True)
class _JobState:
    """One trace job as the simulated cluster tracks it (mutable, private)."""

    trace: TraceJob
    steps_left: float
    restart_s: float  # what one move costs this job
    placement: Placement | None = None
    placed_at_s: float = 0.0  # when the current placement began
    overhead_left_s: float = 0.0  # restart overhead still to pay on the current placement
    rate: float = 0.0  # steps/s on the current placement
    start_s: float | None = None
    end_s: float | None = None
    has_run: bool = False  # has a checkpoint to restart from
    preemptions: int = 0  # moved, or stopped with work left
    moves: int = 0  # moved straight to other GPUs (not counting restarts after a stop)
    restart_gpu_s: float = 0.0  # restart time actually spent x GPUs held meanwhile
    gpu_s: dict[str, float] = field(default_factory=dict)


class SimulatedCluster:
    """A `ClusterBackend` that replays a trace on fixed nodes.

    Args:
        trace: the jobs, any order; arrivals from the trace's start (0).
        nodes: the cluster's nodes (their `gpus_in_use` are ignored: every GPU is ours).
        table: steps/s per job class, GPU type and count (a job spread over nodes runs at the
            table's unconsolidated rate where it has one).
        clock: the simulation's clock, shared with the driver.
        restart_overhead_s: seconds a job spends restarting after it changes GPUs, for jobs
            whose cost neither the trace nor `restart_s_by_class` gives.
        restart_s_by_class: job class -> restart cost in seconds, over the default.
        reports_rates: report each job's steps/s on every type it has trained on in the
            snapshot (`Job.measured_steps_per_s`), as the live controller reads them from its
            progress reports: the policy learns online (what `hetsched simulate --unprofiled`
            measures). Off, the policy's table is the truth and nothing needs learning.

    Raises:
        SimulationError: a negative or non-finite cost, or duplicate job ids.
    """

    def __init__(
        self,
        trace: Sequence[TraceJob],
        nodes: Sequence[Node],
        table: ThroughputTable,
        clock: SimClock,
        restart_overhead_s: float = 10.0,
        restart_s_by_class: Mapping[str, float] | None = None,
        *,
        reports_rates: bool = False,
    ) -> None:
        by_class = dict(restart_s_by_class or {})
        for name, cost in {"default": restart_overhead_s, **by_class}.items():
            if not (math.isfinite(cost) and cost >= 0):
                raise SimulationError(f"restart overhead {cost!r} ({name}): expected >= 0 s")
        self.nodes = tuple(Node(n.name, n.gpus, available=n.available) for n in nodes)
        self.table = table
        self.clock = clock
        self.restart_overhead_s = restart_overhead_s
        self.reports_rates = reports_rates
        self.jobs = {
            job.job_id: _JobState(
                job,
                float(job.total_steps),
                restart_s_of(job.restart_s, job.job_class, by_class, restart_overhead_s),
            )
            for job in trace
        }
        if len(self.jobs) != len(trace):
            raise SimulationError("the trace has duplicate job ids")
        self._pending = sorted(
            self.jobs.values(), key=lambda j: (j.trace.arrival_s, j.trace.job_id)
        )
        self._next_pending = 0
        self._active: dict[str, _JobState] = {}
        self._placed: set[str] = set()  # active jobs with a placement
        # Active job -> its Job as the snapshot reports it, kept up to date as jobs arrive,
        # run and finish (most wait, so most rounds rebuild only the running jobs' Jobs);
        # the active ids, sorted, until the set changes.
        self._job_of: dict[str, Job] = {}
        self._order: tuple[str, ...] | None = None
        self._last_s = clock.now()
        # What ran where and when, one interval per stay on the same GPUs (see _record).
        self._intervals: list[Interval | None] = []
        # Each stay still going, by (job, node, GPU type): [index, count, start, end]; it
        # becomes an Interval at its index once it ends (the list stays in order of start).
        self._open: dict[tuple[str, str, str], list[Any]] = {}
        self.finish_times: list[float] = []

    # -- ClusterBackend ------------------------------------------------------------------------

    def observe(self) -> Observation:
        """Run the placed jobs up to now; report what ran, what finished and what waits."""
        now = self.clock.now()
        ran_s, finished = self._advance_to(now)
        while (
            self._next_pending < len(self._pending)
            and self._pending[self._next_pending].trace.arrival_s <= now
        ):
            state = self._pending[self._next_pending]
            job_id = state.trace.job_id
            self._active[job_id] = state
            job = state.trace.to_job(steps_remaining=state.steps_left, restart_s=state.restart_s)
            self._job_of[job_id] = self._cannot_run(job) if self.reports_rates else job
            self._order = None
            self._next_pending += 1
        if self._order is None:
            self._order = tuple(sorted(self._active))
        snapshot = ClusterSnapshot(
            now_s=now, nodes=self.nodes, jobs=tuple(map(self._job_of.__getitem__, self._order))
        )
        return Observation(snapshot=snapshot, ran_s=ran_s, finished=finished)

    def enact(self, plan: RoundPlan, observed: Observation | None = None) -> EnactReport:
        """Place the jobs as planned, from now; stopped jobs lose their GPUs. (The simulated
        cluster is its own record of what it runs, so `observed` adds nothing here.)"""
        now = self.clock.now()
        placed = {**plan.keep, **plan.move, **plan.start}
        unknown = sorted(job_id for job_id in placed if job_id not in self._active)
        if unknown:
            raise SimulationError(f"round {plan.round} placed jobs that are not active: {unknown}")
        # Only jobs placed before or now can change (the others wait, unplaced, as they were).
        for job_id in self._placed.union(placed):
            state = self._active[job_id]
            new = placed.get(job_id)
            old = state.placement
            if new is None:
                if old is not None:
                    state.preemptions += 1  # stopped while it still has work
                state.placement = None
                self._placed.discard(job_id)
                continue
            if old is not None and job_id in plan.keep:
                state.placed_at_s = now  # lease extended: keeps running, no overhead
                continue
            if old is not None:
                state.preemptions += 1  # moved to other GPUs
                state.moves += 1
            state.placement = new
            self._placed.add(job_id)
            state.placed_at_s = now
            # A restart cut short by another move or a stop is not owed twice: the new one
            # replaces it (the checkpoint it restores from is the same).
            state.overhead_left_s = state.restart_s if state.has_run else 0.0
            state.rate = self._rate(state.trace, new)
            if state.start_s is None:
                state.start_s = now
            state.has_run = True
        return EnactReport()

    # -- for the driver ------------------------------------------------------------------------

    @property
    def active(self) -> int:
        """Jobs arrived and not finished."""
        return len(self._active)

    @property
    def running(self) -> int:
        """Jobs placed now."""
        return sum(1 for s in self._active.values() if s.placement is not None)

    def next_arrival_s(self) -> float | None:
        """When the next job arrives, or None if every job has arrived."""
        if self._next_pending >= len(self._pending):
            return None
        return self._pending[self._next_pending].trace.arrival_s

    @property
    def done(self) -> bool:
        """Every job arrived and finished."""
        return not self._active and self.next_arrival_s() is None

    def job_states(self) -> Mapping[str, _JobState]:
        return self.jobs

    # -- the simulation itself -----------------------------------------------------------------

    def _advance_to(self, now: float) -> tuple[dict[str, float], tuple[str, ...]]:
        """Run every placed job from its placement's start (or the last observation) to now."""
        since = self._last_s
        ran_s: dict[str, float] = {}
        finished = []
        for job_id in sorted(self._placed):
            state = self._active[job_id]
            placement = state.placement
            assert placement is not None  # _placed holds exactly the placed jobs
            begin = max(since, state.placed_at_s)
            span = max(0.0, now - begin)
            overhead = min(span, state.overhead_left_s)
            state.overhead_left_s -= overhead
            state.restart_gpu_s += overhead * placement.num_gpus
            working = span - overhead
            needed = state.steps_left / state.rate
            if working >= needed - 1e-9:
                end = begin + overhead + needed
                state.steps_left = 0.0
                state.end_s = end
            else:
                end = now
                state.steps_left = max(0.0, state.steps_left - state.rate * working)
                if state.steps_left <= _STEPS_EPS:
                    state.steps_left, state.end_s = 0.0, now
            held = end - begin
            ran_s[job_id] = held
            for piece in placement.slices:
                state.gpu_s[piece.gpu_type] = state.gpu_s.get(piece.gpu_type, 0.0) + (
                    held * piece.count
                )
                if held > 0:
                    self._record(job_id, piece, begin, end)
            if state.end_s is None:
                job = self._job_of[job_id]
                if job.steps_remaining != state.steps_left:
                    job = job.with_steps_remaining(state.steps_left)
                if self.reports_rates and working > 0:
                    job = _with_measurement(job, placement, state.rate)
                if held > 0:
                    job = job.with_attained(sum(state.gpu_s.values()))
                self._job_of[job_id] = job
            else:
                state.placement = None
                self._placed.discard(job_id)
                finished.append(job_id)
                self.finish_times.append(state.end_s)
        for job_id in finished:
            del self._active[job_id]
            del self._job_of[job_id]
            self._order = None
        # Only stays that reach now can go on next round.
        for key, stay in list(self._open.items()):
            if stay[3] != now:
                self._close(key, stay)
        self._last_s = now
        return ran_s, tuple(finished)

    def _record(self, job_id: str, piece: GpuSlice, begin: float, end: float) -> None:
        """Add what ran; a job that goes on on the same GPUs from where its stay reached
        extends that stay (one interval per stay, not one per round: the same energy and busy
        GPUs, a fraction of the memory)."""
        key = (job_id, piece.node, piece.gpu_type)
        stay = self._open.get(key)
        if stay is not None:
            if stay[3] == begin and stay[1] == piece.count:
                stay[3] = end
                return
            self._close(key, stay)
        self._open[key] = [len(self._intervals), piece.count, begin, end]
        self._intervals.append(None)

    def _close(self, key: tuple[str, str, str], stay: list[Any]) -> None:
        index, count, start, end = stay
        self._intervals[index] = Interval(key[0], key[1], key[2], count, start, end)
        del self._open[key]

    @property
    def intervals(self) -> list[Interval]:
        """What ran where and when, one interval per stay on the same GPUs, in order of start
        (stays still going are ended here: a later round starts a new interval)."""
        for key, stay in list(self._open.items()):
            self._close(key, stay)
        return self._intervals  # type: ignore[return-value]  # every stay is closed now

    def _cannot_run(self, job: Job) -> Job:
        """The job with 0 reported on every type of the cluster the true table says it cannot
        run on: known from the start, as a job's memory need (`mem=`) is live, so learning
        never places it where it would fail."""
        types = sorted({t for node in self.nodes for t in node.gpus})
        zeros = {
            t: 0.0 for t in types if not table_rate(self.table, job.job_class, t, job.num_gpus) > 0
        }
        if not zeros:
            return job
        return dataclasses.replace(job, measured_steps_per_s={**job.measured_steps_per_s, **zeros})

    def _rate(self, job: TraceJob, placement: Placement) -> float:
        """Its steps/s there: `placement_rate` (a gang across types at its slowest type's)."""
        rate = placement_rate(self.table, job.job_class, placement)
        if not rate > 0:
            raise SimulationError(
                f"job {job.job_id!r} ({job.job_class}, {placement.num_gpus} GPUs) was placed on "
                f"{'+'.join(placement.gpu_types)}, where the throughput table says it cannot run"
            )
        return rate


def _with_measurement(job: Job, placement: Placement, rate: float) -> Job:
    """The job with its steps/s on the placement's type reported, as its progress report
    would be: at its own GPU count on one node only (a measurement of the job's row)."""
    if (
        len(placement.gpu_types) > 1  # a gang across types: no one type's rate
        or placement.num_gpus != job.num_gpus
        or len(placement.nodes) > 1  # spread over nodes: not the row's consolidated rate
        or job.measured_steps_per_s.get(placement.gpu_types[0]) == rate
    ):
        return job
    measured = {**job.measured_steps_per_s, placement.gpu_types[0]: rate}
    return dataclasses.replace(job, measured_steps_per_s=measured)
