"""The seven policies as Gavel's simulator computes them, for the Gavel-faithful simulation.

Our own policies (core/policies) differ from Gavel's code in places we chose on purpose
(docs/simulation.md, "Gavel-faithful mode"): FIFO is an arrival-weighted LP there and a greedy
assignment with memory here; maximum total throughput sums normalized rates there and raw
steps/s here; finish-time fairness measures the isolated time from the job's arrival there and
from its progress here; minimum total duration is one exact LP there and a 5% bisection over
feasibility programs here. This module is the second side of each choice, written from the
behaviour of Gavel's simulator (stanford-futuredata/gavel, scheduler/policies at c4fa400):
same objectives, same constraints in the same order, rows by job in arrival order, columns by
GPU type in alphabetical order, solved by an interior-point solver and clipped to [0, 1] as
they come back (no clean-up of solver noise, which Gavel keeps and which orders its queues).

A form is a small object: FIFO and finish-time fairness remember the last call, as Gavel's
policy objects do. Pure: numbers in, numbers out (the solver is cvxpy's).
"""

from __future__ import annotations

from dataclasses import dataclass

import cvxpy as cp
import numpy as np

# The policies the faithful mode knows, by our names.
FAITHFUL_POLICIES = (
    "max_min_fairness_perf",
    "max_min_fairness",
    "fifo",
    "fifo_perf",
    "finish_time_fairness_perf",
    "min_total_duration_perf",
    "max_sum_throughput_perf",
)
# Interior-point solvers: ECOS is Gavel's (GPL, an optional extra), CLARABEL ships with cvxpy;
# "auto" takes ECOS where it is installed.
FAITHFUL_SOLVERS = ("auto", "ECOS", "CLARABEL")


@dataclass(frozen=True, slots=True)
class Demand:
    """What a form allocates over: the active jobs (rows, in arrival order) and the GPU types
    (columns, alphabetical), as Gavel's simulator hands them to its policy.

    Attributes:
        job_ids: row order.
        gpu_types: column order.
        throughput: (n_jobs, n_types) steps/s on all of a job's GPUs of each type.
        num_gpus: (n_jobs,) GPUs each job uses (Gavel's scale factor).
        weight: (n_jobs,) priority weights.
        steps_left: (n_jobs,) whole steps still to run.
        since_arrival_s: (n_jobs,) seconds since each job arrived.
        capacity: (n_types,) GPUs of each type.
    """

    job_ids: tuple[str, ...]
    gpu_types: tuple[str, ...]
    throughput: np.ndarray
    num_gpus: np.ndarray
    weight: np.ndarray
    steps_left: np.ndarray
    since_arrival_s: np.ndarray
    capacity: np.ndarray


class Form:
    """One policy as Gavel computes it: `allocate` returns (n_jobs, n_types) time fractions."""

    name: str = ""
    # Gavel shuffles the per-type walk order each round for the policies whose name lacks
    # "Perf": the heterogeneity-agnostic ones.
    agnostic: bool = False
    # Gavel's walk skips a FIFO job's entries of priority 0.
    is_fifo: bool = False
    # Not a linear program (finish-time fairness): never given to an LP solver.
    conic: bool = False

    def __init__(self, solver: str = "CLARABEL", seed: int = 0) -> None:
        self.solver = solver  # a cvxpy solver name
        self.seed = seed

    def allocate(self, demand: Demand) -> np.ndarray:
        """(n_jobs, n_types) time fractions. With no jobs Gavel's policies return nothing
        at once, and those that remember forget (FIFO its types, finish-time fairness the
        last call's progress)."""
        if not demand.job_ids:
            self.forget()
            return np.zeros((0, len(demand.gpu_types)))
        return self._allocate(demand)

    def _allocate(self, demand: Demand) -> np.ndarray:
        raise NotImplementedError

    def forget(self) -> None:
        """Called with no jobs: what the form remembers of the jobs, dropped."""

    def _solve(
        self,
        objective: cp.Minimize | cp.Maximize,
        constraints: list[cp.Constraint],
        x: cp.Variable,
        *,
        optimal_only: bool = False,
    ) -> np.ndarray | None:
        """x clipped to [0, 1] as the solver left it (Gavel takes it whatever the status,
        warning only; `optimal_only`: None unless the status is "optimal", as its minimum
        total duration tells feasible from not); None if the solver failed."""
        program = cp.Problem(objective, constraints)
        solver = "CLARABEL" if self.conic and self.solver == "HIGHS" else self.solver
        try:
            program.solve(solver=solver)
        except cp.error.SolverError:
            return None
        if x.value is None or (optimal_only and program.status != cp.OPTIMAL):
            return None
        solution: np.ndarray = np.clip(np.asarray(x.value, dtype=float), 0.0, 1.0)
        return solution


def base_constraints(x: cp.Variable, demand: Demand) -> list[cp.Constraint]:
    """Gavel's base constraints: x >= 0, GPUs per type, time per job <= 1, in its order
    (core/policies/constraints.py has ours, which also pins types a job cannot run on; an
    interior-point solver's answer depends on the program's exact form, so not shared)."""
    gpus = np.repeat(demand.num_gpus[:, None].astype(float), len(demand.gpu_types), axis=1)
    return [
        x >= 0,
        cp.sum(cp.multiply(gpus, x), axis=0) <= demand.capacity,
        cp.sum(x, axis=1) <= 1,
    ]


