"""Solve time and objective of the max-min policies at growing sizes. Prints a table; asserts
nothing (tests/unit/core check correctness, including that both backends agree).

    .venv/bin/python benchmarks/policies.py            # the issue's table (a few minutes)
    .venv/bin/python benchmarks/policies.py --quick    # up to 512 jobs
    .venv/bin/python benchmarks/policies.py --large    # adds 100,000 jobs (max-min only)

Problems: N jobs drawn uniformly from the shipped Gavel table's (class, GPU count) entries, on
3 GPU types (v100, p100, k80) with N/4 or N/2 GPUs of each; "single" = every job on 1 GPU,
"multi" = Gavel's mix (1, 2, 4, 8 GPUs with probability 0.7, 0.1, 0.15, 0.05). The 8-type case
adds 5 synthetic types derived per (class, GPU count) from the measured ones (see
`eight_types`), with the same total GPUs as the 3-type case.

"table" rows come straight from the table, so jobs of one class share a row and the policies'
symmetry reduction (core/policies/symmetry.py) applies. "distinct" multiplies every entry by
U(0.9, 1.1), so no two jobs are alike and no reduction applies: the worst case.

Wall time is measured here around `allocate()` (best of 3 below 0.5 s).

A second table times minimum makespan and finish-time fairness ("table" rows only: their
steps make every job distinct anyway). Steps follow Gavel's trace generator: a duration of
60 * 10^U(1.5, 3) s (80%) or 60 * 10^U(3, 4) s (20%) times the job's V100 rate; arrivals are
uniform over the last hour, so elapsed times differ (but stay short of most jobs' run times,
so the cluster's capacity, not one job's speed, sets the optimum). `--steps-only` prints just
that table.

With power data for the 3 measured types (the shipped `gpu_types.toml`), the max-min rows add
`max_min_fairness_perf` with `energy_slack=0.1` (docs/policies.md "Trading fairness for
energy"): the plain solve plus the least-power LP. `--energy-only` prints just those rows at
2048 jobs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from slurm_hetsched.core.costs import EnergyModel
from slurm_hetsched.core.model import Problem
from slurm_hetsched.core.policies.base import Policy
from slurm_hetsched.core.policies.finish_time_fairness import FinishTimeFairnessPerf
from slurm_hetsched.core.policies.makespan import MinTotalDurationPerf
from slurm_hetsched.core.policies.max_min_fairness import MaxMinFairnessPerf
from slurm_hetsched.core.policies.water_filling import MaxMinFairnessWaterFillingPerf
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy, shipped_throughputs

MEASURED = ("v100", "p100", "k80")
MULTI_GPU = ((1, 2, 4, 8), (0.7, 0.1, 0.15, 0.05))  # Gavel's generate_job mix


@dataclass(frozen=True)
class Case:
    n_jobs: int
    n_types: int
    fraction: float  # GPUs per type = fraction x N (x 3 / n_types: same total)
    multi: bool
    distinct: bool

    def label(self) -> str:
        gpus = "N/4" if self.fraction == 0.25 else "N/2"
        return (
            f"{self.n_jobs:>7} {self.n_types:>5} {gpus:>4} {'multi' if self.multi else 'single':>6}"
            f" {'distinct' if self.distinct else 'table':>8}"
        )


def eight_types(
    table: ThroughputTable, key: tuple[str, int], rng_of_class: dict[str, float]
) -> np.ndarray:
    """Steps/s on 8 types: the 3 measured ones and 5 derived from them (per class, GPU count)."""
    v100, p100, k80 = table.row(key[0], key[1], MEASURED)
    derived = [
        1.8 * v100,  # a faster generation
        float(np.sqrt(v100 * p100)),  # between V100 and P100
        float(np.sqrt(p100 * k80)),  # between P100 and K80
        0.6 * k80,  # slower than K80
        p100 * rng_of_class[key[0]],  # P100-like with per-class quirks (0.5x to 1.5x)
    ]
    return np.array([v100, p100, k80, *derived])


def make_problem(case: Case, table: ThroughputTable, seed: int = 0) -> Problem:
    rng = np.random.default_rng(seed)
    counts, probs = MULTI_GPU if case.multi else ((1,), (1.0,))
    num_gpus = rng.choice(counts, p=probs, size=case.n_jobs)
    classes = {g: [c for c in table.classes if (c, g) in table.rows] for g in counts}
    keys = [(classes[g][rng.integers(len(classes[g]))], int(g)) for g in num_gpus]
    if case.n_types == 3:
        types = MEASURED
        throughput = table.matrix(keys, types)
    else:
        types = (*MEASURED, "s1", "s2", "s3", "s4", "s5")
        quirk = {c: float(rng.uniform(0.5, 1.5)) for c in table.classes}
        rows = {key: eight_types(table, key, quirk) for key in set(keys)}
        throughput = np.array([rows[key] for key in keys])
    if case.distinct:
        throughput = throughput * rng.uniform(0.9, 1.1, size=throughput.shape)
    per_type = max(8, round(case.fraction * case.n_jobs * 3 / case.n_types))
    # Steps and arrivals (drawn last, so the throughputs above do not change with them).
    long = rng.random(case.n_jobs) < 0.2
    duration_s = 60 * 10 ** np.where(
        long, rng.uniform(3, 4, case.n_jobs), rng.uniform(1.5, 3, case.n_jobs)
    )
    v100 = np.where(throughput[:, 0] > 0, throughput[:, 0], throughput.max(axis=1))
    return Problem(
        job_ids=tuple(f"j{i}" for i in range(case.n_jobs)),
        gpu_types=types,
        throughput=throughput,
        capacity=np.full(len(types), float(per_type)),
        num_gpus=num_gpus,
        steps=duration_s * v100,
        arrival_s=-rng.uniform(0, 3600, case.n_jobs),
        # None for the synthetic types (no power data): the energy rows run on 3 types only.
        energy=EnergyModel.from_catalog(shipped_gpu_types(), shipped_site_energy(), types),
    )


def print_header(header: str) -> None:
    """A table's header line and the rule under it."""
    print(header)
    print("-" * len(header))


