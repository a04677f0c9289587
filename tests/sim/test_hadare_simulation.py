"""HadarE in the simulator (sim/forking.py, sim/hadare.py): the forking cluster as job tracker,
round by round by hand, and whole runs through the shared tick."""

from __future__ import annotations

import dataclasses

import pytest

from slurm_hetsched.core.fork_rounds import ForkSettings
from slurm_hetsched.core.model import GpuSlice, Node, Placement, RoundPlan
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy
from slurm_hetsched.rounds.clocks import SimClock
from slurm_hetsched.sim.forking import ForkingCluster, copy_key
from slurm_hetsched.sim.hadare import simulate_forked
from slurm_hetsched.sim.run import SimSettings, simulate
from slurm_hetsched.sim.traces import TraceJob

TABLE = ThroughputTable.from_dict(
    {
        "format": "hetsched-throughputs/1",
        "throughputs": {
            "c": {"1": {"v100": 3.0, "k80": 2.0, "t4": 1.0}},
            "no-k80": {"1": {"v100": 3.0, "k80": 0.0, "t4": 1.0}},
            "flat": {"1": {"v100": 3.0, "k80": 2.5, "t4": 2.5}},
        },
    }
)
NODES = (Node("a", {"v100": 1}), Node("b", {"k80": 1}), Node("c", {"t4": 1}))
SITE = SiteData(TABLE, shipped_gpu_types(), shipped_site_energy())


def place(key: str, node: str, gpu_type: str) -> Placement:
    return Placement(key, (GpuSlice(node, gpu_type, 1),))


def one_round(
    fork: ForkSettings, total: int = 100_000, job_class: str = "c", restart_s: float = 0.0
) -> tuple[ForkingCluster, SimClock]:
    """A job forked into a copy per node, each started on its node for one 100 s round."""
    clock = SimClock()
    cluster = ForkingCluster(
        (TraceJob("j", 0.0, job_class, 1, total),), NODES, TABLE, clock, 100.0, fork, restart_s
    )
    seen = cluster.observe()
    where = {"a": "v100", "b": "k80", "c": "t4"}
    start = {
        job.key: place(job.key, node, where[node])
        for job, node in zip(seen.snapshot.jobs, where, strict=False)
    }
    cluster.enact(RoundPlan(1, start=start))
    clock.sleep_until(100.0)
    return cluster, clock


def test_a_forked_job_offers_one_copy_per_node_that_can_run_it() -> None:
    cluster = ForkingCluster(
        (TraceJob("j", 0.0, "c", 1, 10**6), TraceJob("k", 0.0, "no-k80", 1, 10**6)),
        NODES,
        TABLE,
        SimClock(),
        100.0,
        ForkSettings(5, overhead_s=0.0, efficiency=1.0),  # free: no room rule
    )
    keys = [job.key for job in cluster.observe().snapshot.jobs]
    assert keys == [copy_key("j", 1), copy_key("j", 2), copy_key("j", 3), "k#1", "k#2"]


def test_a_rounds_steps_are_the_sum_of_its_copies_times_the_efficiency() -> None:
    fork = ForkSettings(3, overhead_s=5.0, efficiency=0.8)
    cluster, _ = one_round(fork)
    budgets = {key: c.budget for key, c in cluster.jobs["j"].copies.items()}
    # Each copy does all it can in the 95 s left after the overhead: 3:2:1, like the rates.
    assert budgets == {"j#1": 285.0, "j#2": 190.0, "j#3": 95.0}
    seen = cluster.observe()
    job = cluster.jobs["j"]
    assert job.raw_steps == 570.0
    assert job.steps_left == pytest.approx(100_000 - 0.8 * 570)
    assert seen.ran_s == {"j#1": 100.0, "j#2": 100.0, "j#3": 100.0}
    # The overhead is charged: 5 s per copy, busy but not training.
    assert job.overhead_gpu_s == 15.0
    assert sum(iv.end_s - iv.start_s for iv in cluster.intervals) == 300.0


def test_copies_finish_together_and_the_job_ends_when_its_steps_add_up() -> None:
    # 486 steps: no copy alone, nor two, can make them in 100 - 5 s, all three can.
    fork = ForkSettings(3, overhead_s=5.0, efficiency=0.9)
    cluster, _ = one_round(fork, total=486)
    budgets = {key: c.budget for key, c in cluster.jobs["j"].copies.items()}
    assert budgets == {"j#1": 270.0, "j#2": 180.0, "j#3": 90.0}  # 540 = 486 / 0.9, 3:2:1
    seen = cluster.observe()
    job = cluster.jobs["j"]
    assert seen.finished == ("j#1", "j#2", "j#3")
    assert job.steps_left == 0.0
    assert job.end_s == pytest.approx(95.0)  # 5 s overhead + 90 s for every copy
    assert all(v == pytest.approx(95.0) for v in seen.ran_s.values())
    assert cluster.done


def test_without_forking_the_run_is_the_plain_simulators() -> None:
    trace = tuple(TraceJob(str(i), 0.0, "c", 1, 20_000 * (i + 1)) for i in range(4))
    settings = SimSettings(round_s=120.0, restart_overhead_s=10.0)
    for name in ("max_min_fairness_perf", "hadar"):
        plain = simulate(trace, NODES, get_policy(name), SITE, settings)
        forked = simulate_forked(trace, NODES, get_policy(name), SITE, settings).result
        assert forked.makespan_s == plain.makespan_s
        assert [j.end_s for j in forked.jobs] == [j.end_s for j in plain.jobs]
        assert forked.utilization == pytest.approx(plain.utilization)
        assert forked.moves == plain.moves


