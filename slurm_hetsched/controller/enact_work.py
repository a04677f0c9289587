"""What each managed job needs this round, from its Slurm state and its placement (pure):
keep it where it runs, move it, start it, stop it, or hold it (controller/enact.py does it).

Read from Slurm, not only from the plan, so enacting is idempotent: a placed job already
running on its target GPUs is kept; one running elsewhere is moved; one pending is started; a
job not placed that runs is stopped; one pending and released is held.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_hetsched.controller.jobview import ManagedJob, SlurmView
from slurm_hetsched.core.model import Placement, RoundPlan
from slurm_hetsched.slurm.records import JobState


@dataclass(frozen=True, slots=True)
class Work:
    """The jobs of one round by what they need."""

    keep: dict[str, ManagedJob]
    move: dict[str, tuple[ManagedJob, Placement]]
    start: dict[str, tuple[ManagedJob, Placement]]
    stop: dict[str, ManagedJob]
    hold: dict[str, ManagedJob]


def classify(view: SlurmView, plan: RoundPlan) -> Work:
    """Each managed job's need, from its Slurm state and its placement this round."""
    placed = plan.placements
    work = Work({}, {}, {}, {}, {})
    for key, job in sorted(view.managed.items()):
        if key in view.busy or key in plan.set_aside:
            continue
        target = placed.get(key)
        if target is not None:
            if job.running and runs_on(job, target):
                work.keep[key] = job
            elif job.running:
                work.move[key] = (job, target)
            elif job.state is JobState.PENDING and starting_on(job, target):
                work.keep[key] = job  # released onto this target already; Slurm starts it
            elif job.state is JobState.PENDING:
                work.start[key] = (job, target)
        elif job.running:
            work.stop[key] = job
        elif job.state is JobState.PENDING and not job.leader.held:
            work.hold[key] = job
    return work


def starting_on(job: ManagedJob, placement: Placement) -> bool:
    """Whether a pending job was released onto exactly `placement` (a plain job on one node):
    Slurm is about to start it there, so re-placing it would only race with the start."""
    leader = job.leader
    if leader.held or len(job.components) > 1 or len(placement.slices) != 1:
        return False
    (part,) = placement.slices
    count = leader.gpus_per_node.count if leader.gpus_per_node else 0
    return (leader.features, leader.required_nodes, count) == (
        part.gpu_type,
        part.node,
        part.count,
    )


def runs_on(job: ManagedJob, placement: Placement) -> bool:
    """Whether a running job holds exactly the GPUs of `placement` (type by node feature)."""
    want: dict[str, int] = {}
    for part in placement.slices:
        want[part.node] = want.get(part.node, 0) + part.count
    if job.gpus_by_node() != want:
        return False
    wanted_types = {s.node: s.gpu_type for s in placement.slices}
    # The type a component runs on is the feature it was retargeted to.
    return all(
        (c.features or "") in ("", wanted_types.get(c.batch_host or "", c.features))
        for c in job.components
    )
