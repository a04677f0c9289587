"""ANDREAS's evaluation in the simulator (sim/scenarios.py): the derived T4 column, the scenario
generator's distributions, the files `hetsched trace generate --scenario` writes, and small
simulated runs whose energy and tardiness are worked out by hand.

The policy-level checks of the issue live in tests/unit/core/test_policy_andreas.py: the
hand-checkable 2-node, 3-job instance (`test_hand_instance_takes_cheapest_feasible_else_fastest`),
the fastest configuration for a job that cannot meet its due date
(`test_a_job_that_cannot_meet_its_due_date_gets_the_fastest`), capacity
(`test_andreas_never_exceeds_capacity`, hypothesis) and the same schedule for the same seed
(`test_same_seed_same_schedule_and_never_worse_than_greedy`). Here the same properties are
checked over whole simulated runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from slurm_hetsched.core.costs import SiteEnergy
from slurm_hetsched.core.model import GpuType, Node
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.andreas import Andreas
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.data_files import (
    load_throughputs,
    shipped_gpu_types,
    shipped_site_energy,
    shipped_throughputs,
)
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.command import SimulateRequest, run_simulate
from slurm_hetsched.sim.layout import cluster_nodes
from slurm_hetsched.sim.results import SimResult
from slurm_hetsched.sim.run import SimSettings, simulate
from slurm_hetsched.sim.scenarios import (
    AndreasScenario,
    andreas_classes,
    andreas_nodes,
    generate_andreas_scenario,
    run_generate_scenario,
    scenario_number,
    with_derived_gpu_type,
)
from slurm_hetsched.sim.traces import TraceJob, read_trace

# ----------------------------------------------------------------------------------------------
# The derived T4 column


def test_t4_is_the_ratio_times_v100_everywhere_and_the_rest_is_unchanged() -> None:
    base = shipped_throughputs()
    table = with_derived_gpu_type(base, "t4", "v100", 0.35)
    assert table.gpu_types == (*base.gpu_types, "t4")
    for job_class in base.classes:
        for g in base.gpu_counts(job_class):
            v100 = base.steps_per_s(job_class, "v100", g)
            assert table.steps_per_s(job_class, "t4", g) == pytest.approx(0.35 * v100)
            for t in base.gpu_types:
                assert table.steps_per_s(job_class, t, g) == base.steps_per_s(job_class, t, g)
            assert table.steps_per_s(job_class, "t4", g, consolidated=False) == pytest.approx(
                0.35 * base.steps_per_s(job_class, "v100", g, consolidated=False)
            )
    # Written in our format and read back, it is the same table.
    assert ThroughputTable.from_dict(table.to_dict()).to_dict() == table.to_dict()


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"gpu_type": "k80"}, "already has 'k80'"),
        ({"base_type": "a100"}, "has no 'a100' column"),
        ({"ratio": 0.0}, "ratio 0.0: expected a number > 0"),
        ({"ratio": math.nan}, "ratio nan"),
    ],
)
def test_derivation_errors(kwargs: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        with_derived_gpu_type(shipped_throughputs(), **kwargs)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------
# The scenario generator


@pytest.mark.parametrize(
    ("scenario", "n_nodes", "v100", "t4"),
    [(1, 10, (5, 2), (5, 1)), ("andreas2", 7, (4, 4), (3, 2)), ("2", 2, (1, 4), (1, 2))],
)
def test_nodes_are_half_v100_half_t4_sized_by_the_scenario(
    scenario: int | str, n_nodes: int, v100: tuple[int, int], t4: tuple[int, int]
) -> None:
    nodes = andreas_nodes(scenario, n_nodes)
    assert len(nodes) == n_nodes
    by_type = {t: [n for n in nodes if t in n.gpus] for t in ("v100", "t4")}
    assert (len(by_type["v100"]), {n.gpus["v100"] for n in by_type["v100"]}) == (v100[0], {v100[1]})
    assert (len(by_type["t4"]), {n.gpus["t4"] for n in by_type["t4"]}) == (t4[0], {t4[1]})
    assert len({n.name for n in nodes}) == n_nodes
    assert all(len(n.gpus) == 1 for n in nodes)


@pytest.mark.parametrize(("scenario", "n_nodes"), [("andreas3", 10), (1, 1), (1, 2.0)])
def test_bad_scenario_or_node_count(scenario: str | int, n_nodes: object) -> None:
    with pytest.raises(ConfigError, match=r"scenario|nodes is"):
        andreas_nodes(scenario, n_nodes)  # type: ignore[arg-type]


def test_scenario_names() -> None:
    assert [scenario_number(s) for s in (1, 2, "1", "andreas2", " ANDREAS1 ")] == [1, 2, 1, 2, 1]


def fastest_s(scenario: AndreasScenario, job: TraceJob) -> float:
    """The job's minimum execution time, straight from the table: a V100 is always faster than
    a T4 (0.35 x), so it is the best V100 rate at the allowed counts that fit a V100 node."""
    v100_size = max(n.gpus.get("v100", 0) for n in scenario.nodes)
    rate = max(
        scenario.table.steps_per_s(job.job_class, "v100", g)
        for g in job.allowed_gpus
        if g <= v100_size
    )
    return job.total_steps / rate


@pytest.mark.parametrize(("scenario", "n_nodes"), [(1, 20), (2, 20)])
def test_generated_trace_follows_the_paper(scenario: int, n_nodes: int) -> None:
    s = generate_andreas_scenario(scenario, n_nodes, seed=4)
    trace = s.trace
    assert len(trace) == 10 * n_nodes
    assert [j.job_id for j in trace] == [str(i) for i in range(len(trace))]
    arrival = np.array([j.arrival_s for j in trace])
    assert arrival[0] == 0.0 and np.all(np.diff(arrival) >= 0)
    widest = 2 if scenario == 1 else 4
    classes = set(andreas_classes(s.table, (1, 2) if scenario == 1 else (1, 2, 4)))
    for job in trace:
        assert job.num_gpus == 1
        assert job.allowed_gpus == ((1, 2) if widest == 2 else (1, 2, 4))
        assert job.job_class in classes
        assert job.due_s is not None
        factor = (job.due_s - job.arrival_s) / fastest_s(s, job)
        assert 1.0 - 1e-6 <= factor <= 3.0 + 1e-6
        assert 0.003 <= job.tardiness_weight <= 0.015
        # Work: a run of 0.5 to 8 hours on one V100.
        one_gpu_h = job.total_steps / s.table.steps_per_s(job.job_class, "v100", 1) / 3600
        assert 0.5 - 1e-3 <= one_gpu_h <= 8.0 + 1e-3
    factors = [(j.due_s - j.arrival_s) / fastest_s(s, j) for j in trace if j.due_s is not None]
    weights = [j.tardiness_weight for j in trace]
    # Uniform draws spread over their ranges (fixed seed: not flaky).
    assert min(factors) < 1.2 and max(factors) > 2.8
    assert min(weights) < 0.004 and max(weights) > 0.014


def test_arrival_groups_alternate_high_and_low_rates() -> None:
    n_nodes = 50
    s = generate_andreas_scenario(1, n_nodes, seed=2)
    trace = s.trace
    # Groups arrive one after the other, 10 jobs each: block k of the arrival order is group k.
    # Its rate: mean over its jobs of N x G / (run on one V100) x 1.3 / 3 (even k) or / 12.
    scaled_gaps: dict[str, list[float]] = {"high": [], "low": []}
    for k in range(n_nodes):
        block = trace[10 * k : 10 * k + 10]
        one_gpu_s = np.array(
            [j.total_steps / s.table.steps_per_s(j.job_class, "v100", 1) for j in block]
        )
        rate = float(np.mean(n_nodes * 2 / one_gpu_s)) * 1.3 / (3.0 if k % 2 == 0 else 12.0)
        before = trace[10 * k - 1].arrival_s if k else 0.0
        gaps = np.diff([before] + [j.arrival_s for j in block])
        scaled_gaps["high" if k % 2 == 0 else "low"].extend((gaps * rate)[1 if k == 0 else 0 :])
    # Exponential gaps in units of the group's mean gap: mean 1 (about 250 draws each).
    assert np.mean(scaled_gaps["high"]) == pytest.approx(1.0, abs=0.15)
    assert np.mean(scaled_gaps["low"]) == pytest.approx(1.0, abs=0.15)
    high = [trace[10 * k + 9].arrival_s - trace[10 * k].arrival_s for k in range(0, n_nodes, 2)]
    low = [trace[10 * k + 9].arrival_s - trace[10 * k].arrival_s for k in range(1, n_nodes, 2)]
    assert np.mean(low) > 2.5 * np.mean(high)  # 4x the mean gap, up to the jobs' spread


def test_same_seed_same_scenario_other_seed_other_trace() -> None:
    a = generate_andreas_scenario(2, 10, seed=7)
    b = generate_andreas_scenario(2, 10, seed=7)
    c = generate_andreas_scenario(2, 10, seed=8)
    assert a.trace == b.trace and a.nodes == b.nodes
    assert a.table.to_dict() == b.table.to_dict()
    assert a.trace != c.trace
    assert generate_andreas_scenario(2, 10, seed=7, n_jobs=30).trace != a.trace


def test_run_generate_scenario_writes_what_simulate_reads(tmp_path: Path) -> None:
    out = tmp_path / "a1.jsonl"
    message = run_generate_scenario(out, "andreas1", 4, seed=3, t4_ratio=0.4)
    nodes_path, table_path = tmp_path / "a1.nodes.toml", tmp_path / "a1.throughputs.json"
    expected = generate_andreas_scenario(1, 4, seed=3, t4_ratio=0.4)
    assert read_trace(out) == expected.trace
    assert cluster_nodes(str(nodes_path)) == expected.nodes
    table = load_throughputs(table_path)
    assert table.steps_per_s("ResNet-18 (batch size 32)", "t4", 2) == pytest.approx(
        0.4 * table.steps_per_s("ResNet-18 (batch size 32)", "v100", 2)
    )
    assert "40 jobs" in message
    command = message.splitlines()[-1].strip()
    assert command.startswith(f"hetsched simulate --trace {out} --cluster {nodes_path} ")
    assert "--power-down-idle-nodes" in command and "--seed 3" in command
    # The files run as they are through `hetsched simulate`'s code path.
    for policy in ("andreas", "fifo_exclusive"):
        request = SimulateRequest(
            trace=str(out),
            policies=(policy,),
            cluster=str(nodes_path),
            throughputs=table_path,
            settings=expected.settings(),
            progress=False,
        )
        with open(tmp_path / "out.txt", "w", encoding="utf-8") as text:
            (result,) = run_simulate(request, out=text)
        assert result.completed == 40


def test_run_generate_scenario_rejects_an_unwritable_format(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="extension"):
        run_generate_scenario(tmp_path / "a1.txt", 1, 2)
    assert not list(tmp_path.iterdir())  # nothing written


# ----------------------------------------------------------------------------------------------
# Small simulated runs checked by hand

# One class: 1 step/s on a V100, 0.5 on a T4. Node "a": 2 x V100, node "b": 1 x T4.
HAND_TABLE = ThroughputTable.from_dict(
    {"format": "hetsched-throughputs/1", "throughputs": {"c": {"1": {"v100": 1.0, "t4": 0.5}}}}
)
BASE_W, V100_BUSY_W, V100_IDLE_W, T4_BUSY_W, T4_IDLE_W = 200.0, 300.0, 40.0, 70.0, 10.0
EUR_PER_KWH = 0.172 * 1.33
HAND_SITE = SiteData(
    HAND_TABLE,
    {
        "v100": GpuType("v100", busy_w=V100_BUSY_W, idle_w=V100_IDLE_W),
        "t4": GpuType("t4", busy_w=T4_BUSY_W, idle_w=T4_IDLE_W),
    },
    SiteEnergy(electricity_per_kwh=0.172, pue=1.33, node_base_w=BASE_W),
)
HAND_NODES = (Node("a", {"v100": 2}), Node("b", {"t4": 1}))
# j1, j2: 3600 steps, due at 3000 s: late on any GPU (3600 s at best), so each takes the fastest,
# a V100. j3: 900 steps, due at 10000 s: the V100s are taken, so the T4 (1800 s, on time).
HAND_TRACE = (
    TraceJob("j1", 0.0, "c", 1, 3600, due_s=3000.0, tardiness_weight=0.01),
    TraceJob("j2", 0.0, "c", 1, 3600, due_s=3000.0, tardiness_weight=0.005),
    TraceJob("j3", 0.0, "c", 1, 900, due_s=10000.0, tardiness_weight=0.01),
)


def hand_energy_kwh(
    busy: dict[str, list[tuple[float, float]]], end_s: float, idle_nodes_on: bool
) -> float:
    """Integrate each node's power by hand from its jobs' (start, end): base + busy GPUs x
    busy_w + idle GPUs x idle_w while a GPU is busy; idle power (or nothing) otherwise."""
    spec = {"a": (2, V100_BUSY_W, V100_IDLE_W), "b": (1, T4_BUSY_W, T4_IDLE_W)}
    joules = 0.0
    for node, (gpus, busy_w, idle_w) in spec.items():
        cuts = sorted({0.0, end_s, *(t for span in busy[node] for t in span)})
        for lo, hi in itertools.pairwise(cuts):
            n_busy = sum(1 for s, e in busy[node] if s <= lo and hi <= e)
            if n_busy or idle_nodes_on:
                joules += (BASE_W + n_busy * busy_w + (gpus - n_busy) * idle_w) * (hi - lo)
    return joules / 3.6e6


def spans(result: SimResult) -> dict[str, list[tuple[float, float]]]:
    """Node -> its jobs' (start, end); one node per GPU type here, and no job moved."""
    out: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
    for r in result.jobs:
        assert r.preemptions == 0 and r.start_s is not None and r.end_s is not None
        (gpu_type,) = r.gpu_s
        out["a" if gpu_type == "v100" else "b"].append((r.start_s, r.end_s))
    return out


