"""HadarE's physical-cluster setting (Sultana et al., section VI; shared notes hadar.md section
10) for our simulator: the AWS cluster's five single-GPU nodes and the seven job mixes M-1 to
M-12, with job lengths calibrated to the paper's one absolute figure (docs/simulation.md,
"HadarE").

- Nodes: 1 v100, 2 k80, 2 t4, one GPU each (the paper's p3.2xlarge, p2.xlarge, g4dn.xlarge).
  The t4 is not in Gavel's table: its steps/s are 0.35 x the v100's, as the ANDREAS scenario
  derives it (sim/scenarios.py, `with_derived_gpu_type`).
- Workloads (the paper's Table III) as the closest classes of Gavel's table, each at the middle
  of the batch sizes Gavel measured for the model: IC = ResNet-18 (CIFAR-10), LM = the LSTM on
  Wikitext-2, LT = Transformer (Multi30K), RS = Recommendation (Gavel's autoencoder
  recommender on ML-20M, the same task and data as Recoder). MM, MiMa's encoder-decoder
  Transformer for weather prediction, has no model of its own in the table; the only
  encoder-decoder Transformer there stands for it, at a smaller batch size (32 against LT's
  64), so that its speeds across the GPUs differ from LT's as two workloads' would.
- Lengths: the paper gives dataset sizes only as S, M, L, XL. A job's length is its run alone
  on its best node of the cluster: `SIZE_WEIGHT[size] x BASE_S` seconds (1, 1.5, 2, 2.5: the
  longest 2.5x the shortest, the spread of the paper's M-5 JCTs under Gavel, 3159 / 1283 s).
  BASE_S is calibrated (`calibrate_base_s`) so that M-5 under Gavel's max-min fairness
  without forking takes 4200 s, the paper's AWS figure, on average over the three slot
  lengths (the paper does not say at which slot; at one slot the makespan jumps by a round as
  the length moves, at 360 s by 6%).
- Rounds: slots of 90, 180 and 360 s (the paper's); 10 s restart on every new allocation of a
  job that has run (as the paper's simulation).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slurm_hetsched import data_files
from slurm_hetsched.core.fork_rounds import (
    DEFAULT_ROUND_OVERHEAD_S,
    DEFAULT_STEP_EFFICIENCY,
    ForkSettings,
)
from slurm_hetsched.core.model import Node
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData, table_rate
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.hadare import HadareResult, simulate_forked
from slurm_hetsched.sim.run import SimSettings
from slurm_hetsched.sim.scenarios import with_derived_gpu_type
from slurm_hetsched.sim.traces import Trace, TraceJob

# The AWS cluster: (node name, GPU type), one GPU a node.
NODES: tuple[tuple[str, str], ...] = (
    ("v100-1", "v100"),
    ("k80-1", "k80"),
    ("k80-2", "k80"),
    ("t4-1", "t4"),
    ("t4-2", "t4"),
)
GPU_TYPES = ("v100", "k80", "t4")


@dataclass(frozen=True, slots=True)
class Workload:
    """One of the paper's Table III workloads as a class of Gavel's table."""

    model: str
    dataset: str
    size: str  # S, M, L, XL (Table III)
    job_class: str


WORKLOADS: Mapping[str, Workload] = {
    "IC": Workload("ResNet-18", "CIFAR-10", "S", "ResNet-18 (batch size 64)"),
    "LM": Workload("LSTM", "Wikitext-2", "L", "LM (batch size 20)"),
    "LT": Workload("Transformer", "Multi30K de-en", "L", "Transformer (batch size 64)"),
    "RS": Workload("Recoder", "ML-20M", "XL", "Recommendation (batch size 2048)"),
    "MM": Workload("MiMa (encoder-decoder Transformer)", "Mesonet + HRRR", "M",
                   "Transformer (batch size 32)"),
}  # fmt: skip
SIZE_WEIGHT: Mapping[str, float] = {"S": 1.0, "M": 1.5, "L": 2.0, "XL": 2.5}
MIXES: Mapping[str, tuple[str, ...]] = {
    "M-1": ("MM",),
    "M-3": ("LT", "MM", "MM"),
    "M-4": ("IC", "LM", "LT", "MM"),
    "M-5": ("IC", "LM", "LT", "RS", "MM"),
    "M-8": ("IC", "LM", "LT", "RS", *["MM"] * 4),
    "M-10": ("IC", "LM", "LT", "RS", *["MM"] * 6),
    "M-12": ("IC", "LM", "LT", "RS", *["MM"] * 8),
}
SLOTS_S = (90.0, 180.0, 360.0)
RESTART_S = 10.0
CALIBRATION_MIX = "M-5"
CALIBRATION_TARGET_S = 4200.0  # M-5 under Gavel on the AWS cluster (the paper, section VI)
# Seconds a size-S job runs alone on its best node: `calibrate_base_s()`'s answer (M-5 under
# max-min fairness without forking, mean over the slots: 4200 s; tests/sim/test_hadare_*).
BASE_S = 1024.0
MAX_COPIES = len(NODES)  # the paper forks up to n copies on n nodes

# The paper's Hadar pricing: every GPU type priced alike, no critical jobs first (as
# benchmarks/hadar.py's `hadar_paper`; docs/policies.md, "hadar").
PAPER_HADAR = {"type_values": "none", "critical": "0"}
# The schedulers compared: name -> (policy, its options, whether jobs fork).
SCHEDULERS: Mapping[str, tuple[str, Mapping[str, str], bool]] = {
    "gavel": ("max_min_fairness_perf", {}, False),
    "hadar": ("hadar", {}, False),
    "hadare": ("hadar", {}, True),
    "gavel_fork": ("max_min_fairness_perf", {}, True),
    "hadar_paper": ("hadar", PAPER_HADAR, False),
    "hadare_paper": ("hadar", PAPER_HADAR, True),
}


def hadare_nodes() -> tuple[Node, ...]:
    """The five single-GPU nodes."""
    return tuple(Node(name, {gpu_type: 1}) for name, gpu_type in NODES)


def hadare_table(table: ThroughputTable | None = None) -> ThroughputTable:
    """`table` (default the shipped Gavel table) with the t4 derived from the v100."""
    base = data_files.shipped_throughputs() if table is None else table
    return base if "t4" in base.gpu_types else with_derived_gpu_type(base)


def best_rate(table: ThroughputTable, job_class: str) -> float:
    """The class's steps/s on its best GPU type of the cluster."""
    return max(table_rate(table, job_class, t, 1) for t in GPU_TYPES)


