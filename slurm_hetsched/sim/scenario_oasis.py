"""OASiS's evaluation (Bao et al., INFOCOM'18; shared notes astraea-oasis.md sections 9-12, 16)
as workloads for our simulator: jobs arrive online and each is worth a sigmoid of its completion
time (docs/simulation.md, "OASiS evaluation").

- Nodes: 8 x 4 GPUs, one type a node: 2 of v100, 3 of p100, 3 of k80 (8 + 12 + 12 GPUs). The
  paper's EC2-like servers and separate PS hosts are not ours to model; few fast GPUs make the
  choice of type matter, as heterogeneity does in OASiS's cluster.
- Jobs: classes of Gavel's table that run on all three types at the job's GPU count (1 GPU 80%,
  2 and 4 GPUs 10% each); run time on the job's fastest type log-uniform from 10 minutes to 4
  hours, steps = that x its fastest steps/s.
- Arrivals, `rate_per_hour` jobs an hour on average: Poisson (the first job at 0, exponential
  gaps) or bursty, a batch Poisson process: batches at rate / BURST_MEAN an hour, each of 1 to
  2 x BURST_MEAN - 1 jobs (uniform, mean BURST_MEAN) submitted within BURST_WINDOW_S of the
  batch's start. Same mean load, clumped: what the paper's Google-trace arrivals look like.
- Utilities: OASiS's sigmoid umax / (1 + exp(sharp x (elapsed_h - target_h))) (core/utility.py):
  umax (the priority) uniform in 1-100; time-insensitive (sharp 0) 10%, time-sensitive (sharp
  log-uniform 0.01-1 per hour) 55%, time-critical (sharp uniform 4-6 per hour) 35%, the notes'
  unverified defaults. The target is a multiple, uniform in 1.5-5, of the job's fastest run
  time: met by a prompt start on a fast type, missed by time-critical jobs that queue or land
  on K80s under load (the paper's 1-15 is in slots of its own, not a multiple we can reuse).
- `generate_small_oasis_scenario`: tiny instances for the exact offline optimum
  (sim/offline_optimum.py): nodes of 1 GPU, 1-GPU jobs arriving at slot boundaries, each 0.5 to
  2 slots long on its fastest type, simulated with round = slot and no restart cost.

Each quantity has its own random stream spawned from the seed: the same arguments give the same
scenario, and Poisson and bursty scenarios of one seed have the same jobs at other times. Only
`write_oasis_scenario` touches files.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from slurm_hetsched import data_files
from slurm_hetsched.core.model import Node
from slurm_hetsched.core.problem import table_rate
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.core.utility import Utility
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.arrivals import poisson_arrivals
from slurm_hetsched.sim.generate import random_streams
from slurm_hetsched.sim.run import SimSettings
from slurm_hetsched.sim.scenarios import nodes_toml
from slurm_hetsched.sim.traces import Trace, TraceJob, trace_format, write_trace

GPU_TYPES = ("v100", "p100", "k80")
NODES_PER_TYPE: Mapping[str, int] = {"v100": 2, "p100": 3, "k80": 3}
GPUS_PER_NODE = 4
GPU_MIX: Mapping[int, float] = {1: 0.8, 2: 0.1, 4: 0.1}
RUN_MINUTES = (10.0, 240.0)  # log-uniform run time on the job's fastest type
UMAX_RANGE = (1.0, 100.0)  # the priority (the notes' unverified gamma_1 range)
# Utility kinds: probability and sharpness range per hour (time-sensitive: log-uniform).
KIND_MIX: Mapping[str, float] = {"insensitive": 0.10, "sensitive": 0.55, "critical": 0.35}
SHARPNESS: Mapping[str, tuple[float, float]] = {
    "insensitive": (0.0, 0.0),
    "sensitive": (0.01, 1.0),
    "critical": (4.0, 6.0),
}
TARGET_FACTOR = (1.5, 5.0)  # target = this x the job's fastest run time
BURST_MEAN = 5  # jobs a batch on average (bursty arrivals)
BURST_WINDOW_S = 600.0  # a batch's jobs are submitted within 10 minutes
ROUND_S = 360.0  # Gavel's rounds; OASiS's hour-long slots would hide the deadlines
RESTART_S = 10.0  # small: OASiS's model has no restart cost at all
ARRIVALS = ("poisson", "bursty")
# Streams spawned from the seed by position: a new one goes last.
_STREAMS = ("arrival", "gpus", "duration", "class", "kind", "sharp", "umax", "target", "slot")
_DECIMALS = 3


@dataclass(frozen=True, slots=True)
class OasisScenario:
    """One generated OASiS workload: everything `simulate` needs besides the policy.

    Attributes:
        seed: the seed it was drawn from.
        nodes: the cluster.
        table: the throughput table (Gavel's, by default).
        trace: the jobs in arrival order, ids "0", "1", ..., each with a sigmoid utility.
        kinds: each job's utility kind (a key of KIND_MIX), in trace order.
        round_s: the simulation's round (the optimum's slot for a small scenario).
        restart_s: the restart cost of every move.
        n_slots: a small scenario's horizon in slots for the optimum; 0 for none.
    """

    seed: int
    nodes: tuple[Node, ...]
    table: ThroughputTable
    trace: Trace
    kinds: tuple[str, ...]
    round_s: float = ROUND_S
    restart_s: float = RESTART_S
    n_slots: int = 0

    def settings(self, **overrides: Any) -> SimSettings:
        """Simulation settings: its rounds and restart cost; `overrides` replace any field."""
        settings = SimSettings(
            round_s=self.round_s, restart_overhead_s=self.restart_s, seed=self.seed
        )
        return dataclasses.replace(settings, **overrides)


def oasis_nodes() -> tuple[Node, ...]:
    """2 nodes of 4 x v100, 3 of 4 x p100, 3 of 4 x k80, named v100-1, ..., k80-3."""
    return tuple(
        Node(f"{gpu_type}-{i}", {gpu_type: GPUS_PER_NODE})
        for gpu_type, count in NODES_PER_TYPE.items()
        for i in range(1, count + 1)
    )


def oasis_classes(table: ThroughputTable, num_gpus: int) -> tuple[str, ...]:
    """Classes with figures at `num_gpus` and positive steps/s there on every GPU_TYPES type."""
    return tuple(
        c
        for c in table.classes
        if num_gpus in table.gpu_counts(c)
        and all(table_rate(table, c, t, num_gpus) > 0 for t in GPU_TYPES)
    )


def fastest_rate(table: ThroughputTable, job_class: str, num_gpus: int) -> float:
    """Its highest steps/s over GPU_TYPES at `num_gpus` (the fastest type differs by class)."""
    return max(table_rate(table, job_class, t, num_gpus) for t in GPU_TYPES)


def batch_poisson_arrivals(
    n_jobs: int, rate_per_hour: float, rng: np.random.Generator, *, mean_batch: int = BURST_MEAN,
    window_s: float = BURST_WINDOW_S,
) -> np.ndarray:  # fmt: skip
    """(n_jobs,) ascending seconds, the first at 0: batches starting as a Poisson process of
    rate_per_hour / mean_batch an hour, each of uniform 1..2 x mean_batch - 1 jobs (mean
    `mean_batch`, so jobs arrive at `rate_per_hour` on average), the first at the batch's start
    and the rest uniform within `window_s` of it."""
    times: list[np.ndarray] = []
    start_s, left = 0.0, n_jobs
    mean_gap_s = 3600.0 * mean_batch / rate_per_hour
    while left > 0:
        size = min(left, int(rng.integers(1, 2 * mean_batch)))
        times.append(start_s + np.concatenate(([0.0], rng.uniform(0.0, window_s, size - 1))))
        left -= size
        start_s += rng.exponential(mean_gap_s)
    return np.round(np.sort(np.concatenate(times)), _DECIMALS)  # batches may overlap


def sigmoid_utilities(
    rng: Mapping[str, np.random.Generator], fastest_s: np.ndarray
) -> tuple[list[str], list[Utility]]:
    """Each job's utility kind and sigmoid (module docstring), for jobs whose fastest run times
    are `fastest_s`; draws from the streams "kind", "sharp", "umax" and "target"."""
    n = len(fastest_s)
    names = list(KIND_MIX)
    kind_index = rng["kind"].choice(len(names), size=n, p=[KIND_MIX[k] for k in names])
    sharp_u = [float(u) for u in rng["sharp"].random(n)]  # uniforms mapped per kind
    umax = np.round(rng["umax"].uniform(*UMAX_RANGE, n), 2)
    target = np.round(rng["target"].uniform(*TARGET_FACTOR, n) * fastest_s, 1)
    kinds, utilities = [], []
    for i in range(n):
        kind = names[int(kind_index[i])]
        lo, hi = SHARPNESS[kind]
        if kind == "sensitive":  # two decades: log-uniform, else nearly all would be ~0.5
            sharp = math.exp(math.log(lo) + sharp_u[i] * (math.log(hi) - math.log(lo)))
        else:
            sharp = lo + sharp_u[i] * (hi - lo)
        kinds.append(kind)
        utilities.append(
            Utility("sigmoid", float(umax[i]), max(1.0, float(target[i])), round(sharp, 4))
        )
    return kinds, utilities


def generate_oasis_scenario(
    seed: int = 0,
    n_jobs: int = 100,
    rate_per_hour: float = 8.0,
    arrivals: str = "poisson",
    *,
    table: ThroughputTable | None = None,
) -> OasisScenario:
    """One OASiS workload on the 32-GPU cluster (module docstring), deterministic for a seed.

    Raises:
        ConfigError: a bad job count, rate or arrival process, or a table without v100, p100
            and k80 columns.
    """
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ConfigError(f"n_jobs is {n_jobs!r}; expected a whole number >= 1")
    if not (math.isfinite(rate_per_hour) and rate_per_hour > 0):
        raise ConfigError(f"rate_per_hour is {rate_per_hour!r}; expected jobs per hour > 0")
    if arrivals not in ARRIVALS:
        raise ConfigError(f"arrivals is {arrivals!r}; expected one of {list(ARRIVALS)}")
    table = _checked_table(table)
    rng = random_streams(seed, _STREAMS)
    if arrivals == "poisson":
        arrival = poisson_arrivals(n_jobs, 3600.0 / rate_per_hour, rng["arrival"])
    else:
        arrival = batch_poisson_arrivals(n_jobs, rate_per_hour, rng["arrival"])
    counts = list(GPU_MIX)
    num_gpus = rng["gpus"].choice(counts, p=[GPU_MIX[g] for g in counts], size=n_jobs)
    lo, hi = (math.log10(m) for m in RUN_MINUTES)
    run_s = 60.0 * 10.0 ** rng["duration"].uniform(lo, hi, n_jobs)
    class_u = rng["class"].random(n_jobs)
    classes = {g: oasis_classes(table, g) for g in counts}
    job_class = [
        classes[int(g)][int(u * len(classes[int(g)]))]
        for g, u in zip(num_gpus, class_u, strict=True)
    ]
    best = np.array(
        [fastest_rate(table, c, int(g)) for c, g in zip(job_class, num_gpus, strict=True)]
    )
    steps = np.maximum(1, np.rint(run_s * best)).astype(np.int64)
    kinds, utilities = sigmoid_utilities(rng, steps / best)
    source = f"OASiS scenario ({arrivals}, {rate_per_hour:g} jobs/h, seed {seed})"
    trace = tuple(
        TraceJob(str(i), float(arrival[i]), job_class[i], int(num_gpus[i]), int(steps[i]),
                 utility=utilities[i], source=source)
        for i in range(n_jobs)
    )  # fmt: skip
    return OasisScenario(seed, oasis_nodes(), table, trace, tuple(kinds))


def generate_small_oasis_scenario(
    seed: int = 0,
    n_nodes: int = 3,
    n_jobs: int = 5,
    n_slots: int = 6,
    slot_s: float = 1800.0,
    *,
    table: ThroughputTable | None = None,
) -> OasisScenario:
    """A tiny OASiS instance for the exact offline optimum: `n_nodes` nodes of 1 GPU (types
    cycling v100, p100, k80), `n_jobs` 1-GPU jobs arriving at slot boundaries in the first half
    of the `n_slots` slots, each 0.5 to 2 slots long on its fastest type, with the utilities of
    `generate_oasis_scenario`; rounds of `slot_s`, no restart cost. One node and one GPU count
    a job make the simulator's placements exactly the optimum's, so OPT bounds every policy
    (on completions within the horizon)."""
    for name, value, low in (
        ("n_nodes", n_nodes, 1),
        ("n_jobs", n_jobs, 1),
        ("n_slots", n_slots, 2),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{name} is {value!r}; expected a whole number >= {low}")
    if not (math.isfinite(slot_s) and slot_s > 0):
        raise ConfigError(f"slot_s is {slot_s!r}; expected seconds > 0")
    table = _checked_table(table)
    rng = random_streams(seed, _STREAMS)
    nodes = tuple(
        Node(f"{GPU_TYPES[i % 3]}-{i // 3 + 1}", {GPU_TYPES[i % 3]: 1}) for i in range(n_nodes)
    )
    arrival_slot = np.sort(rng["slot"].integers(0, n_slots // 2 + 1, n_jobs))
    run_s = slot_s * rng["duration"].uniform(0.5, 2.0, n_jobs)
    classes = oasis_classes(table, 1)
    job_class = [classes[int(u * len(classes))] for u in rng["class"].random(n_jobs)]
    best = np.array([fastest_rate(table, c, 1) for c in job_class])
    steps = np.maximum(1, np.rint(run_s * best)).astype(np.int64)
    kinds, utilities = sigmoid_utilities(rng, steps / best)
    source = f"small OASiS scenario (seed {seed})"
    trace = tuple(
        TraceJob(str(i), float(arrival_slot[i]) * slot_s, job_class[i], 1, int(steps[i]),
                 utility=utilities[i], source=source)
        for i in range(n_jobs)
    )  # fmt: skip
    return OasisScenario(seed, nodes, table, trace, tuple(kinds), slot_s, 0.0, n_slots)


def write_oasis_scenario(
    output: str | Path, scenario: OasisScenario, fmt: str | None = None
) -> str:
    """Write the scenario's trace to `output` (.jsonl or .csv) and its nodes next to it
    (STEM.nodes.toml); the `hetsched simulate` command that runs them.

    Raises:
        ConfigError: the nodes file cannot be written.
        TraceError: the output format is not writable or the trace cannot be written.
    """
    out = Path(output)
    trace_format(out, fmt)  # an unusable name fails before anything is written
    stem = out.with_suffix("")
    nodes_path = stem.with_name(stem.name + ".nodes.toml")
    write_trace(out, scenario.trace, fmt)
    try:
        nodes_path.write_text(
            nodes_toml(scenario.nodes).replace("ANDREAS", "OASiS", 1), encoding="utf-8"
        )
    except OSError as exc:
        raise ConfigError(f"cannot write {nodes_path}: {exc.strerror}") from exc
    return (
        f"hetsched simulate --trace {out} --cluster {nodes_path} --compare fifo "
        f"--round {scenario.round_s:g} --restart-overhead {scenario.restart_s:g} "
        f"--seed {scenario.seed}"
    )


def _checked_table(table: ThroughputTable | None) -> ThroughputTable:
    table = data_files.shipped_throughputs() if table is None else table
    missing = [t for t in GPU_TYPES if t not in table.gpu_types]
    if missing:
        raise ConfigError(
            f"the throughput table ({table.source or 'no source'}) has no {missing} column; "
            f"the OASiS scenario needs {list(GPU_TYPES)}"
        )
    empty = [g for g in GPU_MIX if not oasis_classes(table, g)]
    if empty:
        raise ConfigError(
            f"no class of the throughput table ({table.source or 'no source'}) runs on all of "
            f"{list(GPU_TYPES)} at {empty} GPU(s)"
        )
    return table
