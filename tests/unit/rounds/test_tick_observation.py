"""The tick hands each round's own observation to `enact` as a value: a backend never acts on a
view that another observation replaced, and needs to keep none between the two calls. And the
clocks behind the `Clock` port keep their promises."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from slurm_hetsched.core.model import ClusterSnapshot, Job, Node, RoundPlan
from slurm_hetsched.core.policies.max_min_fairness import MaxMinFairnessPerf
from slurm_hetsched.core.ports import EnactReport, Observation
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.data_files import shipped_throughputs
from slurm_hetsched.rounds.clocks import SimClock, SystemClock, sleeper
from slurm_hetsched.rounds.tick import Tick, TickSettings
from slurm_hetsched.store.memory import MemoryStore

RESNET = "ResNet-50 (batch size 64)"
NODES = (Node("n1", {"v100": 2}),)


@dataclass(frozen=True, slots=True, kw_only=True)
class Tagged(Observation):
    """An observation that carries what only its backend needs (live: Slurm's view)."""

    tag: int


@dataclass
class CountingCluster:
    """Each observation is tagged with its number; enact notes the tag it was handed."""

    observed: int = 0
    enacted_with: list[int] = field(default_factory=list)

    def observe(self) -> Tagged:
        self.observed += 1
        jobs = (Job(key="a", job_class=RESNET), Job(key=f"b{self.observed}", job_class=RESNET))
        snapshot = ClusterSnapshot(now_s=360.0 * self.observed, nodes=NODES, jobs=jobs)
        return Tagged(snapshot=snapshot, tag=self.observed)

    def enact(self, plan: RoundPlan, observed: Tagged) -> EnactReport:
        self.enacted_with.append(observed.tag)
        # The plan was made from this very observation: it places only jobs it showed.
        assert set(plan.placements) <= {job.key for job in observed.snapshot.jobs}
        return EnactReport()


def test_each_round_enacts_on_the_observation_it_was_planned_from() -> None:
    cluster = CountingCluster()
    site = SiteData(shipped_throughputs())
    tick = Tick(MaxMinFairnessPerf(), site, cluster, MemoryStore(), TickSettings())
    for _ in range(3):
        tick.run_round()
        assert tick.last_observation is not None
        assert cluster.enacted_with[-1] == tick.last_observation.tag == cluster.observed
    assert cluster.enacted_with == [1, 2, 3]


def test_the_simulated_clock_jumps_forward_only() -> None:
    clock = SimClock(10.0)
    clock.sleep_until(25.0)
    assert clock.now() == 25.0
    clock.sleep_until(5.0)
    assert clock.now() == 25.0, "a clock never goes back"
    sleeper(clock)(5.0)
    assert clock.now() == 30.0


def test_the_system_clock_reads_unix_time_and_does_not_wait_for_the_past() -> None:
    clock = SystemClock()
    before = time.time()
    assert before - 1 <= clock.now() <= time.time() + 1
    clock.sleep_until(clock.now() - 3600.0)  # returns at once (else this test would hang)
    target = clock.now() + 0.05
    clock.sleep_until(target)
    assert clock.now() >= target - 0.01  # whole-tick clocks on some hosts
