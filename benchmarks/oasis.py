"""OASiS against its baselines in simulation (Bao et al., INFOCOM'18; shared notes
astraea-oasis.md sections 12 and 16): (a) total utility against the arrival rate, Poisson and
bursty, over seeds (the paper's Fig. 4) with the share of time-critical jobs that miss their
target (after Fig. 5); (b) each policy's total utility over the exact offline optimum on small
instances (the paper's Fig. 6, OPT / OASiS, shown here as policy / OPT <= 1). Prints tables;
asserts nothing (tests/sim/test_scenario_oasis.py and test_offline_optimum.py check the parts).

    .venv/bin/python benchmarks/oasis.py                       # rates 4-32 jobs/h, seeds 0-4
    .venv/bin/python benchmarks/oasis.py --quick               # a minute or so
    .venv/bin/python benchmarks/oasis.py --rates 8,16 --seeds 0,1 --jobs 60 --procs 4
    .venv/bin/python benchmarks/oasis.py --only ratio --policies fifo,fifo_perf

(a) sim/scenario_oasis.py's workload (docs/simulation.md, "OASiS evaluation"): 8 nodes of 4 GPUs
(8 v100, 12 p100, 12 k80), `--jobs` jobs of Gavel's classes (1 GPU 80%, 2 and 4 GPUs 10% each),
10 minutes to 4 hours on their fastest type, sigmoid utilities (10% time-insensitive, 55%
time-sensitive, 35% time-critical, umax 1-100); rounds of 360 s (Gavel's; OASiS's hour-long slots
would let every time-critical job miss in its first slot) and a 10 s restart per move. Bursty
arrivals come in batches of 5 jobs on average within 10 minutes, at the same mean rate.

(b) sim/scenario_oasis.py's small instances (nodes of 1 GPU cycling v100, p100, k80; 1-GPU jobs
arriving at slot boundaries, 0.5-2 slots long on their fastest type), simulated with round =
slot = 1800 s and no restart cost, against sim/offline_optimum.py's optimum over the same slots.
A job's utility counts only if it completes within the horizon, on both sides, so the ratio is
at most 1 (one node a job and no restarts make every simulated run one of the optimum's
schedules).

A policy not registered in core.policies.POLICIES is skipped with a note.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from policies import print_header

from slurm_hetsched.core.policies import POLICIES, Policy, get_policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy
from slurm_hetsched.errors import HetschedError
from slurm_hetsched.sim.offline_optimum import instance_from_trace, offline_optimum
from slurm_hetsched.sim.run import simulate
from slurm_hetsched.sim.scenario_oasis import (
    generate_oasis_scenario,
    generate_small_oasis_scenario,
)

DEFAULT_POLICIES = ("oasis", "fifo", "drf", "risk_reward")
DEFAULT_RATES = (4.0, 8.0, 16.0, 32.0)  # jobs per hour; the cluster saturates near 12
ARRIVALS = ("poisson", "bursty")
SMALL_SIZES = ((2, 4, 4), (3, 5, 6), (3, 6, 8))  # (nodes, jobs, slots)
SLOT_S = 1800.0
# --quick: seeds 0 and 1, two rates, smaller workloads, the two smaller instance sizes.
QUICK_SEEDS, QUICK_RATES, QUICK_JOBS, QUICK_SIZES = "0,1", "4,16", 40, SMALL_SIZES[:2]


@dataclass(frozen=True)
class Run:
    """One simulation of part (a): total utility and time-critical misses."""

    arrivals: str
    rate: float
    seed: int
    policy: str
    utility: float = 0.0
    critical_missed: float = 0.0  # share of time-critical jobs finishing after their target
    wall_s: float = 0.0
    error: str = ""


@dataclass(frozen=True)
class Ratio:
    """One small instance of part (b): the optimum and each policy's share of it."""

    size: tuple[int, int, int]
    seed: int
    optimum: float
    optimum_s: float
    ratios: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def known_policies(names: Sequence[str]) -> list[str]:
    """`names` that core.policies.POLICIES registers; a note for each that it does not."""
    for name in names:
        if name not in POLICIES:
            print(f"skipping policy {name!r}: not registered in core.policies.POLICIES (yet)")
    return [name for name in names if name in POLICIES]


