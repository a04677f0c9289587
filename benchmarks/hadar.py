"""Hadar against its baselines on the paper's trace-driven simulation (Sultana et al., section
IV): the batch's finish time, the time until half the jobs are done, mean JCT, GPU utilisation
and moves per policy, over seeds, beside the paper's ratios; and with --scaling the time of one
scheduling decision against the number of queued jobs. Prints tables; asserts nothing
(tests/sim/test_scenario_hadar.py checks the scenario).

    .venv/bin/python benchmarks/hadar.py                      # 480 jobs, seeds 0 to 9
    .venv/bin/python benchmarks/hadar.py --jobs 60 --seeds 0 --policies max_min_fairness_perf
    .venv/bin/python benchmarks/hadar.py --procs 4            # simulations in 4 processes
    .venv/bin/python benchmarks/hadar.py --scaling            # decision time, 32 to 10,000 jobs

Scenario and settings are sim/scenario_hadar.py's (docs/simulation.md, "Hadar scenario"): 15
nodes of 4 GPUs (20 v100, 20 p100, 20 k80), 480 jobs at time 0 with Gavel's Philly GPU counts,
GPU-hours from the paper's size buckets (on K80s), models of the paper's Table II; 360 s rounds,
10 s restart on every new allocation. `hadar_paper` is hadar as the paper prices (every GPU
type alike, no critical jobs first: `type_values=none,critical=0`). "x hadar" is the policy's
mean over hadar's (for the batch's finish time, "hadar finishes Nx sooner"). A policy not
registered in core.policies.POLICIES is skipped with a note; without hadar, ratios are to the
first policy.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from policies import TIMEOUT, print_header, run_in_child

DEFAULT_POLICIES = ("hadar", "hadar_paper", "max_min_fairness_perf", "tiresias", "yarn_cs")
# Variants: a policy with options, under a name of their own.
VARIANTS = {
    # The paper's Hadar: all types priced alike, no critical jobs first (docs/policies.md).
    "hadar_paper": ("hadar", {"type_values": "none", "critical": "0"}),
}
# The paper's figures (section IV, Figs. 3-5): baseline / hadar, and Hadar's own finish time.
PAPER_RATIO = {
    "makespan_h": {"hadar": "40 h", "max_min_fairness_perf": "1.21", "tiresias": "1.35",
                   "yarn_cs": "1.67"},
    "half_h": {"max_min_fairness_perf": "1.20", "tiresias": "1.40"},
    "utilization": {"yarn_cs": "highest", "hadar": "near yarn"},
}  # fmt: skip
METRICS: dict[str, tuple[str, str]] = {  # key: (title, cell format)
    "makespan_h": ("Time to finish the batch (makespan), hours", ".1f"),
    "half_h": ("Time until half the jobs are done, hours", ".1f"),
    "avg_jct_h": ("Average JCT, hours", ".1f"),
    "utilization": ("GPU utilisation (busy GPU-time / 60 GPUs x makespan)", ".3f"),
    "moves": ("Moves (to other GPUs)", ".0f"),
    "preemptions": ("Preemptions (moves and stops)", ".0f"),
    "wall_s": ("Simulation wall time, seconds", ".1f"),
}
SCALING_SIZES = (32, 64, 128, 256, 512, 1024, 2048, 10_000)
SCALING_POLICIES = ("hadar", "max_min_fairness_perf")
SCALING_TARGETS = {("hadar", 2048): "< 1 s", ("hadar", 10_000): "< 10 s"}


@dataclass(frozen=True)
class Run:
    seed: int
    policy: str
    values: dict[str, float]
    error: str = ""


def time_to_fraction(ends: Sequence[float | None], fraction: float) -> float:
    """When `fraction` of the jobs (all arrived at 0) had finished: the ceil(fraction x n)-th
    completion time; NaN if fewer finished."""
    done = sorted(e for e in ends if e is not None)
    k = max(1, math.ceil(fraction * len(ends)))
    return done[k - 1] if len(done) >= k else math.nan


def known_policies(names: Sequence[str]) -> list[str]:
    """`names` that core.policies.POLICIES registers; a note for each that it does not."""
    from slurm_hetsched.core.policies import POLICIES

    known = [name for name in names if VARIANTS.get(name, (name,))[0] in POLICIES]
    for name in names:
        if name not in known:
            print(f"skipping policy {name!r}: not registered in core.policies.POLICIES (yet)")
    return known


def simulate_case(case: tuple[int, int, str]) -> Run:
    """One policy on one generated scenario (in a worker process)."""
    from slurm_hetsched.core.policies import get_policy
    from slurm_hetsched.core.problem import SiteData
    from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy
    from slurm_hetsched.errors import HetschedError
    from slurm_hetsched.sim.run import simulate
    from slurm_hetsched.sim.scenario_hadar import generate_hadar_scenario

    seed, n_jobs, name = case
    policy, options = VARIANTS.get(name, (name, {}))
    generated = generate_hadar_scenario(seed, n_jobs)
    site = SiteData(generated.table, shipped_gpu_types(), shipped_site_energy())
    started = time.perf_counter()
    try:
        result = simulate(
            generated.trace,
            generated.nodes,
            get_policy(policy, options),
            site,
            generated.settings(),
        )
    except Exception as exc:  # a policy being written may fail anyhow: report, go on
        kind = "" if isinstance(exc, HetschedError) else " (not a HetschedError)"
        return Run(seed, name, {}, f"{type(exc).__name__}{kind}: {exc}")
    values = {
        "makespan_h": result.makespan_s / 3600,
        "half_h": time_to_fraction([r.end_s for r in result.jobs], 0.5) / 3600,
        "avg_jct_h": result.avg_jct_s / 3600,
        "utilization": result.utilization,
        "moves": float(result.moves),
        "preemptions": float(result.preemptions),
        "wall_s": time.perf_counter() - started,
    }
    return Run(seed, name, values)


def print_bounds(seeds: Sequence[int], n_jobs: int) -> None:
    from slurm_hetsched.sim.scenario_hadar import batch_bounds, generate_hadar_scenario

    print("\nLower bounds on the batch's finish time, hours (no rounds, no restarts)")
    print_header(f"{'seed':>4} {'work/60 GPUs':>12} {'longest job':>11} {'fluid LP':>8}")
    for seed in seeds:
        s = generate_hadar_scenario(seed, n_jobs)
        b = batch_bounds(s.trace, s.nodes, s.table)
        print(f"{seed:>4} {b.work_s / 3600:>12.1f} {b.longest_s / 3600:>11.1f} "
              f"{b.fluid_s / 3600:>8.1f}")  # fmt: skip


def report(runs: Sequence[Run], seeds: Sequence[int], policies: Sequence[str]) -> None:
    """One table per metric: a row per policy, a column per seed, the mean, the ratio to the
    reference policy's mean and the paper's figure."""
    ok = [p for p in policies if all(not r.error for r in runs if r.policy == p)]
    for r in runs:
        if r.error:
            print(f"\n{r.policy} failed on seed {r.seed}: {r.error}")
    if not ok:
        return
    ref = "hadar" if "hadar" in ok else ok[0]
    for key, (title, fmt) in METRICS.items():
        print(f"\n{title}")
        seed_cols = " ".join(f"{'seed ' + str(s):>8}" for s in seeds)
        print_header(f"{'policy':<24} {seed_cols} {'mean':>8} {'x ' + ref:>12} {'paper':>10}")
        ref_mean = _mean(runs, ref, key)
        for p in ok:
            cells = " ".join(
                f"{r.values[key]:>8{fmt}}" for s in seeds for r in runs
                if r.policy == p and r.seed == s
            )  # fmt: skip
            mean = _mean(runs, p, key)
            ratio = f"{mean / ref_mean:.2f}" if ref_mean else "-"
            paper = PAPER_RATIO.get(key, {}).get(p, "") if ref == "hadar" else ""
            print(f"{p:<24} {cells} {mean:>8{fmt}} {ratio:>12} {paper:>10}")


def _mean(runs: Sequence[Run], policy: str, key: str) -> float:
    return statistics.fmean(r.values[key] for r in runs if r.policy == policy and not r.error)


def _time_decisions(name: str, n_jobs: int, repeats: int, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """Child: build one problem of `n_jobs` waiting jobs on the 60-GPU cluster, then put the
    wall seconds of up to `repeats` `allocate` calls (fewer once they add up to a minute)."""
    from slurm_hetsched.core.model import ClusterSnapshot
    from slurm_hetsched.core.policies import get_policy
    from slurm_hetsched.core.problem import SiteData, build_problem
    from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy
    from slurm_hetsched.sim.scenario_hadar import generate_hadar_scenario

    s = generate_hadar_scenario(0, n_jobs)
    site = SiteData(s.table, shipped_gpu_types(), shipped_site_energy())
    jobs = tuple(job.to_job() for job in s.trace)
    problem = build_problem(ClusterSnapshot(now_s=0.0, nodes=s.nodes, jobs=jobs), site)
    policy = get_policy(name)
    times: list[float] = []
    while len(times) < repeats and sum(times) < 60.0:
        started = time.perf_counter()
        policy.allocate(problem)
        times.append(time.perf_counter() - started)
    queue.put(times)


def scaling(policies: Sequence[str], sizes: Sequence[int], repeats: int, limit_s: float) -> None:
    print("\nScheduling time per decision (one allocate) against queued jobs, 60 GPUs; median")
    print_header(f"{'policy':<24} {'jobs':>6} {'median_s':>10} {'runs':>4} {'target':>8}")
    for n in sizes:
        for name in policies:
            found = run_in_child(_time_decisions, (name, n, repeats), limit_s)
            target = SCALING_TARGETS.get((name, n), "")
            if found == TIMEOUT:
                print(f"{name:<24} {n:>6} {'>' + str(int(limit_s)):>10} {'':>4} {target:>8}")
                continue
            if found is None:
                print(f"{name:<24} {n:>6} {'failed':>10} {'':>4} {target:>8}")
                continue
            print(f"{name:<24} {n:>6} {statistics.median(found):>10.4f} {len(found):>4} "
                  f"{target:>8}", flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4,5,6,7,8,9", help="seeds (default: 0-9)")
    parser.add_argument(
        "--policies",
        help=f"P1,P2,... (default: {','.join(DEFAULT_POLICIES)}; with --scaling: "
        f"{','.join(SCALING_POLICIES)})",
    )
    parser.add_argument("--jobs", type=int, default=480, help="jobs per batch (default: 480)")
    parser.add_argument("--procs", type=int, default=1, help="worker processes (default: 1)")
    parser.add_argument("--scaling", action="store_true", help="decision time vs queued jobs")
    parser.add_argument(
        "--sizes", help="with --scaling: queued jobs, e.g. 32,2048 (default: 32..2048, 10000)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="with --scaling: runs per size")
    parser.add_argument("--limit", type=float, default=300.0, help="with --scaling: s per case")
    args = parser.parse_args(argv)
    if args.scaling:
        names = known_policies(args.policies.split(",") if args.policies else SCALING_POLICIES)
        sizes = [int(n) for n in args.sizes.split(",")] if args.sizes else SCALING_SIZES
        scaling(names, sizes, args.repeats, args.limit)
        return 0
    seeds = [int(s) for s in args.seeds.split(",")]
    names = known_policies(args.policies.split(",") if args.policies else DEFAULT_POLICIES)
    if not names:
        print("no registered policy to run")
        return 1
    cases = [(seed, args.jobs, name) for seed in seeds for name in names]
    started = time.perf_counter()
    runs: list[Run] = []
    with ProcessPoolExecutor(max_workers=max(1, args.procs)) as pool:
        for run in pool.map(simulate_case, cases):
            wall = run.values.get("wall_s", math.nan)
            status = "failed" if run.error else f"{wall:.1f} s"
            print(f"seed {run.seed} {run.policy}: {status}", flush=True)
            runs.append(run)
    print(
        f"\nHadar scenario, {args.jobs} jobs, seeds {seeds}, policies {names}: "
        f"{time.perf_counter() - started:.0f} s in all"
    )
    print_bounds(seeds, args.jobs)
    report(runs, seeds, names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
