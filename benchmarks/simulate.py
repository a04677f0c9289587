"""Wall time and peak memory of `hetsched simulate` at growing trace sizes. Prints a table;
asserts nothing (tests/sim/test_simulate.py checks correctness).

    .venv/bin/python benchmarks/simulate.py              # 100, 1000 and 5000 jobs
    .venv/bin/python benchmarks/simulate.py --sizes 100,1000

Each size runs in its own process (so peak memory is that run's own): a trace generated with
Gavel's multi-GPU mix (seed 0) at an arrival rate that keeps 108 GPUs (36 V100 + 36 P100 + 36
K80, servers of 4) busy, simulated with max_min_fairness_perf, 360 s rounds, 10 s restart
overhead and the round mechanism's defaults (one queue per GPU type, work conservation). The
policy is solved only in rounds where jobs arrived or finished; the other rounds reuse the
allocation, as Gavel does. Target: 1000 jobs in under 60 s on a 2-core machine.

Last run (2 cores): 5000 jobs 64-77 s and 534 MiB (peak resident memory of the whole
process); 216 s on the same machine before the simulation-speed work (docs/simulation.md,
"Speed"). The issue's target, under 60 s against 152 s measured on a faster machine, is a
2.5-fold speed-up; this is 3.2-fold.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

RATE_PER_HOUR = 4.0
CLUSTER = {"v100": 36, "p100": 36, "k80": 36}


def run_one(n_jobs: int, policy: str) -> dict[str, float]:
    """Simulate one trace in this process and return its figures."""
    from slurm_hetsched.core.policies import get_policy
    from slurm_hetsched.core.problem import SiteData
    from slurm_hetsched.data_files import (
        shipped_gpu_types,
        shipped_site_energy,
        shipped_throughputs,
    )
    from slurm_hetsched.sim.generate import generate_trace
    from slurm_hetsched.sim.layout import nodes_from_counts
    from slurm_hetsched.sim.run import simulate

    table = shipped_throughputs()
    site = SiteData(table, shipped_gpu_types(), shipped_site_energy())
    trace = generate_trace(n_jobs, seed=0, table=table, rate_per_hour=RATE_PER_HOUR)
    started = time.perf_counter()
    result = simulate(trace, nodes_from_counts(CLUSTER), get_policy(policy), site)
    wall = time.perf_counter() - started
    return {
        "jobs": n_jobs,
        "wall_s": wall,
        "rounds": result.rounds,
        "completed": result.completed,
        "avg_jct_h": result.avg_jct_s / 3600,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,5000", help="trace sizes (jobs)")
    parser.add_argument("--policy", default="max_min_fairness_perf")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child process mode
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.policy)))
        return
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        out = subprocess.run(
            [sys.executable, __file__, "--one", str(size), "--policy", args.policy],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print(f"simulate, {args.policy}, 108 GPUs (36 each of v100/p100/k80), {RATE_PER_HOUR} jobs/h")
    print(
        f"{'jobs':>6} {'rounds':>7} {'completed':>9} {'avg JCT h':>9} {'wall s':>8} {'peak MiB':>9}"
    )
    for r in rows:
        print(
            f"{r['jobs']:>6} {r['rounds']:>7} {r['completed']:>9} {r['avg_jct_h']:>9.2f} "
            f"{r['wall_s']:>8.1f} {r['peak_mib']:>9.0f}"
        )


if __name__ == "__main__":
    main()