def equal_share_rate(demand: Demand, throughput: np.ndarray) -> np.ndarray:
    """(n_jobs,) each job's steps/s on the proportional share Gavel normalizes max-min by:
    of every type, its GPUs over all GPUs (the same for every job, whatever its GPU count);
    core/policies/rates.py's `equal_share_rate` is the same quantity.
    Computed in Gavel's order of operations, so the program's coefficients are the same
    floating-point numbers (ties in the interior point then resolve alike)."""
    n = len(demand.job_ids)
    x = np.tile(demand.capacity / n, (n, 1))
    x = x / x.sum(axis=1).max()
    return np.asarray(np.sum(throughput * x, axis=1))


def isolated_share(demand: Demand) -> np.ndarray:
    """(n_jobs, n_types) Gavel's isolated share (finish-time fairness): of every type, its
    GPUs / n_jobs / the job's GPU count, scaled down so the fractions add up to at most 1."""
    n = len(demand.job_ids)
    x = np.tile(demand.capacity / n, (n, 1)) / demand.num_gpus[:, None]
    return np.asarray(x / np.maximum(x.sum(axis=1), 1.0)[:, None])


def isolated_rate(demand: Demand) -> np.ndarray:
    """(n_jobs,) steps/s on the isolated share."""
    return np.asarray((demand.throughput * isolated_share(demand)).sum(axis=1))


class MaxMinFairnessPerf(Form):
    name = "max_min_fairness_perf"

    def _allocate(self, demand: Demand) -> np.ndarray:
        throughput = self._throughput(demand)
        inverse = (1.0 / demand.weight) * (1.0 / equal_share_rate(demand, throughput))
        a = (throughput * inverse[:, None]) * demand.num_gpus[:, None]
        x = cp.Variable(a.shape)
        objective = cp.Maximize(cp.min(cp.sum(cp.multiply(a, x), axis=1)))
        solved = self._solve(objective, base_constraints(x, demand), x)
        return np.zeros(a.shape) if solved is None else solved

    def _throughput(self, demand: Demand) -> np.ndarray:
        return demand.throughput


class MaxMinFairness(MaxMinFairnessPerf):
    """Agnostic: every throughput 1, on every type (Gavel does not look at 0s here)."""

    name = "max_min_fairness"
    agnostic = True

    def _throughput(self, demand: Demand) -> np.ndarray:
        return np.ones_like(demand.throughput)


class MaxSumThroughputPerf(Form):
    """Raw steps/s summed over jobs (not normalized: Gavel's code)."""

    name = "max_sum_throughput_perf"

    def _allocate(self, demand: Demand) -> np.ndarray:
        x = cp.Variable(demand.throughput.shape)
        objective = cp.Maximize(cp.sum(cp.sum(cp.multiply(demand.throughput, x), axis=1)))
        solved = self._solve(objective, base_constraints(x, demand), x)
        return np.zeros(demand.throughput.shape) if solved is None else solved


class MinTotalDurationPerf(Form):
    """Bisection on the makespan T over feasibility programs (maximize 1 subject to every job
    finishing within T), from [100 s, 10^6 s], stopping once the bracket is within 5%; the
    allocation is the last feasible program's point; the range grows tenfold until one is."""

    name = "min_total_duration_perf"

    def _allocate(self, demand: Demand) -> np.ndarray:
        low, high = 100.0, 1e6
        widest = high
        feasible = None
        while feasible is None:
            while 1.05 * low < high:
                makespan = (low + high) / 2.0
                x = cp.Variable(demand.throughput.shape)
                constraints = base_constraints(x, demand)
                constraints.append(
                    cp.sum(cp.multiply(demand.throughput, x), axis=1)
                    >= demand.steps_left / makespan
                )
                solved = self._solve(cp.Maximize(1), constraints, x, optimal_only=True)
                if solved is not None:
                    feasible, high = solved, makespan
                else:
                    low = makespan
            low, high = widest, widest * 10.0
            widest *= 10.0
            if widest > 1e15:  # no makespan is feasible: a job that can run nowhere
                return np.zeros(demand.throughput.shape)
        return feasible


class FinishTimeFairnessPerf(Form):
    """Minimize the largest ratio (time since arrival + steps left / rate) / (isolated time
    so far + steps left / isolated rate); the isolated time so far adds up, call after call,
    the steps each job ran divided by its isolated rate at the last call."""

    name = "finish_time_fairness_perf"
    conic = True

    def __init__(self, solver: str = "CLARABEL", seed: int = 0) -> None:
        super().__init__(solver, seed)
        self._isolated_s: dict[str, float] = {}
        self._last_steps: dict[str, float] = {}
        self._last_rate: dict[str, float] = {}

    def forget(self) -> None:
        self._last_steps, self._last_rate = {}, {}

    def _allocate(self, demand: Demand) -> np.ndarray:
        iso = isolated_rate(demand)
        x = cp.Variable(demand.throughput.shape)
        ratios = []
        for m, job_id in enumerate(demand.job_ids):
            done = self._isolated_s.setdefault(job_id, 0.0)
            if job_id in self._last_steps:
                ran = self._last_steps[job_id] - demand.steps_left[m]
                done += ran / self._last_rate[job_id]
                self._isolated_s[job_id] = done
            rate = cp.sum(cp.multiply(demand.throughput[m], x[m]))
            isolated_s = done + demand.steps_left[m] / iso[m]
            with_x_s = demand.since_arrival_s[m] + demand.steps_left[m] * cp.inv_pos(rate)
            ratios.append(with_x_s / isolated_s)
        objective = cp.Minimize(ratios[0] if len(ratios) == 1 else cp.maximum(*ratios))
        solved = self._solve(objective, base_constraints(x, demand), x)
        self._last_steps = dict(zip(demand.job_ids, demand.steps_left.tolist(), strict=True))
        self._last_rate = dict(zip(demand.job_ids, iso.tolist(), strict=True))
        return isolated_share(demand) if solved is None else solved  # Gavel's fallback
