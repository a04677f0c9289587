"""What scheduling without profiles costs: the same runs with the true throughput table and with
a policy that sees only estimates from datasheet figures, the neutral prior and what it learns
online (`hetsched simulate --unprofiled`). Prints one table; asserts nothing.

    .venv/bin/python benchmarks/unprofiled.py
    .venv/bin/python benchmarks/unprofiled.py --policy finish_time_fairness_perf

Traces: Gavel's shipped `max_min_fairness` trace (96 jobs) on v100=4,p100=4,k80=4, and a
400-job Poisson trace (Gavel's multi-GPU mix, seed 0, 3 jobs/h) on v100=8,p100=8,k80=8; 360 s
rounds, 10 s restarts. What the policy sees, per row:
- `table`: the true table (the baseline);
- `-k80`, `-p100,k80`: those columns hidden, estimated from the figures and the other columns;
- `none`: no table at all: every class starts from the neutral prior, learns its scale from its
  first report and each type when it first runs there, with exploration stints;
- `none, no stints`: the same without exploration.
Jobs always run at the true table's rates. JCT gap: average JCT against the `table` row's
(target: within 10%). Stints: (job, type) exploration stints given; moves: all moves, stints'
included.
"""

from __future__ import annotations

import argparse
import logging

from slurm_hetsched.core.explore import ExploreSettings
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.core.throughput.prior import with_estimates, without
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy, shipped_throughputs
from slurm_hetsched.sim.generate import generate_trace
from slurm_hetsched.sim.layout import nodes_from_counts
from slurm_hetsched.sim.run import SimSettings, simulate
from slurm_hetsched.sim.traces import read_shipped_trace

# (what the policy sees, the columns hidden or None for no table, exploration on)
VIEWS: tuple[tuple[str, tuple[str, ...] | None, bool], ...] = (
    ("table", (), True),
    ("-k80", ("k80",), True),
    ("-p100,k80", ("p100", "k80"), True),
    ("none", None, True),
    ("none, no stints", None, False),
)


def seen_table(table: ThroughputTable, hidden: tuple[str, ...] | None) -> ThroughputTable:
    """What the policy decides on: the table less `hidden` (None: nothing), with estimates."""
    catalog = shipped_gpu_types()
    if hidden == ():
        return with_estimates(table, catalog, prior=False)
    return with_estimates(without(table, hidden or (), every=hidden is None), catalog)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", default="max_min_fairness_perf")
    parser.add_argument("--jobs", type=int, default=400, help="jobs of the Poisson trace")
    args = parser.parse_args()
    # The online update logs each clipped outlier; the table says what they add up to.
    logging.getLogger("slurm_hetsched").setLevel(logging.ERROR)
    table = shipped_throughputs()
    truth = with_estimates(table, shipped_gpu_types(), prior=False)
    energy = shipped_site_energy()
    traces = (
        ("max_min_fairness (96)", read_shipped_trace("max_min_fairness", table=table), 4),
        (
            f"Poisson ({args.jobs})",
            generate_trace(args.jobs, seed=0, table=table, rate_per_hour=3.0),
            8,
        ),
    )
    print(f"policy {args.policy}; jobs run at the true table's rates")
    header = (
        f"{'trace':<24} {'policy sees':<16} {'avg JCT (h)':>11} {'JCT gap':>8} "
        f"{'moves':>6} {'stints':>6} {'done':>5}"
    )
    print(header)
    print("-" * len(header))
    for name, trace, per_type in traces:
        nodes = nodes_from_counts({"v100": per_type, "p100": per_type, "k80": per_type})
        base_jct = None
        for label, hidden, explore in VIEWS:
            site = SiteData(seen_table(table, hidden), shipped_gpu_types(), energy)
            settings = SimSettings(explore=ExploreSettings(enabled=explore))
            result = simulate(
                trace,
                nodes,
                get_policy(args.policy),
                site,
                settings,
                truth=None if hidden == () else truth,
            )
            if base_jct is None:
                base_jct = result.avg_jct_s
            gap = 100.0 * (result.avg_jct_s / base_jct - 1.0)
            print(
                f"{name:<24} {label:<16} {result.avg_jct_s / 3600:>11.2f} {gap:>+7.1f}% "
                f"{result.moves:>6} {result.exploration_stints:>6} "
                f"{result.completed:>5}"
            )
            name = ""


if __name__ == "__main__":
    main()
