"""Per-job restart costs: in traces, from a class table, and as the simulated cluster charges
them (sim/restart_costs.py, sim/cluster.py, sim/run.py), on hand-computed cases."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from slurm_hetsched.core.mechanism import RoundOptions
from slurm_hetsched.core.model import GpuSlice, Node, Placement, RoundPlan
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy
from slurm_hetsched.errors import ConfigError, TraceError
from slurm_hetsched.rounds.clocks import SimClock
from slurm_hetsched.sim.cluster import SimulatedCluster
from slurm_hetsched.sim.restart_costs import (
    MAX_RESTART_S,
    check_restart_costs,
    draw_restart_costs,
    read_restart_costs,
    restart_s_of,
)
from slurm_hetsched.sim.run import SimSettings, simulate
from slurm_hetsched.sim.traces import (
    TraceJob,
    format_trace,
    parse_csv,
    parse_gavel,
    parse_jsonl,
    read_trace,
    write_trace,
)

# "fast": 4 steps/s on a V100 at 1 or 2 GPUs (8 at 2), 1 on a K80. "slow": the same, another class.
TABLE = ThroughputTable.from_dict(
    {
        "format": "hetsched-throughputs/1",
        "throughputs": {
            "fast": {"1": {"v100": 4.0, "k80": 1.0}, "2": {"v100": 8.0, "k80": 2.0}},
            "slow": {"1": {"v100": 4.0, "k80": 1.0}},
            "v100-only": {"1": {"v100": 1.0, "k80": 0.0}},
        },
    }
)
SITE = SiteData(TABLE, shipped_gpu_types(), shipped_site_energy())
# Two nodes of 2 V100s each: a move from one to the other keeps the speed, so only the restart
# cost shows in the completion time.
TWIN = (Node("a", {"v100": 2}), Node("b", {"v100": 2}))


def on(node: str, job_id: str, count: int = 1, gpu_type: str = "v100") -> Placement:
    return Placement(job_id, (GpuSlice(node, gpu_type, count),))


# ----------------------------------------------------------------------------------------------
# In traces


def test_restart_s_round_trips_in_jsonl_and_csv(tmp_path: Path) -> None:
    trace = (
        TraceJob("a", 0.0, "fast", 1, 100, restart_s=42.5),
        TraceJob("b", 1.0, "slow", 1, 100),  # none: the simulation's default
        TraceJob("c", 2.0, "slow", 1, 100, restart_s=0.0),
    )
    for suffix in (".jsonl", ".csv"):
        path = tmp_path / f"t{suffix}"
        write_trace(path, trace)
        back = read_trace(path)
        assert back == trace
        assert [j.restart_s for j in back] == [42.5, None, 0.0]
    assert '"restart_s": 42.5' in format_trace(trace, "jsonl")
    assert [j.to_job().restart_s for j in trace] == [42.5, None, 0.0]


def test_a_trace_without_restart_s_still_reads() -> None:
    (job,) = parse_csv("arrival_s,class,steps\n0,fast,10\n")
    assert job.restart_s is None
    (job,) = parse_jsonl('{"arrival_s": 0, "class": "fast", "steps": 10, "restart_s": null}')
    assert job.restart_s is None


def test_gavel_traces_carry_no_restart_cost() -> None:
    line = "fast\tcmd\tdir\t--num_steps\t0\t100\t1\t1\t-1\t0"
    (job,) = parse_gavel(line)
    assert job.restart_s is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("-1", "restart_s is -1.0; expected none or seconds from 0 to 86400 (a day)"),
        ("86401", "restart_s is 86401.0; expected none or seconds from 0 to 86400"),
        ('"soon"', "restart_s is 'soon'; expected a number"),
        ("NaN", "restart_s is nan; expected a number"),
        ("Infinity", "restart_s is inf; expected a number"),
        ("true", "restart_s is True; expected a number"),
    ],
)
def test_bad_restart_s_in_jsonl_names_the_line(value: str, expected: str) -> None:
    text = (
        '{"arrival_s": 0, "class": "fast", "steps": 1}\n'
        f'{{"arrival_s": 0, "class": "fast", "steps": 1, "restart_s": {value}}}\n'
    )
    with pytest.raises(TraceError) as info:
        parse_jsonl(text, source="t.jsonl")
    assert str(info.value).startswith("t.jsonl, line 2")
    assert expected in str(info.value)


def test_bad_restart_s_in_csv_names_the_line() -> None:
    with pytest.raises(TraceError, match=r"^t\.csv, line 3 \(job '1'\): restart_s is -5\.0"):
        parse_csv("arrival_s,class,steps,restart_s\n0,fast,1,\n0,fast,1,-5\n", source="t.csv")


# ----------------------------------------------------------------------------------------------
# The class table (--restart-costs)


def test_class_table_from_toml_and_json(tmp_path: Path) -> None:
    toml = tmp_path / "costs.toml"
    toml.write_text('fast = 120\n"ResNet-18 (batch size 32)" = 37.5\n')
    assert read_restart_costs(toml) == {"fast": 120.0, "ResNet-18 (batch size 32)": 37.5}
    json_ = tmp_path / "costs.json"
    json_.write_text('{"fast": 0, "slow": 86400}')
    assert read_restart_costs(json_) == {"fast": 0.0, "slow": 86400.0}


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("c.toml", "fast = -3\n", "restart cost(s) 'fast' = -3; expected a job class = seconds"),
        ("c.toml", 'fast = "2 min"\n', "'fast' = '2 min'"),
        ("c.toml", "fast = true\n", "'fast' = True"),
        ("c.toml", "fast = nan\n", "'fast' = nan"),
        ("c.toml", "fast = 1e9\n", "'fast' = 1000000000.0"),
        ("c.toml", "[restart]\nfast = 3\n", "['restart'] are tables"),
        ("c.toml", "fast = \n", "not valid TOML"),
        ("c.json", "[1, 2]", "a JSON list; expected an object"),
        ("c.json", '{"fast": 1,}', "not valid JSON"),
        ("c.yaml", "fast: 1", "name the file *.toml or *.json"),
    ],
)
def test_class_table_errors_name_the_file_and_entry(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_restart_costs(path)
    assert str(path) in str(info.value)
    assert expected in str(info.value)


def test_class_table_with_a_class_the_throughput_table_lacks() -> None:
    with pytest.raises(ConfigError, match=r"\['fats'\] are not in the throughput table"):
        check_restart_costs({"fast": 1.0, "fats": 2.0}, "costs.toml", TABLE.classes)


def test_simulate_refuses_an_unknown_class_in_the_table() -> None:
    trace = [TraceJob("A", 0.0, "fast", 1, 100)]
    settings = SimSettings(restart_s_by_class={"no-such-class": 30.0})
    with pytest.raises(ConfigError, match="no-such-class"):
        simulate(trace, TWIN, get_policy("fifo_perf"), SITE, settings)


# ----------------------------------------------------------------------------------------------
# Which cost a job pays: its own > its class's > the default


def test_precedence_trace_over_class_table_over_default() -> None:
    assert restart_s_of(5.0, "fast", {"fast": 60.0}, 10.0) == 5.0
    assert restart_s_of(0.0, "fast", {"fast": 60.0}, 10.0) == 0.0  # 0 is a cost, not "none"
    assert restart_s_of(None, "fast", {"fast": 60.0}, 10.0) == 60.0
    assert restart_s_of(None, "slow", {"fast": 60.0}, 10.0) == 10.0
    trace = [
        TraceJob("own", 0.0, "fast", 1, 10**6, restart_s=5.0),
        TraceJob("class", 0.0, "fast", 1, 10**6),
        TraceJob("default", 0.0, "slow", 1, 10**6),
    ]
    cluster = SimulatedCluster(trace, TWIN, TABLE, SimClock(), 10.0, {"fast": 60.0})
    reported = {job.key: job.restart_s for job in cluster.observe().snapshot.jobs}
    assert reported == {"own": 5.0, "class": 60.0, "default": 10.0}


def test_each_job_moved_once_pays_exactly_its_own_cost() -> None:
    # Three 4000-step jobs at 4 steps/s: 1000 s of work each. All start at 0 on node a and move
    # to node b (same GPUs) at 360 s. Each holds its GPUs without progress for its own cost,
    # so it ends at 1000 + cost: JCT = work + cost.
    trace = [
        TraceJob("own", 0.0, "fast", 1, 4000, restart_s=50.0),
        TraceJob("class", 0.0, "fast", 1, 4000),
        TraceJob("default", 0.0, "slow", 1, 4000),
    ]
    clock = SimClock()
    cluster = SimulatedCluster(trace, (Node("a", {"v100": 3}), Node("b", {"v100": 3})), TABLE,
                               clock, 10.0, {"fast": 20.0})  # fmt: skip
    ids = ("own", "class", "default")
    cluster.observe()
    cluster.enact(RoundPlan(round=1, start={j: on("a", j) for j in ids}))
    clock.sleep_until(360.0)
    cluster.observe()
    cluster.enact(RoundPlan(round=2, move={j: on("b", j) for j in ids}))
    for t_s in (720.0, 1080.0):
        clock.sleep_until(t_s)
        finished = cluster.observe().finished
        cluster.enact(RoundPlan(round=3, keep={j: on("b", j) for j in ids if j not in finished}))
    states = cluster.job_states()
    assert {j: states[j].end_s for j in ids} == pytest.approx(
        {"own": 1050.0, "class": 1020.0, "default": 1010.0}
    )
    assert {j: states[j].restart_gpu_s for j in ids} == pytest.approx(
        {"own": 50.0, "class": 20.0, "default": 10.0}
    )
    assert all(states[j].moves == 1 and states[j].preemptions == 1 for j in ids)


def test_lost_gpu_seconds_count_every_gpu_and_only_the_restart_actually_spent() -> None:
    # A 2-GPU job (8 steps/s) costing 100 s a move: started at 0, moved at 360 (restart until
    # 460), moved back at 400 (40 s into that restart, which the new one replaces), so it pays
    # 40 + 100 s of restarts on 2 GPUs: 280 GPU-seconds. Then stopped at 720 and restarted at
    # 1080: another 100 s x 2.
    clock = SimClock()
    job = TraceJob("J", 0.0, "fast", 2, 100_000, restart_s=100.0)
    cluster = SimulatedCluster([job], TWIN, TABLE, clock, 10.0)
    cluster.observe()
    cluster.enact(RoundPlan(round=1, start={"J": on("a", "J", 2)}))
    clock.sleep_until(360.0)
    cluster.observe()
    cluster.enact(RoundPlan(round=2, move={"J": on("b", "J", 2)}))
    clock.sleep_until(400.0)
    cluster.observe()
    cluster.enact(RoundPlan(round=3, move={"J": on("a", "J", 2)}))
    clock.sleep_until(720.0)
    cluster.observe()
    state = cluster.job_states()["J"]
    assert state.restart_gpu_s == pytest.approx(2 * (40.0 + 100.0))
    assert state.steps_left == pytest.approx(100_000 - 8 * 360 - 8 * (720 - 400 - 100))
    cluster.enact(RoundPlan(round=4, stop=("J",)))
    clock.sleep_until(1080.0)
    cluster.observe()
    cluster.enact(RoundPlan(round=5, start={"J": on("a", "J", 2)}))
    clock.sleep_until(1440.0)
    cluster.observe()
    assert state.restart_gpu_s == pytest.approx(2 * (40.0 + 100.0 + 100.0))
    assert (state.moves, state.preemptions) == (2, 3)  # a stop is a preemption, not a move


# ----------------------------------------------------------------------------------------------
# In the results


def test_results_add_up_the_restarts_each_job_paid() -> None:
    # A (own cost 45 s) has the V100 to itself until B, which only a V100 runs, arrives; under
    # "plain" moves Gavel's mechanism then shares the V100 between them round by round. Every
    # restart completes within a round here (costs < 360 s) and every job finishes, so each
    # job's loss is its preemptions x its own cost x its GPUs, and the run's is their sum.
    trace = [
        TraceJob("A", 0.0, "fast", 1, 4000, restart_s=45.0),
        TraceJob("B", 100.0, "v100-only", 1, 500),
    ]
    nodes = (Node("a", {"v100": 1}), Node("b", {"k80": 1}))
    settings = SimSettings(
        restart_overhead_s=10.0,
        min_reset_interval_s=0.0,
        round_options=RoundOptions(moves="plain"),
    )
    result = simulate(trace, nodes, get_policy("max_min_fairness_perf"), SITE, settings)
    by_id = {r.job_id: r for r in result.jobs}
    assert (by_id["A"].restart_s, by_id["B"].restart_s) == (45.0, 10.0)
    assert result.preemptions > 0  # the case is only a test if something moved
    for record in result.jobs:
        assert record.restart_gpu_s == pytest.approx(
            record.preemptions * record.restart_s * record.num_gpus
        )
    lost_s = 45.0 * by_id["A"].preemptions + 10.0 * by_id["B"].preemptions
    assert result.restart_gpu_h == pytest.approx(lost_s / 3600.0)
    assert result.moves == by_id["A"].moves + by_id["B"].moves
    assert result.moves_per_job == pytest.approx(result.moves / 2)
    data = result.to_json()
    assert data["restart_gpu_h"] == pytest.approx(lost_s / 3600.0, abs=1e-4)
    assert [j["restart_gpu_s"] for j in data["jobs"]] == pytest.approx(
        [r.restart_gpu_s for r in result.jobs]
    )


def test_p99_jct_of_two_jobs_by_hand() -> None:
    # JCTs 1000 s (A alone on the V100) and 760 s (B on the K80 from the 360 s round):
    # numpy's linear interpolation puts the 99th percentile at 760 + 0.99 x 240.
    trace = [
        TraceJob("A", 0.0, "fast", 1, 4000),
        TraceJob("B", 100.0, "slow", 1, 500),
    ]
    nodes = (Node("a", {"v100": 1}), Node("b", {"k80": 1}))
    slow_on_k80 = SiteData(
        ThroughputTable.from_dict(
            {
                "format": "hetsched-throughputs/1",
                "throughputs": {
                    "fast": {"1": {"v100": 4.0, "k80": 1.0}},
                    "slow": {"1": {"v100": 0.0, "k80": 1.0}},
                    "v100-only": {"1": {"v100": 1.0, "k80": 0.0}},
                },
            }
        ),
        shipped_gpu_types(),
        shipped_site_energy(),
    )
    settings = SimSettings(min_reset_interval_s=0.0)
    policy = get_policy("max_min_fairness_water_filling_perf")
    result = simulate(trace, nodes, policy, slow_on_k80, settings)
    assert [r.jct_s for r in result.jobs] == pytest.approx([1000.0, 760.0])
    assert result.p99_jct_s == pytest.approx(760.0 + 0.99 * 240.0)
    assert result.to_json()["p99_jct_s"] == pytest.approx(997.6)


# ----------------------------------------------------------------------------------------------
# Drawing costs per class (trace generate --restart-range)


def test_draws_one_cost_per_class_in_range_and_seeded() -> None:
    classes = [f"c{i}" for i in range(200)]
    drawn = draw_restart_costs(classes, (25.0, 250.0), np.random.default_rng(3))
    assert list(drawn) == classes
    assert all(25.0 <= s <= 250.0 for s in drawn.values())
    assert len(set(drawn.values())) > 190  # drawn, not one value for all
    assert draw_restart_costs(classes, (25.0, 250.0), np.random.default_rng(3)) == drawn
    assert draw_restart_costs(["x"], (7.0, 7.0), np.random.default_rng(0)) == {"x": 7.0}


@pytest.mark.parametrize(
    "lo_hi", [(250.0, 25.0), (-1.0, 5.0), (0.0, MAX_RESTART_S + 1), (0, math.inf)]
)
def test_bad_ranges_are_refused(lo_hi: tuple[float, float]) -> None:
    with pytest.raises(ConfigError, match="expected LO,HI seconds with 0 <= LO <= HI"):
        draw_restart_costs(["x"], lo_hi, np.random.default_rng(0))
