"""Builders for the controller's unit tests: Slurm records as the backend parses them, and the
recorded `squeue --json` / `sinfo --json` of the real clusters (tests/golden/)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC
from pathlib import Path
from typing import Any

import numpy as np

from slurm_hetsched.controller.jobview import ManagedJob, SlurmView
from slurm_hetsched.core.jobspec import JobSpec
from slurm_hetsched.core.model import (
    Allocation,
    ClusterSnapshot,
    GpuSlice,
    Job,
    Node,
    Placement,
    RoundPlan,
    RoundState,
)
from slurm_hetsched.core.ports import EnactReport, RoundRecord
from slurm_hetsched.data_files import shipped_throughputs
from slurm_hetsched.slurm.parse import parse_jobs, parse_nodes
from slurm_hetsched.slurm.records import GpuRequest, JobState, SlurmJob, SlurmNode

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
VERSIONS = ["22.05", "26.05"]
TABLE = shipped_throughputs()
TZ = UTC
RESNET = "ResNet-50 (batch size 64)"
SPEC = f"hetsched:class={RESNET};steps=20000;weight=1"


def golden_jobs(version: str) -> list[SlurmJob]:
    return parse_jobs((GOLDEN / f"slurm-{version}" / "squeue_all.json").read_text())


def golden_nodes(version: str) -> list[SlurmNode]:
    return parse_nodes((GOLDEN / f"slurm-{version}" / "sinfo.json").read_text())


def golden_ids(version: str) -> dict[str, str]:
    """Scenario letter -> job id (tests/golden/README.md, "Scenario")."""
    text = (GOLDEN / f"slurm-{version}" / "jobs.txt").read_text()
    return dict(line.split("=") for line in text.split())


def slurm_job(
    job_id: str,
    *,
    comment: str = SPEC,
    state: JobState = JobState.PENDING,
    gpus: int | None = 1,
    gpu_type: str | None = None,
    nodes: str = "",
    reason: str = "",
    features: str = "",
    user: str = "alice",
    user_id: int | None = 1000,
    partition: str = "gpu",
    restart_count: int = 0,
    submit_time: int | None = 1_000,
    het_job_id: str | None = None,
    het_job_offset: int | None = None,
    admin_comment: str = "",
    **more: Any,
) -> SlurmJob:
    """One job as squeue reports it; running jobs run on `nodes` (batch host: the first)."""
    running = state in (JobState.RUNNING, JobState.COMPLETING)
    return SlurmJob(
        job_id=job_id,
        name=f"job{job_id}",
        user=user,
        user_id=user_id,
        account="",
        partition=partition,
        state=state,
        state_flags=(),
        reason=reason or ("None" if running else "Priority"),
        comment=comment,
        admin_comment=admin_comment,
        restart_count=restart_count,
        requeue=True,
        priority=0 if reason.startswith("JobHeld") else 1,
        tres_per_node="" if gpus is None else GpuRequest(gpus, gpu_type).gres(),
        gpus_per_node=None if gpus is None else GpuRequest(gpus, gpu_type),
        features=features,
        required_nodes="",
        excluded_nodes="",
        nodes=nodes if running else "",
        batch_host=nodes.split(",")[0] if running else "",
        gres_detail=(),
        submit_time=submit_time,
        start_time=(submit_time or 0) + 5 if running else None,
        het_job_id=het_job_id,
        het_job_offset=het_job_offset,
        **more,
    )


def held(job_id: str, **kwargs: Any) -> SlurmJob:
    """A pending job held as the sbatch template submits it (`--hold`)."""
    return slurm_job(job_id, state=JobState.PENDING, reason="JobHeldUser", **kwargs)


def running(job_id: str, nodes: str, gpu_type: str, **kwargs: Any) -> SlurmJob:
    """A running job the controller placed: untyped count, the type as its feature."""
    return slurm_job(job_id, state=JobState.RUNNING, nodes=nodes, features=gpu_type, **kwargs)


def slurm_node(
    name: str,
    gpus: dict[str, int],
    used: dict[str, int] | None = None,
    *,
    state: str = "IDLE",
) -> SlurmNode:
    return SlurmNode(
        name=name,
        state=state,
        state_flags=(),
        gpus=gpus,
        gpus_used=used or {},
        features=tuple(sorted(gpus)),
        active_features=tuple(sorted(gpus)),
        partitions=("gpu",),
        reason="",
        cpus=8,
        alloc_cpus=0,
    )


def managed(*components: SlurmJob, key: str | None = None) -> ManagedJob:
    """A managed job of `components` (leader first), GPU count from their requests."""
    leader = components[0]
    num_gpus = sum(c.gpus_per_node.count for c in components if c.gpus_per_node)
    return ManagedJob(
        key=key or leader.job_id,
        spec=JobSpec(job_class=RESNET, steps=20000),
        components=tuple(components),
        num_gpus=num_gpus,
    )


def view_of(*jobs: ManagedJob, busy: tuple[str, ...] = ()) -> SlurmView:
    """A view holding `jobs` (the snapshot is not read by the enactment's classification)."""
    return SlurmView(
        now_s=0.0,
        managed={job.key: job for job in jobs},
        rejected=(),
        nodes=(),
        snapshot=ClusterSnapshot(now_s=0.0, nodes=(), jobs=()),
        busy=busy,
    )


def placement(job_id: str, *slices: tuple[str, str, int]) -> Placement:
    """placement("j", ("n1", "v100", 2)) -> 2 v100 on n1."""
    return Placement(job_id, tuple(GpuSlice(node, gpu_type, n) for node, gpu_type, n in slices))


GPU_TYPES = ("k80", "p100", "v100")
CLUSTER = (
    Node("n1", {"v100": 2}),
    Node("n2", {"p100": 2}),
    Node("n3", {"k80": 4}, {"k80": 1}),
    Node("n4", {"k80": 4}, available=False),
)


def round_record(
    round_: int,
    now_s: float,
    shares: Mapping[str, Mapping[str, float]],
    *,
    keep: Mapping[str, Placement] | None = None,
    move: Mapping[str, Placement] | None = None,
    start: Mapping[str, Placement] | None = None,
    stop: tuple[str, ...] = (),
    priority: Mapping[str, float] | None = None,
    recomputed: bool = False,
    solve_s: float = 0.0,
    failed: Mapping[str, str] | None = None,
    enacted: bool = True,
    policy: str = "max_min_fairness_perf",
) -> RoundRecord:
    """A round as the tick records it: the allocation `shares` (job -> type -> fraction) over
    CLUSTER's GPU types, the plan, and (when `enacted`) the report."""
    job_ids = tuple(sorted(shares))
    x = np.array([[shares[j].get(t, 0.0) for t in GPU_TYPES] for j in job_ids]).reshape(
        len(job_ids), len(GPU_TYPES)
    )
    allocation = Allocation(job_ids, GPU_TYPES, x, 0.5, solve_s, policy)
    plan = RoundPlan(
        round=round_,
        keep=keep or {},
        move=move or {},
        start=start or {},
        stop=stop,
        priority=priority or {},
    )
    state = RoundState(
        round=round_,
        job_ids=job_ids,
        gpu_types=GPU_TYPES,
        received_s=np.zeros((len(job_ids), len(GPU_TYPES))),
        allocation=allocation,
        placements=plan.placements,
    )
    snapshot = ClusterSnapshot(
        now_s=now_s,
        nodes=CLUSTER,
        jobs=tuple(Job(key=j, job_class=RESNET, arrival_s=now_s - 100) for j in job_ids),
    )
    return RoundRecord(
        round=round_,
        now_s=now_s,
        allocation=allocation,
        recomputed=recomputed,
        capacity={"k80": 3.0, "p100": 2.0, "v100": 2.0},
        plan=plan,
        state=state,
        report=EnactReport(failed=dict(failed or {})) if enacted else None,
        snapshot=snapshot,
    )
