"""YARN's capacity scheduler as the Hadar evaluation runs it (Sultana et al.: "YARN-CS,
non-preemptive"): FIFO by arrival, first fit, heterogeneity-unaware, never preempted.

- Non-preemptive: a running job (`Problem.running`) keeps its GPUs to the end. The one
  exception is a job that can no longer run where it is (throughput 0 on one of its types,
  e.g. its memory need grew past the type): it is queued again like a waiting job, since
  holding GPUs it cannot use would block them forever.
- Order: the waiting jobs by arrival (`arrival_s`), ties by row order.
- Placement (`first_fit`, shared with `tiresias`): a job needs exactly `num_gpus` GPUs, all of
  one type; a type is usable where the job's throughput is > 0, and which usable type is
  faster is not looked at (the baseline is heterogeneity-unaware). The job goes on the first
  node (GPU types in column order, then nodes in node order) that has all its GPUs free; if
  no node has, it is spread over the fewest nodes of one type (the type needing the fewest
  nodes, ties by column order; within it the nodes with the most free GPUs first).
- No head-of-line blocking: a job that fits nowhere waits, and later jobs may still take the
  free GPUs. YARN reserves a node for a large container that does not fit, so that small ones
  cannot starve it; that reservation is left out: it only pays off while containers keep
  arriving and finishing between heartbeats, and in one batch decision it would just idle the
  reserved GPUs until the next round, which re-decides everything anyway.

The objective reported is the number of jobs running (running jobs kept included). No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, GpuSlice, InvalidProblemError, Placement, Problem
from slurm_hetsched.core.policies.configurations import placement_allocation
from slurm_hetsched.core.policies.options import NO_OPTIONS, PolicyOption

# (node index, type index, GPUs): one piece of a placement, in the index space of the problem.
Slices = tuple[tuple[int, int, int], ...]


def require_nodes(problem: Problem, policy: str) -> None:
    """Raise InvalidProblemError unless the problem has `nodes` (these policies place on them)."""
    if not problem.nodes:
        raise InvalidProblemError(
            f"policy {policy!r} places jobs on nodes: give `nodes` instead of `gpus`"
        )


def free_table(problem: Problem) -> np.ndarray:
    """(n_nodes, n_types) int64: GPUs of each type we may use on each node (GPUs our running
    jobs hold count as free: they are ours to keep or give)."""
    return np.array(
        [[node.free_gpus(t) for t in problem.gpu_types] for node in problem.nodes],
        dtype=np.int64,
    ).reshape(len(problem.nodes), problem.n_types)


def usable_types(problem: Problem, m: int) -> np.ndarray:
    """Type indices job row `m` can run on (throughput > 0), in column order."""
    return np.flatnonzero(problem.throughput[m] > 0)


def one_node(free: np.ndarray, types: np.ndarray, g: int) -> Slices | None:
    """All `g` GPUs on one node: the first type in `types`, then the first node, with room."""
    for t in types:
        nodes = np.flatnonzero(free[:, t] >= g)
        if nodes.size:
            return ((int(nodes[0]), int(t), g),)
    return None


def spread(free: np.ndarray, types: np.ndarray, g: int) -> Slices | None:
    """`g` GPUs of one type over the fewest nodes: of each type the nodes with the most free
    GPUs first (ties by node order); the type needing the fewest nodes wins (ties by `types`
    order). None if no type has `g` free GPUs in all."""
    best: Slices | None = None
    for t in types:
        column = free[:, t]
        order = np.argsort(-column, kind="stable")
        total = np.cumsum(column[order])
        if total.size == 0 or total[-1] < g:
            continue
        k = int(np.searchsorted(total, g)) + 1  # the first k nodes hold g
        if best is not None and k >= len(best):
            continue
        counts = column[order[:k]].copy()
        counts[-1] -= int(total[k - 1]) - g  # the last node gives only what is still needed
        best = tuple((int(n), int(t), int(c)) for n, c in zip(order[:k], counts, strict=True))
    return best


def first_fit(free: np.ndarray, types: np.ndarray, g: int) -> Slices | None:
    """One node if any has room (`one_node`), else the fewest nodes of one type (`spread`)."""
    return one_node(free, types, g) or spread(free, types, g)


def take(free: np.ndarray, slices: Slices) -> None:
    """Take `slices` out of `free` (in place)."""
    for n, t, count in slices:
        free[n, t] -= count


def fits(free: np.ndarray, slices: Slices) -> bool:
    """Whether `free` still holds every GPU of `slices` (pieces on one node and type summed)."""
    need = np.zeros_like(free)
    for n, t, count in slices:
        need[n, t] += count
    return bool((need <= free).all())


def slices_of(problem: Problem, placement: Placement) -> Slices:
    """A placement in index form (its nodes and types are the problem's: Problem checks)."""
    node_index = {node.name: n for n, node in enumerate(problem.nodes)}
    return tuple(
        (node_index[s.node], problem.gpu_types.index(s.gpu_type), s.count) for s in placement.slices
    )


def placement_of(problem: Problem, job_id: str, slices: Slices) -> Placement:
    """The Placement of `slices` for `job_id`."""
    return Placement(
        job_id,
        tuple(
            GpuSlice(problem.nodes[n].name, problem.gpu_types[t], count) for n, t, count in slices
        ),
    )


def can_stay(problem: Problem, m: int, placement: Placement) -> bool:
    """Whether job row `m` can still run on the types of its current placement."""
    return all(problem.throughput[m, problem.gpu_types.index(t)] > 0 for t in placement.gpu_types)


def arrival_order(problem: Problem) -> np.ndarray:
    """(n_jobs,) row indices by arrival, ties by row order."""
    return np.asarray(np.lexsort((np.arange(problem.n_jobs), problem.arrival_s)))


class YarnCapacityScheduler:
    """YARN-CS: FIFO by arrival, first fit on one GPU type, never preempted (module docstring)."""

    name: ClassVar[str] = "yarn_cs"
    description: ClassVar[str] = (
        "Hadar baseline YARN-CS: FIFO by arrival, first fit on one GPU type (one node if any "
        "has room), heterogeneity-unaware, never preempted (needs nodes)"
    )
    options: ClassVar[Mapping[str, PolicyOption]] = NO_OPTIONS
    needs_nodes: ClassVar[bool] = True  # a `nodes` problem only (generic tests skip it)

    def allocate(self, problem: Problem) -> Allocation:
        """Keep the running jobs; place the waiting ones in arrival order where they fit.

        Raises:
            InvalidProblemError: the problem has jobs but no `nodes`.
        """
        if problem.n_jobs == 0:  # nothing to place, nodes or not (as the other policies)
            return placement_allocation(problem, {}, 0.0, self.name, 0)
        require_nodes(problem, self.name)
        free = free_table(problem)
        placements: dict[str, Placement] = {}
        for m, job in enumerate(problem.job_ids):
            current = problem.running.get(job)
            if current is not None and can_stay(problem, m, current):
                take(free, slices_of(problem, current))
                placements[job] = current
        for m in arrival_order(problem):
            job = problem.job_ids[m]
            if job in placements:
                continue
            slices = first_fit(free, usable_types(problem, int(m)), int(problem.num_gpus[m]))
            if slices is None:
                continue  # waits; later jobs may still take what is free
            take(free, slices)
            placements[job] = placement_of(problem, job, slices)
        return placement_allocation(problem, placements, float(len(placements)), self.name, 0)
