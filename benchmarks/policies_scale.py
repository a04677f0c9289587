"""The decision core at scale: solve time and peak memory of the policies that Gavel also has,
at 2048, 8192, 100,000 and 1,000,000 jobs, on inputs shaped like Gavel's generator and on
distinct rows. Prints a table beside Gavel's own figures; asserts nothing (correctness:
tests/unit/core/test_rate_lp_prices.py).

    .venv/bin/python benchmarks/policies_scale.py              # up to 100,000 jobs
    .venv/bin/python benchmarks/policies_scale.py --million    # adds 1,000,000 (max-min)
    .venv/bin/python benchmarks/policies_scale.py --sizes 2048 8192

Inputs (benchmarks/policies.py `make_problem`): N jobs drawn from the shipped Gavel table's
(class, GPU count) entries with Gavel's GPU mix (1, 2, 4, 8 GPUs with probability 0.7, 0.1,
0.15, 0.05), N/4 GPUs of each of 3 types (v100, p100, k80), or the same total over 8 types (5
synthetic ones scaled from the measured columns). "table": rows straight from the table, as
Gavel's `generate_input` draws them, so jobs of a class are identical and the policies solve
one row per group. "distinct": every entry times U(0.9, 1.1), as the live controller's
per-job rescaling makes them: no two jobs alike.

Each case runs in a child process (its peak RSS is the memory column) with a time limit.
The "gavel_s" column repeats the figures measured with Gavel's own code on the same inputs
(3 types, N/4 GPUs, Gavel's mix) where they exist.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import time
from collections.abc import Callable

from policies import TIMEOUT, Case, make_problem, print_header, run_in_child

from slurm_hetsched.core.policies.base import Policy
from slurm_hetsched.core.policies.finish_time_fairness import FinishTimeFairnessPerf
from slurm_hetsched.core.policies.max_min_fairness import MaxMinFairnessPerf
from slurm_hetsched.core.policies.water_filling import MaxMinFairnessWaterFillingPerf
from slurm_hetsched.data_files import shipped_throughputs

POLICIES: dict[str, Callable[[], Policy]] = {
    "max_min_fairness_perf": MaxMinFairnessPerf,
    "max_min_fairness_water_filling_perf": MaxMinFairnessWaterFillingPerf,
    "finish_time_fairness_perf": FinishTimeFairnessPerf,
}
# Gavel's own code on these inputs (3 types, N/4 GPUs, Gavel's mix): seconds.
GAVEL_S = {
    ("max_min_fairness_perf", 2048, "table"): "0.056",
    ("max_min_fairness_perf", 2048, "distinct"): "0.09-0.11",
    ("max_min_fairness_perf", 8192, "distinct"): "0.21",
    ("max_min_fairness_perf", 100_000, "distinct"): "11.3",
    ("max_min_fairness_water_filling_perf", 2048, "table"): "152",
    ("finish_time_fairness_perf", 2048, "table"): "4.9",
}


def _child(name: str, case: Case, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    problem = make_problem(case, shipped_throughputs())
    started = time.perf_counter()
    allocation = POLICIES[name]().allocate(problem)
    wall = time.perf_counter() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put((wall, allocation.objective, allocation.solves, peak_mib))


def run_case(name: str, case: Case, limit_s: float) -> str:
    """One policy on one case in a child process: the table's cells after the label."""
    result = run_in_child(_child, (name, case), limit_s)
    if result == TIMEOUT:
        return f"{'>' + str(int(limit_s)):>9} {'':>12} {'':>4} {'':>8}"
    if result is None:
        return f"{'failed':>9}"
    wall, objective, solves, peak_mib = result
    return f"{wall:9.3f} {objective:12.6g} {solves:>4} {peak_mib:8.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 8192, 100_000])
    parser.add_argument("--million", action="store_true", help="add 1,000,000 jobs (max-min)")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds per case")
    args = parser.parse_args(argv)
    sizes = list(args.sizes) + ([1_000_000] if args.million else [])
    header = (
        f"{'policy':<36} {'jobs':>7} {'types':>5} {'rows':>8} {'wall_s':>9} {'objective':>12}"
        f" {'LPs':>4} {'peak_MiB':>8} {'gavel_s':>9}"
    )
    print_header(header)
    for n_jobs in sizes:
        for n_types in (3, 8):
            for rows in ("table", "distinct"):
                case = Case(n_jobs, n_types, 0.25, True, rows == "distinct")
                for name in POLICIES:
                    if n_jobs >= 1_000_000 and name != "max_min_fairness_perf":
                        continue
                    cells = run_case(name, case, args.limit)
                    gavel = GAVEL_S.get((name, n_jobs, rows), "") if n_types == 3 else ""
                    print(
                        f"{name:<36} {n_jobs:>7} {n_types:>5} {rows:>8} {cells} {gavel:>9}",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
