"""HadarE in the simulator (Sultana et al., section V): any policy's rounds over a cluster whose
jobs fork into copies (sim/forking.py), driven exactly as `hetsched simulate` drives a plain
run (sim/run.py's `drive` and the shared tick), with the same result.

The policy sees each copy as an ordinary job and schedules it as such (hadar for HadarE, max-min
fairness as the simple case); the forking cluster is the job tracker. With `max_copies=1`
nothing forks and the run is `sim.run.simulate`'s, step for step (tests/sim/test_hadare_*.py).
Every result carries the forking knobs it was made with (`HadareResult.fork`), since what
forking buys depends on them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

from slurm_hetsched.core.fork_rounds import ForkSettings
from slurm_hetsched.core.model import Node
from slurm_hetsched.core.policies.base import Policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.rounds.clocks import SimClock
from slurm_hetsched.rounds.tick import Tick, TickSettings
from slurm_hetsched.sim.forking import ForkingCluster, ForkStats
from slurm_hetsched.sim.layout import gpu_counts
from slurm_hetsched.sim.restart_costs import check_restart_costs
from slurm_hetsched.sim.results import SimResult
from slurm_hetsched.sim.run import Outcome, ProgressCallback, SimSettings, drive, sim_result
from slurm_hetsched.sim.traces import TraceJob, validate_trace
from slurm_hetsched.store.memory import MemoryStore


@dataclass(frozen=True, slots=True)
class HadareResult:
    """A run with forking: the usual result, the knobs, and what forking did.

    Attributes:
        result: as `sim.run.simulate` gives (per-job records, makespan, utilisation, ...;
            busy time includes restarts and the averaging overhead).
        fork: the forking knobs of the run.
        stats: copies started, averaged rounds, overhead, steps trained and credited.
    """

    result: SimResult
    fork: ForkSettings
    stats: ForkStats


def simulate_forked(
    trace: Sequence[TraceJob],
    nodes: Sequence[Node],
    policy: Policy,
    site: SiteData,
    settings: SimSettings | None = None,
    fork: ForkSettings | None = None,
    *,
    forked: frozenset[str] | None = None,
    trace_name: str = "trace",
    progress: ProgressCallback | None = None,
) -> HadareResult:
    """Replay `trace` on `nodes` with `policy`, jobs forking as `fork` says.

    Args:
        trace, nodes, policy, site, settings, trace_name, progress: as `sim.run.simulate`
            (no `truth`: the policy's table is the truth; exploration as configured).
        fork: the forking knobs; default: no forking.
        forked: the ids of the jobs that opted in; None: every job.

    Raises:
        TraceError, ConfigError, SimulationError, InvalidProblemError, SolverError: as
            `sim.run.simulate`.
    """
    settings = settings or SimSettings()
    fork = fork or ForkSettings()
    counts = gpu_counts(tuple(nodes))
    validate_trace(trace, site.table, tuple(counts), capacity=counts)
    by_class = check_restart_costs(
        settings.restart_s_by_class, "restart costs by class (--restart-costs)", site.table.classes
    )
    started = time.perf_counter()
    clock = SimClock()
    cluster = ForkingCluster(
        trace,
        nodes,
        site.table,
        clock,
        settings.round_s,
        fork,
        settings.restart_overhead_s,
        by_class,
        forked=forked,
    )
    tick = Tick(
        policy,
        site,
        cluster,
        MemoryStore(),
        TickSettings(
            settings.round_s,
            settings.min_reset_interval_s,
            dataclasses.replace(
                settings.round_options, seed=settings.seed, restart_s=settings.restart_overhead_s
            ),
            settings.explore,
        ),
    )
    rounds = drive(tick, cluster, clock, settings.round_s, len(trace), progress)
    outcome = Outcome(cluster.job_states(), cluster.intervals, rounds, len(tick.explored))
    result = sim_result(trace, nodes, policy.name, site, settings, outcome, trace_name, started)
    return HadareResult(result, fork, cluster.stats())