@pytest.mark.parametrize("idle_nodes_on", [False, True])
def test_andreas_run_energy_and_tardiness_by_hand(idle_nodes_on: bool) -> None:
    settings = SimSettings(round_s=60.0, restart_overhead_s=10.0, idle_nodes_on=idle_nodes_on)
    result = simulate(HAND_TRACE, HAND_NODES, Andreas(seed=0), HAND_SITE, settings)
    by_id = {r.job_id: r for r in result.jobs}
    # The schedule: j1 and j2 on node a from 0 to 3600 s; j3 on node b from 0 to 1800 s.
    assert {j: (r.start_s, r.end_s, dict(r.gpu_s)) for j, r in by_id.items()} == {
        "j1": (0.0, 3600.0, {"v100": 3600.0}),
        "j2": (0.0, 3600.0, {"v100": 3600.0}),
        "j3": (0.0, 1800.0, {"t4": 1800.0}),
    }
    # Energy from those times: node a 800 W for 3600 s; node b 270 W for 1800 s, then off
    # (0.935 kWh) or at 210 W until the makespan (+ 0.105 kWh).
    kwh = hand_energy_kwh(spans(result), 3600.0, idle_nodes_on)
    assert kwh == pytest.approx(1.04 if idle_nodes_on else 0.935)
    assert result.energy_kwh == pytest.approx(kwh)
    assert result.energy_cost == pytest.approx(kwh * EUR_PER_KWH)
    # Tardiness: j1 and j2 600 s late, at 0.01 and 0.005 per s.
    assert result.tardiness_cost == pytest.approx(600 * 0.01 + 600 * 0.005)
    assert [by_id[j].tardiness_s for j in ("j1", "j2", "j3")] == pytest.approx([600, 600, 0])


