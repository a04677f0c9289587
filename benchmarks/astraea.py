"""Astraea against its baselines in simulation (Wang et al., IEEE Trans. Computers 2022; shared
notes astraea-oasis.md sections 8.2, 8.3 and 16): total utility, the tenants' revenue fairness
ratios, GPU utilisation and makespan of `astraea`, `batchsche`, `gandiva_fair` and `hived` on
sim/scenario_astraea.py's Philly-like multi-tenant workload, over seeds; astraea's ratios to
each baseline next to the paper's; and the sharing-incentive check: per seed and tenant,
astraea's utility and revenue against batchsche's (each tenant alone on its quota). Prints
tables; asserts nothing (tests/sim/test_scenario_astraea.py and the policies' tests check the
parts).

    .venv/bin/python benchmarks/astraea.py                     # seeds 0-4, 600 jobs, 72 jobs/h
    .venv/bin/python benchmarks/astraea.py --procs 2 --json astraea.json
    .venv/bin/python benchmarks/astraea.py --quick             # seeds 0-1, 200 jobs
    .venv/bin/python benchmarks/astraea.py --policies gandiva_fair,hived --slope-scale 10

The workload (docs/simulation.md, "Astraea evaluation"): 100 nodes of 4 GPUs (136 v100, 132
p100, 132 k80); 14 accounts with Zipf-like quotas covering the whole cluster; `--jobs` jobs
arriving at whole hours in batches of one tenant (`--rate` jobs an hour on average); 1 to 16
GPUs, mostly 1; Gavel's classes; linear utilities g + k x elapsed hours, g in [100, 1000], k in
[-2, -0.1] (times `--slope-scale`); rounds of 360 s and a 30 s restart per move.

Revenue g_u = utility + received - paid (sim/tenants.py); alpha_u = (g_u / sum of g) / (u's
share of the quotas), core/policies/astraea_pricing.py `fairness_ratio`: 1 is fair, above 1
gains from sharing. A policy not registered in core.policies.POLICIES is skipped with a note;
a run that fails is reported and left out of the tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field

from policies import print_header

from slurm_hetsched.core.policies import POLICIES, get_policy
from slurm_hetsched.core.policies.astraea_pricing import fairness_ratio
from slurm_hetsched.core.policies.base import Policy
from slurm_hetsched.errors import HetschedError
from slurm_hetsched.sim.run import simulate
from slurm_hetsched.sim.scenario_astraea import generate_astraea_scenario

DEFAULT_POLICIES = ("astraea", "batchsche", "gandiva_fair", "hived")
BASELINES = ("batchsche", "gandiva_fair", "hived")
# The paper's astraea / baseline (section 8.3): total revenue when varying the jobs (Fig. 4),
# makespan (Fig. 13; none given for BatchSche, "much smaller").
PAPER_UTILITY = {"batchsche": 1.58, "gandiva_fair": 1.24, "hived": 1.35}
PAPER_MAKESPAN = {"gandiva_fair": 0.83, "hived": 0.67}
QUICK_SEEDS, QUICK_JOBS = "0,1", 200


@dataclass(frozen=True)
class Run:
    """One policy on one seed's workload."""

    seed: int
    policy: str
    utility: float = 0.0
    makespan_h: float = 0.0
    utilization: float = 0.0
    completed: int = 0
    jobs: int = 0
    moves: int = 0
    wall_s: float = 0.0
    # account -> [utility, revenue, paid, received, borrowed GPU-h, lent GPU-h, quota share]
    tenants: dict[str, list[float]] = field(default_factory=dict)
    error: str = ""

    def alphas(self) -> dict[str, float]:
        """Account -> alpha_u, over the accounts with a quota (the pool, if any, left out)."""
        owners = {a: t for a, t in self.tenants.items() if t[6] > 0}
        total = sum(t[1] for t in owners.values())
        return {a: fairness_ratio(t[1], total, t[6]) for a, t in owners.items()}


def known_policies(names: Sequence[str]) -> list[str]:
    """`names` that core.policies.POLICIES registers; a note for each that it does not."""
    for name in names:
        if name.split(":")[0] not in POLICIES:
            print(f"skipping policy {name!r}: not registered in core.policies.POLICIES (yet)")
    return [name for name in names if name.split(":")[0] in POLICIES]


def policy_of(label: str) -> Policy:
    """`name` or `name:option=value;option=value` (e.g. astraea:theta=20;bias=0.5)."""
    name, _, rest = label.partition(":")
    options = dict(pair.split("=", 1) for pair in rest.split(";") if pair)
    return get_policy(name, options)


