"""Astraea's evaluation (Wang et al., IEEE Trans. Computers 2022; shared notes astraea-oasis.md
sections 8.2, 8.3 and 16) as a workload for our simulator: a Philly-like multi-tenant cluster
where each tenant (a Slurm account, Philly's virtual cluster) owns a quota of GPUs per type
(docs/simulation.md, "Astraea evaluation").

- Nodes: 100 x 4 GPUs, one type a node: 34 of v100, 33 of p100, 33 of k80 (136 + 132 + 132).
- Tenants: 14 accounts vc01..vc14 with Zipf-like sizes (weight 1 / i ** ZIPF_S, i = 1..14; the
  largest about 14 times the smallest). Each type's GPUs are split among them in proportion to
  their weights (largest remainder, at least 1 GPU of each type each), so every tenant owns
  the same mix of types. By default the quotas cover the whole cluster: no GPU is in no
  account's quota (Philly's every machine belongs to a virtual cluster); `pool_share` leaves
  that fraction of each type out of every quota (the cluster's pool, POOL_OWNER).
- Arrivals, hourly and bursty: jobs arrive at whole hours (the paper's slot of one hour, its
  r_j the submission hour). Each hour brings a Poisson number of batches (mean `rate_per_hour`
  / BURST_MEAN), each of 1 to 2 x BURST_MEAN - 1 jobs (uniform) of one tenant, drawn in
  proportion to the tenants' weights: big tenants submit more, and a batch overloads its
  tenant's quota for a while, which is when sharing pays.
- Jobs: GPUs 1, 2, 4, 8 or 16 (GPU_MIX, mostly 1; Philly-like), but at most the largest power
  of two one of its tenant's types holds, so every job fits its tenant's own quota (BatchSche
  runs each tenant alone on it). Classes of Gavel's table that run on all three types at the
  count, uniformly; the table has no 16-GPU figures, so `extrapolated_table` adds them from
  the 8-GPU ones by the project's rule (core/problem.py `table_rate`, `Problem.rates_at`):
  rate(8) x (16 / 8) ** SUBLINEAR_EXPONENT. Run time on the job's fastest type log-uniform in
  RUN_HOURS; steps = that x its fastest steps/s, spread over nodes (Gavel's unconsolidated
  figures) for a job of more GPUs than a node has, as it always runs here.
- Utilities: Astraea's linear f = g + k x (elapsed hours), g uniform in GAIN_RANGE, k uniform in
  SLOPE_RANGE, as core/utility.py's `linear` (umax g, worth 0 at target g / -k hours, floored
  at 0 after it). The paper's convex (e / t) ** kappa has no kind of ours: not generated.

Each quantity has its own random stream spawned from the seed: the same arguments give the same
scenario. Pure apart from reading the shipped tables.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from slurm_hetsched import data_files
from slurm_hetsched.core.model import SUBLINEAR_EXPONENT, Account, Node
from slurm_hetsched.core.policies.astraea_pricing import quota_shares as shares_of_quotas
from slurm_hetsched.core.problem import SiteData, table_rate
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.core.utility import Utility
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.generate import random_streams
from slurm_hetsched.sim.run import SimSettings
from slurm_hetsched.sim.scenario_oasis import oasis_classes
from slurm_hetsched.sim.traces import Trace, TraceJob

GPU_TYPES = ("v100", "p100", "k80")
NODES_PER_TYPE: Mapping[str, int] = {"v100": 34, "p100": 33, "k80": 33}
GPUS_PER_NODE = 4
N_TENANTS = 14
ZIPF_S = 1.0
GPU_MIX: Mapping[int, float] = {1: 0.62, 2: 0.14, 4: 0.12, 8: 0.08, 16: 0.04}
RUN_HOURS = (0.25, 8.0)  # log-uniform run time on the job's fastest type
GAIN_RANGE = (100.0, 1000.0)  # g of f = g + k x elapsed hours
SLOPE_RANGE = (-2.0, -0.1)  # k, per hour
BURST_MEAN = 6  # jobs a batch on average
ROUND_S = 360.0
RESTART_S = 30.0
# Streams spawned from the seed by position: a new one goes last.
_STREAMS = ("arrival", "batch", "tenant", "gpus", "duration", "class", "gain", "slope")


@dataclass(frozen=True, slots=True)
class AstraeaScenario:
    """One generated multi-tenant workload: everything `simulate` needs besides the policy.

    Attributes:
        seed: the seed it was drawn from.
        nodes: the cluster.
        table: the throughput table (Gavel's with 16-GPU rows extrapolated).
        trace: the jobs in arrival order, ids "0", "1", ..., each with its tenant's account
            and a linear utility.
        accounts: account name -> its `Account` with its quota (GPU type -> GPUs).
        round_s: the simulation's round.
        restart_s: the restart cost of every move.
    """

    seed: int
    nodes: tuple[Node, ...]
    table: ThroughputTable
    trace: Trace
    accounts: Mapping[str, Account]
    round_s: float = ROUND_S
    restart_s: float = RESTART_S

    def settings(self, **overrides: Any) -> SimSettings:
        """Simulation settings: its rounds and restart cost; `overrides` replace any field."""
        settings = SimSettings(
            round_s=self.round_s, restart_overhead_s=self.restart_s, seed=self.seed
        )
        return dataclasses.replace(settings, **overrides)

    def site(self) -> SiteData:
        """The site: its table, the shipped GPU types and energy data, its accounts."""
        return SiteData(
            self.table,
            data_files.shipped_gpu_types(),
            data_files.shipped_site_energy(),
            dict(self.accounts),
        )

    def quota_shares(self) -> dict[str, float]:
        """Account -> its share of the quotas: the mean over GPU types of its quota over all
        accounts' quotas of the type (the paper's fairness ratio's denominator)."""
        return quota_shares(self.accounts)


def astraea_nodes(nodes_per_type: Mapping[str, int] = NODES_PER_TYPE) -> tuple[Node, ...]:
    """Nodes of GPUS_PER_NODE GPUs of one type, named v100-1, ..., k80-33."""
    return tuple(
        Node(f"{gpu_type}-{i}", {gpu_type: GPUS_PER_NODE})
        for gpu_type, count in nodes_per_type.items()
        for i in range(1, count + 1)
    )


def tenant_weights(n_tenants: int = N_TENANTS, zipf_s: float = ZIPF_S) -> np.ndarray:
    """(n_tenants,) sizes 1 / i ** zipf_s, i = 1.., summing to 1."""
    raw = 1.0 / np.arange(1, n_tenants + 1, dtype=float) ** zipf_s
    return np.asarray(raw / raw.sum())


def split_whole(total: int, weights: np.ndarray) -> list[int]:
    """`total` split in proportion to `weights` in whole parts (largest remainder, ties to the
    first), each at least 1 when `total` allows; the parts sum to `total`."""
    n = len(weights)
    exact = weights * total
    parts = np.floor(exact).astype(int)
    if total >= n:
        parts = np.maximum(parts, 1)
    while parts.sum() > total:  # the floors of 1 overshot: take from parts above 1, the
        over = np.where(parts > 1, parts - exact, -np.inf)  # most over their exact share first
        parts[int(np.argmax(over))] -= 1
    rest = exact - parts
    for i in sorted(range(n), key=lambda i: (-rest[i], i))[: total - int(parts.sum())]:
        parts[i] += 1
    return [int(p) for p in parts]


def tenant_quotas(
    capacity: Mapping[str, int],
    n_tenants: int = N_TENANTS,
    zipf_s: float = ZIPF_S,
    pool_share: float = 0.0,
) -> dict[str, Account]:
    """Accounts vc01.. with each type's GPUs (less `pool_share` of them, the pool) split in
    proportion to `tenant_weights` (module docstring)."""
    weights = tenant_weights(n_tenants, zipf_s)
    names = [f"vc{i:02d}" for i in range(1, n_tenants + 1)]
    quota: dict[str, dict[str, int]] = {name: {} for name in names}
    for gpu_type, count in capacity.items():
        owned = count - round(count * pool_share)
        for name, part in zip(names, split_whole(owned, weights), strict=True):
            quota[name][gpu_type] = part
    return {name: Account(name, quota=quota[name]) for name in names}


def quota_shares(accounts: Mapping[str, Account]) -> dict[str, float]:
    """Account -> its share of the quotas (astraea_pricing.quota_shares, as `hetsched
    tenants` counts it)."""
    return shares_of_quotas({name: account.quota for name, account in accounts.items()})


def largest_job(account: Account, counts: Sequence[int]) -> int:
    """The largest of `counts` that one GPU type of the account's quota holds (1 at least)."""
    room = max(account.quota.values(), default=0)
    return max((g for g in counts if g <= room), default=1)


def extrapolated_table(table: ThroughputTable, counts: Sequence[int]) -> ThroughputTable:
    """`table` with rows at each of `counts` above the largest count it has for any class
    (Gavel's: 8), for the classes it has at that count, scaled from there: rate x (count /
    largest) ** SUBLINEAR_EXPONENT, consolidated and unconsolidated (core/problem.py
    `table_rate` reads counts the table lacks alike). Classes known at fewer GPUs only (Gavel's
    1-GPU-only classes) get nothing."""
    rows = dict(table.rows)
    spread = dict(table.unconsolidated)
    top = max((max(table.gpu_counts(c)) for c in table.classes), default=0)
    added: set[int] = set()
    for job_class in table.classes:
        if top not in table.gpu_counts(job_class):
            continue
        for count in (c for c in counts if c > top):
            factor = (count / top) ** SUBLINEAR_EXPONENT
            rows[(job_class, count)] = table.rows[(job_class, top)] * factor
            if (job_class, top) in table.unconsolidated:
                spread[(job_class, count)] = table.unconsolidated[(job_class, top)] * factor
            added.add(count)
    if not added:
        return table
    note = f"{', '.join(map(str, sorted(added)))}-GPU rows extrapolated"
    return ThroughputTable(
        table.gpu_types,
        rows,
        spread,
        table.packed,
        f"{table.source} + {note}" if table.source else note,
    )


def hourly_batches(
    n_jobs: int,
    rate_per_hour: float,
    arrival_rng: np.random.Generator,
    batch_rng: np.random.Generator,
    mean_batch: int = BURST_MEAN,
) -> tuple[np.ndarray, np.ndarray]:
    """(arrival_s, batch) of `n_jobs` jobs, ascending: each hour a Poisson number of batches
    of mean rate_per_hour / mean_batch (the first hour at least one), each of uniform
    1..2 x mean_batch - 1 jobs, all at the hour's start; batch: each job's 0-based batch."""
    arrivals: list[float] = []
    batch: list[int] = []
    hour, n_batches = 0, 0
    while len(arrivals) < n_jobs:
        count = int(arrival_rng.poisson(rate_per_hour / mean_batch))
        for _ in range(max(count, 1 if hour == 0 else 0)):
            size = min(int(batch_rng.integers(1, 2 * mean_batch)), n_jobs - len(arrivals))
            arrivals += [3600.0 * hour] * size
            batch += [n_batches] * size
            n_batches += 1
            if len(arrivals) == n_jobs:
                break
        hour += 1
    return np.array(arrivals), np.array(batch, dtype=np.int64)


def generate_astraea_scenario(
    seed: int = 0,
    n_jobs: int = 600,
    rate_per_hour: float = 72.0,
    *,
    nodes_per_type: Mapping[str, int] = NODES_PER_TYPE,
    n_tenants: int = N_TENANTS,
    pool_share: float = 0.0,
    slope_scale: float = 1.0,
    table: ThroughputTable | None = None,
) -> AstraeaScenario:
    """One Philly-like multi-tenant workload (module docstring), deterministic for a seed.
    `nodes_per_type` and `n_tenants` shrink it for tests; `slope_scale` multiplies every k
    (the same draws: > 1 makes waiting cost more than the paper's k does).

    Raises:
        ConfigError: a bad job count, rate, tenant count or pool share, or a table without
            v100, p100 and k80 columns.
    """
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ConfigError(f"n_jobs is {n_jobs!r}; expected a whole number >= 1")
    if not (math.isfinite(rate_per_hour) and rate_per_hour > 0):
        raise ConfigError(f"rate_per_hour is {rate_per_hour!r}; expected jobs per hour > 0")
    if isinstance(n_tenants, bool) or not isinstance(n_tenants, int) or n_tenants < 1:
        raise ConfigError(f"n_tenants is {n_tenants!r}; expected a whole number >= 1")
    if not (math.isfinite(slope_scale) and slope_scale > 0):
        raise ConfigError(f"slope_scale is {slope_scale!r}; expected a factor > 0")
    if not 0.0 <= pool_share < 1.0:
        raise ConfigError(f"pool_share is {pool_share!r}; expected a fraction in [0, 1)")
    table = _checked_table(table)
    rng = random_streams(seed, _STREAMS)
    nodes = astraea_nodes(nodes_per_type)
    capacity = {t: GPUS_PER_NODE * n for t, n in nodes_per_type.items()}
    accounts = tenant_quotas(capacity, n_tenants, ZIPF_S, pool_share)
    names = list(accounts)
    arrival, batch = hourly_batches(n_jobs, rate_per_hour, rng["arrival"], rng["batch"])
    n_batches = int(batch[-1]) + 1
    batch_tenant = rng["tenant"].choice(n_tenants, size=n_batches, p=tenant_weights(n_tenants))
    tenant = [names[int(batch_tenant[b])] for b in batch]
    counts = list(GPU_MIX)
    drawn = rng["gpus"].choice(counts, p=[GPU_MIX[g] for g in counts], size=n_jobs)
    cap = {name: largest_job(accounts[name], counts) for name in names}
    num_gpus = [min(int(g), cap[u]) for g, u in zip(drawn, tenant, strict=True)]
    lo, hi = (math.log(h) for h in RUN_HOURS)
    run_s = 3600.0 * np.exp(rng["duration"].uniform(lo, hi, n_jobs))
    classes = {g: oasis_classes(table, g) for g in counts}
    class_u = rng["class"].random(n_jobs)
    job_class = [
        classes[g][int(u * len(classes[g]))] for g, u in zip(num_gpus, class_u, strict=True)
    ]
    best = np.array([best_rate(table, c, g) for c, g in zip(job_class, num_gpus, strict=True)])
    steps = np.maximum(1, np.rint(run_s * best)).astype(np.int64)
    gain = np.round(rng["gain"].uniform(*GAIN_RANGE, n_jobs), 2)
    slope = np.round(rng["slope"].uniform(*SLOPE_RANGE, n_jobs) * slope_scale, 4)
    source = f"Astraea scenario ({rate_per_hour:g} jobs/h, seed {seed})"
    trace = tuple(
        TraceJob(str(i), float(arrival[i]), job_class[i], num_gpus[i], int(steps[i]),
                 account=tenant[i], utility=linear_utility(float(gain[i]), float(slope[i])),
                 source=source)
        for i in range(n_jobs)
    )  # fmt: skip
    return AstraeaScenario(seed, nodes, table, trace, accounts)


def best_rate(table: ThroughputTable, job_class: str, num_gpus: int) -> float:
    """Its highest steps/s over GPU_TYPES at `num_gpus` as the cluster can run it: spread over
    nodes (unconsolidated) when it needs more GPUs than a node has."""
    spread = num_gpus > GPUS_PER_NODE
    return max(table_rate(table, job_class, t, num_gpus, spread=spread) for t in GPU_TYPES)


def linear_utility(gain: float, slope_per_h: float) -> Utility:
    """Astraea's f = gain + slope x elapsed hours (slope < 0) as core/utility.py's `linear`:
    umax gain, worth 0 after gain / -slope hours."""
    if not (gain > 0 and slope_per_h < 0):
        raise ConfigError(
            f"a linear utility needs gain > 0 and slope < 0, not {gain}, {slope_per_h}"
        )
    return Utility("linear", gain, round(3600.0 * gain / -slope_per_h, 1))


def _checked_table(table: ThroughputTable | None) -> ThroughputTable:
    table = data_files.shipped_throughputs() if table is None else table
    missing = [t for t in GPU_TYPES if t not in table.gpu_types]
    if missing:
        raise ConfigError(
            f"the throughput table ({table.source or 'no source'}) has no {missing} column; "
            f"the Astraea scenario needs {list(GPU_TYPES)}"
        )
    table = extrapolated_table(table, list(GPU_MIX))
    empty = [g for g in GPU_MIX if not oasis_classes(table, g)]
    if empty:
        raise ConfigError(
            f"no class of the throughput table ({table.source or 'no source'}) runs on all of "
            f"{list(GPU_TYPES)} at {empty} GPU(s)"
        )
    return table
