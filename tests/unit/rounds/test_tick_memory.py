"""A job never goes where it cannot fit, round after round: through the tick (policy, round
mechanism with work conservation, amortized moves) and the simulator, a job whose memory need
(`Job.mem_gib`) exceeds a GPU type's memory is never placed there, even when that type is the
only one with free GPUs (it waits, and is not set aside as a failure) or the fastest (it runs
elsewhere); and a need that grows while an allocation stands voids that allocation."""

from __future__ import annotations

import dataclasses

import pytest

from slurm_hetsched.core.model import ClusterSnapshot, Job, Node, RoundPlan
from slurm_hetsched.core.policies import POLICIES, get_policy
from slurm_hetsched.core.ports import EnactReport, Observation
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy, shipped_throughputs
from slurm_hetsched.rounds.tick import Tick, TickSettings
from slurm_hetsched.sim.run import SimSettings, simulate
from slurm_hetsched.sim.traces import TraceJob
from slurm_hetsched.store.memory import MemoryStore

RESNET = "ResNet-50 (batch size 64)"
ROUND_S = 360.0
ROUNDS = 30
SHIPPED = SiteData(shipped_throughputs(), shipped_gpu_types(), shipped_site_energy())


class ChangingCluster:
    """A cluster of fixed nodes whose jobs the test sets; it keeps the plans it is given and
    reports every placed job as having run the whole round."""

    def __init__(self, nodes: tuple[Node, ...], jobs: tuple[Job, ...]) -> None:
        self.nodes = nodes
        self.jobs = jobs
        self.plans: list[RoundPlan] = []
        self.now_s = 0.0

    def observe(self) -> Observation:
        ran = {job: ROUND_S for job in self.plans[-1].placements} if self.plans else {}
        self.now_s += ROUND_S
        return Observation(ClusterSnapshot(self.now_s, self.nodes, self.jobs), ran_s=ran)

    def enact(self, plan: RoundPlan, observed: Observation) -> EnactReport:
        self.plans.append(plan)
        return EnactReport()

    def types_of(self, job: str) -> list[str]:
        """The GPU type the job was placed on in each round it was placed."""
        return [p.placements[job].gpu_types[0] for p in self.plans if job in p.placements]


def make_tick(cluster: ChangingCluster, policy: str) -> Tick[Observation]:
    return Tick(get_policy(policy), SHIPPED, cluster, MemoryStore(), TickSettings(ROUND_S))


def run_rounds(tick: Tick[Observation], rounds: int = ROUNDS) -> None:
    for _ in range(rounds):
        record = tick.run_round()
        assert not record.plan.set_aside, "waiting for room is no failure"


# Max-min fairness with work conservation and amortized moves (the controller's defaults),
# an agnostic policy, and a placement policy that chooses the nodes itself.
POLICIES_TRIED = ["max_min_fairness_perf", "max_min_fairness", "andreas", "fifo_exclusive"]


@pytest.mark.parametrize("policy", POLICIES_TRIED)
def test_a_job_waits_while_only_a_type_too_small_for_it_has_room(policy: str) -> None:
    # The v100s (16 GiB) are all busy with jobs outside the controller; the k80s (12 GiB) are
    # free. "big" needs 14 GiB: it waits. "small" runs on a k80, as does "big" never.
    busy = Node("n1", {"v100": 2}, gpus_in_use={"v100": 2})
    nodes = (busy, Node("n2", {"k80": 4}))
    jobs = (
        Job("big", RESNET, steps_remaining=1e6, arrival_s=0.0, mem_gib=14.0),
        Job("small", RESNET, steps_remaining=1e6, arrival_s=1.0, mem_gib=4.0),
    )
    cluster = ChangingCluster(nodes, jobs)
    tick = make_tick(cluster, policy)
    run_rounds(tick)
    assert cluster.types_of("big") == []
    assert set(cluster.types_of("small")) == {"k80"}
    # The v100s free up: "big" runs there, and only there.
    cluster.nodes = (Node("n1", {"v100": 2}), nodes[1])
    run_rounds(tick, rounds=5)
    assert set(cluster.types_of("big")) == {"v100"}