def mix_trace(mix: str, base_s: float = BASE_S, table: ThroughputTable | None = None) -> Trace:
    """The jobs of `mix`, all at time 0, ids CODE-i (e.g. MM-2).

    Raises:
        ConfigError: an unknown mix or a length that is not > 0.
    """
    if mix not in MIXES:
        raise ConfigError(f"mix {mix!r} unknown; expected one of {list(MIXES)}")
    if not base_s > 0:
        raise ConfigError(f"base length {base_s!r}: expected seconds > 0")
    table = hadare_table(table)
    seen: dict[str, int] = {}
    jobs = []
    for code in MIXES[mix]:
        seen[code] = seen.get(code, 0) + 1
        work = WORKLOADS[code]
        seconds = SIZE_WEIGHT[work.size] * base_s
        steps = max(1, round(seconds * best_rate(table, work.job_class)))
        source = f"HadarE scenario {mix}"
        jobs.append(TraceJob(f"{code}-{seen[code]}", 0.0, work.job_class, 1, steps, source=source))
    return tuple(jobs)


def hadare_settings(slot_s: float, **overrides: Any) -> SimSettings:
    """Rounds of `slot_s` seconds, 10 s restart per new allocation; `overrides` replace any
    field of `SimSettings`."""
    settings = SimSettings(round_s=slot_s, restart_overhead_s=RESTART_S)
    return dataclasses.replace(settings, **overrides)


def fork_settings(
    forks: bool,
    *,
    overhead_s: float = DEFAULT_ROUND_OVERHEAD_S,
    efficiency: float = DEFAULT_STEP_EFFICIENCY,
) -> ForkSettings:
    """Up to one copy per node when `forks`, else none, at the given costs."""
    return ForkSettings(MAX_COPIES if forks else 1, overhead_s, efficiency)


