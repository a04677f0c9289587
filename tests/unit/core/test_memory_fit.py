"""core/memory_fit.py and where it acts: a job never goes where it cannot fit. Its memory need
(`Job.mem_gib`) rules out the GPU types with less memory, in the problem (throughput 0 there,
at every GPU count) and in the round mechanism's work conservation (never filled there)."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_hetsched.core.mechanism import plan_round
from slurm_hetsched.core.memory_fit import gives_time_where_too_small, misfits, too_small
from slurm_hetsched.core.model import (
    Allocation,
    ClusterSnapshot,
    GpuType,
    InvalidProblemError,
    Job,
    Node,
    RoundState,
)
from slurm_hetsched.core.problem import SiteData, build_problem
from slurm_hetsched.core.throughput import ThroughputTable

CATALOG = {
    "k80": GpuType("k80", mem_gib=12.0),
    "p100": GpuType("p100", mem_gib=16.0),
    "v100": GpuType("v100", mem_gib=16.0),
    "a100": GpuType("a100", mem_gib=80.0),
    "mystery": GpuType("mystery"),  # no memory size known
}
TABLE = ThroughputTable.from_dict(
    {
        "format": "hetsched-throughputs/1",
        "throughputs": {
            "c": {
                "1": {"k80": 2.0, "p100": 5.0, "v100": 10.0},
                "2": {"k80": 3.5, "p100": 9.0, "v100": 19.0},
            }
        },
    }
)
SITE = SiteData(TABLE, CATALOG)
NODES = (Node("n1", {"v100": 2}), Node("n2", {"p100": 2}), Node("n3", {"k80": 2}))


# ----------------------------------------------------------------------------------------------
# too_small, misfits


def test_a_type_is_too_small_only_when_its_memory_is_known_and_below_the_need() -> None:
    types = ["k80", "p100", "a100", "mystery", "not-in-catalog"]
    assert too_small(14.0, types, CATALOG).tolist() == [True, False, False, False, False]
    assert too_small(80.5, types, CATALOG).tolist() == [True, True, True, False, False]


def test_a_need_equal_to_the_memory_fits() -> None:
    assert too_small(12.0, ["k80"], CATALOG).tolist() == [False]
    assert too_small(12.000001, ["k80"], CATALOG).tolist() == [True]


def test_no_known_need_rules_nothing_out() -> None:
    assert too_small(None, ["k80", "v100"], CATALOG).tolist() == [False, False]
    assert too_small(14.0, [], CATALOG).shape == (0,)


def test_misfits_is_too_small_row_by_row() -> None:
    jobs = [Job("a", "c", mem_gib=14.0), Job("b", "c"), Job("c", "c", mem_gib=20.0)]
    types = ["k80", "v100", "a100"]
    assert misfits(jobs, types, CATALOG).tolist() == [
        [True, False, False],
        [False, False, False],
        [True, True, False],
    ]
    assert misfits([], types, CATALOG).shape == (0, 3)
    assert not misfits(jobs, types, {}).any(), "an empty catalog knows no memory size"


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_a_job_with_a_memory_need_that_is_not_a_positive_number_is_refused(bad: float) -> None:
    with pytest.raises(InvalidProblemError, match="memory need"):
        Job("a", "c", mem_gib=bad)


def test_an_allocation_giving_time_where_the_need_no_longer_fits_is_spotted() -> None:
    allocation = Allocation(
        ("a", "b"), ("k80", "v100"), np.array([[0.5, 0.5], [1.0, 0.0]]), 0.0, 0.0, "test"
    )
    grown = [Job("a", "c", mem_gib=14.0), Job("b", "c")]
    assert gives_time_where_too_small(allocation, grown, CATALOG)
    fine = [Job("a", "c", mem_gib=12.0), Job("b", "c")]
    assert not gives_time_where_too_small(allocation, fine, CATALOG)
    # b has no time on the v100, so its need there does not matter; on the k80 it fits.
    assert not gives_time_where_too_small(allocation, [Job("b", "c", mem_gib=12.0)], CATALOG)


# ----------------------------------------------------------------------------------------------
# build_problem


def test_a_job_gets_no_throughput_where_it_cannot_fit_and_keeps_its_rate_elsewhere() -> None:
    jobs = (Job("big", "c", mem_gib=14.0), Job("small", "c", mem_gib=4.0), Job("any", "c"))
    problem = build_problem(ClusterSnapshot(0.0, NODES, jobs), SITE)
    assert problem.gpu_types == ("k80", "p100", "v100")
    assert problem.throughput.tolist() == [[0.0, 5.0, 10.0], [2.0, 5.0, 10.0], [2.0, 5.0, 10.0]]
    assert problem.runnable[0].tolist() == [False, True, True]


def test_a_measured_rate_does_not_bring_a_ruled_out_type_back() -> None:
    job = Job("big", "c", mem_gib=14.0, measured_steps_per_s={"k80": 4.0, "v100": 20.0})
    problem = build_problem(ClusterSnapshot(0.0, NODES, (job,)), SITE)
    assert problem.throughput[0, 0] == 0.0 and problem.throughput[0, 2] > 0


def test_a_job_of_flexible_gpu_counts_gets_nothing_at_any_count_where_it_cannot_fit() -> None:
    job = Job("big", "c", num_gpus=1, allowed_gpus=(1, 2), mem_gib=14.0)
    problem = build_problem(ClusterSnapshot(0.0, NODES, (job,)), SITE)
    assert problem.throughput_at is not None
    assert problem.throughput_at[0, 0].tolist() == [0.0, 0.0], "k80 at 1 and 2 GPUs"
    assert problem.rates_at(2)[0].tolist() == [0.0, 9.0, 19.0]


def test_a_job_that_fits_nowhere_is_named() -> None:
    job = Job("huge", "c", mem_gib=100.0)
    with pytest.raises(InvalidProblemError, match="'huge'"):
        build_problem(ClusterSnapshot(0.0, NODES, (job,)), SITE)


# ----------------------------------------------------------------------------------------------
# The round mechanism's work conservation


def test_work_conservation_never_fills_a_type_too_small_for_the_job() -> None:
    # "big" is allocated the v100 only, which "hog" holds; the idle k80s are filled by work
    # conservation with whatever can run there (by the table): not with "big" when the catalog
    # says it cannot fit, as it would be without it.
    nodes = (Node("n1", {"v100": 1}), Node("n3", {"k80": 2}))
    jobs = (Job("big", "c", mem_gib=14.0, arrival_s=0.0), Job("hog", "c", arrival_s=-1.0))
    allocation = Allocation(
        ("big", "hog"), ("k80", "v100"), np.array([[0.0, 0.0], [0.0, 1.0]]), 0.0, 0.0, "test"
    )
    snapshot = ClusterSnapshot(0.0, nodes, jobs)
    state = RoundState.initial(("k80", "v100"))
    blind, _ = plan_round(allocation, state, snapshot, 360.0, table=TABLE)
    assert blind.placements["big"].gpu_types == ("k80",), "the table alone would fill it there"
    plan, _ = plan_round(allocation, state, snapshot, 360.0, table=TABLE, catalog=CATALOG)
    assert "big" not in plan.placements
    assert plan.placements["hog"].gpu_types == ("v100",)
