"""HiveD (Zhao et al., "HiveD: Sharing a GPU cluster for deep learning with guarantees",
OSDI'20), simplified, as a baseline of the Astraea evaluation (notes astraea-oasis.md sections
8.2 and 16): each tenant (Slurm account) owns a virtual cluster, its quota of GPUs per type
(`Account.quota`); jobs inside it are guaranteed, and idle GPUs are lent to other jobs at low
priority, taken back as soon as their owner needs them. No payments. A node placement policy,
recomputed from scratch on every call:

1. Guaranteed jobs, per account (running ones first, then by arrival, ties by row): a running
   job stays guaranteed on its type while the account's virtual cluster of that type has room
   for it; a waiting one is guaranteed on the fastest type where the account's virtual cluster
   has room for all its GPUs. Guaranteed jobs that run keep their GPUs; the others are placed
   next, on GPUs no opportunistic job holds where they can, else on GPUs opportunistic jobs
   hold (the owner reclaims them: those jobs are preempted). Since the virtual clusters of a
   type hold at most its GPUs, every guaranteed job finds room.
2. Opportunistic jobs, on the GPUs left (idle quotas and GPUs in no quota), in arrival order
   (ties by row), whatever their account: a running one keeps its GPUs if no guaranteed job
   took them, else it is moved to the fastest type with room or waits
   ("preempted:owner-reclaimed"); a waiting one goes on the fastest type with room. An
   account without quota only ever gets such idle GPUs.

A job that cannot be checkpointed (`Problem.preemptible`) is never run opportunistically (it
could not be preempted); it keeps its GPUs while it runs.

Left out (docs/policies.md, "hived"): HiveD's cells (a virtual cluster as a hierarchy of GPU
cells with their affinity, buddy cell allocation, binding virtual to physical cells): here a
virtual cluster is a count of GPUs per type, placed on any nodes of the type (one node if one
has room, else spread), and the physical GPUs it uses change as jobs come and go; its
scheduler inside a virtual cluster (here first fit in arrival order, without head-of-line
blocking); and a job's own choice of priority (here a job is guaranteed whenever its account's
virtual cluster has room, opportunistic otherwise). No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, Problem
from slurm_hetsched.core.policies.configurations import placement_allocation
from slurm_hetsched.core.policies.gandiva_fair import Board, Tenants, preemptible
from slurm_hetsched.core.policies.options import NO_OPTIONS, PolicyOption
from slurm_hetsched.core.policies.yarn_cs import arrival_order, require_nodes


class HiveD:
    """HiveD, simplified: quotas as virtual clusters, guaranteed inside, idle GPUs lent at low
    priority and reclaimed by their owners (module docstring)."""

    name: ClassVar[str] = "hived"
    description: ClassVar[str] = (
        "Astraea baseline HiveD (simplified): each account's quota a virtual cluster per GPU "
        "type, its jobs guaranteed there; idle GPUs lent to other jobs at low priority and "
        "reclaimed by preemption when the owner needs them (needs nodes)"
    )
    options: ClassVar[Mapping[str, PolicyOption]] = NO_OPTIONS
    needs_nodes: ClassVar[bool] = True  # a `nodes` problem only (generic tests skip it)

    def allocate(self, problem: Problem) -> Allocation:
        """Guaranteed jobs inside the virtual clusters, then opportunistic ones on the GPUs
        left (module docstring).

        Raises:
            InvalidProblemError: the problem has jobs but no `nodes`.
        """
        if problem.n_jobs == 0:
            return placement_allocation(problem, {}, 0.0, self.name, 0)
        require_nodes(problem, self.name)
        tenants = Tenants.of(problem)
        board = Board(problem)
        for m in range(problem.n_jobs):  # jobs that cannot be moved keep their GPUs first
            if not preemptible(problem, m):
                board.keep(m)
        guaranteed = _guaranteed(problem, tenants, board)
        for m, t in sorted(guaranteed.items()):  # 1. running guaranteed jobs stay put
            if board.current_type(m) == t:
                board.keep(m)
        for m in sorted(guaranteed, key=lambda m: (float(problem.arrival_s[m]), m)):
            if not board.placed(m):  # the others, reclaiming GPUs lent out if need be
                board.place(m, [guaranteed[m]])
        waiting: dict[str, str] = {}
        for m in arrival_order(problem).tolist():  # 2. opportunistic, on what is left
            job = problem.job_ids[m]
            if board.placed(m):
                continue
            if m not in guaranteed and preemptible(problem, m):
                if board.keep(m) or board.place(m):
                    continue
            waiting[job] = _why(problem, tenants, m, job in problem.running)
        return board.allocation(waiting, float(len(guaranteed)), self.name)


def _guaranteed(problem: Problem, tenants: Tenants, board: Board) -> dict[int, int]:
    """Job row -> the type column it is guaranteed on, inside its account's virtual cluster
    (step 1 of the module docstring): counts only, nothing placed yet."""
    out: dict[int, int] = {}
    runnable = problem.throughput > 0
    speed = board.speeds
    for u in range(len(tenants.names)):
        room = tenants.quota[u].copy()
        if not room.any():
            continue
        for m in tenants.jobs_of(problem, u):
            g = int(problem.num_gpus[m])
            t = board.current_type(m)
            if t < 0 or room[t] < g:
                fit = np.flatnonzero(runnable[m] & (room >= g)).tolist()
                if not fit:
                    continue
                t = max(fit, key=lambda k: (speed.rate(m, k, g, spread=False), -k))
            room[t] -= g
            out[m] = t
    return out


def _why(problem: Problem, tenants: Tenants, m: int, was_running: bool) -> str:
    """Why job row `m` waits."""
    if was_running:
        return "preempted:owner-reclaimed"
    account = problem.job_accounts[m] or "-"
    if not tenants.quota[tenants.of_job[m]].any():
        return f"no-quota:{account},no-idle-GPUs"
    if not preemptible(problem, m):
        return f"quota-full:{account},not-preemptible"
    return f"quota-full:{account},no-idle-GPUs"