def timed(policy: Policy, problem: Problem) -> tuple[float, float, int]:
    """(best wall seconds, objective, solver calls)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        allocation = policy.allocate(problem)
        best = min(best, time.perf_counter() - started)
        if best > 0.5:
            break
    return best, allocation.objective, allocation.solves


def _run_in_child(args: tuple[Callable[[], Policy], Case], queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    make_policy, case = args
    queue.put(timed(make_policy(), make_problem(case, shipped_throughputs()))[:2])


def run_in_child(target: Callable[..., None], args: tuple[Any, ...], limit_s: float) -> Any:
    """`target(*args, queue)` in a child process: what it put on the queue; TIMEOUT past
    limit_s, None if it put nothing (it failed)."""
    queue: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    child = multiprocessing.Process(target=target, args=(*args, queue))
    child.start()
    child.join(limit_s)
    if child.is_alive():
        child.terminate()
        child.join()
        return TIMEOUT
    return None if queue.empty() else queue.get()


TIMEOUT = "timeout"


def timed_with_limit(make_policy: Callable[[], Policy], case: Case, limit_s: float) -> str:
    """Run one case in a child process; 'not finished' past limit_s."""
    result = run_in_child(_run_in_child, ((make_policy, case),), limit_s)
    if result is None or result == TIMEOUT:
        return f"{'>' + str(int(limit_s)):>9}    (not finished)"
    wall, objective = result
    return f"{wall:9.4f} {objective:9.4f}"


def highs_max_min() -> Policy:
    return MaxMinFairnessPerf()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="up to 512 jobs")
    parser.add_argument("--large", action="store_true", help="add 100,000 jobs (max-min)")
    parser.add_argument(
        "--steps-only", action="store_true", help="only makespan and finish-time fairness"
    )
    parser.add_argument(
        "--energy-only", action="store_true", help="only max-min with energy_slack, 2048 jobs"
    )
    args = parser.parse_args(argv)
    table = shipped_throughputs()
    sizes = (32, 128, 512) if args.quick else (32, 128, 512, 2048, 8192)
    if args.energy_only:
        sizes = (2048,)
    cases = [
        Case(n, 3, f, m, d)
        for d in (False, True)
        for n in sizes
        for f in (0.25, 0.5)
        for m in (False, True)
    ]
    if not (args.quick or args.energy_only):
        cases += [
            Case(2048, 8, f, m, d)
            for d in (False, True)
            for f in (0.25, 0.5)
            for m in (False, True)
        ]
    MaxMinFairnessPerf().allocate(make_problem(Case(8, 3, 0.5, False, False), table))  # warm-up

    header = (
        f"{'policy':<37} {'backend':<8} {'jobs':>7} {'types':>5} {'GPUs':>4} {'mix':>6} "
        f"{'rows':>8} {'wall_s':>9} {'objective':>9} {'LPs':>4}"
    )
    if args.steps_only:
        print_steps_table(cases, table)
        return 0
    print_header(header)
    for case in cases:
        problem = make_problem(case, table)
        runs = max_min_runs(case, problem, args.energy_only)
        for backend, policy in runs:
            wall, objective, lps = timed(policy, problem)
            label = policy.name + (" energy_slack=.1" if getattr(policy, "energy_slack", 0) else "")
            print(
                f"{label:<37} {backend:<8} {case.label()} {wall:9.4f} {objective:9.4f} {lps:>4}",
                flush=True,
            )
    if args.energy_only:
        return 0
    if args.large:
        for distinct in (False, True):
            case = Case(100_000, 3, 0.25, True, distinct)
            result = timed_with_limit(highs_max_min, case, limit_s=60.0)
            print(f"{'max_min_fairness_perf':<37} {'highs':<8} {case.label()} {result}", flush=True)
    print()
    print_steps_table(cases, table)
    return 0


def max_min_runs(case: Case, problem: Problem, energy_only: bool) -> list[tuple[str, Policy]]:
    """The (backend, policy) runs of the max-min table for one case."""
    energy = [("highs", MaxMinFairnessPerf(energy_slack=0.1))] if problem.energy else []
    if energy_only:
        return [("highs", MaxMinFairnessPerf()), *energy]
    runs: list[tuple[str, Policy]] = [("highs", MaxMinFairnessPerf()), *energy]
    if case.n_jobs <= 2048:
        runs.append(("cvxpy", MaxMinFairnessPerf(backend="cvxpy")))
    if case.n_jobs <= 2048 or not case.distinct:
        runs.append(("highs", MaxMinFairnessWaterFillingPerf()))
    return runs


def print_steps_table(cases: list[Case], table: ThroughputTable) -> None:
    """Makespan (seconds) and finish-time fairness (worst rho) on the "table" cases."""
    header = (
        f"{'policy':<27} {'backend':<8} {'jobs':>7} {'types':>5} {'GPUs':>4} {'mix':>6} "
        f"{'rows':>8} {'wall_s':>9} {'objective':>12} {'LPs':>4}"
    )
    print_header(header)
    for case in cases:
        if case.distinct:
            continue
        problem = make_problem(case, table)
        runs: list[tuple[str, Policy]] = [
            ("highs", MinTotalDurationPerf()),
            ("highs", FinishTimeFairnessPerf()),
        ]
        if case.n_jobs <= 2048:
            runs.append(("cvxpy", MinTotalDurationPerf(backend="cvxpy")))
        if case.n_jobs <= 512:  # Gavel's convex program (CLARABEL): slow beyond
            runs.append(("cvxpy", FinishTimeFairnessPerf(backend="cvxpy")))
        for backend, policy in runs:
            wall, objective, lps = timed(policy, problem)
            print(
                f"{policy.name:<27} {backend:<8} {case.label()} {wall:9.4f} {objective:12.6g} "
                f"{lps:>4}",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