def test_a_need_that_grows_voids_the_allocation_giving_time_where_it_no_longer_fits() -> None:
    # One k80 and one v100 for two jobs of one class: max-min fairness shares both types, so
    # "a" gets time on the k80. Its peak then grows past the k80's 12 GiB (a progress report):
    # from the next round on it never runs there, though nothing else changed.
    nodes = (Node("n1", {"v100": 1}), Node("n2", {"k80": 1}))
    jobs = (
        Job("a", RESNET, steps_remaining=1e6, arrival_s=0.0),
        Job("b", RESNET, steps_remaining=1e6, arrival_s=1.0),
    )
    cluster = ChangingCluster(nodes, jobs)
    tick = make_tick(cluster, "max_min_fairness_perf")
    run_rounds(tick, rounds=10)
    assert "k80" in cluster.types_of("a"), "the test needs 'a' on the k80 first"
    cluster.jobs = (dataclasses.replace(jobs[0], mem_gib=13.5), jobs[1])
    before = len(cluster.plans)
    run_rounds(tick)
    after = [p.placements["a"].gpu_types[0] for p in cluster.plans[before:] if "a" in p.placements]
    assert after and set(after) == {"v100"}


# ----------------------------------------------------------------------------------------------
# The simulator: the need comes from the trace


TABLE = ThroughputTable.from_dict(
    {
        "format": "hetsched-throughputs/1",
        "throughputs": {"fast-on-v100": {"1": {"v100": 4.0, "k80": 1.0}}},
    }
)
# The fastest type has the least memory here: 8 GiB on the v100, 24 GiB on the k80.
SMALL_V100 = {
    **shipped_gpu_types(),
    "v100": dataclasses.replace(shipped_gpu_types()["v100"], mem_gib=8.0),
    "k80": dataclasses.replace(shipped_gpu_types()["k80"], mem_gib=24.0),
}
SITE = SiteData(TABLE, SMALL_V100, shipped_site_energy())
NODES = (Node("a", {"v100": 1}), Node("b", {"k80": 1}))
SETTINGS = SimSettings(round_s=ROUND_S, restart_overhead_s=10.0, min_reset_interval_s=0.0)
# Placement and space-sharing policies need what this tiny trace does not give (allowed GPU
# counts, pairs); every time-fraction policy runs it. A policy that runs jobs only inside
# their accounts' quotas (batchsche) runs none here, where no account has one.
SIMULATED = sorted(
    p for p in POLICIES if "packed" not in p and not getattr(POLICIES[p], "needs_quotas", False)
)


def trace(big_mem_gib: float | None) -> list[TraceJob]:
    return [
        TraceJob("big", 0.0, "fast-on-v100", 1, 4000, mem_gib=big_mem_gib),
        TraceJob("x", 0.0, "fast-on-v100", 1, 4000),
        TraceJob("y", 500.0, "fast-on-v100", 1, 4000, mem_gib=8.0),
    ]


@pytest.mark.parametrize("policy", SIMULATED)
def test_a_simulated_job_never_runs_on_the_fastest_type_when_it_cannot_fit(policy: str) -> None:
    result = simulate(trace(12.0), NODES, get_policy(policy), SITE, SETTINGS)
    by_id = {r.job_id: r for r in result.jobs}
    assert all(r.end_s is not None for r in result.jobs), "every job finishes"
    assert by_id["big"].gpu_s.get("v100", 0.0) == 0.0
    assert by_id["big"].gpu_s["k80"] > 0


def test_without_its_need_the_same_job_would_run_on_the_fastest_type() -> None:
    result = simulate(trace(None), NODES, get_policy("max_min_fairness_perf"), SITE, SETTINGS)
    (big,) = [r for r in result.jobs if r.job_id == "big"]
    assert big.gpu_s.get("v100", 0.0) > 0