@pytest.mark.parametrize("policy", ["hadar", "max_min_fairness_perf"])
def test_free_forking_on_an_idle_cluster_is_about_n_copies_faster(policy: str) -> None:
    nodes = tuple(Node(f"n{i}", {"v100": 1}) for i in range(4))
    trace = (TraceJob("j", 0.0, "c", 1, 3 * 40_000),)  # 40,000 s alone on a v100
    settings = SimSettings(round_s=360.0, restart_overhead_s=10.0)
    free = ForkSettings(4, overhead_s=0.0, efficiency=1.0)
    alone = simulate_forked(trace, nodes, get_policy(policy), SITE, settings).result
    forked = simulate_forked(trace, nodes, get_policy(policy), SITE, settings, free)
    assert alone.makespan_s == pytest.approx(40_000.0)
    assert forked.result.makespan_s == pytest.approx(10_000.0, rel=0.02)
    assert forked.result.jobs[0].steps_done == 120_000
    assert forked.stats.lost_steps == 0.0


def test_with_a_low_efficiency_forking_does_not_help() -> None:
    """4 copies at 0.25 make exactly what one makes: no faster (the overhead makes it worse)."""
    nodes = tuple(Node(f"n{i}", {"v100": 1}) for i in range(4))
    trace = (TraceJob("j", 0.0, "c", 1, 3 * 10_000),)
    settings = SimSettings(round_s=360.0)
    alone = simulate_forked(trace, nodes, get_policy("hadar"), SITE, settings).result
    poor = ForkSettings(4, overhead_s=8.0, efficiency=0.25)
    forked = simulate_forked(trace, nodes, get_policy("hadar"), SITE, settings, poor)
    assert forked.result.makespan_s >= alone.makespan_s
    assert forked.stats.averaged_rounds == 0  # a fork that adds nothing is not started


def test_only_the_jobs_that_opted_in_fork() -> None:
    trace = (TraceJob("in", 0.0, "c", 1, 30_000), TraceJob("out", 0.0, "c", 1, 30_000))
    fork = ForkSettings(3, overhead_s=8.0, efficiency=0.9)  # averaging pays at these knobs
    cluster = ForkingCluster(trace, NODES, TABLE, SimClock(), 120.0, fork, forked=frozenset({"in"}))
    # Forking costs here: "in" gets a copy on the one node "out" leaves spare, not two.
    assert [j.key for j in cluster.observe().snapshot.jobs] == ["in#1", "in#2", "out"]
    policy = get_policy("max_min_fairness_perf")
    run = simulate_forked(
        trace, NODES, policy, SITE, SimSettings(round_s=120.0), fork, forked=frozenset({"in"})
    )
    assert all(r.steps_done == r.total_steps for r in run.result.jobs)
    assert run.stats.averaged_rounds > 0


def test_hetsched_simulate_forks_on_request_and_says_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from io import StringIO

    from slurm_hetsched.errors import ConfigError
    from slurm_hetsched.sim.command import SimulateRequest, run_simulate
    from slurm_hetsched.sim.traces import write_trace

    trace = tmp_path / "t.jsonl"
    write_trace(trace, (TraceJob("a", 0.0, "LM (batch size 20)", 1, 80_000),))
    request = SimulateRequest(
        trace=str(trace),
        policies=("max_min_fairness_perf",),
        cluster="v100=1,k80=2",
        gpus_per_server=1,
        settings=SimSettings(round_s=180.0),
        progress=False,
        fork=ForkSettings(3, overhead_s=8.0, efficiency=0.9),  # forking pays at these knobs
    )
    out = StringIO()
    (forked,) = run_simulate(request, out)
    assert "forking: up to 3 copies, 8 s overhead" in out.getvalue()
    (plain,) = run_simulate(dataclasses.replace(request, fork=ForkSettings()), StringIO())
    assert forked.makespan_s < plain.makespan_s
    with pytest.raises(ConfigError, match="--fork"):
        run_simulate(dataclasses.replace(request, unprofiled=("k80",)), StringIO())


@pytest.mark.parametrize("policy", ["hadar", "max_min_fairness_perf"])
def test_at_efficiency_0_5_copies_take_only_nodes_no_job_waits_for(policy: str) -> None:
    """Class "flat" forked on all three nodes makes 0.5 x 8 = 4 > 3 steps/s: it pays for one
    job alone, never against another job's first copy. While two or more jobs are left nothing
    forks; no copy is placed and then left idle; the run is faster than without forking."""
    trace = tuple(TraceJob(str(i), 0.0, "flat", 1, 30_000 * (i + 1)) for i in range(4))
    settings = SimSettings(round_s=120.0, restart_overhead_s=10.0)
    fork = ForkSettings(3, overhead_s=5.0, efficiency=0.5)
    plain = simulate_forked(trace, NODES, get_policy(policy), SITE, settings).result
    forked = simulate_forked(trace, NODES, get_policy(policy), SITE, settings, fork)
    ends = sorted(j.end_s for j in forked.result.jobs if j.end_s is not None)
    assert forked.stats.averaged_rounds > 0  # the last job alone
    assert forked.stats.not_started == 0
    assert forked.result.makespan_s < plain.makespan_s
    # The first three jobs end as without forking: only the last one alone forks.
    plain_ends = sorted(j.end_s for j in plain.jobs if j.end_s is not None)
    assert ends[:3] == plain_ends[:3]
