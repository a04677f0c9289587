"""The exact offline optimum (sim/offline_optimum.py): equal to a brute-force search over every
job's every schedule on tiny random instances, within capacities, picking the better job when
only one fits, refusing large instances, and never below a simulated policy."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest

from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.utility import Utility
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy, shipped_throughputs
from slurm_hetsched.sim.offline_optimum import (
    MAX_JOBS,
    InstanceTooLargeError,
    Optimum,
    OptimumInstance,
    OptimumJob,
    instance_from_trace,
    job_schedules,
    offline_optimum,
)
from slurm_hetsched.sim.run import simulate
from slurm_hetsched.sim.scenario_oasis import generate_small_oasis_scenario
from slurm_hetsched.sim.traces import TraceJob

SLOT_S = 100.0


def flat(umax: float) -> Utility:
    return Utility("sigmoid", umax, 50.0, 0.0)  # sharp 0: umax / 2 whenever it finishes


def brute_force(instance: OptimumInstance) -> float:
    """Every job's every per-slot choice (idle, or a node, type and GPU count), walked on its
    own (no pruning), then every combination of one schedule or none a job, within capacity."""
    per_job: list[list[tuple[float, Counter[tuple[str, str, int]]]]] = []
    for job in instance.jobs:
        first = math.ceil(job.arrival_s / instance.slot_s - 1e-9)
        counts = {job.num_gpus: job.rates, **job.other_counts}
        choices = [None] + [
            (node, t, g, counts[g][t])
            for node, gpus in instance.nodes.items()
            for t, cap in gpus.items()
            for g in counts
            if g <= cap and counts[g].get(t, 0) > 0
        ]
        schedules = []
        for plan in itertools.product(choices, repeat=max(0, instance.n_slots - first)):
            work, used = 0.0, Counter[tuple[str, str, int]]()
            for k, choice in enumerate(plan):
                if choice is None:
                    continue
                node, t, g, rate = choice
                used[(node, t, first + k)] += g
                if work + rate * instance.slot_s >= job.steps - 1e-9:
                    end = (first + k) * instance.slot_s + (job.steps - work) / rate
                    schedules.append((job.utility.value(end, job.arrival_s), used))
                    break
                work += rate * instance.slot_s
        per_job.append([(0.0, Counter()), *schedules])
    best = 0.0
    for combo in itertools.product(*per_job):
        total: Counter[tuple[str, str, int]] = Counter()
        for _, used in combo:
            total.update(used)
        if all(n <= instance.nodes[node][t] for (node, t, _), n in total.items()):
            best = max(best, sum(value for value, _ in combo))
    return best


def random_instance(seed: int) -> OptimumInstance:
    rng = np.random.default_rng(seed)
    types = ("fast", "slow")
    nodes = {
        f"n{i}": {t: int(rng.integers(1, 3)) for t in types if rng.random() < 0.7} or {"fast": 1}
        for i in range(2)
    }
    n_slots = int(rng.integers(2, 4))
    jobs = []
    for j in range(int(rng.integers(2, 4))):
        rates = {t: float(rng.uniform(0.2, 2.0)) for t in types if rng.random() < 0.8}
        kind = rng.integers(3)
        target = float(rng.uniform(50, 300))
        utility = (
            Utility("sigmoid", float(rng.uniform(1, 100)), target, float(rng.choice([0, 1, 50])))
            if kind < 2
            else Utility("deadline", float(rng.uniform(1, 100)), target)
        )
        elastic = {2: {t: 1.6 * r for t, r in rates.items()}} if rng.random() < 0.3 else {}
        jobs.append(
            OptimumJob(
                arrival_s=float(rng.choice([0.0, 30.0, 100.0])),
                steps=float(rng.uniform(20, 250)),
                num_gpus=int(rng.integers(1, 3)) if not elastic else 1,
                rates=rates,
                utility=utility,
                job_id=str(j),
                other_counts=elastic,
            )
        )
    return OptimumInstance(nodes, tuple(jobs), SLOT_S, n_slots)


def assert_feasible(instance: OptimumInstance, optimum: Optimum) -> None:
    jobs = [s.job for s in optimum.schedules]
    assert len(jobs) == len(set(jobs))  # at most one schedule a job
    held: Counter[tuple[str, str, int]] = Counter()
    for s in optimum.schedules:
        job = instance.jobs[s.job]
        assert s.first_slot * instance.slot_s >= job.arrival_s - 1e-9
        assert s.steps[-1] is not None  # ends running: completes in its last slot
        last_start = (s.first_slot + len(s.steps) - 1) * instance.slot_s
        assert last_start < s.completion_s <= last_start + instance.slot_s + 1e-6
        assert s.completion_s <= instance.horizon_s + 1e-6
        assert s.utility == pytest.approx(job.utility.value(s.completion_s, job.arrival_s))
        for node, t, slot, gpus in s.uses():
            held[(node, t, slot)] += gpus
    assert all(n <= instance.nodes[node][t] for (node, t, _), n in held.items())
    assert optimum.total_utility == pytest.approx(sum(s.utility for s in optimum.schedules))


@pytest.mark.parametrize("seed", range(40))
def test_equals_brute_force_on_tiny_random_instances(seed: int) -> None:
    instance = random_instance(seed)
    optimum = offline_optimum(instance)
    assert_feasible(instance, optimum)
    assert optimum.total_utility == pytest.approx(brute_force(instance), rel=1e-7, abs=1e-9)


def test_prefers_the_higher_utility_job_when_only_one_fits() -> None:
    jobs = tuple(
        OptimumJob(0.0, 100.0, 1, {"v100": 1.0}, flat(umax), job_id=name)
        for name, umax in (("low", 10.0), ("high", 60.0), ("mid", 30.0))
    )
    optimum = offline_optimum(OptimumInstance({"n": {"v100": 1}}, jobs, SLOT_S, 1))
    assert [jobs[s.job].job_id for s in optimum.schedules] == ["high"]
    assert optimum.total_utility == pytest.approx(30.0)


def test_completes_mid_slot_starts_after_arrival_and_switches_types() -> None:
    # 150 steps at 1/s: one full slot and half the next, from the slot after its arrival.
    job = OptimumJob(30.0, 150.0, 1, {"v100": 1.0}, Utility("deadline", 10.0, 1000.0))
    (s,) = offline_optimum(OptimumInstance({"n": {"v100": 1}}, (job,), SLOT_S, 3)).schedules
    assert (s.first_slot, s.completion_s) == (1, 250.0)
    # A time-critical job switches type between slots: k80 in slot 0 (the v100 is taken by
    # a better job), then the v100.
    urgent = OptimumJob(
        0.0, 120.0, 1, {"v100": 1.0, "k80": 0.5}, Utility("sigmoid", 50.0, 160.0, 50.0)
    )
    other = OptimumJob(0.0, 100.0, 1, {"v100": 1.0}, Utility("deadline", 100.0, 100.0))
    nodes = {"a": {"v100": 1}, "b": {"k80": 1}}
    optimum = offline_optimum(OptimumInstance(nodes, (urgent, other), SLOT_S, 3))
    chosen = {s.job: s for s in optimum.schedules}
    assert chosen[0].steps == (("b", "k80", 1), ("a", "v100", 1))
    assert chosen[0].completion_s == pytest.approx(170.0)


def test_jobs_that_cannot_finish_in_the_horizon_earn_nothing() -> None:
    slow = OptimumJob(0.0, 500.0, 1, {"k80": 1.0}, flat(80.0))
    wide = OptimumJob(0.0, 10.0, 4, {"k80": 5.0}, flat(80.0))  # no node has 4 GPUs
    instance = OptimumInstance({"n": {"k80": 2}}, (slow, wide), SLOT_S, 4)
    assert job_schedules(instance, 0) == [] and job_schedules(instance, 1) == []
    assert offline_optimum(instance) == Optimum(0.0, ())


def test_time_insensitive_schedules_are_pruned_to_undominated_ones() -> None:
    """Flat utility: a schedule with a slot it could idle and still finish is dropped."""
    job = OptimumJob(0.0, 100.0, 1, {"v100": 1.0, "k80": 0.2}, flat(10.0))
    instance = OptimumInstance({"a": {"v100": 1}, "b": {"k80": 1}}, (job,), SLOT_S, 3)
    # One v100 slot does it all; k80 slots before it (20 steps each) are never needed, and
    # three k80 slots are too few.
    expected = [(("a", "v100", 1),), (None, ("a", "v100", 1)), (None, None, ("a", "v100", 1))]
    assert sorted((s.steps for s in job_schedules(instance, 0)), key=len) == expected
    # A time-sensitive job keeps them: finishing 20 s sooner is worth something.
    sensitive = OptimumJob(0.0, 100.0, 1, job.rates, Utility("sigmoid", 10.0, 150.0, 1.0))
    instance = OptimumInstance(instance.nodes, (sensitive,), SLOT_S, 3)
    assert len(job_schedules(instance, 0)) == 7


def test_refuses_large_instances() -> None:
    job = OptimumJob(0.0, 1000.0, 1, {"v100": 1.0}, flat(1.0))
    with pytest.raises(InstanceTooLargeError, match="at most"):
        offline_optimum(OptimumInstance({"n": {"v100": 1}}, (job,) * (MAX_JOBS + 1), SLOT_S, 4))
    nodes = {f"n{i}": {"v100": 1} for i in range(6)}
    instance = OptimumInstance(nodes, (job,), SLOT_S, 12)
    with pytest.raises(InstanceTooLargeError, match="schedules"):
        job_schedules(instance, 0, limit=1000)


def test_instance_from_trace_takes_the_tables_rates_and_the_jobs_utility() -> None:
    table = shipped_throughputs()
    u = Utility("sigmoid", 40.0, 3600.0, 2.0)
    trace = (TraceJob("a", 90.0, "A3C", 1, 500, utility=u, allowed_gpus=(1, 2)),)
    s = generate_small_oasis_scenario(0, n_nodes=3)
    instance = instance_from_trace(trace, s.nodes, table, 600.0, 5)
    (job,) = instance.jobs
    assert instance.nodes == {"v100-1": {"v100": 1}, "p100-1": {"p100": 1}, "k80-1": {"k80": 1}}
    assert job.rates["v100"] == table.steps_per_s("A3C", "v100", 1)
    assert set(job.other_counts) == {2} and job.utility == u and job.arrival_s == 90.0


@pytest.mark.parametrize("seed", range(4))
def test_no_simulated_policy_beats_the_optimum(seed: int) -> None:
    """Round = slot, no restarts, one GPU a job: a simulated run is one of the optimum's
    schedule sets, so its utility within the horizon is at most the optimum's."""
    s = generate_small_oasis_scenario(seed, n_nodes=2, n_jobs=4, n_slots=5)
    instance = instance_from_trace(s.trace, s.nodes, s.table, s.round_s, s.n_slots)
    optimum = offline_optimum(instance)
    assert_feasible(instance, optimum)
    site = SiteData(s.table, shipped_gpu_types(), shipped_site_energy())
    for name in ("fifo", "fifo_perf"):
        result = simulate(s.trace, s.nodes, get_policy(name), site, s.settings())
        earned = sum(
            job.the_utility().value(r.end_s, job.arrival_s)
            for job, r in zip(s.trace, result.jobs, strict=True)
            if r.end_s is not None and r.end_s <= instance.horizon_s + 1e-6
        )
        assert earned <= optimum.total_utility * (1 + 1e-9) + 1e-9
