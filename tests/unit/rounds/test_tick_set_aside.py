"""One job never fails a round for the others: when the policy fails, the tick finds the job it
fails with (by halving), sets it aside and plans the rest; a failure no single job explains
still fails the round."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import pytest

from slurm_hetsched.core.model import (
    Allocation,
    ClusterSnapshot,
    Job,
    Node,
    Problem,
    RoundPlan,
)
from slurm_hetsched.core.policies.max_min_fairness import MaxMinFairnessPerf
from slurm_hetsched.core.ports import EnactReport, Observation
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.data_files import shipped_throughputs
from slurm_hetsched.errors import SolverError
from slurm_hetsched.rounds.tick import MAX_SET_ASIDE, Tick, TickSettings
from slurm_hetsched.store.memory import MemoryStore

RESNET = "ResNet-50 (batch size 64)"
NODES = (Node("n1", {"v100": 2}), Node("n2", {"p100": 2}), Node("n3", {"k80": 4}))


class Poisoned(MaxMinFairnessPerf):
    """Max-min fairness that fails whenever a poisoned job (or every given pair) is in it."""

    def __init__(self, poison: Collection[str] = (), pairs: Collection[frozenset[str]] = ()):
        super().__init__()
        self.poison = set(poison)
        self.pairs = list(pairs)
        self.everything_fails = False
        self.solves = 0

    def allocate(self, problem: Problem) -> Allocation:
        self.solves += 1
        ids = set(problem.job_ids)
        if (
            self.everything_fails
            or ids & self.poison
            or any(pair <= ids for pair in self.pairs)
        ):
            raise SolverError(self.name, "Empty", len(ids), len(problem.gpu_types))
        return super().allocate(problem)


class FixedCluster:
    """A cluster that always shows the same jobs and keeps the plans it is given."""

    def __init__(self, jobs: list[Job], nodes: tuple[Node, ...] = NODES) -> None:
        self.snapshot = ClusterSnapshot(now_s=1000.0, nodes=nodes, jobs=tuple(jobs))
        self.plans: list[RoundPlan] = []

    def observe(self) -> Observation:
        return Observation(self.snapshot)

    def enact(self, plan: RoundPlan, observed: Observation) -> EnactReport:
        self.plans.append(plan)
        return EnactReport()


def jobs(n: int) -> list[Job]:
    return [Job(key=f"j{i}", job_class=RESNET, arrival_s=float(i)) for i in range(n)]


def tick(policy: Poisoned, cluster: FixedCluster) -> Tick:
    return Tick(policy, SiteData(shipped_throughputs()), cluster, MemoryStore(), TickSettings())


def test_a_job_the_policy_fails_with_is_set_aside_and_the_rest_planned() -> None:
    policy = Poisoned(poison={"j5"})
    cluster = FixedCluster(jobs(8))
    record = tick(policy, cluster).run_round()
    assert list(record.plan.set_aside) == ["j5"]
    assert "fails with this job alone" in record.plan.set_aside["j5"]
    assert "j5" not in record.allocation.job_ids and len(record.allocation.job_ids) == 7
    assert "j5" not in record.plan.placements and len(record.plan.placements) == 7
    assert cluster.plans == [record.plan], "the round went on and was enacted"
    assert policy.solves <= 2 + 2 * 3 + 2, "found by halving, not one solve per job"


def test_several_bad_jobs_are_all_set_aside() -> None:
    policy = Poisoned(poison={"j1", "j6"})
    record = tick(policy, FixedCluster(jobs(8))).run_round()
    assert sorted(record.plan.set_aside) == ["j1", "j6"]
    assert len(record.allocation.job_ids) == 6


def test_a_failure_that_needs_two_jobs_sets_the_newest_aside() -> None:
    policy = Poisoned(pairs=[frozenset({"j0", "j7"})])
    record = tick(policy, FixedCluster(jobs(8))).run_round()
    assert list(record.plan.set_aside) == ["j7"]
    assert "together" in record.plan.set_aside["j7"]


def test_a_solver_that_fails_on_everything_fails_the_round() -> None:
    policy = Poisoned()
    policy.everything_fails = True
    cluster = FixedCluster(jobs(6))
    with pytest.raises(SolverError):
        tick(policy, cluster).run_round()
    assert cluster.plans == [], "nothing enacted, no job blamed"


def test_at_most_a_few_jobs_are_set_aside_in_one_round() -> None:
    policy = Poisoned(poison={f"j{i}" for i in range(MAX_SET_ASIDE + 1)})
    with pytest.raises(SolverError):
        tick(policy, FixedCluster(jobs(MAX_SET_ASIDE + 4))).run_round()


def test_the_gpus_a_set_aside_job_runs_on_stay_busy() -> None:
    """Set aside while it runs (the cluster hands it back, it keeps running there): its GPUs
    are not offered to the others in the same round."""
    policy = Poisoned()
    cluster = FixedCluster(jobs(3))
    t = tick(policy, cluster)
    first = t.run_round()
    on_v100 = min(k for k, p in first.plan.placements.items() if p.gpu_types == ("v100",))
    policy.poison = {on_v100}
    cluster.snapshot = dataclasses.replace(cluster.snapshot, jobs=tuple(jobs(5)))  # recompute
    second = t.run_round()
    assert list(second.plan.set_aside) == [on_v100]
    slices = [s for p in second.plan.placements.values() for s in p.slices]
    on_n1 = sum(s.count for s in slices if s.node == "n1")
    assert on_n1 <= 2 - first.plan.placements[on_v100].num_gpus


def test_a_job_no_type_has_room_for_waits_and_is_not_blamed() -> None:
    """GPUs taken by jobs outside our control: a 2-GPU job that fits nowhere now waits; the
    round plans the others and sets nobody aside."""
    nodes = (Node("n1", {"v100": 2}, {"v100": 1}), Node("n2", {"p100": 2}, {"p100": 2}))
    wide = Job(key="wide", job_class=RESNET, num_gpus=2, arrival_s=0.0)
    cluster = FixedCluster([wide, *jobs(1)], nodes)
    record = tick(Poisoned(), cluster).run_round()
    assert record.plan.set_aside == {} and sorted(record.plan.placements) == ["j0"]
    assert record.allocation.job_ids == ("j0",)


def test_no_free_gpu_at_all_is_an_empty_round_not_a_failure() -> None:
    nodes = (Node("n1", {"v100": 2}, {"v100": 2}),)
    record = tick(Poisoned(), FixedCluster(jobs(3), nodes)).run_round()
    assert record.plan.placements == {} and record.plan.set_aside == {}
