"""ANDREAS's simulation scenarios (Filippini et al., FCloud'21, section V-B) for our simulator:
the nodes, a throughput table with the T4 column ANDREAS needs, and a seeded trace
(docs/simulation.md, "ANDREAS scenarios"; results in docs/policies.md, "andreas").

- Nodes: N, half with V100s and half with T4s (the V100 half gets the odd one); scenario 1:
  2 x V100 or 1 x T4 per node, scenario 2: 4 x V100 or 2 x T4.
- Throughputs: the shipped Gavel table has no T4, so `with_derived_gpu_type` adds one as a fixed
  fraction of the V100's steps/s at every GPU count (T4_V100_RATIO, reasoning next to it).
- Jobs: J = 10 N, one GPU each by default but allowed every GPU count the table measures up to
  the largest node (ANDREAS chooses). Classes: those whose V100 steps/s never fall as GPUs are
  added at those counts (the public ANDREAS generator likewise drops jobs whose time grows with
  more GPUs). Work: a run on one V100 of U(0.5, 8) hours (the paper publishes no durations).
- Arrivals in groups of 10 jobs (jobs dealt round-robin into round(J / 10) groups, as the
  public generator does), the groups one after the other, alternately at a high and a low rate
  ("mixed rate"): job j alone would arrive at lambda_j = N x G / t_j (G the largest node's GPUs,
  t_j its run on one V100); a group's rate is the mean of its lambda_j x 1.3 / 3 (high) or
  x 1.3 / 12 (low); exponential gaps within a group; the first job at 0.
- Due dates: arrival + U(1, 3) x the job's minimum execution time (its fastest configuration on
  these nodes); tardiness weights U(0.003, 0.015) per second late.

Each quantity has its own random stream spawned from the seed (as sim/generate.py): the same
arguments give the same scenario. Only `run_generate_scenario` touches files.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from slurm_hetsched import data_files
from slurm_hetsched.core.model import Node
from slurm_hetsched.core.problem import table_rate
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.generate import random_streams
from slurm_hetsched.sim.run import SimSettings
from slurm_hetsched.sim.traces import Trace, TraceJob, trace_format, write_trace

# A T4 trains at about 0.35 x a V100. The T4's memory bandwidth is 320 GB/s against the
# V100's 900 GB/s (SXM2; PCIe: also 900), a ratio of 0.36, and training is largely bound by
# memory bandwidth; its peak FP32 (8.1 against 15.7 TFLOPS) and FP16 tensor (65 against 125)
# ratios, about 0.52, are upper bounds it does not reach in training, since its 70 W limit holds
# it below its boost clock under sustained load. ANDREAS profiled its T4 but did not publish
# the figures, so this ratio is ours; pass another to `with_derived_gpu_type` to test it.
T4_V100_RATIO = 0.35
BASE_GPU_TYPE = "v100"
DERIVED_GPU_TYPE = "t4"

# GPUs per node of each half, per scenario (paper section V-B).
NODE_GPUS: Mapping[int, Mapping[str, int]] = {
    1: {"v100": 2, "t4": 1},
    2: {"v100": 4, "t4": 2},
}
SCENARIOS: Mapping[str, int] = {"andreas1": 1, "andreas2": 2}
POLICIES = ("andreas", "fifo_exclusive", "edf_exclusive", "priority_exclusive")

JOBS_PER_NODE = 10  # J = 10 N
GROUP_SIZE = 10  # jobs per arrival group
HIGH_RATE_DIVISOR = 3.0  # a high-rate group arrives at lambda x RATE_BOOST / 3
LOW_RATE_DIVISOR = 12.0  # a low-rate group at lambda x RATE_BOOST / 12
RATE_BOOST = 1.3
RUN_ON_ONE_BASE_GPU_H = (0.5, 8.0)
DUE_FACTOR = (1.0, 3.0)
TARDINESS_WEIGHT = (0.003, 0.015)  # per second late (the site's currency, EUR here)
# Event-driven like ANDREAS: short rounds, so that a completion or an arrival is acted on within
# a minute (the tick re-plans only in rounds where jobs or free GPUs changed).
ROUND_S = 60.0
_Key = TypeVar("_Key")
_STREAMS = ("class", "duration", "arrival", "due", "tardiness")
_DECIMALS = 3


@dataclass(frozen=True, slots=True)
class AndreasScenario:
    """One generated ANDREAS scenario: everything `simulate` needs besides the policy.

    Attributes:
        scenario: 1 or 2.
        seed: the seed it was drawn from.
        nodes: the cluster.
        table: the throughput table with the derived T4 column.
        trace: the jobs, in arrival order.
    """

    scenario: int
    seed: int
    nodes: tuple[Node, ...]
    table: ThroughputTable
    trace: Trace

    def settings(self, **overrides: Any) -> SimSettings:
        """The simulation settings of ANDREAS's evaluation: 60 s rounds, nodes without a busy
        GPU powered off (ANDREAS's unused nodes draw nothing), 10 s restart overhead on every
        move; `overrides` replace any field of `SimSettings`."""
        settings = SimSettings(
            round_s=ROUND_S, restart_overhead_s=10.0, idle_nodes_on=False, seed=self.seed
        )
        return dataclasses.replace(settings, **overrides)


def scenario_number(scenario: int | str) -> int:
    """1 or 2 from 1, 2, "1", "2", "andreas1" or "andreas2".

    Raises:
        ConfigError: anything else.
    """
    text = str(scenario).strip().lower()
    number = SCENARIOS.get(text, int(text) if text in ("1", "2") else None)
    if number is None:
        raise ConfigError(
            f"ANDREAS scenario {scenario!r} unknown; expected one of {list(SCENARIOS)} "
            "(1: 2 x V100 or 1 x T4 per node, 2: 4 x V100 or 2 x T4)"
        )
    return number


def with_derived_gpu_type(
    table: ThroughputTable,
    gpu_type: str = DERIVED_GPU_TYPE,
    base_type: str = BASE_GPU_TYPE,
    ratio: float = T4_V100_RATIO,
) -> ThroughputTable:
    """`table` with a column `gpu_type` = ratio x `base_type`'s steps/s, at every class and GPU
    count (consolidated, unconsolidated and packed alike).

    Raises:
        ConfigError: `base_type` is not a column, `gpu_type` already is one (measured figures
            win over derived ones: drop it from the table first), or ratio is not > 0.
    """
    if base_type not in table.gpu_types:
        raise ConfigError(
            f"cannot derive {gpu_type!r} from {base_type!r}: the throughput table "
            f"({table.source or 'no source'}) has no {base_type!r} column; its types: "
            f"{list(table.gpu_types)}"
        )
    if gpu_type in table.gpu_types:
        raise ConfigError(
            f"the throughput table ({table.source or 'no source'}) already has {gpu_type!r}; "
            "derive a GPU type only where no figures were measured"
        )
    if not (math.isfinite(ratio) and ratio > 0):
        raise ConfigError(f"ratio {ratio!r}: expected a number > 0 (e.g. {T4_V100_RATIO})")
    col = table.gpu_types.index(base_type)

    def widen(entries: Mapping[_Key, np.ndarray]) -> dict[_Key, np.ndarray]:
        return {
            key: np.concatenate([value, ratio * value[col : col + 1]], axis=0)
            for key, value in entries.items()
        }

    return ThroughputTable(
        gpu_types=(*table.gpu_types, gpu_type),
        rows=widen(table.rows),
        unconsolidated=widen(table.unconsolidated),
        packed=widen(table.packed),
        source=f"{table.source or 'table'} + {gpu_type} = {ratio:g} x {base_type}",
    )


def andreas_nodes(scenario: int | str, n_nodes: int) -> tuple[Node, ...]:
    """N nodes, ceil(N / 2) with V100s and floor(N / 2) with T4s, sized by the scenario;
    named v100-1, ..., t4-1, ..."""
    number = scenario_number(scenario)
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, int) or n_nodes < 2:
        raise ConfigError(
            f"nodes is {n_nodes!r}; expected a whole number >= 2 (half V100, half T4)"
        )
    sizes = NODE_GPUS[number]
    halves = {"v100": (n_nodes + 1) // 2, "t4": n_nodes // 2}
    return tuple(
        Node(f"{gpu_type}-{i}", {gpu_type: sizes[gpu_type]})
        for gpu_type in ("v100", "t4")
        for i in range(1, halves[gpu_type] + 1)
    )


def andreas_classes(table: ThroughputTable, counts: Sequence[int]) -> tuple[str, ...]:
    """Classes measured at every one of `counts` on V100, with positive steps/s that never
    fall as GPUs are added (time does not grow with more GPUs)."""
    out = []
    for job_class in table.classes:
        if not set(counts) <= set(table.gpu_counts(job_class)):
            continue
        rates = [table.steps_per_s(job_class, BASE_GPU_TYPE, g) for g in sorted(counts)]
        if rates[0] > 0 and all(b >= a for a, b in itertools.pairwise(rates)):
            out.append(job_class)
    return tuple(out)


def generate_andreas_scenario(
    scenario: int | str,
    n_nodes: int,
    seed: int = 0,
    *,
    table: ThroughputTable | None = None,
    t4_ratio: float = T4_V100_RATIO,
    n_jobs: int | None = None,
) -> AndreasScenario:
    """One ANDREAS scenario (module docstring), deterministic for a seed.

    Args:
        scenario: 1, 2, "andreas1" or "andreas2".
        n_nodes: N >= 2.
        seed: the seed.
        table: a throughput table with V100 figures and no T4 column; default the shipped one.
        t4_ratio: the T4's steps/s as a fraction of the V100's.
        n_jobs: J; default 10 N.

    Raises:
        ConfigError: a bad scenario, node count, job count, ratio or table.
    """
    number = scenario_number(scenario)
    nodes = andreas_nodes(number, n_nodes)
    jobs = JOBS_PER_NODE * n_nodes if n_jobs is None else n_jobs
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"n_jobs is {jobs!r}; expected a whole number >= 1")
    base = data_files.shipped_throughputs() if table is None else table
    derived = with_derived_gpu_type(base, ratio=t4_ratio)
    sizes = NODE_GPUS[number]
    widest = max(sizes.values())
    classes = andreas_classes(derived, [g for g in (1, 2, 4, 8) if g <= widest])
    if not classes:
        raise ConfigError(
            f"no class of the throughput table ({base.source or 'no source'}) has V100 figures "
            f"at every GPU count up to {widest} that do not fall as GPUs are added"
        )
    rng = random_streams(seed, _STREAMS)
    job_class = [classes[k] for k in rng["class"].integers(0, len(classes), jobs)]
    one_gpu_s = 3600.0 * rng["duration"].uniform(*RUN_ON_ONE_BASE_GPU_H, jobs)
    one_gpu_rate = np.array([derived.steps_per_s(c, BASE_GPU_TYPE, 1) for c in job_class])
    steps = np.maximum(1, np.rint(one_gpu_s * one_gpu_rate)).astype(np.int64)
    allowed = [
        tuple(g for g in derived.gpu_counts(c) if g <= widest) for c in job_class
    ]  # from 1, as andreas_classes requires
    arrival = _arrivals(one_gpu_s, n_nodes * widest, rng["arrival"])
    fastest = np.array(
        [
            max(table_rate(derived, c, t, g) for t, size in sizes.items() for g in a if g <= size)
            for c, a in zip(job_class, allowed, strict=True)
        ]
    )
    factor = rng["due"].uniform(*DUE_FACTOR, jobs)
    due = np.round(arrival + factor * steps / fastest, _DECIMALS)
    weight = rng["tardiness"].uniform(*TARDINESS_WEIGHT, jobs)
    source = f"ANDREAS scenario {number}, {n_nodes} nodes (seed {seed})"
    order = np.lexsort((np.arange(jobs), arrival))  # ids "0", "1", ... in arrival order
    trace = tuple(
        TraceJob(
            job_id=str(k),
            arrival_s=float(arrival[i]),
            job_class=job_class[i],
            num_gpus=allowed[i][0],
            total_steps=int(steps[i]),
            due_s=float(due[i]),
            tardiness_weight=float(weight[i]),
            allowed_gpus=allowed[i],
            source=source,
        )
        for k, i in enumerate(order)
    )
    return AndreasScenario(number, seed, nodes, derived, trace)


def _arrivals(one_gpu_s: np.ndarray, capacity: int, rng: np.random.Generator) -> np.ndarray:
    """(J,) arrival times: round(J / 10) groups, jobs dealt round-robin, the groups in turn,
    even ones at the high rate, odd ones at the low rate (module docstring)."""
    jobs = len(one_gpu_s)
    n_groups = max(1, round(jobs / GROUP_SIZE))
    lam = capacity / one_gpu_s  # (J,) jobs per second
    arrival = np.empty(jobs)
    clock = 0.0
    for k in range(n_groups):
        members = np.arange(k, jobs, n_groups)
        divisor = HIGH_RATE_DIVISOR if k % 2 == 0 else LOW_RATE_DIVISOR
        rate = float(lam[members].mean()) * RATE_BOOST / divisor
        gaps = rng.exponential(1.0 / rate, len(members))
        if k == 0:
            gaps[0] = 0.0  # the first job at 0
        times = clock + np.cumsum(gaps)
        arrival[members] = times
        clock = float(times[-1])
    return np.round(arrival, _DECIMALS)


def nodes_toml(nodes: Sequence[Node]) -> str:
    """The nodes as a layout file (etc/devcluster.toml's [[nodes]]), for `--cluster FILE`."""
    lines = ["# ANDREAS scenario nodes (hetsched trace generate --scenario)", ""]
    for node in nodes:
        gpus = ", ".join(f"{t} = {n}" for t, n in node.gpus.items())
        lines += ["[[nodes]]", f'name = "{node.name}"', f"gpus = {{ {gpus} }}", ""]
    return "\n".join(lines)


def run_generate_scenario(
    output: str | Path,
    scenario: int | str,
    n_nodes: int,
    seed: int = 0,
    *,
    throughputs: str | Path | None = None,
    t4_ratio: float = T4_V100_RATIO,
    fmt: str | None = None,
) -> str:
    """`hetsched trace generate --scenario`: write an ANDREAS scenario's trace to `output`, its
    nodes next to it (STEM.nodes.toml) and its throughput table (STEM.throughputs.json).

    Args:
        output: the trace file (.jsonl or .csv, or name the format with `fmt`).
        scenario: 1, 2, "andreas1" or "andreas2".
        n_nodes: N.
        seed: the seed.
        throughputs: a throughput file (with V100 and no T4); None for the shipped table.
        t4_ratio: the T4's steps/s as a fraction of the V100's.
        fmt: "jsonl" or "csv"; None to use the extension.

    Returns:
        What was written and the `hetsched simulate` command that compares ANDREAS with its
        baselines on it.

    Raises:
        ConfigError: a bad parameter, or a file cannot be written.
        ThroughputFormatError: the throughput file does not follow a known format.
        TraceError: the output format is not writable or the trace cannot be written.
    """
    table = None if throughputs is None else data_files.load_throughputs(Path(throughputs))
    generated = generate_andreas_scenario(scenario, n_nodes, seed, table=table, t4_ratio=t4_ratio)
    out = Path(output)
    trace_format(out, fmt)  # an unusable name fails before anything is written
    stem = out.with_suffix("")
    nodes_path = stem.with_name(stem.name + ".nodes.toml")
    table_path = stem.with_name(stem.name + ".throughputs.json")
    write_trace(out, generated.trace, fmt)
    for path, text in (
        (nodes_path, nodes_toml(generated.nodes)),
        (table_path, json.dumps(generated.table.to_dict(), indent=1) + "\n"),
    ):
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror}") from exc
    span_h = generated.trace[-1].arrival_s / 3600
    command = (
        f"hetsched simulate --trace {out} --cluster {nodes_path} --throughputs {table_path} "
        f"--compare {','.join(POLICIES)} --power-down-idle-nodes --round {ROUND_S:g} "
        f"--seed {seed}"
    )
    return (
        f"wrote {len(generated.trace)} jobs to {out} (ANDREAS scenario {generated.scenario}, "
        f"{n_nodes} nodes, seed {seed}, arrivals over {span_h:.1f} h), the nodes to "
        f"{nodes_path} and the throughputs (t4 = {t4_ratio:g} x v100) to {table_path}\n"
        f"simulate it with:\n  {command}"
    )
