"""The Gavel-faithful simulation: a trace replayed as Gavel's own simulator replays it
(`hetsched simulate --gavel-faithful`; docs/simulation.md, "Gavel-faithful mode").

What differs from our simulation (sim/run.py), each Gavel's behaviour (scheduler.py at
c4fa400), each revertible to ours by its name in `FaithfulChoices` (choices.py) and measured
in docs/simulation.md:

- steps: a round runs whole steps: a job runs int(steps/s x round) steps (or what it has
  left) and the round ends when the slowest job of the round has run them, so rounds are a
  little shorter than `round_s`, and a round whose jobs all finish early shorter still.
- drops: a job's round on several GPUs fails when it has fewer steps left than GPUs (each GPU
  gets steps // GPUs); after 5 failures in a row the job is dropped (never completed).
- shares: the time a round adds to a job's share counts from the end of the last round that
  ran anything, so a round after the cluster stood idle counts the idle time too.
- idle: when nothing runs, the clock jumps to the next arrival (a waiting job waits for it);
  when nothing is left to arrive, the next reset may happen at once.
- shuffle: the agnostic policies' type order comes from Gavel's generator.
- No restart costs, no nodes: a job runs at its consolidated rate wherever it is.

The allocation, the resets, the priorities and the walk are rounds.py; the policies forms.py
and fifo.py.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.costs import Interval
from slurm_hetsched.core.model import Node
from slurm_hetsched.core.problem import SiteData, table_rate
from slurm_hetsched.core.round_options import RoundOptions
from slurm_hetsched.core.selection import walk_order
from slurm_hetsched.sim.cluster import SimulationError
from slurm_hetsched.sim.faithful.catalog import for_choices
from slurm_hetsched.sim.faithful.choices import GAVEL, FaithfulChoices
from slurm_hetsched.sim.faithful.forms import Demand, Form
from slurm_hetsched.sim.faithful.rounds import GavelRounds, allocation_rows
from slurm_hetsched.sim.results import SimResult
from slurm_hetsched.sim.run import Outcome, SimSettings, sim_result
from slurm_hetsched.sim.traces import TraceJob, validate_trace

# Gavel drops a job after this many failed rounds in a row (MAX_FAILED_ATTEMPTS).
MAX_FAILED_ROUNDS = 5
# Gavel's type shuffler is random.Random(seed + 5) (scheduler.py, _initialize_seeds).
SHUFFLE_SEED_OFFSET = 5
# Below this many steps a job is done (fractional steps: the residue of rate x seconds).
_STEPS_EPS = 1e-6


@dataclass(slots=True)
class JobProgress:
    """One trace job in the faithful run (mutable, private to the run)."""

    trace: TraceJob
    rank: int  # position in arrival order (Gavel's job id)
    steps_done: float = 0  # whole steps, unless the "steps" choice is ours
    failures: int = 0
    start_s: float | None = None
    end_s: float | None = None  # None: not completed (still running, or dropped)
    preemptions: int = 0
    last_type: str | None = None
    gpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def steps_left(self) -> float:
        return self.trace.total_steps - self.steps_done

    # What sim_result reads of a job's state: no moves are charged in this mode.
    @property
    def moves(self) -> int:
        return self.preemptions

    restart_s: ClassVar[float] = 0.0
    restart_gpu_s: ClassVar[float] = 0.0


@dataclass(frozen=True, slots=True)
class MicroTask:
    """One job's round: `steps` on `gpu_type`, dispatched at `start_s`, done at `end_s`."""

    job_id: str
    gpu_type: str
    steps: float
    start_s: float
    end_s: float


@dataclass(slots=True)
class FaithfulRun:
    """What a faithful run leaves behind, for the result."""

    jobs: dict[str, JobProgress]
    intervals: list[Interval] = field(default_factory=list)
    rounds: int = 0  # rounds that ran something
    resets: int = 0  # resets of the time received


def simulate_faithful(
    trace: Sequence[TraceJob],
    counts: Mapping[str, int],
    form: Form,
    site: SiteData,
    *,
    round_s: float = 360.0,
    min_reset_interval_s: float = 1920.0,
    seed: int = 0,
    choices: FaithfulChoices = GAVEL,
) -> FaithfulRun:
    """Replay `trace` on `counts` GPUs per type as Gavel's simulator would, with `form`
    (and ours where `choices` say so).

    Raises:
        TraceError: a job the throughput table cannot run on this cluster.
        SimulationError: jobs wait forever (nothing runs, nothing arrives, no new allocation).
    """
    counts = {t: n for t, n in counts.items() if n > 0}
    validate_trace(trace, site.table, tuple(counts), capacity=dict(counts))
    replay = _Replay(trace, counts, form, site, round_s, min_reset_interval_s, seed, choices)
    replay.run()
    replay.result.resets = replay.rounds.resets
    return replay.result