def _site(table: ThroughputTable) -> SiteData:
    return SiteData(table, shipped_gpu_types(), shipped_site_energy())


def _failure(exc: Exception) -> str:
    kind = "" if isinstance(exc, HetschedError) else " (not a HetschedError)"
    return f"{type(exc).__name__}{kind}: {exc}"


def simulate_case(case: tuple[str, float, int, int, str]) -> Run:
    """Part (a): one policy on one generated workload (in a worker process)."""
    arrivals, rate, seed, n_jobs, name = case
    s = generate_oasis_scenario(seed, n_jobs, rate, arrivals)
    started = time.perf_counter()
    try:
        result = simulate(s.trace, s.nodes, get_policy(name), _site(s.table), s.settings())
    except Exception as exc:  # a policy being written may fail anyhow: report, go on
        return Run(arrivals, rate, seed, name, error=_failure(exc))
    critical = [
        (job, record)
        for job, record, kind in zip(s.trace, result.jobs, s.kinds, strict=True)
        if kind == "critical"
    ]
    missed = sum(
        1
        for job, record in critical
        if record.end_s is None
        or record.end_s - job.arrival_s > (job.the_utility().target_s or 0.0)
    )
    return Run(
        arrivals,
        rate,
        seed,
        name,
        result.total_utility,
        missed / len(critical) if critical else 0.0,
        time.perf_counter() - started,
    )


def small_policy(name: str, n_slots: int) -> Policy:
    """A policy for the small instances: oasis plans in their slots, over all of them, with
    no restart cost (the optimum's setting); the others as registered."""
    if name == "oasis":
        return get_policy(name, {"slot_s": SLOT_S, "horizon": n_slots, "restart_s": 0})
    return get_policy(name)


def ratio_case(case: tuple[tuple[int, int, int], int, tuple[str, ...]]) -> Ratio:
    """Part (b): the optimum of one small instance and every policy's utility over it."""
    size, seed, names = case
    n_nodes, n_jobs, n_slots = size
    s = generate_small_oasis_scenario(seed, n_nodes, n_jobs, n_slots, SLOT_S)
    instance = instance_from_trace(s.trace, s.nodes, s.table, SLOT_S, n_slots)
    started = time.perf_counter()
    optimum = offline_optimum(instance).total_utility
    out = Ratio(size, seed, optimum, time.perf_counter() - started)
    for name in names:
        try:
            policy = small_policy(name, n_slots)
            result = simulate(s.trace, s.nodes, policy, _site(s.table), s.settings())
        except Exception as exc:
            out.errors[name] = _failure(exc)
            continue
        earned = sum(
            job.the_utility().value(record.end_s, job.arrival_s)
            for job, record in zip(s.trace, result.jobs, strict=True)
            if record.end_s is not None and record.end_s <= instance.horizon_s + 1e-6
        )
        out.ratios[name] = earned / optimum if optimum > 0 else 1.0
    return out


def _cell(values: Sequence[float], fmt: str) -> str:
    if not values:
        return "-"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):{fmt}} ± {spread:{fmt}}"


