"""Minimum makespan: the one-LP form against Gavel's bisection, the makespan the allocation
implies, finished jobs, the agnostic baseline, and the two backends."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from extended_problems import random_full_problem, with_fields
from problem_builders import gavel_example, make_job, make_problem

from slurm_hetsched.core.model import InvalidProblemError, Problem
from slurm_hetsched.core.policies.base import base_constraints, rate_matrix, rates
from slurm_hetsched.core.policies.makespan import (
    MinTotalDuration,
    MinTotalDurationPerf,
    makespan_s,
)

BACKENDS = ["highs", "cvxpy"]


def bisected_makespan(problem: Problem, rel_tol: float = 1e-7) -> float:
    """Gavel's appendix A.1: bisection on M over "every job finishes by M" feasibility LPs."""
    steps = problem.require("steps", "test")
    throughput = rate_matrix(problem)
    left = steps > 0

    def feasible(makespan: float) -> bool:
        x = cp.Variable(throughput.shape, nonneg=True)
        rate = cp.sum(cp.multiply(throughput, x), axis=1)
        program = cp.Problem(
            cp.Minimize(0),
            [rate[np.flatnonzero(left)] >= steps[left] / makespan, *base_constraints(x, problem)],
        )
        program.solve(solver="HIGHS")
        return bool(program.status == cp.OPTIMAL)

    low, high = 1e-3, 1e9
    while high - low > rel_tol * high:
        mid = np.sqrt(low * high) if high > 4 * low else (low + high) / 2
        low, high = (low, mid) if feasible(mid) else (mid, high)
    return high


def gavel_with_steps() -> Problem:
    return with_fields(gavel_example(), steps=np.array([4000.0, 3000.0, 2000.0]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_lp_gives_the_bisection_makespan(backend: str) -> None:
    problem = gavel_with_steps()
    alloc = MinTotalDurationPerf(backend=backend).allocate(problem)
    assert alloc.objective == pytest.approx(bisected_makespan(problem), rel=1e-6)
    assert alloc.solves == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_makespan_is_the_one_the_allocation_implies(backend: str) -> None:
    problem = gavel_with_steps()
    alloc = MinTotalDurationPerf(backend=backend).allocate(problem)
    implied = np.max(problem.steps / (problem.throughput * alloc.x).sum(axis=1))
    assert alloc.objective == pytest.approx(implied, rel=1e-12)


def test_a_hand_solved_case() -> None:
    # One V100: job a needs 100 steps at 1 step/s, job b 300 at 3: both finish at M with
    # x_a = 100 / M and x_b = 100 / M, x_a + x_b <= 1, so M = 200 s.
    problem = make_problem([make_job("a").tput(v100=1.0), make_job("b").tput(v100=3.0)], v100=1)
    alloc = MinTotalDurationPerf().allocate(with_fields(problem, steps=np.array([100.0, 300.0])))
    assert alloc.objective == pytest.approx(200.0, rel=1e-9)
    np.testing.assert_allclose(alloc.x[:, 0], [0.5, 0.5], atol=1e-9)


def test_finished_jobs_do_not_count() -> None:
    problem = make_problem([make_job("a").tput(v100=1.0), make_job("b").tput(v100=3.0)], v100=1)
    alloc = MinTotalDurationPerf().allocate(with_fields(problem, steps=np.array([0.0, 300.0])))
    assert alloc.objective == pytest.approx(100.0, rel=1e-9)  # b alone on the GPU
    done = MinTotalDurationPerf().allocate(with_fields(problem, steps=np.zeros(2)))
    assert (done.objective, done.solves) == (0.0, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_agnostic_baseline_is_worse_on_a_heterogeneous_cluster(backend: str) -> None:
    problem = gavel_with_steps()
    aware = MinTotalDurationPerf(backend=backend).allocate(problem)
    agnostic = MinTotalDuration(backend=backend).allocate(problem)
    real = makespan_s(problem.steps, rates(rate_matrix(problem), agnostic.x))
    assert real > aware.objective * 1.01


def test_steps_are_required() -> None:
    with pytest.raises(InvalidProblemError, match=r"min_total_duration_perf.*`steps`"):
        MinTotalDurationPerf().allocate(gavel_example())


@pytest.mark.parametrize("seed", range(12))
def test_backends_agree(seed: int) -> None:
    problem = random_full_problem(seed)
    for cls in (MinTotalDurationPerf, MinTotalDuration):
        highs = cls().allocate(problem)
        reference = cls(backend="cvxpy").allocate(problem)
        assert highs.objective == pytest.approx(reference.objective, rel=1e-6)
