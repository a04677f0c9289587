"""Run a trace on a simulated cluster with one policy: the driver of `hetsched simulate`.

The driver only wires the shared tick (rounds/tick.py) to the simulated cluster, moves the
simulated clock round by round (jumping over idle gaps to the next arrival) and turns what
happened into a `SimResult`. Nothing here decides anything.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from slurm_hetsched.core.costs import (
    EnergyModel,
    Interval,
    job_energy_kwh,
    tardiness_cost,
    tardiness_s,
    window_energy_kwh,
)
from slurm_hetsched.core.explore import ExploreSettings
from slurm_hetsched.core.mechanism import GAVEL_MIN_RESET_INTERVAL_S, RoundOptions
from slurm_hetsched.core.model import Node
from slurm_hetsched.core.policies.base import Policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.rounds.clocks import SimClock
from slurm_hetsched.rounds.tick import Tick, TickSettings
from slurm_hetsched.sim.cluster import SimulatedCluster, SimulationError
from slurm_hetsched.sim.layout import gpu_counts
from slurm_hetsched.sim.restart_costs import check_restart_costs
from slurm_hetsched.sim.results import BusySample, JobRecord, SimResult
from slurm_hetsched.sim.tenants import PaymentLedger, has_quotas, tenant_records
from slurm_hetsched.sim.traces import TraceJob, validate_trace

# A policy that leaves waiting jobs unplaced on an idle cluster this many rounds in a row, with
# no arrival to come, would never finish them: stop with an error instead of looping forever.
_IDLE_ROUNDS_LIMIT = 3

# Called after every round with (jobs finished, jobs in the trace, simulated seconds).
ProgressCallback = Callable[[int, int, float], None]


@dataclass(frozen=True, slots=True)
class SimSettings:
    """How a simulation runs.

    Attributes:
        round_s: the round length (Gavel's simulator: 360 s).
        restart_overhead_s: seconds a job restarting on other GPUs makes no progress, for a
            job whose cost neither the trace (`TraceJob.restart_s`) nor `restart_s_by_class`
            gives; also the round mechanism's default (`RoundOptions.restart_s`).
        restart_s_by_class: job class -> restart cost in seconds, over `restart_overhead_s`
            and under a trace job's own (`--restart-costs`; classes of the throughput table).
        min_reset_interval_s: the mechanism's minimum time between resets of received time.
        idle_nodes_on: count nodes without a busy GPU at their idle power (a powered
            cluster); False takes them as powered down (ANDREAS's assumption).
        seed: recorded in the result (random policies take it as an option); also seeds the
            round mechanism's shuffled type order (agnostic policies).
        round_options: the round mechanism's queue, work conservation and moves
            (docs/mechanism.md), as the live controller would be configured; its seed is
            replaced by `seed` and its restart_s by `restart_overhead_s`.
        explore: stints of classes in no table on the types they could use (core/explore.py).
    """

    round_s: float = 360.0
    restart_overhead_s: float = 10.0
    restart_s_by_class: Mapping[str, float] = field(default_factory=dict)
    min_reset_interval_s: float = GAVEL_MIN_RESET_INTERVAL_S
    idle_nodes_on: bool = True
    seed: int = 0
    round_options: RoundOptions = field(default_factory=RoundOptions)
    explore: ExploreSettings = field(default_factory=ExploreSettings)


@dataclass(slots=True)
class _Run:
    rounds: int = 0
    idle_rounds: int = 0
    notes: list[str] = field(default_factory=list)


def simulate(
    trace: Sequence[TraceJob],
    nodes: Sequence[Node],
    policy: Policy,
    site: SiteData,
    settings: SimSettings | None = None,
    *,
    trace_name: str = "trace",
    progress: ProgressCallback | None = None,
    truth: ThroughputTable | None = None,
) -> SimResult:
    """Replay `trace` on `nodes` with `policy` until every job has finished.

    `truth`, when given, is the table jobs really run at while the policy decides on
    `site.table` (estimates, a prior: `hetsched simulate --unprofiled`) and learns from what
    each job is measured doing, as live; None: the policy's table is the truth.

    Raises:
        TraceError: a job the throughput table cannot run on this cluster (all named).
        ConfigError: a class of `settings.restart_s_by_class` the table does not have, or a
            cost that is not from 0 to a day.
        SimulationError: the policy leaves jobs waiting forever on an idle cluster.
        InvalidProblemError, SolverError: from the policy.
    """
    settings = settings or SimSettings()
    counts = gpu_counts(tuple(nodes))
    real = site.table if truth is None else truth
    validate_trace(trace, real, tuple(counts), capacity=counts)
    by_class = check_restart_costs(
        settings.restart_s_by_class, "restart costs by class (--restart-costs)", real.classes
    )
    started = time.perf_counter()
    clock = SimClock()
    cluster = SimulatedCluster(
        trace,
        nodes,
        real,
        clock,
        settings.restart_overhead_s,
        by_class,
        reports_rates=truth is not None,
    )
    store = PaymentLedger()  # a MemoryStore that adds up the payments of tenant policies
    tick = Tick(
        policy,
        site,
        cluster,
        store,
        TickSettings(
            settings.round_s,
            settings.min_reset_interval_s,
            dataclasses.replace(
                settings.round_options,
                seed=settings.seed,
                restart_s=settings.restart_overhead_s,
            ),
            settings.explore,
        ),
    )
    rounds = drive(tick, cluster, clock, settings.round_s, len(trace), progress)
    outcome = Outcome(cluster.job_states(), cluster.intervals, rounds, len(tick.explored))
    result = sim_result(trace, nodes, policy.name, site, settings, outcome, trace_name, started)
    if store.seen or has_quotas(site.accounts):
        ledger = tenant_records(
            trace, counts, site.accounts, outcome.states, outcome.intervals, store
        )
        result = dataclasses.replace(result, tenants=ledger)
    return result


class DrivenCluster(Protocol):
    """What `drive` needs of a simulated cluster besides the tick's `ClusterBackend`."""

    @property
    def done(self) -> bool: ...

    @property
    def active(self) -> int: ...

    @property
    def running(self) -> int: ...

    finish_times: list[float]

    def next_arrival_s(self) -> float | None: ...

    def job_states(self) -> Mapping[str, Any]: ...


def drive(
    tick: Tick[Any],
    cluster: DrivenCluster,
    clock: SimClock,
    round_s: float,
    n_jobs: int,
    progress: ProgressCallback | None = None,
) -> int:
    """Run rounds of `tick` until `cluster` is done, moving `clock` a round at a time (jumping
    over idle gaps to the next arrival); the number of rounds run. Shared by `simulate` and
    HadarE's forking simulation (sim/hadare.py), so both move time alike.

    Raises:
        SimulationError: the policy leaves jobs waiting forever on an idle cluster.
    """
    run = _Run()
    while True:
        round_start = clock.now()
        tick.run_round()
        run.rounds += 1
        if progress is not None:
            progress(len(cluster.finish_times), n_jobs, round_start)
        if cluster.done:
            break
        if cluster.active == 0:  # nothing to run until the next job arrives: jump there
            clock.sleep_until(cluster.next_arrival_s() or round_start)
            continue
        if cluster.running == 0 and cluster.next_arrival_s() is None:
            run.idle_rounds += 1
            if run.idle_rounds >= _IDLE_ROUNDS_LIMIT:
                waiting = sorted(
                    s.trace.job_id for s in cluster.job_states().values() if s.end_s is None
                )
                raise SimulationError(
                    f"policy {tick.policy.name!r} leaves {len(waiting)} job(s) waiting on an idle "
                    f"cluster with no arrival to come (e.g. {waiting[:5]}); it would never "
                    "finish them"
                )
        else:
            run.idle_rounds = 0
        clock.sleep_until(round_start + round_s)
    return run.rounds


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a run leaves behind for its result.

    Attributes:
        states: job id -> its state at the end (`start_s`, `end_s`, `steps_left`,
            `preemptions`, `moves`, `restart_s`, `restart_gpu_s`, `gpu_s`).
        intervals: what ran where and when.
        rounds: rounds simulated.
        exploration_stints: (job, GPU type) stints of classes in no table.
    """

    states: Mapping[str, Any]
    intervals: Sequence[Interval]
    rounds: int
    exploration_stints: int = 0


def sim_result(
    trace: Sequence[TraceJob],
    nodes: Sequence[Node],
    policy: str,
    site: SiteData,
    settings: SimSettings,
    outcome: Outcome,
    trace_name: str,
    started: float,
) -> SimResult:
    """The `SimResult` of a finished run: per-job records, energy, busy GPUs, totals."""
    node_gpus = {node.name: dict(node.gpus) for node in nodes}
    counts = gpu_counts(tuple(nodes))
    states = outcome.states
    ends = [s.end_s for s in states.values() if s.end_s is not None]
    makespan = max(ends, default=0.0)
    model = EnergyModel.from_catalog(site.gpu_types, site.energy, counts)
    per_job = job_energy_kwh(model, outcome.intervals, node_gpus) if model else {}
    due = np.array([math.nan if j.due_s is None else j.due_s for j in trace])
    end = np.array(
        [math.nan if states[j.job_id].end_s is None else states[j.job_id].end_s for j in trace]
    )
    weight = np.array([j.tardiness_weight for j in trace])
    late_s = np.nan_to_num(tardiness_s(end, due))
    late_cost = np.nan_to_num(tardiness_cost(end, due, weight))
    records = tuple(
        JobRecord(
            job_id=job.job_id,
            job_class=job.job_class,
            num_gpus=job.num_gpus,
            arrival_s=job.arrival_s,
            start_s=states[job.job_id].start_s,
            end_s=states[job.job_id].end_s,
            total_steps=float(job.total_steps),
            steps_done=float(job.total_steps) - states[job.job_id].steps_left,
            preemptions=states[job.job_id].preemptions,
            moves=states[job.job_id].moves,
            restart_s=states[job.job_id].restart_s,
            restart_gpu_s=states[job.job_id].restart_gpu_s,
            gpu_s=dict(states[job.job_id].gpu_s),
            energy_kwh=per_job.get(job.job_id, 0.0) if model else math.nan,
            due_s=job.due_s,
            tardiness_s=float(late_s[i]),
            tardiness_cost=float(late_cost[i]),
        )
        for i, job in enumerate(trace)
    )
    jcts = [r.jct_s for r in records if r.jct_s is not None]
    busy_gpu_s = sum(iv.count * (iv.end_s - iv.start_s) for iv in outcome.intervals)
    total_gpus = sum(counts.values())
    energy = (
        window_energy_kwh(
            model, outcome.intervals, node_gpus, 0.0, makespan, idle_nodes_on=settings.idle_nodes_on
        )
        if model
        else math.nan
    )
    return SimResult(
        policy=policy,
        trace=trace_name,
        cluster=counts,
        round_s=settings.round_s,
        seed=settings.seed,
        jobs=records,
        busy=busy_samples(outcome.intervals, counts),
        rounds=outcome.rounds,
        wall_s=time.perf_counter() - started,
        avg_jct_s=float(np.mean(jcts)) if jcts else math.nan,
        p99_jct_s=float(np.percentile(jcts, 99)) if jcts else math.nan,
        makespan_s=makespan,
        utilization=busy_gpu_s / (total_gpus * makespan) if makespan > 0 else 0.0,
        energy_kwh=energy,
        energy_cost=energy * site.energy.pue * site.energy.electricity_per_kwh,
        tardiness_cost=float(late_cost.sum()),
        preemptions=sum(r.preemptions for r in records),
        completed=len(jcts),
        moves=sum(r.moves for r in records),
        restart_gpu_h=sum(r.restart_gpu_s for r in records) / 3600.0,
        estimates=estimates_note(site.table, counts, trace),
        exploration_stints=outcome.exploration_stints,
        total_utility=sum(
            job.the_utility().value(states[job.job_id].end_s, job.arrival_s)
            for job in trace
            if states[job.job_id].end_s is not None
        ),
    )


def estimates_note(
    table: ThroughputTable, counts: Mapping[str, int], trace: Sequence[TraceJob]
) -> str:
    """What of the run's decisions rested on estimates: '' when nothing did."""
    parts = []
    estimated = [t for t in sorted(counts) if t in table.estimated_types]
    if estimated:
        parts.append(f"{', '.join(estimated)} estimated from datasheet figures")
    prior = sorted({job.job_class for job in trace if table.is_prior(job.job_class)})
    if prior:
        parts.append(f"{len(prior)} class(es) in no table started from the neutral prior")
    return "; ".join(parts)


def busy_samples(
    intervals: Sequence[Interval], counts: Mapping[str, int]
) -> tuple[BusySample, ...]:
    """GPUs busy per type as a step function: one sample at every change."""
    events: dict[float, dict[str, int]] = {}
    for iv in intervals:
        for t_s, delta in ((iv.start_s, iv.count), (iv.end_s, -iv.count)):
            per_type = events.setdefault(t_s, {})
            per_type[iv.gpu_type] = per_type.get(iv.gpu_type, 0) + delta
    busy = dict.fromkeys(counts, 0)
    samples = [BusySample(0.0, dict(busy))]
    for t_s in sorted(events):
        for gpu_type, delta in events[t_s].items():
            busy[gpu_type] += delta
        if any(events[t_s].values()):
            if samples[-1].time_s == t_s:
                samples.pop()
            samples.append(BusySample(t_s, dict(busy)))
    return tuple(samples)