def report_utility(runs: Sequence[Run], rates: Sequence[float], policies: Sequence[str]) -> None:
    for r in runs:
        if r.error:
            print(
                f"\n{r.policy} failed ({r.arrivals}, {r.rate:g} jobs/h, seed {r.seed}): {r.error}"
            )
    tables = (
        ("utility", "Total utility, mean ± sd over seeds", ".0f", 15),
        ("critical_missed", "Time-critical jobs missing their target, share", ".2f", 15),
    )
    for arrivals in ARRIVALS:
        for key, title, fmt, width in tables:
            print(f"\n{title} ({arrivals} arrivals)")
            cols = " ".join(f"{f'{rate:g} jobs/h':>{width}}" for rate in rates)
            print_header(f"{'policy':<22} {cols}")
            for p in policies:
                cells = []
                for rate in rates:
                    values = [
                        getattr(r, key)
                        for r in runs
                        if (r.policy, r.arrivals, r.rate) == (p, arrivals, rate) and not r.error
                    ]
                    cells.append(f"{_cell(values, fmt):>{width}}")
                print(f"{p:<22} {' '.join(cells)}")


def report_ratios(ratios: Sequence[Ratio], policies: Sequence[str]) -> None:
    for r in ratios:
        for name, error in r.errors.items():
            print(f"\n{name} failed on small instance {r.size}, seed {r.seed}: {error}")
    sizes = sorted({r.size for r in ratios})
    print(f"\nTotal utility / offline optimum (completions within the horizon; slot {SLOT_S:g} s)")
    print("mean [min, max] over seeds; columns: nodes x jobs x slots")
    cols = " ".join(f"{f'{n}x{j}x{t}':>20}" for n, j, t in sizes)
    print_header(f"{'policy':<22} {cols}")
    for p in policies:
        cells = []
        for size in sizes:
            values = [r.ratios[p] for r in ratios if r.size == size and p in r.ratios]
            text = (
                f"{statistics.fmean(values):.3f} [{min(values):.2f}, {max(values):.2f}]"
                if values
                else "-"
            )
            cells.append(f"{text:>20}")
        print(f"{p:<22} {' '.join(cells)}")
    times = " ".join(
        f"{f'{max(r.optimum_s for r in ratios if r.size == size):.2f}':>20}" for size in sizes
    )
    print(f"{'optimum: slowest s':<22} {times}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="seeds (default: 0-4)")
    parser.add_argument("--rates", help="jobs per hour (default: 4,8,16,32)")
    parser.add_argument("--jobs", type=int, help="jobs per workload in (a) (default: 100)")
    parser.add_argument("--policies", help=f"P1,P2,... (default: {','.join(DEFAULT_POLICIES)})")
    parser.add_argument("--procs", type=int, default=1, help="worker processes (default: 1)")
    parser.add_argument("--quick", action="store_true", help="seeds 0,1, rates 4,16, 40 jobs")
    parser.add_argument("--only", choices=("utility", "ratio"), help="run one part only")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in (QUICK_SEEDS if args.quick else args.seeds).split(",")]
    rates_text = args.rates or (QUICK_RATES if args.quick else None)
    rates = [float(r) for r in rates_text.split(",")] if rates_text else list(DEFAULT_RATES)
    n_jobs = args.jobs or (QUICK_JOBS if args.quick else 100)
    sizes = QUICK_SIZES if args.quick else SMALL_SIZES
    names = known_policies(args.policies.split(",") if args.policies else DEFAULT_POLICIES)
    if not names:
        print("no registered policy to run")
        return 1
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.procs)) as pool:
        if args.only != "ratio":
            cases = [(a, rate, seed, n_jobs, p) for a in ARRIVALS for rate in rates
                     for seed in seeds for p in names]  # fmt: skip
            runs = list(pool.map(simulate_case, cases))
            print(f"\n(a) OASiS workload, {n_jobs} jobs, rates {rates} jobs/h, seeds {seeds}: "
                  f"{time.perf_counter() - started:.0f} s")  # fmt: skip
            report_utility(runs, rates, names)
        if args.only != "utility":
            began = time.perf_counter()
            small = [(size, seed, tuple(names)) for size in sizes for seed in seeds]
            ratios = list(pool.map(ratio_case, small))
            print(f"\n(b) small instances {list(sizes)}, seeds {seeds}: "
                  f"{time.perf_counter() - began:.0f} s")  # fmt: skip
            report_ratios(ratios, names)
    print(f"\n{time.perf_counter() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