class _Replay:
    """One faithful run: the state of Gavel's simulation loop and its steps."""

    def __init__(
        self,
        trace: Sequence[TraceJob],
        counts: dict[str, int],
        form: Form,
        site: SiteData,
        round_s: float,
        min_reset_interval_s: float,
        seed: int,
        choices: FaithfulChoices,
    ) -> None:
        self.counts = counts
        self.form = form
        self.round_s = round_s
        self.seed = seed
        self.choices = choices
        self.table = site.table
        self.gpu_types = tuple(counts)
        fastest_first = walk_order(self.gpu_types, RoundOptions(), site.table, 0)
        assert fastest_first is not None  # the per-type queue always has an order
        self.fastest_first = [self.gpu_types[i] for i in fastest_first]
        self.columns = tuple(sorted(counts))
        ordered = sorted(enumerate(trace), key=lambda e: (e[1].arrival_s, e[0]))
        self.jobs = {job.job_id: JobProgress(job, rank) for rank, (_, job) in enumerate(ordered)}
        self.rate = {
            (job.job_id, t): table_rate(site.table, job.job_class, t, job.num_gpus)
            for job in trace
            for t in counts
        }
        self.rounds = GavelRounds(tuple(counts), round_s, min_reset_interval_s, choices)
        self.shuffler = random.Random(seed + SHUFFLE_SEED_OFFSET)
        self.result = FaithfulRun(self.jobs)
        self.pending = [job for _, job in ordered]
        self.next_pending = 0
        self.remaining = len(self.jobs)
        self.running: list[MicroTask] = []
        self.now = self.pending[0].arrival_s if self.pending else 0.0
        self.round_start = 0.0  # when the last round that ran anything began (Gavel's count)
        self.round_end: float | None = None
        self.plans = 0

    def run(self) -> None:
        while self.remaining > 0:
            stalled = not self.running
            self._advance_clock()
            for task in self.running:
                self.remaining -= self._finish(task)
            self.running = []
            while (arrival := self._next_arrival()) is not None and arrival <= self.now:
                self.rounds.add_job(self.pending[self.next_pending].job_id)
                self.next_pending += 1
            self.rounds.maybe_reallocate(self.now, self._compute)
            self._plan()
            if self.running:
                self.result.rounds += 1
            elif stalled and self._next_arrival() is None and not self.rounds.need_allocation:
                waiting = sorted(self.rounds.job_time, key=lambda j: self.jobs[j].rank)
                raise SimulationError(
                    f"policy {self.form.name!r} leaves {len(waiting)} job(s) waiting on an "
                    f"idle cluster with no arrival to come (e.g. {waiting[:5]}); it would "
                    "never finish them"
                )

    def _next_arrival(self) -> float | None:
        if self.next_pending >= len(self.pending):
            return None
        return self.pending[self.next_pending].arrival_s

    def _advance_clock(self) -> None:
        """To the end of the running round, else to the next arrival (ours: the next round
        while jobs wait); with nothing to run or to come, the next reset is due at once."""
        next_arrival = self._next_arrival()
        if next_arrival is None and not self.running:
            self.rounds.force_reset_due()
        if self.running:
            if self.round_end is not None:
                self.round_start = self.round_end
            if self.choices.steps:
                self.round_end = max(task.end_s for task in self.running)
            else:  # ours: every round lasts the round length
                self.round_end = self.running[0].start_s + self.round_s
            self.now = self.round_end
        elif self.rounds.job_time and not self.choices.idle:
            self.now = min(
                self.now + self.round_s, math.inf if next_arrival is None else next_arrival
            )
        elif next_arrival is not None:
            self.now = next_arrival

    def _compute(self) -> dict[str, dict[str, float]]:
        rows = sorted(self.rounds.job_time, key=lambda j: self.jobs[j].rank)
        progress = [self.jobs[j] for j in rows]
        demand = Demand(
            job_ids=tuple(rows),
            gpu_types=self.columns,
            throughput=np.array([[self.rate[(j, t)] for t in self.columns] for j in rows]),
            num_gpus=np.array([p.trace.num_gpus for p in progress], dtype=float),
            weight=np.array([p.trace.weight for p in progress]),
            steps_left=np.array([p.steps_left for p in progress], dtype=float),
            since_arrival_s=np.array([self.now - p.trace.arrival_s for p in progress]),
            capacity=np.array([self.counts[t] for t in self.columns], dtype=float),
        )
        return allocation_rows(demand.job_ids, self.columns, self.form.allocate(demand))

    def _plan(self) -> None:
        self.plans += 1
        order = list(self.fastest_first)
        if self.form.agnostic and self.choices.shuffle:
            self.shuffler.shuffle(order)
        elif self.form.agnostic:  # ours: the round mechanism's own draw
            ours = RoundOptions(shuffle=True, seed=self.seed)
            drawn = walk_order(self.gpu_types, ours, self.table, self.plans)
            assert drawn is not None
            order = [self.gpu_types[i] for i in drawn]
        nums = {job_id: self.jobs[job_id].trace.num_gpus for job_id in self.rounds.job_time}

        def runs_on(job_id: str, gpu_type: str) -> bool:
            return self.rate[(job_id, gpu_type)] > 0

        for job_id, gpu_type in self.rounds.pick(
            order, self.counts, nums, runs_on, self.form.is_fifo
        ):
            self.running.append(self._dispatch(self.jobs[job_id], gpu_type))

    def _dispatch(self, job: JobProgress, gpu_type: str) -> MicroTask:
        steps_per_s = self.rate[(job.trace.job_id, gpu_type)]
        per_round = steps_per_s * self.round_s
        steps = min(int(per_round) if self.choices.steps else per_round, job.steps_left)
        if steps <= 0 and not self.choices.drops:
            # Gavel fails such a round and drops the job after 5; without drops it would
            # never progress and the clock would stand still.
            raise SimulationError(
                f"job {job.trace.job_id!r} runs {steps_per_s:g} steps/s on {gpu_type}: not one "
                f"whole step in a {self.round_s:g} s round; use a longer --round, or keep "
                "Gavel's drops (leave `drops` out of --faithful-except)"
            )
        if job.start_s is None:
            job.start_s = self.now
        if job.last_type is not None and job.last_type != gpu_type:
            job.preemptions += 1
        job.last_type = gpu_type
        end = self.now + steps / steps_per_s
        return MicroTask(job.trace.job_id, gpu_type, steps, self.now, end)

    def _finish(self, task: MicroTask) -> int:
        """Apply one finished round of one job; 1 if the job left the run (done or dropped)."""
        job = self.jobs[task.job_id]
        gpus = job.trace.num_gpus
        held = task.end_s - task.start_s
        job.gpu_s[task.gpu_type] = job.gpu_s.get(task.gpu_type, 0.0) + held * gpus
        if held > 0:
            self.result.intervals.append(
                Interval(task.job_id, task.gpu_type, task.gpu_type, gpus, task.start_s, task.end_s)
            )
        if self.choices.drops and task.steps // gpus <= 0:  # a GPU got no step: failed
            job.failures += 1
            self.rounds.need_allocation = True
            if job.failures >= MAX_FAILED_ROUNDS:
                self.rounds.remove_job(task.job_id)
                return 1
            return 0
        job.failures = 0
        job.steps_done += task.steps
        counted = task.end_s - (self.round_start if self.choices.shares else task.start_s)
        self.rounds.record(task.job_id, task.gpu_type, counted)
        if job.steps_left <= _STEPS_EPS:
            job.end_s = task.end_s
            self.rounds.remove_job(task.job_id)
            return 1
        return 0


def faithful_nodes(counts: Mapping[str, int]) -> tuple[Node, ...]:
    """One node per GPU type, named after it (the faithful mode has no servers)."""
    return tuple(Node(t, {t: n}) for t, n in sorted(counts.items()) if n > 0)


def faithful_result(
    trace: Sequence[TraceJob],
    counts: Mapping[str, int],
    form: Form,
    site: SiteData,
    settings: SimSettings,
    trace_name: str = "trace",
    choices: FaithfulChoices = GAVEL,
) -> SimResult:
    """`simulate_faithful` with `settings`' round length, reset interval and seed, as a
    `SimResult` (restart settings and the round options do not apply)."""
    started = time.perf_counter()
    form = for_choices(form, choices, site, {job.job_id: job for job in trace})
    run = simulate_faithful(
        trace,
        counts,
        form,
        site,
        round_s=settings.round_s,
        min_reset_interval_s=settings.min_reset_interval_s,
        seed=settings.seed,
        choices=choices,
    )
    outcome = Outcome(run.jobs, run.intervals, run.rounds)
    nodes = faithful_nodes(counts)
    return sim_result(trace, nodes, form.name, site, settings, outcome, trace_name, started)
