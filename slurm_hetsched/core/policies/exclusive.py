"""ANDREAS's baselines (paper section V-B; the public GPUScheduler's First_principle_methods):
FIFO, EDF and priority ordering with exclusive-node, non-preemptive semantics.

- Non-preemptive: a running job (`Problem.running`) keeps its node and GPUs to the end; it is
  never moved or stopped.
- Exclusive: a node runs at most one job. A node with a running job is taken; a waiting job is
  placed only on a node with no job (its other GPUs stay idle).
- Order: `fifo_exclusive` by arrival (then row order); `edf_exclusive` by due date (none last,
  then arrival); `priority_exclusive` by descending tardiness weight (then arrival).
- Configuration: among the free nodes, the cheapest configuration (n, g) that meets the due
  date, T_c + t_jng < d_j, else the fastest; the cost of a configuration is t_jng times the
  whole node's cost c(n, g) (busy GPUs, idle GPUs and base power: the job holds the node
  alone). A job that fits no free node waits; later jobs may still take the free nodes (no
  head-of-line blocking).

The objective reported is ANDREAS's proxy (eq. 1) of the decision, running jobs included, so
it compares with `andreas`'s. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, GpuSlice, Placement, Problem
from slurm_hetsched.core.policies.configurations import (
    build_configurations,
    due_and_weight,
    placement_allocation,
    proxy_objective,
)
from slurm_hetsched.core.policies.options import NO_OPTIONS, PolicyOption

RHO = 100.0  # the postponement penalty of the proxy objective they report (ANDREAS's rho)


class FifoExclusive:
    """ANDREAS's FIFO baseline: arrival order, one job per node, never preempted."""

    name: ClassVar[str] = "fifo_exclusive"
    description: ClassVar[str] = (
        "ANDREAS baseline: FIFO, each job alone on a free node (cheapest deadline-meeting "
        "configuration else fastest), never preempted (needs nodes, steps)"
    )
    options: ClassVar[Mapping[str, PolicyOption]] = NO_OPTIONS
    needs_nodes: ClassVar[bool] = True  # a `nodes` problem only, like andreas

    def order(self, problem: Problem) -> np.ndarray:
        """(n_jobs,) row indices in service order."""
        return np.asarray(np.lexsort((np.arange(problem.n_jobs), problem.arrival_s)))

    def allocate(self, problem: Problem) -> Allocation:
        """Keep the running jobs; place waiting jobs in order on free nodes (module docstring).

        Raises:
            InvalidProblemError: no `nodes`, no `steps`, or no power data for a GPU type.
        """
        if problem.n_jobs == 0:
            return placement_allocation(problem, {}, 0.0, self.name, 0)
        cfg = build_configurations(problem, self.name, whole_node=True)
        due, _tw = due_and_weight(problem)
        placements: dict[str, Placement] = dict(problem.running)
        taken = {s.node for p in placements.values() for s in p.slices}
        node_names = [node.name for node in problem.nodes]
        unit_free = np.array([node_names[n] not in taken for n in cfg.unit_node], dtype=bool)
        feasible = cfg.valid & ~(problem.now_s + cfg.time_s >= due[:, None])
        for m in self.order(problem):
            job = problem.job_ids[m]
            if job in placements:
                continue
            # A configuration is open if its group has a unit on a node without a job.
            open_groups = np.zeros(len(cfg.group_free), dtype=bool)
            open_groups[cfg.unit_group[unit_free]] = True
            usable = cfg.valid[m] & open_groups[cfg.conf_group]
            if not usable.any():
                continue  # waits for a free node
            meets = usable & feasible[m]
            if meets.any():
                c = int(np.lexsort((cfg.time_s[m], np.where(meets, cfg.cost[m], np.inf)))[0])
            else:
                c = int(np.lexsort((cfg.cost[m], np.where(usable, cfg.time_s[m], np.inf)))[0])
            u = int(np.flatnonzero(unit_free & (cfg.unit_group == cfg.conf_group[c]))[0])
            node = problem.nodes[cfg.unit_node[u]]
            gpu_type = problem.gpu_types[cfg.unit_type[u]]
            placements[job] = Placement(
                job, (GpuSlice(node.name, gpu_type, int(cfg.conf_gpus[c])),)
            )
            unit_free &= cfg.unit_node != cfg.unit_node[u]  # the whole node is now taken
        objective = proxy_objective(problem, placements, RHO)
        return placement_allocation(problem, placements, objective, self.name, 0)


class EdfExclusive(FifoExclusive):
    """ANDREAS's EDF baseline: earliest due date first, one job per node, never preempted."""

    name: ClassVar[str] = "edf_exclusive"
    description: ClassVar[str] = (
        "ANDREAS baseline: earliest due date first, each job alone on a free node, never "
        "preempted (needs nodes, steps)"
    )

    def order(self, problem: Problem) -> np.ndarray:
        due, _tw = due_and_weight(problem)
        key = np.where(np.isnan(due), np.inf, due)
        return np.asarray(np.lexsort((np.arange(problem.n_jobs), problem.arrival_s, key)))


class PriorityExclusive(FifoExclusive):
    """ANDREAS's priority baseline: highest tardiness weight first, one job per node."""

    name: ClassVar[str] = "priority_exclusive"
    description: ClassVar[str] = (
        "ANDREAS baseline: highest tardiness weight first, each job alone on a free node, never "
        "preempted (needs nodes, steps)"
    )

    def order(self, problem: Problem) -> np.ndarray:
        _due, tw = due_and_weight(problem)
        return np.asarray(np.lexsort((np.arange(problem.n_jobs), problem.arrival_s, -tw)))