def test_fifo_exclusive_run_energy_and_tardiness_by_hand() -> None:
    settings = SimSettings(round_s=60.0, restart_overhead_s=10.0, idle_nodes_on=False)
    result = simulate(HAND_TRACE, HAND_NODES, get_policy("fifo_exclusive"), HAND_SITE, settings)
    by_id = {r.job_id: r for r in result.jobs}
    # One job per node: j1 takes node a (one V100; the other idles), j2 the T4 (7200 s), j3
    # waits for node a until j1 ends at 3600 s.
    assert {j: (r.start_s, r.end_s) for j, r in by_id.items()} == {
        "j1": (0.0, 3600.0),
        "j2": (0.0, 7200.0),
        "j3": (3600.0, 4500.0),
    }
    # Node a 540 W (one busy, one idle V100) for 4500 s, then off; node b 270 W for 7200 s.
    kwh = hand_energy_kwh(spans(result), 7200.0, idle_nodes_on=False)
    assert kwh == pytest.approx((540 * 4500 + 270 * 7200) / 3.6e6)
    assert result.energy_kwh == pytest.approx(kwh)
    assert result.energy_cost == pytest.approx(kwh * EUR_PER_KWH)
    assert result.tardiness_cost == pytest.approx(600 * 0.01 + 4200 * 0.005)


