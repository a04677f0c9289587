"""The nodes-problem model of the placement policies (ANDREAS and the exclusive baselines).

A placement policy decides, for each job, one node and g GPUs of that node's type, or to
postpone it. `build_configurations` enumerates what it chooses among: configurations (a group
of interchangeable nodes, g GPUs) with every job's execution time there (steps / rate at g
GPUs of the type, `Problem.rates_at`) and the energy cost of its whole run (its GPUs' busy
power plus their share of the node's base power, core/costs.py; or the whole node's, when a
job holds the node alone). `due_and_weight`, `postpone_cost` and `proxy_objective` price a
decision as ANDREAS's eq. 1 does (weighted tardiness, penalized postponements, the energy of
each node's first-ending job), and `placement_allocation` turns a decision into the
Allocation the round mechanism takes as it is.

No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from slurm_hetsched.core.model import Allocation, InvalidProblemError, Placement, Problem


@dataclass(frozen=True, slots=True)
class Configurations:
    """The configurations of a nodes problem, and every job's time and cost on each.

    A unit is one GPU type of one node (a node with one type is one unit); units whose GPU
    type, free GPUs and node size agree form a group, and a configuration is (group, g): the
    nodes of a group are interchangeable, so the choice among them is a matter of fit.

    Attributes:
        unit_node: (n_units,) index into `problem.nodes`; units sorted by group, then node.
        unit_type: (n_units,) index into `problem.gpu_types`.
        unit_free: (n_units,) free GPUs of that type on the node.
        unit_group: (n_units,) group of each unit.
        unit_total: (n_units,) all GPUs of the node (for its base-power share).
        group_free: (n_groups,) free GPUs of each unit of the group.
        conf_group: (n_confs,) group of each configuration.
        conf_gpus: (n_confs,) GPUs of each configuration.
        conf_type: (n_confs,) GPU type index of each configuration.
        time_s: (n_jobs, n_confs) execution time; inf where the job cannot use it (GPU count
            not allowed, or steps/s 0).
        cost: (n_jobs, n_confs) energy cost of the whole run there; inf where time_s is.
        job_cost: (n_jobs, n_confs) the same with the job-attributed power (proxy objective);
            equal to `cost` unless the exclusive baselines price whole nodes.
    """

    unit_node: np.ndarray
    unit_type: np.ndarray
    unit_free: np.ndarray
    unit_group: np.ndarray
    unit_total: np.ndarray
    group_free: np.ndarray
    conf_group: np.ndarray
    conf_gpus: np.ndarray
    conf_type: np.ndarray
    time_s: np.ndarray
    cost: np.ndarray
    job_cost: np.ndarray

    @property
    def valid(self) -> np.ndarray:
        """(n_jobs, n_confs) bool: the job can use the configuration."""
        return np.asarray(np.isfinite(self.time_s))


def build_configurations(problem: Problem, policy: str, whole_node: bool = False) -> Configurations:
    """The configurations, times and costs of a nodes problem.

    Args:
        problem: needs `nodes`, `steps` and `energy` for every GPU type of the nodes.
        policy: named in errors.
        whole_node: price a configuration by the whole node's cost c(n, g) (busy GPUs, idle
            GPUs and base power: the job holds the node alone) instead of the job's share.

    Raises:
        InvalidProblemError: a field is missing.
    """
    if not problem.nodes:
        raise InvalidProblemError(
            f"policy {policy!r} places jobs on nodes: give `nodes` instead of `gpus`"
        )
    steps = problem.require("steps", policy)
    energy = problem.energy
    if energy is None or not energy.has(problem.gpu_types):
        known = [] if energy is None else sorted(energy.busy_w)
        raise InvalidProblemError(
            f"policy {policy!r} needs busy_w and idle_w for every GPU type of the nodes "
            f"{list(problem.gpu_types)} (gpu_types.toml or the problem's `gpu_types`); it has "
            f"them for {known}"
        )
    keys: dict[tuple[int, int, int], int] = {}  # (type, free, node total) -> group
    units = []  # (group, node, type, free, node total)
    for n, node in enumerate(problem.nodes):
        total = sum(node.gpus.values())
        for t in node.gpus:
            free = node.free_gpus(t)
            if free > 0:
                j = problem.gpu_types.index(t)
                units.append((keys.setdefault((j, free, total), len(keys)), n, j, free, total))
    units.sort()
    table = np.array(units, dtype=np.int64).reshape(len(units), 5)
    unit_group, unit_node, unit_type, unit_free, unit_total = table.T
    group_keys = sorted(keys, key=keys.__getitem__)
    group_free = np.array([free for _j, free, _total in group_keys], dtype=np.int64)
    conf = [(grp, g) for grp, (_j, free, _t) in enumerate(group_keys) for g in range(1, free + 1)]
    conf_group = np.array([c[0] for c in conf], dtype=np.int64)
    conf_gpus = np.array([c[1] for c in conf], dtype=np.int64)
    conf_type = np.array([group_keys[grp][0] for grp in conf_group], dtype=np.int64)
    conf_total = np.array([group_keys[grp][2] for grp in conf_group], dtype=np.int64)
    n_jobs, n_confs = problem.n_jobs, len(conf)
    rate = np.zeros((n_jobs, n_confs))
    allowed = np.zeros((n_jobs, n_confs), dtype=bool)
    for g in np.unique(conf_gpus):
        cols = np.flatnonzero(conf_gpus == g)
        rate[:, cols] = problem.rates_at(int(g))[:, conf_type[cols]]
        allowed[:, cols] = np.array([int(g) in problem.gpu_options(m) for m in range(n_jobs)])[
            :, None
        ]
    valid = allowed & (rate > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        time_s = np.where(valid, steps[:, None] / np.where(valid, rate, 1.0), np.inf)
    types_ = [problem.gpu_types[j] for j in conf_type]
    job_rate = np.array(
        [
            energy.job_cost_per_s(t, tot, g)
            for t, tot, g in zip(types_, conf_total, conf_gpus, strict=True)
        ]
    ).reshape(n_confs)
    if whole_node:
        node_rate = np.array(
            [
                energy.node_cost_per_h(t, tot, g) / 3600.0
                for t, tot, g in zip(types_, conf_total, conf_gpus, strict=True)
            ]
        ).reshape(n_confs)
    else:
        node_rate = job_rate
    job_cost = np.where(valid, np.where(valid, time_s, 0.0) * job_rate, np.inf)
    cost = np.where(valid, np.where(valid, time_s, 0.0) * node_rate, np.inf)
    return Configurations(
        unit_node=unit_node,
        unit_type=unit_type,
        unit_free=unit_free,
        unit_group=unit_group,
        unit_total=unit_total,
        group_free=group_free,
        conf_group=conf_group,
        conf_gpus=conf_gpus,
        conf_type=conf_type,
        time_s=time_s,
        cost=cost,
        job_cost=job_cost,
    )


def due_and_weight(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """(n_jobs,) due dates (NaN = none) and tardiness weights (0 if not given)."""
    due = problem.due_s if problem.due_s is not None else np.full(problem.n_jobs, np.nan)
    tw = problem.tardiness_weight
    return due, (tw if tw is not None else np.zeros(problem.n_jobs))


def postpone_cost(
    problem: Problem, cfg: Configurations, rho: float, interval_s: float
) -> np.ndarray:
    """(n_jobs,) rho * w_j * tau^_j: the worst-case tardiness cost if j is postponed.

    tau^_j = max(0, T_c + H + M_j - d_j), M_j the job's slowest configuration. A job with no
    configuration at all is never placed by anyone, so its term is 0 (the same in every
    solution).
    """
    due, tw = due_and_weight(problem)
    slowest = np.where(cfg.valid, cfg.time_s, -np.inf).max(axis=1, initial=-np.inf)
    late = np.maximum(problem.now_s + interval_s + slowest - due, 0.0)
    late = np.where(np.isfinite(slowest) & ~np.isnan(due), late, 0.0)
    return np.asarray(rho * tw * late)


def proxy_objective(
    problem: Problem,
    placements: Mapping[str, Placement],
    rho: float,
    interval_s: float = 0.0,
) -> float:
    """ANDREAS's proxy objective (eq. 1) of any decision on a nodes problem.

    Weighted tardiness of the placed jobs if they run to the end where they are placed, plus
    rho times the weighted worst-case tardiness of the others (postponed), plus, per node
    with a job, the energy cost (job-attributed power x time) of its first-ending job.

    Args:
        problem: a nodes problem with `steps` and `energy`.
        placements: job -> its GPUs (one node, one type); absent = postponed.
        rho: the postponement penalty coefficient.
        interval_s: H, the time to the next rescheduling point.
    """
    energy = problem.energy
    if energy is None:
        raise InvalidProblemError("proxy objective: the problem has no energy model")
    cfg = build_configurations(problem, "andreas")
    due, tw = due_and_weight(problem)
    steps = problem.require("steps", "andreas")
    post = postpone_cost(problem, cfg, rho, interval_s)
    totals = {node.name: sum(node.gpus.values()) for node in problem.nodes}
    index = {job: m for m, job in enumerate(problem.job_ids)}
    value = 0.0
    first: dict[str, tuple[float, float]] = {}
    for m, job in enumerate(problem.job_ids):
        placement = placements.get(job)
        if placement is None:
            value += float(post[m])
            continue
        piece = placement.slices[0]
        g = placement.num_gpus
        rate = problem.rates_at(g)[index[job], problem.gpu_types.index(piece.gpu_type)]
        t = float(steps[m] / rate) if rate > 0 else np.inf
        if not np.isnan(due[m]):
            value += float(tw[m] * max(0.0, problem.now_s + t - due[m]))
        pi = t * float(energy.job_cost_per_s(piece.gpu_type, totals[piece.node], g))
        if piece.node not in first or t < first[piece.node][0]:
            first[piece.node] = (t, pi)
    return value + sum(pi for _t, pi in first.values())


def placement_allocation(
    problem: Problem,
    placements: Mapping[str, Placement],
    objective: float,
    policy: str,
    solves: int,
) -> Allocation:
    """An Allocation with `placements` and x 1 on each placed job's type (shared with the
    exclusive baselines)."""
    x = np.zeros((problem.n_jobs, problem.n_types))
    for m, job in enumerate(problem.job_ids):
        if job in placements:
            x[m, problem.gpu_types.index(placements[job].slices[0].gpu_type)] = 1.0
    return Allocation(
        job_ids=problem.job_ids,
        gpu_types=problem.gpu_types,
        x=x,
        objective=objective,
        solve_s=0.0,
        policy=policy,
        solves=solves,
        placements=dict(placements),
    )
