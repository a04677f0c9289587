"""Our own policies (core/policies) behind the faithful mode's form interface, for
`--faithful-except forms`: the allocation our controller would compute, in Gavel's rounds.

Pure: builds the policy's `Problem` from the demand, as the tick does from a snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from slurm_hetsched.core.model import ClusterSnapshot, Node
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData, build_problem
from slurm_hetsched.sim.faithful.forms import Demand, Form
from slurm_hetsched.sim.traces import TraceJob


class OurPolicyForm(Form):
    """Our policy of the same name as `like`, with its defaults (HiGHS where it solves an LP),
    walked as Gavel walks `like` (agnostic shuffle, FIFO's rule)."""

    def __init__(self, like: Form, site: SiteData, trace: Mapping[str, TraceJob]) -> None:
        super().__init__(like.solver, like.seed)
        self.name = like.name
        self.agnostic = like.agnostic
        self.is_fifo = like.is_fifo
        self.policy = get_policy(like.name)
        self.site = site
        self.trace = trace

    def _allocate(self, demand: Demand) -> np.ndarray:
        first = self.trace[demand.job_ids[0]]
        now_s = first.arrival_s + float(demand.since_arrival_s[0])
        jobs = tuple(
            self.trace[job_id].to_job(steps_remaining=float(steps))
            for job_id, steps in zip(demand.job_ids, demand.steps_left, strict=True)
        )
        nodes = tuple(
            Node(t, {t: int(n)}) for t, n in zip(demand.gpu_types, demand.capacity, strict=True)
        )
        snapshot = ClusterSnapshot(now_s=now_s, nodes=nodes, jobs=jobs)
        allocation = self.policy.allocate(build_problem(snapshot, self.site))
        rows = {job_id: m for m, job_id in enumerate(allocation.job_ids)}
        columns = [allocation.gpu_types.index(t) for t in demand.gpu_types]
        return np.array([allocation.x[rows[j], columns] for j in demand.job_ids])
