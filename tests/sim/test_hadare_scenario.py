"""HadarE's physical-cluster setting (sim/scenario_hadare.py): the cluster, the mixes, the
calibration to the paper's 4200 s, and the issue's done criterion at one slot length. (The full
table over three slots and the knobs is benchmarks/hadare.py's.)"""

from __future__ import annotations

import statistics

import pytest

from slurm_hetsched.core.fork_rounds import DEFAULT_STEP_EFFICIENCY
from slurm_hetsched.core.problem import table_rate
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.hadare import HadareResult
from slurm_hetsched.sim.scenario_hadare import (
    BASE_S,
    CALIBRATION_TARGET_S,
    MIXES,
    SIZE_WEIGHT,
    WORKLOADS,
    best_rate,
    calibrate_base_s,
    calibration_makespan_s,
    forking_bound_s,
    hadare_nodes,
    hadare_table,
    mix_trace,
    run_case,
)

SLOT_S = 180.0


def test_the_aws_cluster_has_one_v100_two_k80s_and_two_derived_t4s() -> None:
    nodes = hadare_nodes()
    assert sorted(t for n in nodes for t, c in n.gpus.items() for _ in range(c)) == [
        "k80", "k80", "t4", "t4", "v100",
    ]  # fmt: skip
    table = hadare_table()
    for work in WORKLOADS.values():
        v100 = table_rate(table, work.job_class, "v100", 1)
        assert table_rate(table, work.job_class, "t4", 1) == pytest.approx(0.35 * v100)


def test_each_mix_has_its_jobs_and_each_job_its_length() -> None:
    table = hadare_table()
    for name, codes in MIXES.items():
        trace = mix_trace(name, table=table)
        assert len(trace) == int(name.split("-")[1]) == len(codes)
        assert len({job.job_id for job in trace}) == len(trace)
        for job, code in zip(trace, codes, strict=True):
            alone_s = job.total_steps / best_rate(table, job.job_class)
            assert alone_s == pytest.approx(SIZE_WEIGHT[WORKLOADS[code].size] * BASE_S, rel=1e-3)
    with pytest.raises(ConfigError):
        mix_trace("M-2")
    with pytest.raises(ConfigError):
        run_case("M-1", SLOT_S, "yarn")


def test_m5_under_gavel_takes_the_papers_4200_s() -> None:
    assert calibration_makespan_s(BASE_S) == pytest.approx(CALIBRATION_TARGET_S, rel=0.02)


def test_calibration_finds_the_length_of_a_target() -> None:
    assert calibrate_base_s(4200.0, makespan=lambda b: 4.0 * b) == pytest.approx(1050.0, rel=0.01)


# The knobs assumed before the live measurement (docs/simulation.md): an averaged step worth
# 0.9 of a step, 8 s a round. The measured ones (the defaults) are tested below.
ASSUMED = {"overhead_s": 8.0, "efficiency": 0.9}


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str], HadareResult]:
    return {
        (mix, name): run_case(mix, SLOT_S, name, **ASSUMED)
        for mix in MIXES
        for name in ("hadar", "hadare")
    }


def test_hadare_beats_hadar_on_total_time_and_utilisation_at_efficiency_0_9(runs) -> None:  # type: ignore[no-untyped-def]
    """The issue's done criterion (at one slot; the benchmark has all three), at the knobs
    assumed before the live measurement."""
    time_ratio = statistics.fmean(
        runs[(m, "hadar")].result.makespan_s / runs[(m, "hadare")].result.makespan_s for m in MIXES
    )
    util_ratio = statistics.fmean(
        runs[(m, "hadare")].result.utilization / runs[(m, "hadar")].result.utilization
        for m in MIXES
    )
    assert time_ratio > 1.1
    assert util_ratio > 1.2
    # The knobs travel with every result.
    assert runs[("M-5", "hadare")].fork.efficiency == 0.9
    assert runs[("M-5", "hadar")].fork.max_copies == 1


def test_every_job_finishes_with_its_steps_and_no_run_beats_the_forking_bound(runs) -> None:  # type: ignore[no-untyped-def]
    table = hadare_table()
    bounds = {m: forking_bound_s(mix_trace(m, table=table), hadare_nodes(), table) for m in MIXES}
    for (mix, _), run in runs.items():
        assert all(r.steps_done == pytest.approx(r.total_steps) for r in run.result.jobs)
        assert run.result.makespan_s >= bounds[mix] * 0.999


def test_at_the_measured_efficiency_hadare_degrades_to_hadar_and_wins_only_where_nodes_idle(
    runs,
) -> None:  # type: ignore[no-untyped-def]
    """Nothing wins by construction: at the live figure (0.5, docs/simulation.md) a copy pays
    only when a job's other nodes add more than its fastest, i.e. nearly the whole cluster, and
    a copy never takes a node from another job's first copy. So HadarE forks M-1 (one job, four
    idle nodes) and the mixes' tails, runs as hadar elsewhere, and is never much slower than it
    (before the room rule, copies placed and then left idle made it 0.86x hadar)."""
    measured = {m: run_case(m, SLOT_S, "hadare") for m in MIXES}
    assert measured["M-5"].fork.efficiency == DEFAULT_STEP_EFFICIENCY == 0.5
    ratio = {m: runs[(m, "hadar")].result.makespan_s / measured[m].result.makespan_s for m in MIXES}
    assert ratio["M-1"] > 1.05
    assert all(r > 0.99 for r in ratio.values())
    assert 1.0 < statistics.fmean(ratio.values()) < 1.1
    assert measured["M-1"].stats.averaged_rounds > 0
    # M-12's tail never leaves one job enough spare nodes for a copy to pay.
    assert measured["M-12"].stats.averaged_rounds == 0
    # Copies the policy placed that the tracker did not start: a handful, not a node a round.
    assert all(run.stats.not_started <= 5 for run in measured.values())
    util_ratio = statistics.fmean(
        measured[m].result.utilization / runs[(m, "hadar")].result.utilization for m in MIXES
    )
    assert util_ratio > 1.0
