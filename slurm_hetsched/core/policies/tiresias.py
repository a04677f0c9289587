"""Tiresias (Gu et al., NSDI'19) as the Hadar evaluation runs it (Sultana et al.: "2 priority
queues, PromoteKnob disabled"): discretized two-dimensional least-attained-service (2D-LAS),
preemptive, heterogeneity-unaware.

- Attained service is two-dimensional: GPUs x time run, i.e. GPU-seconds so far
  (`Problem.attained_gpu_s`; None = every job at 0). It needs no job durations, which is the
  point of Tiresias: it orders by what jobs have received, not by what they will need.
- Two queues: queue 1 (high) holds the jobs below `threshold_gpu_h` GPU-hours of attained
  service, queue 2 the rest; within a queue FIFO by arrival, ties by row order. So a new job
  overtakes one that has already run a while, and long jobs sink to queue 2, where they run in
  arrival order on whatever queue 1 leaves. The PromoteKnob (moving a job that has waited too
  long back to queue 1, against starvation) is disabled, as in the Hadar evaluation.
- Default threshold 1 GPU-hour: our choice, not a published value: a round number close to
  the first queue limit of Tiresias's public simulator with 2 queues (3250 GPU-seconds, about
  0.9 GPU-hour); `threshold_gpu_h=0.9028` gives exactly that.
- Preemptive: every call re-plans from scratch, walking the jobs in priority order. A running
  job that comes up with its current GPUs still free keeps exactly them (no needless move);
  otherwise it is placed like a new job. A job that does not fit waits; its GPUs, if it ran,
  are given up (preempted).
- Placement: as `yarn_cs` (yarn_cs.first_fit: one GPU type, one node if any has room, else
  the fewest nodes of that type; heterogeneity-unaware). A job being placed prefers GPUs that
  no lower-priority running job holds: one node without preempting, else one node taking
  lower-priority jobs' GPUs, else spread without preempting, else spread preempting. So a
  running job is preempted only when a job ahead of it needs its GPUs, and consolidation comes
  first, as the placement rule says.

The objective reported is the number of jobs running. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, Placement, Problem
from slurm_hetsched.core.policies.configurations import placement_allocation
from slurm_hetsched.core.policies.options import PolicyOption, checked, parse_non_negative
from slurm_hetsched.core.policies.yarn_cs import (
    Slices,
    can_stay,
    fits,
    free_table,
    one_node,
    placement_of,
    require_nodes,
    slices_of,
    spread,
    take,
    usable_types,
)

DEFAULT_THRESHOLD_GPU_H = 1.0


class Tiresias:
    """Tiresias's discretized 2D-LAS: 2 queues by attained GPU-hours, FIFO within a queue,
    preemptive, first fit on one GPU type (module docstring)."""

    name: ClassVar[str] = "tiresias"
    description: ClassVar[str] = (
        "Hadar baseline Tiresias: 2-queue least attained GPU-service first (FIFO within a "
        "queue, no promotion), preemptive, first fit on one GPU type, heterogeneity-unaware "
        "(needs nodes)"
    )
    options: ClassVar[Mapping[str, PolicyOption]] = MappingProxyType(
        {
            "threshold_gpu_h": PolicyOption(
                "attained GPU-hours at which a job drops to the low-priority queue (default 1)",
                DEFAULT_THRESHOLD_GPU_H,
                parse_non_negative,
            ),
        }
    )
    needs_nodes: ClassVar[bool] = True  # a `nodes` problem only (generic tests skip it)

    def __init__(self, threshold_gpu_h: float = DEFAULT_THRESHOLD_GPU_H) -> None:
        """Args: threshold_gpu_h: attained service (GPU-hours) from which a job is in queue 2.

        Raises:
            ConfigError: a negative or non-finite threshold.
        """
        self.threshold_gpu_h = checked(self.name, self.options, "threshold_gpu_h", threshold_gpu_h)

    def queues(self, problem: Problem) -> np.ndarray:
        """(n_jobs,) 0 for queue 1 (attained service below the threshold), 1 for queue 2."""
        attained = problem.attained_gpu_s
        if attained is None:
            return np.zeros(problem.n_jobs, dtype=np.int64)
        return (attained >= self.threshold_gpu_h * 3600.0).astype(np.int64)

    def order(self, problem: Problem) -> np.ndarray:
        """(n_jobs,) row indices in priority order: queue, then arrival, then row."""
        rows = np.arange(problem.n_jobs)
        return np.asarray(np.lexsort((rows, problem.arrival_s, self.queues(problem))))

    def allocate(self, problem: Problem) -> Allocation:
        """Re-plan every job in priority order (module docstring).

        Raises:
            InvalidProblemError: the problem has jobs but no `nodes`.
        """
        if problem.n_jobs == 0:  # nothing to place, nodes or not (as the other policies)
            return placement_allocation(problem, {}, 0.0, self.name, 0)
        require_nodes(problem, self.name)
        left = free_table(problem)
        # GPUs of the running jobs not walked yet: placing a job elsewhere spares them.
        held = np.zeros_like(left)
        current: dict[int, Slices] = {}
        for m, job in enumerate(problem.job_ids):
            placement = problem.running.get(job)
            if placement is not None and can_stay(problem, m, placement):
                current[m] = slices_of(problem, placement)
                for n, t, count in current[m]:
                    held[n, t] += count
        placements: dict[str, Placement] = {}
        for m in (int(r) for r in self.order(problem)):
            job = problem.job_ids[m]
            if m in current:
                take(held, current[m])  # walked: its GPUs are no longer spared
                if fits(left, current[m]):
                    take(left, current[m])
                    placements[job] = problem.running[job]
                    continue
            slices = self._place(left, held, usable_types(problem, m), int(problem.num_gpus[m]))
            if slices is not None:
                take(left, slices)
                placements[job] = placement_of(problem, job, slices)
        return placement_allocation(problem, placements, float(len(placements)), self.name, 0)

    @staticmethod
    def _place(left: np.ndarray, held: np.ndarray, types: np.ndarray, g: int) -> Slices | None:
        """First fit of `g` GPUs, sparing lower-priority running jobs' GPUs where it can: one
        node without preempting, one node preempting, spread without, spread preempting."""
        idle = np.maximum(left - held, 0)
        return (
            one_node(idle, types, g)
            or one_node(left, types, g)
            or spread(idle, types, g)
            or spread(left, types, g)
        )
