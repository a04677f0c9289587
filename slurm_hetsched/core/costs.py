"""Energy and tardiness costs: the energy, cost and tardiness of jobs, rounds and runs, and what
one decision is expected to cost (ANDREAS, docs/policies.md "Energy and tardiness").

Power comes from the power model (`EnergyModel`, `SiteEnergy`: core/model/energy.py, importable
from here too). Energies are IT energies in kWh (what node meters measure); costs multiply them
by PUE and the price. Tardiness is max(0, end - due) seconds, and its cost is the tardiness
weight times it; a job without a due date (NaN) is never late.

Pure: numbers in, numbers out. No I/O, no clock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from slurm_hetsched.core.model import Placement, Problem
from slurm_hetsched.core.model.energy import J_PER_KWH, S_PER_H, EnergyModel, SiteEnergy

__all__ = [
    "J_PER_KWH",
    "S_PER_H",
    "EnergyModel",
    "Interval",
    "SiteEnergy",
    "decision_costs",
    "job_energy_kwh",
    "placement_rate",
    "run_energy_kwh",
    "tardiness_cost",
    "tardiness_s",
    "window_energy_kwh",
]


# ----------------------------------------------------------------------------------------------
# Tardiness


def tardiness_s(end_s: Any, due_s: Any) -> np.ndarray:
    """max(0, end - due) per job, elementwise; 0 where the due date is NaN (none)."""
    end, due = np.asarray(end_s, dtype=float), np.asarray(due_s, dtype=float)
    late = np.maximum(end - np.where(np.isnan(due), np.inf, due), 0.0)
    return np.asarray(np.where(np.isnan(due), 0.0, late))


def tardiness_cost(end_s: Any, due_s: Any, weight: Any) -> np.ndarray:
    """Tardiness weight x max(0, end - due) per job, elementwise (0 without a due date)."""
    return np.asarray(np.asarray(weight, dtype=float) * tardiness_s(end_s, due_s))


# ----------------------------------------------------------------------------------------------
# Energy of intervals: jobs, rounds, runs


@dataclass(frozen=True, slots=True)
class Interval:
    """A job ran on `count` GPUs of `gpu_type` on `node` from `start_s` to `end_s`."""

    job_id: str
    node: str
    gpu_type: str
    count: int
    start_s: float
    end_s: float

    def __post_init__(self) -> None:
        if self.count < 1 or not self.end_s >= self.start_s:
            raise ValueError(
                f"interval of job {self.job_id!r}: count {self.count} on {self.node!r} from "
                f"{self.start_s} to {self.end_s}; expected count >= 1 and end >= start"
            )


def _node_total(nodes: Mapping[str, Mapping[str, int]], node: str) -> int:
    try:
        return sum(nodes[node].values())
    except KeyError:
        raise ValueError(f"interval on node {node!r}, which is not in `nodes`") from None


def job_energy_kwh(
    model: EnergyModel,
    intervals: Iterable[Interval],
    nodes: Mapping[str, Mapping[str, int]],
) -> dict[str, float]:
    """IT energy attributed to each job over its intervals (job power x duration).

    Args:
        model: the power model.
        intervals: what ran where and when.
        nodes: node -> {GPU type: GPUs}, for each node's total GPU count (base power share).

    Returns:
        job id -> kWh, for every job with an interval.
    """
    energy: dict[str, float] = defaultdict(float)
    for iv in intervals:
        watts = model.job_power_w(iv.gpu_type, _node_total(nodes, iv.node), iv.count)
        energy[iv.job_id] += float(watts) * (iv.end_s - iv.start_s) / J_PER_KWH
    return dict(energy)


def window_energy_kwh(
    model: EnergyModel,
    intervals: Iterable[Interval],
    nodes: Mapping[str, Mapping[str, int]],
    start_s: float,
    end_s: float,
    idle_nodes_on: bool = False,
) -> float:
    """IT energy of the nodes from `start_s` to `end_s` (a round, or a whole run).

    Each node draws P(n, g(t)) with g(t) its busy GPUs at time t (intervals clipped to the
    window). A node with no busy GPU draws its idle power P(n, 0) if `idle_nodes_on`, else
    nothing (it is taken to be powered down, as ANDREAS's unused nodes are: w_n = 0). A node
    with several GPU types draws its base power once and each type's GPU power.

    Args:
        model: the power model; it must know every GPU type of `nodes`.
        intervals: what ran where and when; overlapping intervals on one node add up.
        nodes: node -> {GPU type: GPUs}: every node to count.
        start_s, end_s: the window.
        idle_nodes_on: count nodes without a busy GPU at their idle power.

    Returns:
        kWh over the window.

    Raises:
        ValueError: an interval on a node not in `nodes`, or more busy GPUs than the node has.
    """
    if end_s <= start_s:
        return 0.0
    names = list(nodes)
    node_of = {name: i for i, name in enumerate(names)}
    types = sorted({t for gpus in nodes.values() for t in gpus})
    type_of = {t: k for k, t in enumerate(types)}
    has = np.array([[nodes[n].get(t, 0) for t in types] for n in names]).reshape(len(names), -1)
    # Watts of a node with no busy GPU, and what each busy GPU of a type adds.
    idle_w = has @ np.array([model.idle_w[t] for t in types]) + model.site.node_base_w
    extra_w = np.array([model.busy_w[t] - model.idle_w[t] for t in types])
    listed = intervals if isinstance(intervals, Sequence) else list(intervals)
    n = len(listed)
    for iv in listed:  # every node known: checked first, so the arrays need no sentinel
        if iv.node not in node_of:
            raise ValueError(f"interval on node {iv.node!r}, which is not in `nodes`")
    # Column arrays, not lists of Python numbers: a long simulation has millions.
    node = np.fromiter((node_of[iv.node] for iv in listed), dtype=np.int64, count=n)
    kind = np.fromiter((type_of.get(iv.gpu_type, -1) for iv in listed), dtype=np.int64, count=n)
    count = np.fromiter((iv.count for iv in listed), dtype=np.int64, count=n)
    lo = np.maximum(np.fromiter((iv.start_s for iv in listed), dtype=float, count=n), start_s)
    hi = np.minimum(np.fromiter((iv.end_s for iv in listed), dtype=float, count=n), end_s)
    seen = hi > lo
    off_w = idle_w if idle_nodes_on else np.zeros(len(names))
    # Nodes with nothing on them draw their idle power (or none) for the whole window.
    busy_nodes = np.unique(node[seen])
    joules = float(off_w.sum() - off_w[busy_nodes].sum()) * (end_s - start_s)
    if not seen.any():
        return joules / J_PER_KWH
    if np.any(kind[seen] < 0):
        bad = listed[int(np.argmax(seen & (kind < 0)))]
        raise ValueError(f"interval on GPU type {bad.gpu_type!r}, which no node has")
    # Every interval is a start (+count) and an end (-count) event; on each node, in time
    # order with ends first at equal times, the busy GPUs per type are running sums.
    at = np.r_[lo[seen], hi[seen]]
    on = np.r_[node[seen], node[seen]]
    of = np.r_[kind[seen], kind[seen]]
    delta = np.r_[count[seen], -count[seen]]
    order = np.lexsort((delta, at, on))
    at, on, of, delta = at[order], on[order], of[order], delta[order]
    change = np.zeros((len(at), len(types)), dtype=np.int64)
    change[np.arange(len(at)), of] = delta
    # A node's events add up to 0, so the running sum starts each node's block at 0.
    busy = np.cumsum(change, axis=0)
    first = np.r_[True, on[1:] != on[:-1]]  # each node's first event
    starts = np.nonzero(first)[0]
    over = busy > has[on]
    if over.any():
        e, k = np.argwhere(over)[0]
        raise ValueError(
            f"node {names[on[e]]!r}: {busy[e, k]} busy {types[k]} GPUs at {at[e]}, "
            f"it has {has[on[e], k]}"
        )
    watts = np.where(busy.sum(axis=1) > 0, idle_w[on] + busy @ extra_w, off_w[on])
    until = np.r_[at[1:], end_s]
    until[np.r_[first[1:], True]] = end_s  # a node's last event lasts to the window's end
    joules += float(watts @ (until - at))
    joules += float(off_w[on[starts]] @ (at[starts] - start_s))  # before a node's first event
    return joules / J_PER_KWH


def run_energy_kwh(
    model: EnergyModel,
    intervals: Sequence[Interval],
    nodes: Mapping[str, Mapping[str, int]],
    idle_nodes_on: bool = False,
) -> float:
    """IT energy of a whole run: the window from the first start to the last end."""
    if not intervals:
        return 0.0
    start = min(iv.start_s for iv in intervals)
    end = max(iv.end_s for iv in intervals)
    return window_energy_kwh(model, intervals, nodes, start, end, idle_nodes_on)


# ----------------------------------------------------------------------------------------------
# What a decision is expected to cost (the `costs` block of `hetsched allocate`)


def decision_costs(
    problem: Problem,
    x: np.ndarray,
    placements: Mapping[str, Placement] | None = None,
    digits: int = 6,
) -> dict[str, Any]:
    """The expected energy and tardiness of one decision, if it were kept until jobs finish.

    With `placements` (policies that place jobs on nodes), a placed job runs at the rate of
    its GPUs there; a job left out is postponed and gets no figures. Otherwise the job runs at
    its time-fraction-weighted rate sum_t x[m, t] * throughput[m, t], using num_gpus GPUs for
    the fraction x[m, t] of the time on type t.

    Args:
        problem: the problem; without `energy` (or power data for one of its types) the
            result is {}.
        x: (n_jobs, n_types) the allocation's time fractions.
        placements: job -> its GPUs, or None for time-fraction allocations.
        digits: rounding of the returned numbers.

    Returns:
        {"energy_kwh_per_h", "energy_cost_per_h"}: the IT energy per hour the cluster draws
        under the decision (nodes given: every available node, idle nodes included; otherwise
        the GPUs only) and its cost; with `steps`, also "energy_kwh", "energy_cost" (attributed
        to the jobs until each finishes), "tardiness_cost" (jobs with a due date and a
        tardiness weight) and "jobs": {job: {"end_s", "energy_kwh", "tardiness_s",
        "tardiness_cost"}} for the jobs that run, and "not_running": the others (postponed,
        or with no rate); their tardiness is not in the totals. {} if the problem has no
        energy model.
    """
    model = problem.energy
    if model is None or not model.has(problem.gpu_types):
        return {}
    types_ = problem.gpu_types
    busy_w, idle_w = model.busy_array(types_), model.idle_array(types_)
    base = model.site.node_base_w
    node_gpus = {node.name: dict(node.gpus) for node in problem.nodes}
    out: dict[str, Any] = {}
    # Power now.
    if placements is not None and problem.nodes:
        busy: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for placement in placements.values():
            for piece in placement.slices:
                busy[piece.node][piece.gpu_type] += piece.count
        watts = 0.0
        for node in problem.nodes:
            if not node.available:
                continue
            on = busy.get(node.name, {})
            watts += base + sum(
                on.get(t, 0) * model.busy_w[t] + (c - on.get(t, 0)) * model.idle_w[t]
                for t, c in node.gpus.items()
            )
    else:
        busy_gpus = np.minimum(problem.num_gpus @ x, problem.capacity)  # (n_types,)
        watts = float(busy_gpus @ busy_w + (problem.capacity - busy_gpus) @ idle_w)
        if problem.nodes:
            watts += base * sum(1 for node in problem.nodes if node.available)
    out["energy_kwh_per_h"] = round(watts / 1000.0, digits)
    out["energy_cost_per_h"] = round(float(model.cost(watts / 1000.0)), digits)
    if problem.steps is None:
        return out
    # Per job, until it finishes.
    due = problem.due_s if problem.due_s is not None else np.full(problem.n_jobs, np.nan)
    tw = problem.tardiness_weight
    tw = tw if tw is not None else np.zeros(problem.n_jobs)
    duration = np.full(problem.n_jobs, np.nan)
    job_w = np.zeros(problem.n_jobs)
    if placements is not None:
        index = {job: m for m, job in enumerate(problem.job_ids)}
        for job, placement in placements.items():
            m = index[job]
            watts_m = 0.0
            for piece in placement.slices:
                total = sum(node_gpus.get(piece.node, {piece.gpu_type: piece.count}).values())
                watts_m += float(model.job_power_w(piece.gpu_type, total, piece.count))
            rate = placement_rate(problem, m, placement)
            if rate > 0:
                duration[m] = problem.steps[m] / rate
                job_w[m] = watts_m
    else:
        rate_m = np.sum(np.where(problem.runnable, problem.throughput, 0.0) * x, axis=1)
        share = _base_share_per_gpu(problem, base)  # (n_types,) W of base power per GPU
        running = rate_m > 0
        duration[running] = problem.steps[running] / rate_m[running]
        job_w = (x * problem.num_gpus[:, None]) @ (busy_w + share)
    runs = ~np.isnan(duration)
    end = problem.now_s + duration
    energy = np.where(runs, job_w * np.nan_to_num(duration) / J_PER_KWH, 0.0)
    late = tardiness_s(np.where(runs, end, -np.inf), due)
    late_cost = tw * late
    out["energy_kwh"] = round(float(energy.sum()), digits)
    out["energy_cost"] = round(float(model.cost(energy.sum())), digits)
    out["tardiness_cost"] = round(float(late_cost[runs].sum()), digits)
    out["jobs"] = {
        job: {
            "end_s": round(float(end[m]), 3),
            "energy_kwh": round(float(energy[m]), digits),
            "tardiness_s": round(float(late[m]), 3),
            "tardiness_cost": round(float(late_cost[m]), digits),
        }
        for m, job in enumerate(problem.job_ids)
        if runs[m]
    }
    out["not_running"] = [job for m, job in enumerate(problem.job_ids) if not runs[m]]
    return out


def placement_rate(problem: Problem, m: int, placement: Placement) -> float:
    """Steps/s of job row `m` on `placement`: its throughput at the placement's GPU count,
    from `problem.rates_at` (scaled where not measured); a gang across types runs at its
    slowest type's rate at that count (synchronous data parallel)."""
    rates = problem.rates_at(placement.num_gpus)[m]
    return min(float(rates[problem.gpu_types.index(t)]) for t in placement.gpu_types)


def _base_share_per_gpu(problem: Problem, base_w: float) -> np.ndarray:
    """(n_types,) the average node base power per GPU of each type (0 without nodes)."""
    share = np.zeros(problem.n_types)
    gpus = np.zeros(problem.n_types)
    for node in problem.nodes:
        total = sum(node.gpus.values())
        for t, count in node.gpus.items():
            if t in problem.gpu_types and total > 0:
                j = problem.gpu_types.index(t)
                share[j] += base_w * count / total
                gpus[j] += count
    return np.divide(share, gpus, out=np.zeros_like(share), where=gpus > 0)
