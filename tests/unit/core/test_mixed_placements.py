"""Gangs across GPU types (Hadar): a policy's placement of slices of several types and nodes is
taken by the mechanism, credited per type in the round state, and run by the simulated cluster
at the pace of its slowest type."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_hetsched.controller.admin_comment import describe_target
from slurm_hetsched.core.mechanism import plan_round, record_round
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
from slurm_hetsched.core.problem import placement_rate, table_rate
from slurm_hetsched.data_files import shipped_throughputs
from slurm_hetsched.rounds.clocks import SimClock
from slurm_hetsched.sim.cluster import SimulatedCluster
from slurm_hetsched.sim.trace_job import TraceJob

TABLE = shipped_throughputs()
CLASS = "ResNet-18 (batch size 64)"
TYPES = ("k80", "p100", "v100")
NODES = (Node("n1", {"v100": 2}), Node("n2", {"p100": 2}), Node("n3", {"k80": 4}))
GANG = Placement("g", (GpuSlice("n1", "v100", 2), GpuSlice("n3", "k80", 1)))


def test_a_gang_runs_at_count_times_its_slowest_types_per_gpu_rate() -> None:
    rate = placement_rate(TABLE, CLASS, GANG)
    per_type = {t: table_rate(TABLE, CLASS, t, 3, spread=True) for t in ("v100", "k80")}
    assert rate == min(per_type.values()) == per_type["k80"]
    single = Placement("s", (GpuSlice("n1", "v100", 2),))
    assert placement_rate(TABLE, CLASS, single) == table_rate(TABLE, CLASS, "v100", 2)
    assert GANG.gpus_by_type() == {"v100": 2, "k80": 1} and GANG.main_gpu_type() == "v100"
    assert describe_target(GANG) == "v100x2@n1+k80x1@n3"


def test_the_mechanism_takes_a_policys_gang_and_credits_each_type_its_share() -> None:
    allocation = Allocation(
        ("g",), TYPES, np.array([[1 / 3, 0.0, 2 / 3]]), 0.0, 0.0, "hadar", placements={"g": GANG}
    )
    snapshot = ClusterSnapshot(0.0, NODES, (Job("g", CLASS, num_gpus=3),))
    plan, state = plan_round(allocation, RoundState.initial(TYPES), snapshot, 360.0)
    assert plan.start == {"g": GANG}
    after = record_round(state, {"g": 300.0})
    row = dict(zip(after.gpu_types, after.received_s[after.job_ids.index("g")], strict=True))
    assert row == {"k80": pytest.approx(100.0), "p100": 0.0, "v100": pytest.approx(200.0)}


def test_the_simulated_cluster_runs_a_gang_at_its_slowest_type() -> None:
    steps = 10_000
    job = TraceJob(job_id="g", arrival_s=0.0, job_class=CLASS, num_gpus=3, total_steps=steps)
    clock = SimClock()
    cluster = SimulatedCluster([job], NODES, TABLE, clock, restart_overhead_s=0.0)
    cluster.observe()
    cluster.enact(RoundPlan(round=1, start={"g": GANG}))
    rate = placement_rate(TABLE, CLASS, GANG)
    clock.sleep_until(100.0)
    cluster.observe()
    assert cluster.job_states()["g"].steps_left == pytest.approx(steps - 100.0 * rate)
    # Every GPU it holds counts: 2 v100 and 1 k80 for 100 s.
    assert cluster.job_states()["g"].gpu_s == {"v100": 200.0, "k80": 100.0}
