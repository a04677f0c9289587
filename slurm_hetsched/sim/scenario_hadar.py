"""Hadar's trace-driven simulation (Sultana et al., section IV; shared notes hadar.md sections
10-12) for our simulator: the 60-GPU cluster and a seeded static batch of 480 jobs
(docs/simulation.md, "Hadar scenario").

- Nodes: 15 x 4 GPUs, 5 nodes of each of v100, p100, k80 (20 GPUs a type, as the paper). The
  paper gives only the totals; 4 GPUs a node and one type a node are our choice.
- Jobs: all at time 0. GPU counts 1/2/4/8 in Gavel's Philly proportions (sim/generate.py's
  GPU_MIXES["multi"]: 70/10/15/5%). Size: a bucket drawn uniformly among Small 0.1-1, Medium
  1-10, Large 10-50, XLarge 60-100 GPU-hours (the paper's; its 50-60 gap kept; Small starts at
  0.1 GPU-hours, one GPU for 6 minutes, so that no job is empty), then GPU-hours uniform in it.
- Classes: the models of the paper's Table II in Gavel's table (ResNet-50, ResNet-18, LM, i.e.
  the LSTM on Wikitext-2, CycleGAN, Transformer); a model uniform among those with a class
  that runs on all three types at the job's GPU count, then a batch size uniform among its
  classes that do (CycleGAN has 1-GPU figures only, so only 1-GPU jobs get it). A job wider
  than a node (8 GPUs) runs spread over two nodes, so its figures are the table's
  unconsolidated ones.
- Steps: GPU-hours x 3600 / num_gpus x the class's steps/s at num_gpus on the reference type,
  the K80: a job's GPU-hours are its run on K80s. On the V100 the same batch would need over
  200 hours even with every job at its best rate, against the paper's 40 h for Hadar; on the
  K80 it needs 60 to 68 (seeds 0-2, fluid bound: `batch_bounds`).

Each quantity has its own random stream spawned from the seed (as sim/scenarios.py): the same
arguments give the same scenario. Only `run_generate_hadar` touches files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from slurm_hetsched import data_files
from slurm_hetsched.core.model import Node
from slurm_hetsched.core.problem import table_rate
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.generate import GPU_MIXES, random_streams
from slurm_hetsched.sim.layout import gpu_counts
from slurm_hetsched.sim.run import SimSettings
from slurm_hetsched.sim.scenarios import nodes_toml
from slurm_hetsched.sim.traces import Trace, TraceJob, trace_format, write_trace

GPU_TYPES = ("v100", "p100", "k80")
NODES_PER_TYPE = 5
GPUS_PER_NODE = 4
N_JOBS = 480
# Table II's models, as the prefixes of Gavel's class names ("LM" is the LSTM on Wikitext-2).
MODELS = ("ResNet-50", "ResNet-18", "LM", "CycleGAN", "Transformer")
GPU_MIX: Mapping[int, float] = GPU_MIXES["multi"]  # Gavel's Philly proportions
# GPU-hours per size bucket (the paper's; Small from 0.1 rather than 0: no empty job).
BUCKETS: Mapping[str, tuple[float, float]] = {
    "small": (0.1, 1.0),
    "medium": (1.0, 10.0),
    "large": (10.0, 50.0),
    "xlarge": (60.0, 100.0),
}
REFERENCE_GPU_TYPE = "k80"  # a job's GPU-hours are its run on K80s (module docstring)
ROUND_S = 360.0  # the paper's 6-minute rounds
RESTART_S = 10.0  # the paper's checkpoint-restart cost of every new allocation
POLICIES = ("hadar", "max_min_fairness_perf", "tiresias", "yarn_cs")
# Streams spawned from the seed by position: a new one goes last.
_STREAMS = ("gpus", "bucket", "gpu_hours", "model", "batch")


@dataclass(frozen=True, slots=True)
class HadarScenario:
    """One generated Hadar scenario: everything `simulate` needs besides the policy.

    Attributes:
        seed: the seed it was drawn from.
        nodes: the cluster.
        table: the throughput table (Gavel's, by default).
        trace: the jobs, ids "0", "1", ..., all at time 0.
        buckets: each job's size bucket (a key of BUCKETS), in trace order.
        gpu_hours: each job's drawn GPU-hours (on the reference type), in trace order.
    """

    seed: int
    nodes: tuple[Node, ...]
    table: ThroughputTable
    trace: Trace
    buckets: tuple[str, ...]
    gpu_hours: tuple[float, ...]

    def settings(self, **overrides: Any) -> SimSettings:
        """The paper's simulation settings: 360 s rounds and 10 s of restart on every new
        allocation of a job that has run (a move, or a start after a stop); `overrides`
        replace any field of `SimSettings`."""
        settings = SimSettings(round_s=ROUND_S, restart_overhead_s=RESTART_S, seed=self.seed)
        return dataclasses.replace(settings, **overrides)


@dataclass(frozen=True, slots=True)
class BatchBounds:
    """Lower bounds on the time to finish a batch, in seconds (restarts and rounds ignored).

    Attributes:
        work_s: every job's GPU-seconds at its best type's rate, over all the cluster's GPUs.
        longest_s: the longest job alone at its best type's rate.
        fluid_s: the fluid bound: the least T such that every job's steps fit in time shares
            of the types (at most T in all per job) within each type's GPUs x T (an LP).
    """

    work_s: float
    longest_s: float
    fluid_s: float

    @property
    def best_s(self) -> float:
        """The tightest of the three."""
        return max(self.work_s, self.longest_s, self.fluid_s)


def hadar_nodes() -> tuple[Node, ...]:
    """5 nodes of 4 x v100, 5 of 4 x p100, 5 of 4 x k80, named v100-1, ..., k80-5."""
    return tuple(
        Node(f"{gpu_type}-{i}", {gpu_type: GPUS_PER_NODE})
        for gpu_type in GPU_TYPES
        for i in range(1, NODES_PER_TYPE + 1)
    )


def job_rate(table: ThroughputTable, job_class: str, gpu_type: str, num_gpus: int) -> float:
    """Steps/s of a job on `gpu_type` here: unconsolidated when wider than a node."""
    return table_rate(table, job_class, gpu_type, num_gpus, spread=num_gpus > GPUS_PER_NODE)


def hadar_classes(table: ThroughputTable, num_gpus: int) -> dict[str, tuple[str, ...]]:
    """Model -> its classes with positive steps/s on every type of GPU_TYPES at `num_gpus`
    (figures of that very count), for the models of MODELS that have one."""
    out: dict[str, tuple[str, ...]] = {}
    for model in MODELS:
        classes = tuple(
            c
            for c in table.classes
            if c.split(" (")[0] == model
            and num_gpus in table.gpu_counts(c)
            and all(job_rate(table, c, t, num_gpus) > 0 for t in GPU_TYPES)
        )
        if classes:
            out[model] = classes
    return out


def generate_hadar_scenario(
    seed: int = 0, n_jobs: int = N_JOBS, *, table: ThroughputTable | None = None
) -> HadarScenario:
    """One Hadar scenario (module docstring), deterministic for a seed.

    Args:
        seed: the seed.
        n_jobs: how many jobs (the paper: 480).
        table: a throughput table with v100, p100 and k80 columns; default the shipped one.

    Raises:
        ConfigError: a bad job count, or a table without the types or classes it needs.
    """
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ConfigError(f"n_jobs is {n_jobs!r}; expected a whole number >= 1")
    table = data_files.shipped_throughputs() if table is None else table
    missing = [t for t in GPU_TYPES if t not in table.gpu_types]
    if missing:
        raise ConfigError(
            f"the throughput table ({table.source or 'no source'}) has no {missing} column; "
            f"the Hadar scenario needs {list(GPU_TYPES)}"
        )
    models = {g: hadar_classes(table, g) for g in GPU_MIX}
    empty = [g for g, found in models.items() if not found]
    if empty:
        raise ConfigError(
            f"no class of {list(MODELS)} in the throughput table ({table.source or 'no source'})"
            f" runs on all of {list(GPU_TYPES)} at {empty} GPU(s)"
        )
    rng = random_streams(seed, _STREAMS)
    counts = list(GPU_MIX)
    num_gpus = rng["gpus"].choice(counts, p=[GPU_MIX[g] for g in counts], size=n_jobs)
    names = list(BUCKETS)
    bucket = rng["bucket"].integers(0, len(names), n_jobs)
    lo = np.array([BUCKETS[names[b]][0] for b in bucket])
    hi = np.array([BUCKETS[names[b]][1] for b in bucket])
    gpu_hours = rng["gpu_hours"].uniform(lo, hi)
    model_u = rng["model"].random(n_jobs)  # uniforms, so that a pick never shifts a stream
    batch_u = rng["batch"].random(n_jobs)
    source = f"Hadar scenario (seed {seed})"
    jobs = []
    for i in range(n_jobs):
        g = int(num_gpus[i])
        choices = list(models[g].values())
        classes = choices[int(model_u[i] * len(choices))]
        job_class = classes[int(batch_u[i] * len(classes))]
        rate = job_rate(table, job_class, REFERENCE_GPU_TYPE, g)
        steps = max(1, round(float(gpu_hours[i]) * 3600.0 / g * rate))
        jobs.append(TraceJob(str(i), 0.0, job_class, g, steps, source=source))
    return HadarScenario(
        seed,
        hadar_nodes(),
        table,
        tuple(jobs),
        tuple(names[b] for b in bucket),
        tuple(float(h) for h in gpu_hours),
    )


def batch_bounds(
    trace: Sequence[TraceJob], nodes: Sequence[Node], table: ThroughputTable
) -> BatchBounds:
    """Lower bounds on the time to finish `trace` (all jobs at 0) on `nodes` (BatchBounds)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    capacity = gpu_counts(tuple(nodes))
    types_ = tuple(capacity)
    rates = np.array([[job_rate(table, j.job_class, t, j.num_gpus) for t in types_] for j in trace])
    steps = np.array([float(j.total_steps) for j in trace])
    gpus = np.array([float(j.num_gpus) for j in trace])
    best = rates.max(axis=1)
    work_s = float((gpus * steps / best).sum()) / sum(capacity.values())
    longest_s = float((steps / best).max())
    # Variables: y[j, t] (seconds job j runs on type t), then T. Minimise T subject to
    # -sum_t r[j,t] y[j,t] <= -steps[j]; sum_j g[j] y[j,t] - cap[t] T <= 0; sum_t y[j,t] <= T.
    n, k = rates.shape
    j_idx, t_idx = np.nonzero(rates > 0)
    var = j_idx * k + t_idx
    t_var = n * k
    rows = np.concatenate([j_idx, n + t_idx, n + k + j_idx, n + np.arange(k), n + k + np.arange(n)])
    cols = np.concatenate([var, var, var, np.full(k, t_var), np.full(n, t_var)])
    vals = np.concatenate(
        [
            -rates[j_idx, t_idx],
            gpus[j_idx],
            np.ones(len(var)),
            -np.array([float(capacity[t]) for t in types_]),
            -np.ones(n),
        ]
    )
    a_ub = coo_matrix((vals, (rows, cols)), shape=(2 * n + k, t_var + 1)).tocsr()
    b_ub = np.concatenate([-steps, np.zeros(k + n)])
    cost = np.zeros(t_var + 1)
    cost[t_var] = 1.0
    solved = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    fluid_s = float(solved.x[t_var]) if solved.status == 0 else float("nan")
    return BatchBounds(work_s, longest_s, fluid_s)


def simulate_command(
    trace: Path | str, nodes: Path | str, seed: int, throughputs: Path | str | None = None
) -> str:
    """The `hetsched simulate` command that compares Hadar with its baselines on the files."""
    table = "" if throughputs is None else f" --throughputs {throughputs}"
    return (
        f"hetsched simulate --trace {trace} --cluster {nodes}{table} --compare "
        f"{','.join(POLICIES)} --round {ROUND_S:g} --restart-overhead {RESTART_S:g} "
        f"--seed {seed}"
    )


def run_generate_hadar(
    output: str | Path,
    seed: int = 0,
    n_jobs: int = N_JOBS,
    *,
    throughputs: str | Path | None = None,
    fmt: str | None = None,
) -> str:
    """`hetsched trace generate --scenario hadar`: write the scenario's trace to `output` and
    its nodes next to it (STEM.nodes.toml).

    Returns:
        What was written, the batch's lower bounds and the `hetsched simulate` command.

    Raises:
        ConfigError: a bad parameter, or a file cannot be written.
        ThroughputFormatError: the throughput file does not follow a known format.
        TraceError: the output format is not writable or the trace cannot be written.
    """
    table = None if throughputs is None else data_files.load_throughputs(Path(throughputs))
    generated = generate_hadar_scenario(seed, n_jobs, table=table)
    out = Path(output)
    trace_format(out, fmt)  # an unusable name fails before anything is written
    stem = out.with_suffix("")
    nodes_path = stem.with_name(stem.name + ".nodes.toml")
    write_trace(out, generated.trace, fmt)
    text = nodes_toml(generated.nodes).replace("ANDREAS", "Hadar", 1)
    try:
        nodes_path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {nodes_path}: {exc.strerror}") from exc
    bounds = batch_bounds(generated.trace, generated.nodes, generated.table)
    return (
        f"wrote {len(generated.trace)} jobs to {out} (Hadar scenario, all at time 0, seed "
        f"{seed}) and the nodes (15 x 4 GPUs: 20 v100, 20 p100, 20 k80) to {nodes_path}\n"
        f"no policy can finish the batch in under {bounds.best_s / 3600:.1f} h (work at each "
        f"job's best rate: {bounds.work_s / 3600:.1f} h, longest job: "
        f"{bounds.longest_s / 3600:.1f} h, fluid: {bounds.fluid_s / 3600:.1f} h)\n"
        f"simulate it with:\n  {simulate_command(out, nodes_path, seed, throughputs)}"
    )
