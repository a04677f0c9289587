"""Moves that pay for themselves: the plain round mechanism against amortized moves (the
default), side by side in one run. Prints a table; asserts nothing (the unit and property
tests check the rules: tests/unit/core/test_mechanism_amortized.py).

    .venv/bin/python benchmarks/moves.py             # all three scenarios, 2 processes
    .venv/bin/python benchmarks/moves.py --only a --procs 1

Scenarios (360 s rounds, servers of 4 GPUs, the defaults of `hetsched simulate` otherwise):
  a  Gavel's shipped `max_min_fairness` trace (96 jobs) on 8 V100 + 16 P100 + 24 K80, 10 s
     restarts, heterogeneity-aware and agnostic max-min fairness. Target: amortized within
     2% of the plain mechanism's average JCT.
  b  400 jobs, Poisson arrivals at 4 jobs/h (Gavel's durations and GPU counts), restart costs
     per job class uniform in 25-250 s, on 36 V100 + 36 P100 + 36 K80. Target: 1.5x lower
     average JCT than plain.
  c  the same with bursty arrivals (`--arrivals bursty`: bursts of up to 100 jobs within an
     hour, 4 h quiet on average between them). Target as b.
  b0, c0 (with --bounds): b and c under the plain mechanism with restarts that cost nothing:
     the average JCT no mechanism that only saves restarts can beat by much.

Columns: average and 99th-percentile JCT (hours), restarts per job (moves and stops of running
jobs: each costs a restart), GPU-hours lost to restarts, and plain / amortized average JCT.

Last run (2 cores, --bounds, about 40 s): a aware 4.23 -> 4.26 h, agnostic 5.79 -> 5.83 h
(+0.7%, within the 2% target); b 35.87 -> 32.72 h (1.10x; free restarts 29.78 h, 1.20x);
c 44.04 -> 39.45 h (1.12x; free restarts 34.15 h, 1.29x). The 1.5x target of b and c is not
reached: even restarts that cost nothing give only 1.20x and 1.29x (docs/mechanism.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from concurrent.futures import ProcessPoolExecutor

CLUSTER_A = {"v100": 8, "p100": 16, "k80": 24}
CLUSTER_BC = {"v100": 36, "p100": 36, "k80": 36}
RESTARTS = (25.0, 250.0)
JOBS = 400
SEED = 0


@dataclasses.dataclass(frozen=True)
class Run:
    scenario: str
    policy: str
    moves: str
    free_restarts: bool = False


def runs(only: str, bounds: bool) -> list[Run]:
    out = []
    for scenario in only:
        policies = ["max_min_fairness_perf"]
        if scenario == "a":
            policies.append("max_min_fairness")
        for policy in policies:
            out += [Run(scenario, policy, "plain"), Run(scenario, policy, "amortized")]
        if bounds and scenario in "bc":
            out.append(Run(scenario, "max_min_fairness_perf", "plain", free_restarts=True))
    return out


def simulate_one(run: Run) -> dict[str, float | str]:
    from slurm_hetsched.core.mechanism import RoundOptions
    from slurm_hetsched.core.policies import get_policy
    from slurm_hetsched.core.problem import SiteData
    from slurm_hetsched.data_files import (
        shipped_gpu_types,
        shipped_site_energy,
        shipped_throughputs,
    )
    from slurm_hetsched.sim.arrivals import Bursts
    from slurm_hetsched.sim.generate import generate_trace
    from slurm_hetsched.sim.layout import nodes_from_counts
    from slurm_hetsched.sim.run import SimSettings, simulate
    from slurm_hetsched.sim.traces import read_shipped_trace

    table = shipped_throughputs()
    site = SiteData(table, shipped_gpu_types(), shipped_site_energy())
    if run.scenario == "a":
        trace = read_shipped_trace("max_min_fairness")
        cluster, restart_s = CLUSTER_A, 10.0
    else:
        arrivals = {"rate_per_hour": 4.0} if run.scenario == "b" else {"bursts": Bursts()}
        trace = generate_trace(JOBS, seed=SEED, table=table, restart_range=RESTARTS, **arrivals)
        cluster, restart_s = CLUSTER_BC, 0.0  # every job has its own cost in the trace
    if run.free_restarts:
        trace = tuple(dataclasses.replace(job, restart_s=0.0) for job in trace)
    settings = SimSettings(
        round_s=360.0,
        restart_overhead_s=restart_s,
        round_options=RoundOptions(moves=run.moves, restart_s=restart_s),
    )
    started = time.perf_counter()
    result = simulate(trace, nodes_from_counts(cluster), get_policy(run.policy), site, settings)
    return {
        "avg_jct_h": result.avg_jct_s / 3600,
        "p99_jct_h": result.p99_jct_s / 3600,
        "restarts_per_job": result.preemptions / len(trace),
        "restart_gpu_h": result.restart_gpu_h,
        "completed": result.completed,
        "jobs": len(trace),
        "wall_s": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="abc", help="scenarios to run, e.g. 'a' or 'bc'")
    parser.add_argument("--procs", type=int, default=2, help="processes in parallel")
    parser.add_argument(
        "--bounds", action="store_true", help="also b and c with free restarts (plain)"
    )
    args = parser.parse_args()
    todo = runs(args.only, args.bounds)
    with ProcessPoolExecutor(max_workers=args.procs) as pool:
        results = dict(zip(todo, pool.map(simulate_one, todo), strict=True))

    header = (
        f"{'':2} {'policy':22} {'mechanism':16} {'avg JCT h':>9} {'p99 JCT h':>9} "
        f"{'restarts/job':>12} {'GPU-h lost':>10} {'plain/this':>10} {'done':>7} {'wall s':>6}"
    )
    print(header)
    print("-" * len(header))
    for run, r in results.items():
        plain = results[Run(run.scenario, run.policy, "plain")]
        label = "plain, free restarts" if run.free_restarts else run.moves
        print(
            f"{run.scenario + ('0' if run.free_restarts else ''):2} {run.policy:22} {label:16} "
            f"{r['avg_jct_h']:9.2f} {r['p99_jct_h']:9.1f} {r['restarts_per_job']:12.1f} "
            f"{r['restart_gpu_h']:10.1f} {plain['avg_jct_h'] / r['avg_jct_h']:10.2f} "
            f"{r['completed']:>3}/{r['jobs']:<3} {r['wall_s']:6.1f}"
        )


if __name__ == "__main__":
    main()
