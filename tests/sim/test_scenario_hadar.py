"""Hadar's trace-driven simulation scenario (sim/scenario_hadar.py): the cluster, the
distributions of the generated batch, its lower bounds, and `hetsched trace generate --scenario
hadar` with the `hetsched simulate` command it prints."""

from __future__ import annotations

import shlex
from collections import Counter
from pathlib import Path

import pytest

from slurm_hetsched.cli import main
from slurm_hetsched.core.model import Node
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.data_files import shipped_throughputs
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.generate import GPU_MIXES
from slurm_hetsched.sim.layout import cluster_nodes, gpu_counts
from slurm_hetsched.sim.scenario_hadar import (
    BUCKETS,
    GPU_TYPES,
    MODELS,
    REFERENCE_GPU_TYPE,
    HadarScenario,
    batch_bounds,
    generate_hadar_scenario,
    hadar_nodes,
    job_rate,
)
from slurm_hetsched.sim.traces import TraceJob, read_trace

SEEDS = range(5)


@pytest.fixture(scope="module")
def scenarios() -> list[HadarScenario]:
    return [generate_hadar_scenario(seed) for seed in SEEDS]


def test_same_seed_same_scenario_other_seed_other_trace() -> None:
    a, b, c = (generate_hadar_scenario(s) for s in (7, 7, 8))
    assert a.trace == b.trace and a.nodes == b.nodes
    assert a.buckets == b.buckets and a.gpu_hours == b.gpu_hours
    assert a.trace != c.trace
    # A smaller batch is the same draws, cut short (each quantity has its own stream).
    assert generate_hadar_scenario(7, 30).trace == a.trace[:30]


def test_480_jobs_all_at_time_zero(scenarios: list[HadarScenario]) -> None:
    for s in scenarios:
        assert len(s.trace) == 480
        assert [j.job_id for j in s.trace] == [str(i) for i in range(480)]
        assert all(j.arrival_s == 0.0 for j in s.trace)
        assert all(j.due_s is None and j.allowed_gpus == () for j in s.trace)


def test_gpu_counts_follow_gavels_philly_mix(scenarios: list[HadarScenario]) -> None:
    counts = Counter(j.num_gpus for s in scenarios for j in s.trace)
    total = sum(counts.values())
    mix = GPU_MIXES["multi"]
    assert set(counts) == set(mix)
    for g, p in mix.items():
        assert counts[g] / total == pytest.approx(p, abs=0.03), (g, counts)


def test_every_class_runs_on_all_three_types_at_its_count(
    scenarios: list[HadarScenario],
) -> None:
    table = shipped_throughputs()
    models: Counter[str] = Counter()
    for s in scenarios:
        for job in s.trace:
            model = job.job_class.split(" (")[0]
            models[model] += 1
            assert model in MODELS
            assert job.num_gpus in table.gpu_counts(job.job_class)
            spread = job.num_gpus > 4  # wider than a node: the unconsolidated figures
            for t in GPU_TYPES:
                assert job_rate(table, job.job_class, t, job.num_gpus) > 0
                assert (
                    table.steps_per_s(job.job_class, t, job.num_gpus, consolidated=not spread) > 0
                )
            if model == "CycleGAN":  # 1-GPU figures only
                assert job.num_gpus == 1
    assert set(models) == set(MODELS)


def test_sizes_lie_in_their_buckets_and_make_the_steps(scenarios: list[HadarScenario]) -> None:
    table = shipped_throughputs()
    for s in scenarios:
        assert len(s.buckets) == len(s.gpu_hours) == len(s.trace)
        for job, bucket, hours in zip(s.trace, s.buckets, s.gpu_hours, strict=True):
            lo, hi = BUCKETS[bucket]
            assert lo <= hours <= hi
            rate = job_rate(table, job.job_class, REFERENCE_GPU_TYPE, job.num_gpus)
            expected = hours * 3600 / job.num_gpus * rate
            assert abs(job.total_steps - expected) <= max(0.5, 1 - expected)
    buckets = Counter(b for s in scenarios for b in s.buckets)
    assert set(buckets) == set(BUCKETS)
    assert all(abs(n / (480 * len(SEEDS)) - 0.25) < 0.03 for n in buckets.values())
    assert min(h for s in scenarios for h in s.gpu_hours) >= BUCKETS["small"][0] > 0


def test_nodes_are_15_of_4_gpus_20_of_each_type() -> None:
    nodes = hadar_nodes()
    assert len(nodes) == 15
    assert all(sum(n.gpus.values()) == 4 and len(n.gpus) == 1 for n in nodes)
    assert gpu_counts(nodes) == {"k80": 20, "p100": 20, "v100": 20}
    assert generate_hadar_scenario(0, 5).nodes == nodes


