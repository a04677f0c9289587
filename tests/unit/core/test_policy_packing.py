"""Space sharing: a pair that beats time slicing raises the objective, one that does not
changes nothing; pair shares in the output; the sharing constraints; pairs from the table;
the two backends."""

from __future__ import annotations

import numpy as np
import pytest
from extended_problems import random_full_problem, with_fields
from problem_builders import make_job, make_problem

from slurm_hetsched.allocate import parse_problem
from slurm_hetsched.core.model import PackedPairs, Problem
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.makespan import MinTotalDurationPerf
from slurm_hetsched.core.policies.max_min_fairness import MaxMinFairnessPerf
from slurm_hetsched.core.policies.packing import (
    MaxMinFairnessPacked,
    MaxMinFairnessPerfPacked,
    MinTotalDurationPacked,
    MinTotalDurationPerfPacked,
    SharingLayout,
    packed_pairs_from_table,
)
from slurm_hetsched.data_files import shipped_throughputs

BACKENDS = ["highs", "cvxpy"]
TOL = 1e-6


def two_jobs_one_gpu(pair: tuple[float, float] | None) -> Problem:
    """Jobs a and b at 1 step/s alone on one V100, 100 steps each; `pair`: their steps/s
    while sharing it."""
    problem = make_problem([make_job("a").tput(v100=1.0), make_job("b").tput(v100=1.0)], v100=1)
    packed = None
    if pair is not None:
        packed = PackedPairs(pairs=np.array([[0, 1]]), throughput=np.array([[pair]]))
    return with_fields(problem, steps=np.array([100.0, 100.0]), packed=packed)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pair_that_beats_time_slicing_raises_the_objective(backend: str) -> None:
    # Time slicing: each job half the GPU, 0.5 steps/s. Sharing: 0.8 steps/s each.
    plain, packed = two_jobs_one_gpu(None), two_jobs_one_gpu((0.8, 0.8))
    max_min = MaxMinFairnessPerfPacked(backend=backend)
    assert max_min.allocate(plain).objective == pytest.approx(0.5, rel=TOL)
    alloc = max_min.allocate(packed)
    assert alloc.objective == pytest.approx(0.8, rel=TOL)
    assert alloc.pairs == (("a", "b"),)
    assert alloc.pair_x is not None
    np.testing.assert_allclose(alloc.pair_x, [[1.0]], atol=TOL)
    np.testing.assert_allclose(alloc.x, 0.0, atol=TOL)
    makespan = MinTotalDurationPerfPacked(backend=backend)
    assert makespan.allocate(plain).objective == pytest.approx(200.0, rel=TOL)
    assert makespan.allocate(packed).objective == pytest.approx(125.0, rel=TOL)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pair", [(0.4, 0.4), (0.7, 0.2), (0.5, 0.5)])