def run_case(
    mix: str,
    slot_s: float,
    scheduler: str,
    *,
    base_s: float = BASE_S,
    overhead_s: float = DEFAULT_ROUND_OVERHEAD_S,
    efficiency: float = DEFAULT_STEP_EFFICIENCY,
    table: ThroughputTable | None = None,
) -> HadareResult:
    """One mix under one scheduler of SCHEDULERS at one slot length.

    Raises:
        ConfigError: an unknown mix or scheduler.
    """
    if scheduler not in SCHEDULERS:
        raise ConfigError(f"scheduler {scheduler!r} unknown; expected one of {list(SCHEDULERS)}")
    policy, options, forks = SCHEDULERS[scheduler]
    table = hadare_table(table)
    site = SiteData(table, data_files.shipped_gpu_types(), data_files.shipped_site_energy())
    return simulate_forked(
        mix_trace(mix, base_s, table),
        hadare_nodes(),
        get_policy(policy, dict(options)),
        site,
        hadare_settings(slot_s),
        fork_settings(forks, overhead_s=overhead_s, efficiency=efficiency),
        trace_name=mix,
    )


def calibration_makespan_s(base_s: float, table: ThroughputTable | None = None) -> float:
    """M-5's makespan under Gavel (max-min fairness, no forking), averaged over SLOTS_S."""
    runs = [
        run_case(CALIBRATION_MIX, slot, "gavel", base_s=base_s, table=table) for slot in SLOTS_S
    ]
    return sum(run.result.makespan_s for run in runs) / len(runs)


def calibrate_base_s(
    target_s: float = CALIBRATION_TARGET_S,
    *,
    tolerance_s: float = 21.0,
    table: ThroughputTable | None = None,
    makespan: Callable[[float], float] | None = None,
) -> float:
    """The base length at which `calibration_makespan_s` is `target_s`, within `tolerance_s`
    where one can be found: secant steps, the makespan being nearly proportional to the
    length; since it moves in jumps (rounds, the order in which jobs end), then a scan of +-5%
    around the last step in 0.25% steps for the closest.

    `makespan` (base seconds -> makespan seconds) replaces the simulation (tests).
    """
    measure = makespan or (lambda base_s: calibration_makespan_s(base_s, table))
    base = BASE_S
    for _ in range(5):
        got = measure(base)
        if abs(got - target_s) <= tolerance_s:
            return base
        base *= target_s / got
    around = [base * (1 + k / 400) for k in range(-20, 21)]
    return min(around, key=lambda b: abs(measure(b) - target_s))


def forking_bound_s(trace: Trace, nodes: tuple[Node, ...], table: ThroughputTable) -> float:
    """The least time in which `trace` could finish on `nodes` with perfect forking (no
    rounds, restarts or overhead, every averaged step worth a step): an LP over the seconds
    y[j, t] each job runs on each GPU type, a job on any number of GPUs at once,
    sum_t rate[j, t] y[j, t] >= steps[j] and sum_j y[j, t] <= GPUs of t x T; minimise T.
    No forking scheduler can beat it, so baseline / bound caps any speedup over a baseline."""
    import numpy as np
    from scipy.optimize import linprog

    types = tuple(sorted({t for node in nodes for t in node.gpus}))
    capacity = [sum(node.gpus.get(t, 0) for node in nodes) for t in types]
    n, k = len(trace), len(types)
    rates = np.array(
        [[table_rate(table, job.job_class, t, job.num_gpus) for t in types] for job in trace]
    )
    a_ub = np.zeros((n + k, n * k + 1))
    for j in range(n):
        a_ub[j, j * k : (j + 1) * k] = -rates[j]
    for t in range(k):
        a_ub[n + t, [j * k + t for j in range(n)]] = 1.0
        a_ub[n + t, n * k] = -capacity[t]
    b_ub = np.concatenate([-np.array([float(j.total_steps) for j in trace]), np.zeros(k)])
    cost = np.zeros(n * k + 1)
    cost[-1] = 1.0
    solved = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    return float(solved.x[-1]) if solved.status == 0 else float("nan")