def simulate_case(case: tuple[int, int, float, float, str]) -> Run:
    """One policy on one generated workload (in a worker process)."""
    seed, n_jobs, rate, slope_scale, name = case
    s = generate_astraea_scenario(seed, n_jobs, rate, slope_scale=slope_scale)
    started = time.perf_counter()
    try:
        result = simulate(s.trace, s.nodes, policy_of(name), s.site(), s.settings())
    except Exception as exc:  # a policy being written may fail anyhow: report, go on
        kind = "" if isinstance(exc, HetschedError) else " (not a HetschedError)"
        return Run(seed, name, error=f"{type(exc).__name__}{kind}: {exc}")
    shares = s.quota_shares()
    tenants = {
        a: [r.utility, r.revenue, r.paid, r.received, r.borrowed_gpu_h, r.lent_gpu_h,
            shares.get(a, 0.0)]
        for a, r in (result.tenants or {}).items()
    }  # fmt: skip
    return Run(
        seed,
        name,
        result.total_utility,
        result.makespan_s / 3600.0,
        result.utilization,
        result.completed,
        len(s.trace),
        result.moves,
        time.perf_counter() - started,
        tenants,
    )


def _cell(values: Sequence[float], fmt: str) -> str:
    if not values:
        return "-"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):{fmt}} ± {spread:{fmt}}"


def _ok(runs: Sequence[Run], policy: str) -> list[Run]:
    return [r for r in runs if r.policy == policy and not r.error]


def report_totals(runs: Sequence[Run], policies: Sequence[str]) -> None:
    for r in runs:
        if r.error:
            print(f"\n{r.policy} failed (seed {r.seed}): {r.error}")
    print("\nPer policy, mean ± sd over seeds")
    print_header(
        f"{'policy':<14} {'total utility':>18} {'makespan h':>13} {'GPU util':>12} "
        f"{'done':>9} {'moves':>7} {'borrowed GPU-h':>15} {'paid':>9} {'wall s':>7}"
    )
    for p in policies:
        ok = _ok(runs, p)
        if not ok:
            print(f"{p:<14} (no run)")
            continue
        borrowed = [sum(t[4] for t in r.tenants.values()) for r in ok]
        paid = [sum(t[2] for t in r.tenants.values()) for r in ok]
        done = f"{sum(r.completed for r in ok)}/{sum(r.jobs for r in ok)}"
        print(
            f"{p:<14} {_cell([r.utility for r in ok], '.0f'):>18} "
            f"{_cell([r.makespan_h for r in ok], '.1f'):>13} "
            f"{_cell([r.utilization for r in ok], '.2f'):>12} {done:>9} "
            f"{statistics.fmean(r.moves for r in ok):>7.0f} {statistics.fmean(borrowed):>15.0f} "
            f"{statistics.fmean(paid):>9.0f} {statistics.fmean(r.wall_s for r in ok):>7.1f}"
        )


def report_fairness(runs: Sequence[Run], policies: Sequence[str]) -> None:
    print("\nRevenue fairness ratio alpha_u across the 14 tenants (per seed, then mean over seeds;")
    print("min and max over all seeds; the paper: around 1, BatchSche exactly 1)")
    print_header(
        f"{'policy':<14} {'mean':>7} {'min':>7} {'max':>7} {'variance':>9} {'below 0.6':>10}"
    )
    for p in policies:
        ok = [r.alphas() for r in _ok(runs, p)]
        ok = [a for a in ok if a]
        if not ok:
            print(f"{p:<14} -")
            continue
        values = [list(a.values()) for a in ok]
        below = sum(sum(1 for v in seed if v < 0.6) for seed in values)
        print(
            f"{p:<14} {statistics.fmean(statistics.fmean(v) for v in values):>7.3f} "
            f"{min(min(v) for v in values):>7.3f} {max(max(v) for v in values):>7.3f} "
            f"{statistics.fmean(statistics.pvariance(v) for v in values):>9.4f} "
            f"{below:>10}"
        )


def _paired(runs: Sequence[Run], a: str, b: str) -> list[tuple[Run, Run]]:
    mine = {r.seed: r for r in _ok(runs, a)}
    theirs = {r.seed: r for r in _ok(runs, b)}
    return [(mine[s], theirs[s]) for s in sorted(mine.keys() & theirs.keys())]


def _astraeas(policies: Sequence[str]) -> list[str]:
    """The astraea runs of `policies`: `astraea` and any `astraea:<options>`."""
    return [p for p in policies if p.split(":")[0] == "astraea"]


