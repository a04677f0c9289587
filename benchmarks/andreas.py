"""Solve time of the ANDREAS policy per call at growing sizes. Prints a table; asserts nothing
(tests/unit/core/test_policy_andreas.py checks correctness).

    .venv/bin/python benchmarks/andreas.py            # MaxIt 1000 (the paper's), about a minute
    .venv/bin/python benchmarks/andreas.py --quick    # MaxIt 100

Problems follow ANDREAS's simulation scenarios (paper section V-B): N nodes, half V100 and half
T4; scenario 1: 2 x V100 or 1 x T4 per node, scenario 2: 4 x V100 or 2 x T4. J queued jobs
drawn from the shipped Gavel table's classes, each allowed every GPU count up to its node size
(so ANDREAS chooses g): V100 steps/s from the table at 1, 2 and 4 GPUs; the table has no T4,
so here a T4 runs at 0.35 x a V100 (an assumption of this benchmark only, roughly the T4's
FP32 throughput against the V100's). Steps give a fastest run of U(0.5, 8) h; due dates are
U(1, 3) x the fastest run and tardiness weights U(0.003, 0.015) per second, as in the public
ANDREAS code; energy data are the shipped gpu_types.toml defaults.

"placed" is how many jobs the chosen schedule runs now (the rest are postponed); "vs greedy"
is the objective's change against the plain greedy (MaxIt 1). Wall time is measured here
around `allocate()`, best of 3.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from slurm_hetsched.core.costs import EnergyModel
from slurm_hetsched.core.model import Node, Problem
from slurm_hetsched.core.policies.andreas import Andreas
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy, shipped_throughputs

T4_RATIO = 0.35
SCENARIOS = {1: {"v100": 2, "t4": 1}, 2: {"v100": 4, "t4": 2}}


def make_problem(scenario: int, n_nodes: int, n_jobs: int, seed: int = 0) -> Problem:
    """An ANDREAS-like queue on N nodes (see the module docstring)."""
    rng = np.random.default_rng(seed)
    sizes = SCENARIOS[scenario]
    nodes = tuple(
        Node(f"n{i}", {"v100": sizes["v100"]} if i % 2 == 0 else {"t4": sizes["t4"]})
        for i in range(n_nodes)
    )
    table = shipped_throughputs()
    classes = [c for c in table.classes if set((1, 2, 4)) <= set(table.gpu_counts(c))]
    picks = rng.choice(len(classes), n_jobs)
    widest = max(sizes.values())
    at = np.full((n_jobs, 2, widest), np.nan)
    for m, k in enumerate(picks):
        for g in range(1, widest + 1):
            if g in table.gpu_counts(classes[k]):
                v100 = table.steps_per_s(classes[k], "v100", g)
                at[m, :, g - 1] = (v100, T4_RATIO * v100)
    throughput = at[:, :, 0]
    fastest_rate = np.nanmax(at[:, 0, :], axis=1)
    fastest_s = rng.uniform(0.5, 8.0, n_jobs) * 3600
    capacity = np.array(
        [sizes["v100"] * ((n_nodes + 1) // 2), sizes["t4"] * (n_nodes // 2)], dtype=float
    )
    allowed = tuple(tuple(range(1, widest + 1)) for _ in range(n_jobs))
    energy = EnergyModel.from_catalog(shipped_gpu_types(), shipped_site_energy(), ("v100", "t4"))
    return Problem(
        job_ids=tuple(f"j{m}" for m in range(n_jobs)),
        gpu_types=("v100", "t4"),
        throughput=throughput,
        capacity=capacity,
        steps=fastest_rate * fastest_s,
        due_s=rng.uniform(1.0, 3.0, n_jobs) * fastest_s,
        tardiness_weight=rng.uniform(0.003, 0.015, n_jobs),
        nodes=nodes,
        allowed_gpus=allowed,
        throughput_at=at,
        energy=energy,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="MaxIt 100 instead of 1000")
    args = parser.parse_args()
    max_it = 100 if args.quick else 1000
    print(f"ANDREAS randomized greedy, MaxIt {max_it}, wall time per allocate() (best of 3)")
    print(
        f"{'scen.':>5} {'nodes':>5} {'GPUs':>5} {'jobs':>5} {'solve_s':>8} {'placed':>6} "
        f"{'objective':>12} {'vs greedy':>9}"
    )
    for scenario in (1, 2):
        for n_nodes in (10, 50, 100):
            for n_jobs in (100, 1000):
                problem = make_problem(scenario, n_nodes, n_jobs)
                policy = Andreas(max_it=max_it)
                best = np.inf
                for _ in range(3):
                    started = time.perf_counter()
                    alloc = policy.allocate(problem)
                    best = min(best, time.perf_counter() - started)
                greedy = Andreas(max_it=1).allocate(problem).objective
                change = (alloc.objective - greedy) / greedy if greedy else 0.0
                print(
                    f"{scenario:>5} {n_nodes:>5} {int(problem.capacity.sum()):>5} {n_jobs:>5} "
                    f"{best:>8.3f} {len(alloc.placements or {}):>6} {alloc.objective:>12.2f} "
                    f"{change:>+9.2%}"
                )


if __name__ == "__main__":
    main()
