"""ANDREAS against its baselines in the simulator: total cost (energy + tardiness) per scenario,
cluster size and policy, averaged over seeds. Prints tables; asserts nothing
(tests/sim/test_andreas_scenarios.py checks correctness).

    .venv/bin/python benchmarks/andreas_simulation.py            # N = 10, 20, 50; seeds 0-2
    .venv/bin/python benchmarks/andreas_simulation.py --quick    # N = 4, 10; MaxIt 100
    .venv/bin/python benchmarks/andreas_simulation.py --nodes 10 --seeds 0,1,2,3,4 --procs 2

Scenarios and settings are sim/scenarios.py's (docs/simulation.md, "ANDREAS scenarios"): N
nodes, half V100 and half T4 (scenario 1: 2 x V100 or 1 x T4 per node; scenario 2: 4 x V100
or 2 x T4), J = 10 N jobs in alternating high- and low-rate groups, T4 = 0.35 x V100, 60 s
rounds, nodes without a busy GPU powered off, 10 s restart overhead on every move. Policies:
`andreas` (MaxIt 1000, seeded with the run's seed), `fifo_exclusive`, `edf_exclusive`,
`priority_exclusive`. "vs andreas" is ANDREAS's reduction of the mean total cost against the
policy's: 1 - andreas / policy. Wall time is the simulation's, per run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

POLICIES = ("andreas", "fifo_exclusive", "edf_exclusive", "priority_exclusive")


@dataclass(frozen=True)
class Run:
    scenario: int
    nodes: int
    seed: int
    policy: str
    energy_cost: float
    tardiness_cost: float
    makespan_h: float
    preemptions: int
    late_jobs: int
    wall_s: float

    @property
    def total(self) -> float:
        return self.energy_cost + self.tardiness_cost


def simulate_case(case: tuple[int, int, int, int]) -> list[Run]:
    """Every policy on one generated scenario (runs in a worker process)."""
    from slurm_hetsched.core.policies import get_policy
    from slurm_hetsched.core.policies.andreas import Andreas
    from slurm_hetsched.core.policies.base import Policy
    from slurm_hetsched.core.problem import SiteData
    from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy
    from slurm_hetsched.sim.run import simulate
    from slurm_hetsched.sim.scenarios import generate_andreas_scenario

    scenario, n_nodes, seed, max_it = case
    generated = generate_andreas_scenario(scenario, n_nodes, seed)
    site = SiteData(generated.table, shipped_gpu_types(), shipped_site_energy())
    runs = []
    for name in POLICIES:
        policy: Policy = (
            Andreas(max_it=max_it, seed=seed) if name == "andreas" else get_policy(name)
        )
        started = time.perf_counter()
        result = simulate(generated.trace, generated.nodes, policy, site, generated.settings())
        runs.append(
            Run(
                scenario=scenario,
                nodes=n_nodes,
                seed=seed,
                policy=name,
                energy_cost=result.energy_cost,
                tardiness_cost=result.tardiness_cost,
                makespan_h=result.makespan_s / 3600,
                preemptions=result.preemptions,
                late_jobs=sum(1 for r in result.jobs if r.tardiness_s > 0),
                wall_s=time.perf_counter() - started,
            )
        )
    return runs


def report(runs: Sequence[Run], scenarios: Sequence[int], sizes: Sequence[int]) -> bool:
    """Print one table per scenario; True if ANDREAS has the lowest mean total everywhere."""
    wins = True
    for scenario in scenarios:
        print(f"\nScenario {scenario} (mean over seeds; costs in EUR)")
        print(
            f"{'N':>3} {'policy':<19} {'energy':>8} {'tardiness':>10} {'total':>10} "
            f"{'vs andreas':>10} {'late jobs':>9} {'makespan_h':>10} {'moves':>7} {'wall_s':>7}"
        )
        for n in sizes:
            cell = [r for r in runs if r.scenario == scenario and r.nodes == n]
            if not cell:
                continue
            mean = {
                p: {
                    "energy": np.mean([r.energy_cost for r in cell if r.policy == p]),
                    "tardiness": np.mean([r.tardiness_cost for r in cell if r.policy == p]),
                    "total": np.mean([r.total for r in cell if r.policy == p]),
                    "late": np.mean([r.late_jobs for r in cell if r.policy == p]),
                    "makespan": np.mean([r.makespan_h for r in cell if r.policy == p]),
                    "moves": np.mean([r.preemptions for r in cell if r.policy == p]),
                    "wall": np.mean([r.wall_s for r in cell if r.policy == p]),
                }
                for p in POLICIES
            }
            ours = mean["andreas"]["total"]
            for p in POLICIES:
                m = mean[p]
                vs = "" if p == "andreas" else f"{1 - ours / m['total']:>+10.1%}"
                print(
                    f"{n:>3} {p:<19} {m['energy']:>8.2f} {m['tardiness']:>10.2f} "
                    f"{m['total']:>10.2f} {vs:>10} {m['late']:>9.1f} {m['makespan']:>10.1f} "
                    f"{m['moves']:>7.0f} {m['wall']:>7.1f}"
                )
                if p != "andreas" and not ours < m["total"]:
                    wins = False
    return wins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 4, 10 and MaxIt 100")
    parser.add_argument("--nodes", help="cluster sizes, e.g. 10,20,50 (default)")
    parser.add_argument("--seeds", default="0,1,2", help="seeds (default: %(default)s)")
    parser.add_argument("--scenarios", default="1,2", help="scenarios (default: %(default)s)")
    parser.add_argument("--max-it", type=int, help="ANDREAS's MaxIt (default 1000; 100 quick)")
    parser.add_argument("--procs", type=int, default=1, help="worker processes (default: 1)")
    args = parser.parse_args()
    sizes = [int(n) for n in (args.nodes or ("4,10" if args.quick else "10,20,50")).split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    scenarios = [int(s) for s in args.scenarios.split(",")]
    max_it = args.max_it or (100 if args.quick else 1000)
    cases = [(s, n, seed, max_it) for s in scenarios for n in sizes for seed in seeds]
    # Largest first, so that the pool's last tasks are short.
    cases.sort(key=lambda c: -c[1])
    started = time.perf_counter()
    runs: list[Run] = []
    with ProcessPoolExecutor(max_workers=max(1, args.procs)) as pool:
        for done in pool.map(simulate_case, cases):
            runs.extend(done)
    print(
        f"ANDREAS vs FIFO/EDF/priority (exclusive), MaxIt {max_it}, seeds {seeds}, "
        f"{time.perf_counter() - started:.0f} s in all"
    )
    wins = report(runs, scenarios, sizes)
    print(f"\nANDREAS has the lowest mean total cost in every cell: {'yes' if wins else 'NO'}")


if __name__ == "__main__":
    main()
