"""The simulator end to end on small traces: hand-computed completion times, conservation of
steps and GPU time, the restart overhead, determinism, and clear errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from slurm_hetsched.core.model import GpuSlice, Node, Placement, RoundPlan
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy, shipped_throughputs
from slurm_hetsched.errors import TraceError
from slurm_hetsched.rounds.clocks import SimClock
from slurm_hetsched.sim.cluster import SimulatedCluster
from slurm_hetsched.sim.generate import generate_trace
from slurm_hetsched.sim.layout import nodes_from_counts
from slurm_hetsched.sim.run import SimSettings, simulate
from slurm_hetsched.sim.traces import TraceJob, read_shipped_trace

# Class "fast-on-v100": 4 steps/s on a V100, 1 on a K80. "k80-only": 1 step/s on a K80 only.
TABLE = ThroughputTable.from_dict(
    {
        "format": "hetsched-throughputs/1",
        "throughputs": {
            "fast-on-v100": {"1": {"v100": 4.0, "k80": 1.0}},
            "k80-only": {"1": {"v100": 0.0, "k80": 1.0}},
            "v100-only": {"1": {"v100": 1.0, "k80": 0.0}},
        },
    }
)
SITE = SiteData(TABLE, shipped_gpu_types(), shipped_site_energy())
TWO_NODES = (Node("a", {"v100": 1}), Node("b", {"k80": 1}))
NO_RESET_WAIT = SimSettings(round_s=360.0, restart_overhead_s=10.0, min_reset_interval_s=0.0)


def job(job_id: str, cls: str, steps: int, arrival_s: float = 0.0, **kw: object) -> TraceJob:
    return TraceJob(job_id, arrival_s, cls, 1, steps, **kw)  # type: ignore[arg-type]


def run(trace: list[TraceJob], policy: str = "max_min_fairness_water_filling_perf", **kw: object):
    settings = kw.pop("settings", NO_RESET_WAIT)
    return simulate(trace, TWO_NODES, get_policy(policy), SITE, settings, **kw)  # type: ignore[arg-type]


def test_two_jobs_on_two_gpus_finish_at_hand_computed_times() -> None:
    # A alone at t=0 takes the V100 (4 steps/s). B arrives at 100 s and can only use the K80;
    # it starts at the next round (360 s) and runs 500 steps at 1 step/s: ends at 860 s.
    # A is never moved (lease extension), so it pays no overhead: 4000 / 4 = 1000 s, mid-round.
    result = run([job("A", "fast-on-v100", 4000), job("B", "k80-only", 500, arrival_s=100.0)])
    by_id = {r.job_id: r for r in result.jobs}
    assert by_id["A"].end_s == pytest.approx(1000.0)
    assert by_id["B"].start_s == pytest.approx(360.0)
    assert by_id["B"].end_s == pytest.approx(860.0)
    assert result.avg_jct_s == pytest.approx((1000.0 + 760.0) / 2)
    assert result.makespan_s == pytest.approx(1000.0)
    assert result.preemptions == 0
    assert result.completed == 2
    # GPU time: A held its V100 1000 s, B its K80 500 s, of 2 GPUs x 1000 s.
    assert result.utilization == pytest.approx(1500.0 / 2000.0)
    assert by_id["A"].gpu_s == pytest.approx({"v100": 1000.0})


def test_every_job_runs_exactly_its_steps_and_gpu_time_fits_capacity() -> None:
    table = shipped_throughputs()
    site = SiteData(table, shipped_gpu_types(), shipped_site_energy())
    nodes = nodes_from_counts({"v100": 8, "p100": 8, "k80": 8})
    trace = generate_trace(40, seed=3, table=table, rate_per_hour=8.0, mix="multi")
    result = simulate(trace, nodes, get_policy("max_min_fairness_perf"), site)
    assert result.completed == len(trace)
    for record, traced in zip(result.jobs, trace, strict=True):
        assert record.steps_done == pytest.approx(traced.total_steps, rel=1e-9)
        assert record.end_s is not None and record.end_s > record.arrival_s
    for sample in result.busy:
        for gpu_type, busy in sample.busy.items():
            assert 0 <= busy <= result.cluster[gpu_type]
    used = sum(sum(r.gpu_s.values()) for r in result.jobs)
    assert used <= sum(result.cluster.values()) * result.makespan_s + 1e-6
    assert 0 < result.utilization <= 1


def test_restart_overhead_is_charged_once_per_move() -> None:
    clock = SimClock()
    cluster = SimulatedCluster([job("A", "fast-on-v100", 100_000)], TWO_NODES, TABLE, clock, 10.0)
    on_v100 = Placement("A", (GpuSlice("a", "v100", 1),))
    on_k80 = Placement("A", (GpuSlice("b", "k80", 1),))
    cluster.observe()
    cluster.enact(RoundPlan(round=1, start={"A": on_v100}))  # first start: no overhead
    clock.sleep_until(360.0)
    assert cluster.observe().ran_s == {"A": 360.0}
    cluster.enact(RoundPlan(round=2, move={"A": on_k80}))  # a move: 10 s without progress
    clock.sleep_until(365.0)  # observed mid-overhead: nothing done yet, 5 s still owed
    cluster.observe()
    clock.sleep_until(720.0)
    cluster.observe()
    cluster.enact(RoundPlan(round=3, keep={"A": on_k80}))  # kept: no overhead
    clock.sleep_until(1080.0)
    cluster.observe()
    state = cluster.job_states()["A"]
    assert state.steps_left == pytest.approx(100_000 - 4 * 360 - 1 * (360 - 10) - 1 * 360)
    assert state.preemptions == 1
    assert state.gpu_s == pytest.approx({"v100": 360.0, "k80": 720.0})


def test_a_stopped_job_pays_the_overhead_when_it_restarts() -> None:
    clock = SimClock()
    cluster = SimulatedCluster([job("A", "fast-on-v100", 100_000)], TWO_NODES, TABLE, clock, 10.0)
    on_v100 = Placement("A", (GpuSlice("a", "v100", 1),))
    cluster.observe()
    cluster.enact(RoundPlan(round=1, start={"A": on_v100}))
    clock.sleep_until(360.0)
    cluster.observe()
    cluster.enact(RoundPlan(round=2, stop=("A",)))
    clock.sleep_until(720.0)
    assert cluster.observe().ran_s == {}
    cluster.enact(RoundPlan(round=3, start={"A": on_v100}))
    clock.sleep_until(1080.0)
    cluster.observe()
    state = cluster.job_states()["A"]
    assert state.steps_left == pytest.approx(100_000 - 4 * 360 - 4 * 350)
    assert state.preemptions == 1


def test_moves_cost_time_so_overhead_lengthens_the_run() -> None:
    # A and C both prefer the V100; the mechanism alternates them, so they move every round.
    trace = [job("A", "fast-on-v100", 20_000), job("C", "fast-on-v100", 20_000)]
    free = run(trace, settings=SimSettings(restart_overhead_s=0.0, min_reset_interval_s=0.0))
    paid = run(trace, settings=SimSettings(restart_overhead_s=30.0, min_reset_interval_s=0.0))
    assert free.preemptions > 0
    assert paid.makespan_s > free.makespan_s


def test_same_seed_same_result_and_json_round_trips() -> None:
    table = shipped_throughputs()
    site = SiteData(table, shipped_gpu_types(), shipped_site_energy())
    nodes = nodes_from_counts({"v100": 8, "p100": 8, "k80": 8})
    trace = generate_trace(30, seed=5, table=table, rate_per_hour=6.0, due_factor=(1.2, 3.0))
    runs = [
        simulate(trace, nodes, get_policy("andreas"), site, SimSettings(seed=1)).to_json()
        for _ in range(2)
    ]
    for r in runs:
        r.pop("wall_s")
    assert runs[0] == runs[1]
    assert json.loads(json.dumps(runs[0]))["completed"] == 30


def test_energy_counts_busy_and_idle_power_of_the_whole_cluster() -> None:
    result = run([job("A", "fast-on-v100", 3600)])  # A alone: V100 busy 900 s, K80 idle
    gpu = shipped_gpu_types()
    site = shipped_site_energy()
    watts_v100_node = site.node_base_w + gpu["v100"].busy_w  # type: ignore[operator]
    watts_k80_node = site.node_base_w + gpu["k80"].idle_w  # type: ignore[operator]
    expected_kwh = (watts_v100_node + watts_k80_node) * 900.0 / 3.6e6
    assert result.energy_kwh == pytest.approx(expected_kwh)
    assert result.energy_cost == pytest.approx(expected_kwh * site.pue * site.electricity_per_kwh)


def test_tardiness_is_weight_times_lateness() -> None:
    # B (K80 only, 500 steps) arrives at 0 with A; both start at once: B ends at 500 s.
    trace = [
        job("A", "fast-on-v100", 400),
        job("B", "k80-only", 500, due_s=400.0, tardiness_weight=2.0),
    ]
    result = run(trace)
    late = {r.job_id: r for r in result.jobs}["B"]
    assert late.tardiness_s == pytest.approx(100.0)
    assert result.tardiness_cost == pytest.approx(200.0)


def test_a_job_no_gpu_of_the_cluster_can_run_is_named() -> None:
    with pytest.raises(TraceError, match="'X'"):
        simulate(
            [job("X", "v100-only", 10)],
            (Node("b", {"k80": 1}),),
            get_policy("max_min_fairness_perf"),
            SITE,
        )


def test_gavel_trace_on_gavels_physical_cluster_completes_every_job() -> None:
    table = shipped_throughputs()
    site = SiteData(table, shipped_gpu_types(), shipped_site_energy())
    trace = read_shipped_trace("small_test", table=table)
    nodes = nodes_from_counts({"v100": 8, "p100": 16, "k80": 24})
    result = simulate(trace, nodes, get_policy("max_min_fairness_perf"), site)
    assert result.completed == len(trace)
    assert math.isfinite(result.avg_jct_s)
    assert np.all([r.jct_s and r.jct_s > 0 for r in result.jobs])


def test_tick_adapts_the_round_options_to_its_policy() -> None:
    from slurm_hetsched.core.mechanism import RoundOptions
    from slurm_hetsched.rounds.tick import Tick, TickSettings
    from slurm_hetsched.store.memory import MemoryStore

    def options(policy: str, base: RoundOptions) -> RoundOptions:
        cluster = SimulatedCluster([], TWO_NODES, TABLE, SimClock())
        settings = TickSettings(round_options=base)
        return Tick(get_policy(policy), SITE, cluster, MemoryStore(), settings).round_options

    aware = options("max_min_fairness_perf", RoundOptions(seed=7))
    assert (aware.queue, aware.shuffle, aware.work_conserving, aware.seed) == (
        "per_type",
        False,
        True,
        7,
    )
    assert options("max_min_fairness", RoundOptions()).shuffle  # agnostic: shuffled types
    assert not options("fifo_perf", RoundOptions()).work_conserving  # FIFO never fills
    assert not options("max_min_fairness_perf", RoundOptions(work_conserving=False)).work_conserving


def test_a_stay_on_the_same_gpus_is_one_interval_and_a_move_starts_another() -> None:
    clock = SimClock()
    trace = [job("A", "fast-on-v100", 100_000), job("B", "k80-only", 100, arrival_s=10.0)]
    cluster = SimulatedCluster(trace, TWO_NODES, TABLE, clock, 0.0)
    on_v100 = Placement("A", (GpuSlice("a", "v100", 1),))
    on_k80 = Placement("A", (GpuSlice("b", "k80", 1),))
    first = cluster.observe().snapshot
    assert [j.key for j in first.jobs] == ["A"]
    cluster.enact(RoundPlan(round=1, start={"A": on_v100}))
    for round_, until in ((2, 360.0), (3, 720.0)):
        clock.sleep_until(until)
        snapshot = cluster.observe().snapshot
        # The snapshot reports the steps left as they are now, for every active job.
        assert snapshot.jobs[0].steps_remaining == pytest.approx(100_000 - 4 * until)
        assert [j.key for j in snapshot.jobs] == ["A", "B"]
        assert snapshot.jobs[0].job_class == "fast-on-v100"  # the rest of the job is kept
        cluster.enact(RoundPlan(round=round_, keep={"A": on_v100}))
    clock.sleep_until(1080.0)
    cluster.observe()
    cluster.enact(RoundPlan(round=4, move={"A": on_k80}))
    clock.sleep_until(1440.0)
    cluster.observe()
    spans = [(i.job_id, i.node, i.start_s, i.end_s) for i in cluster.intervals]
    # Three rounds on the V100 are one interval; the move opens a second; in order of start.
    assert spans == [("A", "a", 0.0, 1080.0), ("A", "b", 1080.0, 1440.0)]


def test_a_finished_job_leaves_the_snapshot_and_its_interval_ends_at_its_last_step() -> None:
    clock = SimClock()
    cluster = SimulatedCluster([job("A", "fast-on-v100", 400)], TWO_NODES, TABLE, clock, 0.0)
    cluster.observe()
    cluster.enact(RoundPlan(round=1, start={"A": Placement("A", (GpuSlice("a", "v100", 1),))}))
    clock.sleep_until(360.0)
    observed = cluster.observe()
    assert observed.finished == ("A",)
    assert observed.snapshot.jobs == ()
    assert [(i.start_s, i.end_s) for i in cluster.intervals] == [(0.0, 100.0)]