def report_ratios(runs: Sequence[Run], policies: Sequence[str]) -> None:
    for mine in _astraeas(policies):
        _report_ratios(runs, policies, mine)


def _report_ratios(runs: Sequence[Run], policies: Sequence[str], mine: str) -> None:
    print(f"\n{mine} / baseline, mean [min, max] of the per-seed ratios (the paper's in brackets)")
    print_header(f"{'baseline':<14} {'total utility':>28} {'makespan':>28}")
    for b in (b for b in BASELINES if b in policies):
        pairs = _paired(runs, mine, b)
        if not pairs:
            print(f"{b:<14} -")
            continue
        cells = []
        for key, paper in (("utility", PAPER_UTILITY), ("makespan_h", PAPER_MAKESPAN)):
            ratios = [getattr(x, key) / getattr(y, key) for x, y in pairs if getattr(y, key) > 0]
            text = f"{statistics.fmean(ratios):.3f} [{min(ratios):.2f}, {max(ratios):.2f}]"
            cells.append(f"{text} ({paper[b]:.2f})" if b in paper else f"{text} (-)")
        print(f"{b:<14} {cells[0]:>28} {cells[1]:>28}")


def report_incentive(runs: Sequence[Run], policies: Sequence[str]) -> None:
    """Sharing incentive: per seed, the tenants each astraea run serves worse than batchsche."""
    if "batchsche" not in policies:
        return
    for label in _astraeas(policies):
        _report_incentive(runs, label)


def _report_incentive(runs: Sequence[Run], label: str) -> None:
    pairs = _paired(runs, label, "batchsche")
    if not pairs:
        return
    print(f"\nSharing incentive: tenants whose {label} utility (revenue) is below batchsche's")
    print_header(
        f"{'seed':>4} {'tenants':>8} {'utility worse':>14} {'worst by':>18} "
        f"{'revenue worse':>14} {'worst by':>18}"
    )
    for mine, theirs in pairs:
        cells = []
        for k in (0, 1):  # utility, revenue
            short = {
                a: theirs.tenants[a][k] - t[k]
                for a, t in mine.tenants.items()
                if a in theirs.tenants and t[6] > 0 and t[k] < theirs.tenants[a][k] - 1e-6
            }
            if short:
                worst = max(short, key=lambda a: short[a])
                base = theirs.tenants[worst][k]
                rel = short[worst] / base if base > 0 else float("inf")
                cells += [f"{len(short)}", f"{short[worst]:.0f} ({rel:.1%}, {worst})"]
            else:
                cells += ["0", "-"]
        tenants = sum(1 for t in mine.tenants.values() if t[6] > 0)
        print(f"{mine.seed:>4} {tenants:>8} {cells[0]:>14} {cells[1]:>18} {cells[2]:>14} "
              f"{cells[3]:>18}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="seeds (default: 0-4)")
    parser.add_argument("--jobs", type=int, help="jobs per workload (default: 600)")
    parser.add_argument("--rate", type=float, default=72.0, help="jobs per hour (default: 72)")
    parser.add_argument("--slope-scale", type=float, default=1.0, help="k x this (default: 1)")
    parser.add_argument("--policies", help=f"P1,P2,... (default: {','.join(DEFAULT_POLICIES)})")
    parser.add_argument("--procs", type=int, default=1, help="worker processes (default: 1)")
    parser.add_argument("--quick", action="store_true", help="seeds 0,1 and 200 jobs")
    parser.add_argument("--json", help="also write every run and its tenants to this file")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in (QUICK_SEEDS if args.quick else args.seeds).split(",")]
    n_jobs = args.jobs or (QUICK_JOBS if args.quick else 600)
    names = known_policies(args.policies.split(",") if args.policies else DEFAULT_POLICIES)
    if not names:
        print("no registered policy to run")
        return 1
    started = time.perf_counter()
    cases = [(seed, n_jobs, args.rate, args.slope_scale, p) for seed in seeds for p in names]
    with ProcessPoolExecutor(max_workers=max(1, args.procs)) as pool:
        runs = list(pool.map(simulate_case, cases))
    took = time.perf_counter() - started
    print(f"\nAstraea workload, {n_jobs} jobs at {args.rate:g} jobs/h, slope scale "
          f"{args.slope_scale:g}, seeds {seeds}: {took:.0f} s")  # fmt: skip
    report_totals(runs, names)
    report_fairness(runs, names)
    report_ratios(runs, names)
    report_incentive(runs, names)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump([asdict(r) for r in runs], out, indent=1)
        print(f"\nruns written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
