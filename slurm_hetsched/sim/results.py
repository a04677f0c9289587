"""What one simulated run produced: per-job records, GPUs busy over time, and the run's totals.

`hetsched simulate` prints these (sim/report.py), writes them as JSON (`SimResult.to_json`,
keys in docs/simulation.md) and plots them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurm_hetsched.sim.tenants import TenantRecord


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job of the trace, at the end of the run.

    Attributes:
        job_id: the trace's job id.
        job_class: its throughput-table class.
        num_gpus: GPUs it uses at once.
        arrival_s: when it arrived (seconds from the trace's start).
        start_s: when it first ran, or None if it never did.
        end_s: when its last step ran, or None if it did not finish within the run.
        total_steps: steps of the whole job.
        steps_done: steps it ran (== total_steps when finished).
        preemptions: times it was moved to other GPUs or stopped while it still had work.
        gpu_s: GPU-seconds it held per GPU type (restart time included).
        energy_kwh: IT energy of its busy GPUs (not the nodes' base or idle power).
        due_s: its due date, or None.
        tardiness_s: seconds its end was after its due date (0 without one, or on time).
        tardiness_cost: tardiness weight x tardiness_s.
        moves: times it was moved straight to other GPUs (a preemption that is not a stop).
        restart_s: what one move (or restart after a stop) cost it, in seconds.
        restart_gpu_s: GPU-seconds lost to restarts: the restart time it actually spent x the
            GPUs it held meanwhile (a restart cut short by another move counts only in part).
    """

    job_id: str
    job_class: str
    num_gpus: int
    arrival_s: float
    start_s: float | None
    end_s: float | None
    total_steps: float
    steps_done: float
    preemptions: int
    gpu_s: Mapping[str, float] = field(default_factory=dict)
    energy_kwh: float = 0.0
    due_s: float | None = None
    tardiness_s: float = 0.0
    tardiness_cost: float = 0.0
    moves: int = 0
    restart_s: float = 0.0
    restart_gpu_s: float = 0.0

    @property
    def jct_s(self) -> float | None:
        """Job completion time: end - arrival, or None if unfinished."""
        return None if self.end_s is None else self.end_s - self.arrival_s

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "class": self.job_class,
            "num_gpus": self.num_gpus,
            "arrival_s": _r(self.arrival_s),
            "start_s": None if self.start_s is None else _r(self.start_s),
            "end_s": None if self.end_s is None else _r(self.end_s),
            "jct_s": None if self.jct_s is None else _r(self.jct_s),
            "total_steps": _r(self.total_steps),
            "steps_done": _r(self.steps_done),
            "preemptions": self.preemptions,
            "gpu_s": {t: _r(v) for t, v in sorted(self.gpu_s.items())},
            "energy_kwh": _r(self.energy_kwh, 6),
            "due_s": None if self.due_s is None else _r(self.due_s),
            "tardiness_s": _r(self.tardiness_s),
            "tardiness_cost": _r(self.tardiness_cost, 6),
            "moves": self.moves,
            "restart_s": _r(self.restart_s),
            "restart_gpu_s": _r(self.restart_gpu_s),
        }


@dataclass(frozen=True, slots=True)
class BusySample:
    """GPUs busy per type from `time_s` until the next sample (a step function)."""

    time_s: float
    busy: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class SimResult:
    """One policy's run on one trace and cluster.

    Attributes:
        policy: the policy's registered name.
        trace: the trace's name (file name, or "generated").
        cluster: GPUs per type.
        round_s: the round length.
        seed: the run's seed (policies with randomness, tie order).
        jobs: one record per trace job, in trace order.
        busy: GPUs busy per type over time, from 0 to the makespan.
        rounds: rounds simulated.
        wall_s: wall-clock seconds the run took (the only non-deterministic figure).
        avg_jct_s: mean completion time of the finished jobs (NaN if none finished).
        p99_jct_s: their 99th percentile (numpy's linear interpolation; NaN if none).
        makespan_s: time the last job finished (or the run stopped).
        utilization: busy GPU-seconds / (GPUs x makespan).
        energy_kwh: IT energy of the whole cluster over the makespan (busy and idle GPUs,
            node base power); facility energy is this x PUE.
        energy_cost: facility energy x electricity price.
        tardiness_cost: sum of the jobs' tardiness costs.
        preemptions: sum of the jobs' preemptions.
        completed: jobs finished.
        moves: sum of the jobs' moves (`moves_per_job` divides by the trace's jobs).
        restart_gpu_h: GPU-hours lost to restarts, over all jobs (their restart_gpu_s / 3600).
        estimates: what the policy decided on that was estimated, not measured (the estimated
            GPU types, the classes that started from the neutral prior); "" for none.
        exploration_stints: (job, GPU type) stints given to classes in no table so that they
            are measured there (core/explore.py); their moves are among `moves`.
        total_utility: the sum of the jobs' utilities at their completion (core/utility.py;
            a trace job's own `utility`, else its due date and tardiness weight read as one); a
            job that did not finish is worth 0.
        tenants: account -> its ledger (sim/tenants.py: utility, paid, received, revenue,
            GPU-hours borrowed and lent) when the policy returned payments or an account
            owns GPUs (a quota); None otherwise.
    """

    policy: str
    trace: str
    cluster: Mapping[str, int]
    round_s: float
    seed: int
    jobs: tuple[JobRecord, ...]
    busy: tuple[BusySample, ...]
    rounds: int
    wall_s: float
    avg_jct_s: float
    makespan_s: float
    utilization: float
    energy_kwh: float
    energy_cost: float
    tardiness_cost: float
    preemptions: int
    completed: int
    p99_jct_s: float
    moves: int
    restart_gpu_h: float
    estimates: str = ""
    exploration_stints: int = 0
    total_utility: float = 0.0
    tenants: Mapping[str, TenantRecord] | None = None

    @property
    def moves_per_job(self) -> float:
        """Moves over the trace's jobs (0 for an empty run)."""
        return self.moves / len(self.jobs) if self.jobs else 0.0

    def to_json(self) -> dict[str, Any]:
        tenants = (
            {}
            if self.tenants is None
            else {"tenants": {a: r.to_json() for a, r in sorted(self.tenants.items())}}
        )
        return {
            "policy": self.policy,
            "trace": self.trace,
            "cluster": dict(sorted(self.cluster.items())),
            "round_s": self.round_s,
            "seed": self.seed,
            "avg_jct_s": None if math.isnan(self.avg_jct_s) else _r(self.avg_jct_s),
            "p99_jct_s": None if math.isnan(self.p99_jct_s) else _r(self.p99_jct_s),
            "makespan_s": _r(self.makespan_s),
            "utilization": _r(self.utilization, 4),
            "energy_kwh": _r(self.energy_kwh, 3),
            "energy_cost": _r(self.energy_cost, 3),
            "tardiness_cost": _r(self.tardiness_cost, 3),
            "preemptions": self.preemptions,
            "moves": self.moves,
            "moves_per_job": _r(self.moves_per_job, 4),
            "restart_gpu_h": _r(self.restart_gpu_h, 4),
            "completed": self.completed,
            "estimates": self.estimates or None,
            "exploration_stints": self.exploration_stints,
            "total_utility": _r(self.total_utility, 3),
            "rounds": self.rounds,
            "wall_s": _r(self.wall_s, 3),
            **tenants,
            "jobs": [job.to_json() for job in self.jobs],
            "busy": [
                {"time_s": _r(s.time_s), "busy": dict(sorted(s.busy.items()))} for s in self.busy
            ],
        }


def _r(value: float, digits: int = 3) -> float:
    return round(float(value), digits) + 0.0