def test_a_pair_that_does_not_beat_time_slicing_changes_nothing(
    backend: str, pair: tuple[float, float]
) -> None:
    # Together the pair makes at most as much progress as time slicing (a + b <= 1 GPU).
    problem = two_jobs_one_gpu(pair)
    assert MaxMinFairnessPerfPacked(backend=backend).allocate(problem).objective == pytest.approx(
        MaxMinFairnessPerf(backend=backend).allocate(problem).objective, rel=TOL
    )
    assert MinTotalDurationPerfPacked(backend=backend).allocate(problem).objective == (
        pytest.approx(MinTotalDurationPerf(backend=backend).allocate(problem).objective, rel=TOL)
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pair_is_used_only_where_it_helps(backend: str) -> None:
    # Four identical jobs on one V100 and one K80, in two candidate pairs that share well on
    # the K80 (0.9 + 0.9 of a K80 each) and badly on the V100 (1 + 1, against 4 alone).
    problem = make_problem([make_job(j).tput(v100=4.0, k80=1.0) for j in "abcd"], v100=1, k80=1)
    tput = np.tile([[1.0, 1.0], [0.9, 0.9]], (2, 1, 1))  # (pair, type: v100, k80, job)
    packed = PackedPairs(pairs=np.array([[0, 1], [2, 3]]), throughput=tput)
    alloc = MaxMinFairnessPerfPacked(backend=backend).allocate(with_fields(problem, packed=packed))
    assert alloc.pair_x is not None
    np.testing.assert_allclose(alloc.pair_x[:, 0], 0.0, atol=TOL)  # no sharing on the V100
    assert alloc.pair_x[:, 1].sum() == pytest.approx(1.0, abs=TOL)  # the K80 always shared
    assert alloc.objective == pytest.approx(0.58, rel=1e-5)
    assert MaxMinFairnessPerf(backend=backend).allocate(problem).objective == pytest.approx(0.5)


def test_output_reports_pair_shares() -> None:
    out = MaxMinFairnessPerfPacked().allocate(two_jobs_one_gpu((0.8, 0.8))).to_json()
    assert out["allocation"] == {"a": {"v100": 0.0}, "b": {"v100": 0.0}}
    assert out["packed"] == [{"jobs": ["a", "b"], "allocation": {"v100": 1.0}}]
    unused = MaxMinFairnessPerfPacked().allocate(two_jobs_one_gpu((0.4, 0.4))).to_json()
    assert unused["packed"] == []


def test_gavel_names_are_the_same_policies() -> None:
    problem = two_jobs_one_gpu((0.8, 0.6))
    for gavel, ours in (
        (MaxMinFairnessPacked, MaxMinFairnessPerfPacked),
        (MinTotalDurationPacked, MinTotalDurationPerfPacked),
    ):
        a, b = gavel().allocate(problem), ours().allocate(problem)
        assert a.policy == gavel.name and b.policy == ours.name
        assert a.objective == pytest.approx(b.objective, rel=1e-12)


def sharing_violation(problem: Problem, x: np.ndarray, pair_x: np.ndarray) -> float:
    layout = SharingLayout.of(problem)
    usage = problem.num_gpus @ x + layout.pair_gpus @ pair_x
    return max(
        float((layout.time_used(x, pair_x) - 1).max()),
        float((usage - problem.capacity).max()),
        float(np.abs(pair_x[~layout.pair_allowed]).max(initial=0.0)),
    )


@pytest.mark.parametrize("seed", range(16))
def test_backends_agree_and_keep_the_sharing_constraints(seed: int) -> None:
    problem = random_full_problem(seed)
    for name in ("max_min_fairness_perf_packed", "min_total_duration_perf_packed"):
        cls = type(get_policy(name))
        highs = cls().allocate(problem)
        reference = cls(backend="cvxpy").allocate(problem)
        assert highs.objective == pytest.approx(reference.objective, rel=1e-5)
        for alloc in (highs, reference):
            assert alloc.pair_x is not None
            assert sharing_violation(problem, alloc.x, alloc.pair_x) <= 1e-6
        # Sharing is an option: it never makes the objective worse.
        unpacked = get_policy(name.replace("_packed", "")).allocate(problem)
        if name.startswith("max_min"):
            assert highs.objective >= unpacked.objective - 1e-6
        else:
            assert highs.objective <= unpacked.objective * (1 + 1e-6)


def test_pairs_from_the_shipped_table() -> None:
    table = shipped_throughputs()
    classes = ["ResNet-18 (batch size 32)", "ResNet-50 (batch size 64)", "A3C"]
    problem = make_problem(
        [
            make_job(str(m)).tput(
                **dict(zip(table.gpu_types, table.row(c, 1, table.gpu_types), strict=True))
            )
            for m, c in enumerate(classes)
        ],
        v100=1,
        p100=1,
        k80=1,
    )
    packed = packed_pairs_from_table(table, classes, problem.num_gpus, problem.gpu_types)
    assert packed is not None
    expected = table.packed_pair(classes[0], classes[1], 1, problem.gpu_types)
    index = [tuple(p) for p in packed.pairs].index((0, 1))
    np.testing.assert_allclose(packed.throughput[index], expected)
    alloc = MaxMinFairnessPerfPacked().allocate(with_fields(problem, packed=packed))
    assert alloc.objective >= MaxMinFairnessPerf().allocate(problem).objective - 1e-6


def test_what_if_problems_pair_class_jobs_from_the_table() -> None:
    problem = parse_problem(
        {
            "gpus": {"v100": 2, "k80": 2},
            "jobs": [
                {"id": "r18", "class": "ResNet-18 (batch size 32)"},
                {"id": "r50", "class": "ResNet-50 (batch size 64)"},
                {"id": "big", "class": "ResNet-50 (batch size 64)", "num_gpus": 2},
                {"id": "own", "throughput": {"v100": 2.0}, "packed": {"r18": {"v100": [1, 2]}}},
            ],
        }
    )
    assert problem.packed is not None
    pairs = {
        tuple(p): t for p, t in zip(problem.packed.pairs, problem.packed.throughput, strict=True)
    }
    # r18 + r50 from the table (1 GPU each); "big" has 2 GPUs: no partner; "own" + r18 as given.
    assert set(pairs) == {(0, 1), (0, 3)}
    table = shipped_throughputs()
    expected = table.packed_pair(
        "ResNet-18 (batch size 32)", "ResNet-50 (batch size 64)", 1, ["v100", "k80"]
    )
    np.testing.assert_allclose(pairs[(0, 1)], expected)
    np.testing.assert_allclose(pairs[(0, 3)], [[2.0, 1.0], [0.0, 0.0]])