def test_settings_are_the_papers() -> None:
    s = generate_hadar_scenario(3, 5)
    settings = s.settings()
    assert (settings.round_s, settings.restart_overhead_s, settings.seed) == (360.0, 10.0, 3)
    assert s.settings(round_s=60.0).round_s == 60.0


def test_bad_arguments_raise_config_errors() -> None:
    with pytest.raises(ConfigError, match="n_jobs"):
        generate_hadar_scenario(0, 0)
    table = shipped_throughputs()
    no_k80 = ThroughputTable(
        gpu_types=("p100", "v100"),
        rows={key: value[1:] for key, value in table.rows.items()},
        unconsolidated={key: value[1:] for key, value in table.unconsolidated.items()},
        packed={},
    )
    assert table.gpu_types[0] == "k80"
    with pytest.raises(ConfigError, match="k80"):
        generate_hadar_scenario(0, 5, table=no_k80)


def test_batch_bounds_by_hand() -> None:
    table = shipped_throughputs()
    c = "ResNet-18 (batch size 32)"
    best = max(table.steps_per_s(c, t, 1) for t in GPU_TYPES)
    one = (TraceJob("a", 0.0, c, 1, 36_000),)
    nodes = (Node("v", {"v100": 1}), Node("p", {"p100": 1}), Node("k", {"k80": 1}))
    bounds = batch_bounds(one, nodes, table)
    assert bounds.longest_s == pytest.approx(36_000 / best)
    assert bounds.work_s == pytest.approx(36_000 / best / 3)
    assert bounds.fluid_s == pytest.approx(36_000 / best, rel=1e-6)
    # Two equal jobs on one V100 and one K80: the fluid bound shares them out, T r_v + T r_k
    # = total steps, tighter than both simple bounds.
    r_v, r_k = table.steps_per_s(c, "v100", 1), table.steps_per_s(c, "k80", 1)
    two = (TraceJob("a", 0.0, c, 1, 36_000), TraceJob("b", 0.0, c, 1, 36_000))
    bounds = batch_bounds(two, (Node("v", {"v100": 1}), Node("k", {"k80": 1})), table)
    assert bounds.fluid_s == pytest.approx(72_000 / (r_v + r_k), rel=1e-6)
    assert bounds.best_s == bounds.fluid_s > max(bounds.work_s, bounds.longest_s)


def test_full_batch_takes_tens_of_hours(scenarios: list[HadarScenario]) -> None:
    for s in scenarios[:2]:
        bounds = batch_bounds(s.trace, s.nodes, s.table)
        assert 20 * 3600 < bounds.best_s < 100 * 3600
        assert bounds.fluid_s >= max(bounds.work_s, bounds.longest_s) * (1 - 1e-6)


def test_cli_writes_the_scenario_and_a_command_simulate_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "h.jsonl"
    code = main(["trace", "generate", "--scenario", "hadar", "--seed", "2", "--jobs", "12",
                 "-o", str(out)])  # fmt: skip
    printed, err = capsys.readouterr()
    assert code == 0, err
    expected = generate_hadar_scenario(2, 12)
    assert read_trace(out) == expected.trace
    nodes_path = tmp_path / "h.nodes.toml"
    assert cluster_nodes(str(nodes_path)) == expected.nodes
    assert "wrote 12 jobs" in printed and "no policy can finish the batch in under" in printed
    command = shlex.split(printed.splitlines()[-1])
    assert command[:2] == ["hetsched", "simulate"]
    compare = command.index("--compare") + 1
    assert command[compare] == "hadar,max_min_fairness_perf,tiresias,yarn_cs"
    for flag, value in (("--round", "360"), ("--restart-overhead", "10"), ("--seed", "2"),
                        ("--trace", str(out)), ("--cluster", str(nodes_path))):  # fmt: skip
        assert command[command.index(flag) + 1] == value
    # The command's flags run as printed (with one policy of ours: the others are tested
    # where they are written).
    command[compare] = "max_min_fairness_perf"
    assert main([*command[1:], "--no-progress"]) == 0, capsys.readouterr().err
    assert "max_min_fairness_perf" in capsys.readouterr().out


def test_cli_refuses_flags_the_scenario_sets_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "h.jsonl"
    code = main(["trace", "generate", "--scenario", "hadar", "--nodes", "3", "--rate", "2",
                 "-o", str(out)])  # fmt: skip
    assert code == 1
    assert "drop --nodes, --rate" in capsys.readouterr().err
    assert main(["trace", "generate", "--scenario", "hadar", "--jobs", "0", "-o", str(out)]) == 1
    assert "--jobs 0" in capsys.readouterr().err
    assert not out.exists()


def test_other_scenarios_keep_needing_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "a.jsonl"
    assert main(["trace", "generate", "--scenario", "andreas1", "-o", str(out)]) == 1
    assert "--scenario needs --nodes N" in capsys.readouterr().err