# ----------------------------------------------------------------------------------------------
# Whole scenarios


def small_scenario(scenario: int = 2) -> tuple[AndreasScenario, SiteData]:
    s = generate_andreas_scenario(scenario, 4, seed=1, n_jobs=24)
    return s, SiteData(s.table, shipped_gpu_types(), shipped_site_energy())


def test_andreas_on_a_scenario_finishes_every_job_within_capacity_and_repeats() -> None:
    s, site = small_scenario()
    runs = [
        simulate(s.trace, s.nodes, Andreas(max_it=50, seed=5), site, s.settings()) for _ in "ab"
    ]
    first, again = (dataclasses.replace(r, wall_s=0.0) for r in runs)
    assert first == again  # same seed, same schedule and figures
    assert first.completed == len(s.trace)
    capacity = {"v100": 2 * 4, "t4": 2 * 2}
    for sample in first.busy:
        for gpu_type, busy in sample.busy.items():
            assert 0 <= busy <= capacity[gpu_type]
    for record, job in zip(first.jobs, s.trace, strict=True):
        assert record.steps_done == pytest.approx(job.total_steps, rel=1e-9)


def test_andreas_chooses_the_gpu_count_in_the_simulator() -> None:
    # One V100 node with 2 GPUs and one job allowed 1 or 2 that meets its due date only on 2.
    table = ThroughputTable.from_dict(
        {
            "format": "hetsched-throughputs/1",
            "throughputs": {"c": {"1": {"v100": 1.0}, "2": {"v100": 1.8}}},
        }
    )
    site = SiteData(table, shipped_gpu_types(), shipped_site_energy())
    job = TraceJob("j", 0.0, "c", 1, 3600, due_s=2500.0, tardiness_weight=0.01, allowed_gpus=(1, 2))
    settings = SimSettings(round_s=60.0, idle_nodes_on=False)
    result = simulate((job,), (Node("a", {"v100": 2}),), Andreas(seed=0), site, settings)
    assert result.jobs[0].end_s == pytest.approx(2000.0)  # 3600 steps at 1.8 steps/s
    assert result.tardiness_cost == 0.0
