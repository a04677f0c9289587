"""OASiS's evaluation workloads (sim/scenario_oasis.py): the cluster, determinism per seed, the
arrival processes' rates, the utility mix, the small instances for the offline optimum, the
trace written for `hetsched simulate`, and a run through the simulator with `fifo`."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData, table_rate
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.layout import cluster_nodes, gpu_counts
from slurm_hetsched.sim.run import simulate
from slurm_hetsched.sim.scenario_oasis import (
    GPU_MIX,
    GPU_TYPES,
    KIND_MIX,
    RUN_MINUTES,
    SHARPNESS,
    TARGET_FACTOR,
    UMAX_RANGE,
    OasisScenario,
    fastest_rate,
    generate_oasis_scenario,
    generate_small_oasis_scenario,
    write_oasis_scenario,
)
from slurm_hetsched.sim.traces import read_trace


@pytest.fixture(scope="module")
def big() -> OasisScenario:
    return generate_oasis_scenario(3, 4000, 10.0)


def test_same_seed_same_scenario_other_seed_other_trace() -> None:
    a, b, c = (generate_oasis_scenario(s, 50, 6.0) for s in (7, 7, 8))
    assert a.trace == b.trace and a.nodes == b.nodes and a.kinds == b.kinds
    assert a.trace != c.trace
    bursty = generate_oasis_scenario(7, 50, 6.0, "bursty")
    assert bursty == generate_oasis_scenario(7, 50, 6.0, "bursty")
    # The same jobs at other times: each quantity has its own stream.
    assert [j.arrival_s for j in bursty.trace] != [j.arrival_s for j in a.trace]
    strip = [(j.job_class, j.num_gpus, j.total_steps, j.utility) for j in a.trace]
    assert strip == [(j.job_class, j.num_gpus, j.total_steps, j.utility) for j in bursty.trace]


def test_cluster_is_eight_nodes_of_four_gpus_of_one_type() -> None:
    s = generate_oasis_scenario(0, 5)
    assert len(s.nodes) == 8
    assert all(len(n.gpus) == 1 and sum(n.gpus.values()) == 4 for n in s.nodes)
    assert gpu_counts(s.nodes) == {"v100": 8, "p100": 12, "k80": 12}
    settings = s.settings()
    assert (settings.round_s, settings.restart_overhead_s, settings.seed) == (360.0, 10.0, 0)


@pytest.mark.parametrize(("arrivals", "tolerance"), [("poisson", 0.04), ("bursty", 0.08)])
def test_arrival_rate_is_the_one_asked(arrivals: str, tolerance: float) -> None:
    """Jobs per hour over the generated trace (not wall time), averaged over seeds."""
    for rate in (2.0, 12.0):
        measured = []
        for seed in range(5):
            trace = generate_oasis_scenario(seed, 3000, rate, arrivals).trace
            times = [j.arrival_s for j in trace]
            assert times == sorted(times) and times[0] == 0.0
            measured.append((len(trace) - 1) / (times[-1] / 3600.0))
        assert np.mean(measured) == pytest.approx(rate, rel=tolerance)


def test_bursty_arrivals_come_in_batches() -> None:
    """The same mean rate, but gaps far more variable than Poisson's (coefficient of
    variation 1): many near-zero gaps within a batch, long ones between batches."""

    def gap_cv(arrivals: str) -> float:
        gaps = np.diff([j.arrival_s for j in generate_oasis_scenario(1, 3000, 6.0, arrivals).trace])
        return float(np.std(gaps) / np.mean(gaps))

    assert gap_cv("poisson") == pytest.approx(1.0, abs=0.1)
    assert gap_cv("bursty") > 1.5


def test_utility_kinds_follow_the_mix(big: OasisScenario) -> None:
    counts = Counter(big.kinds)
    for kind, share in KIND_MIX.items():
        assert counts[kind] / len(big.kinds) == pytest.approx(share, abs=0.03)
    for job, kind in zip(big.trace, big.kinds, strict=True):
        u = job.utility
        assert u is not None and u.kind == "sigmoid" and u.target_s is not None
        lo, hi = SHARPNESS[kind]
        assert lo - 1e-4 <= u.sharpness_per_h <= hi + 1e-4
        assert UMAX_RANGE[0] <= u.max_utility <= UMAX_RANGE[1]
        fastest_s = job.total_steps / fastest_rate(big.table, job.job_class, job.num_gpus)
        factor = u.target_s / fastest_s
        assert TARGET_FACTOR[0] - 0.01 <= factor <= TARGET_FACTOR[1] + 0.01
    sharp = [
        j.the_utility().sharpness_per_h
        for j, k in zip(big.trace, big.kinds, strict=True)
        if k == "sensitive"
    ]
    # Log-uniform over two decades: about half below 0.1 per hour.
    assert np.mean(np.array(sharp) < 0.1) == pytest.approx(0.5, abs=0.05)


def test_jobs_gpu_counts_classes_and_run_times(big: OasisScenario) -> None:
    counts = Counter(j.num_gpus for j in big.trace)
    for g, p in GPU_MIX.items():
        assert counts[g] / len(big.trace) == pytest.approx(p, abs=0.03)
    minutes = []
    for job in big.trace:
        assert all(table_rate(big.table, job.job_class, t, job.num_gpus) > 0 for t in GPU_TYPES)
        minutes.append(job.total_steps / fastest_rate(big.table, job.job_class, job.num_gpus) / 60)
    assert RUN_MINUTES[0] - 0.1 <= min(minutes) and max(minutes) <= RUN_MINUTES[1] + 0.1
    # Log-uniform: the median near the geometric mean of the bounds.
    assert np.median(minutes) == pytest.approx(math.sqrt(RUN_MINUTES[0] * RUN_MINUTES[1]), rel=0.1)


def test_small_scenario_for_the_optimum() -> None:
    s = generate_small_oasis_scenario(4, n_nodes=4, n_jobs=6, n_slots=8, slot_s=1200.0)
    assert [n.gpus for n in s.nodes] == [{"v100": 1}, {"p100": 1}, {"k80": 1}, {"v100": 1}]
    assert len({n.name for n in s.nodes}) == 4
    assert s.n_slots == 8 and s.settings().round_s == 1200.0
    assert s.settings().restart_overhead_s == 0.0
    for job in s.trace:
        assert job.num_gpus == 1
        assert job.arrival_s % 1200.0 == 0 and job.arrival_s <= 4 * 1200.0
        slots = job.total_steps / fastest_rate(s.table, job.job_class, 1) / 1200.0
        assert 0.49 <= slots <= 2.01


def test_bad_parameters_are_named() -> None:
    for kwargs, word in (
        ({"n_jobs": 0}, "n_jobs"),
        ({"rate_per_hour": 0.0}, "rate_per_hour"),
        ({"arrivals": "steady"}, "arrivals"),
    ):
        with pytest.raises(ConfigError, match=word):
            generate_oasis_scenario(**kwargs)
    with pytest.raises(ConfigError, match="n_slots"):
        generate_small_oasis_scenario(n_slots=1)


def test_written_trace_reads_back_and_names_the_simulation(tmp_path: Path) -> None:
    s = generate_oasis_scenario(2, 20, 6.0, "bursty")
    out = tmp_path / "oasis.jsonl"
    command = write_oasis_scenario(out, s)
    assert read_trace(out) == s.trace
    nodes_file = tmp_path / "oasis.nodes.toml"
    assert cluster_nodes(str(nodes_file), 4) == s.nodes
    assert command.startswith(f"hetsched simulate --trace {out} --cluster {nodes_file}")
    assert "--round 360 --restart-overhead 10 --seed 2" in command


def test_fifo_finishes_every_job_and_earns_utility() -> None:
    s = generate_oasis_scenario(5, 30, 12.0, "bursty")
    site = SiteData(s.table, shipped_gpu_types(), shipped_site_energy())
    result = simulate(s.trace, s.nodes, get_policy("fifo"), site, s.settings())
    assert result.completed == len(s.trace)
    assert all(r.end_s is not None for r in result.jobs)
    ceiling = sum(j.the_utility().max_utility for j in s.trace)
    assert 0 < result.total_utility < ceiling
