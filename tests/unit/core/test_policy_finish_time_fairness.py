"""Finish-time fairness: lower worst rho than max-min where elapsed times differ, the link to
max-min when nobody has waited, sharing incentive, and the Newton search against Gavel's
convex program."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from extended_problems import random_full_problem, with_fields
from problem_builders import gavel_example, make_job, make_problem

from slurm_hetsched.core.model import InvalidProblemError, Problem
from slurm_hetsched.core.policies import finish_time_fairness
from slurm_hetsched.core.policies.base import rate_matrix, rates
from slurm_hetsched.core.policies.finish_time_fairness import (
    FinishTimeFairness,
    FinishTimeFairnessPerf,
    FinishTimes,
)
from slurm_hetsched.core.policies.max_min_fairness import MaxMinFairnessPerf
from slurm_hetsched.core.policies.speed_classes import SpeedClasses

BACKENDS = ["highs", "cvxpy"]


def worst_rho(problem: Problem, x: np.ndarray) -> float:
    throughput = rate_matrix(problem)
    times = FinishTimes.of(problem, throughput, problem.require("steps", "test"))
    return times.worst(rates(throughput, x))


def waited_and_new() -> Problem:
    """X gains 10x from the fast type and has waited twice as long as its isolated run would
    take; Y and Z run the same everywhere and just arrived. One GPU of each type. Max-min lifts
    all normalized rates alike (to 1.18 of the equal share): Y and Z get rho 0.85, while X,
    whose long wait dilutes any gain, stays at 0.95. Finish-time fairness moves fast-GPU time
    from Y and Z to X: all three end at 0.90."""
    problem = make_problem(
        [
            make_job("X").tput(fast=10.0, slow=1.0),
            make_job("Y").tput(fast=1.0, slow=1.0),
            make_job("Z").tput(fast=1.0, slow=1.0),
        ],
        fast=1,
        slow=1,
    )
    # Equal split: a third of each type per job, so isolated rates 11/3, 2/3, 2/3 steps/s and
    # 1000 s of isolated run time for each job.
    steps = np.array([11000 / 3, 2000 / 3, 2000 / 3])
    return with_fields(problem, steps=steps, arrival_s=np.array([-2000.0, 0.0, 0.0]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_lowers_the_worst_rho_against_max_min(backend: str) -> None:
    problem = waited_and_new()
    max_min = MaxMinFairnessPerf().allocate(problem)
    ftf = FinishTimeFairnessPerf(backend=backend).allocate(problem)
    assert worst_rho(problem, max_min.x) == pytest.approx(0.95, abs=1e-3)
    assert ftf.objective == pytest.approx(worst_rho(problem, ftf.x), rel=1e-9)
    assert ftf.objective < worst_rho(problem, max_min.x) - 0.04
    # At the optimum all share one rho (none could gain without another losing).
    throughput = rate_matrix(problem)
    rho = FinishTimes.of(problem, throughput, problem.steps).rho(rates(throughput, ftf.x))
    np.testing.assert_allclose(rho, ftf.objective, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_waiting_it_is_max_min_fairness(backend: str) -> None:
    # t = 0: rho_m = isolated rate / rate, and the isolated split is 2/3 of the equal share
    # here, so the optimum is (2/3) / (max-min level 8/11) = 11/12.
    problem = with_fields(gavel_example(), steps=np.array([400.0, 300.0, 200.0]))
    alloc = FinishTimeFairnessPerf(backend=backend).allocate(problem)
    assert alloc.objective == pytest.approx(11 / 12, rel=1e-6)


def test_finished_jobs_are_left_out() -> None:
    # One GPU; a is finished. The isolated split is still over both jobs (b: half the GPU),
    # b gets the whole GPU, so rho_b = 0.5; a (0 steps, never waited) has no rho at all.
    problem = make_problem([make_job("a").tput(v100=1.0), make_job("b").tput(v100=1.0)], v100=1)
    alloc = FinishTimeFairnessPerf().allocate(with_fields(problem, steps=np.array([0.0, 100.0])))
    assert alloc.objective == pytest.approx(0.5, rel=1e-6)
    done = FinishTimeFairnessPerf().allocate(with_fields(problem, steps=np.zeros(2)))
    assert (done.objective, done.solves) == (0.0, 0)


def test_steps_are_required() -> None:
    with pytest.raises(InvalidProblemError, match=r"finish_time_fairness_perf.*`steps`"):
        FinishTimeFairnessPerf().allocate(gavel_example())


@pytest.mark.parametrize("seed", range(16))
def test_newton_search_matches_gavels_convex_program(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(finish_time_fairness, "CLASS_SHARE", 0.0)  # always per job
    problem = random_full_problem(seed)
    for cls in (FinishTimeFairnessPerf, FinishTimeFairness):
        highs = cls().allocate(problem)
        reference = cls(backend="cvxpy").allocate(problem)
        assert highs.objective == pytest.approx(reference.objective, rel=1e-5)
        # Sharing incentive: the equal split has rho = 1 for every job.
        assert highs.objective <= 1 + 1e-9
        assert highs.solves <= 6


@pytest.mark.parametrize("seed", range(16))
def test_speed_class_search_matches_gavels_convex_program(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(finish_time_fairness, "CLASS_SHARE", 1.0)  # always by speed classes
    monkeypatch.setattr(FinishTimeFairnessPerf, "_solve_by_jobs", _must_not_be_called)
    problem = random_full_problem(seed)
    for cls in (FinishTimeFairnessPerf, FinishTimeFairness):
        highs = cls().allocate(problem)
        reference = cls(backend="cvxpy").allocate(problem)
        assert highs.objective == pytest.approx(reference.objective, rel=1e-5)


def _must_not_be_called(*args: object) -> None:
    raise AssertionError("the per-job search ran")


def table_like(seed: int, n: int = 40) -> Problem:
    """n jobs of 4 classes (rows rescaled per job, as the online update does), 3 types."""
    rng = np.random.default_rng(seed)
    classes = rng.uniform(0.5, 10.0, size=(4, 3))
    rows = classes[rng.integers(4, size=n)] * rng.uniform(0.5, 2.0, size=(n, 1))
    jobs = [make_job(f"j{m}").tput(a=r[0], b=r[1], c=r[2]) for m, r in enumerate(rows)]
    return with_fields(
        make_problem(jobs, a=4, b=6, c=8),
        steps=rng.uniform(1e3, 1e5, n),
        arrival_s=-rng.uniform(0, 3e4, n) * (rng.random(n) < 0.7),
    )


@pytest.mark.parametrize("seed", range(6))
def test_jobs_of_few_classes_are_decided_by_class(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = table_like(seed)
    assert SpeedClasses.of(rate_matrix(problem), problem.num_gpus).groups.n_groups == 4
    monkeypatch.setattr(FinishTimeFairnessPerf, "_solve_by_jobs", _must_not_be_called)
    highs = FinishTimeFairnessPerf().allocate(problem)
    reference = FinishTimeFairnessPerf(backend="cvxpy").allocate(problem)
    assert highs.objective == pytest.approx(reference.objective, rel=1e-5)


@pytest.mark.parametrize("seed", range(40))
def test_class_condition_is_exactly_the_per_job_lp(seed: int) -> None:
    # speed_classes.py's (*): demands r can be met from group times X iff sum_j (s_j -
    # theta)^+ X_j >= sum_m (r_m - theta)^+ for theta in {0} and the speeds. Demands are
    # scaled to just inside and just outside the boundary of (*); the per-job LP must agree.
    rng = np.random.default_rng(seed)
    n_types, n_jobs = int(rng.integers(1, 4)), int(rng.integers(1, 6))
    speed = np.sort(rng.uniform(0.1, 1.0, n_types))[::-1]
    speed[0] = 1.0
    total = rng.uniform(0.0, 2.5, n_types)
    demand = rng.uniform(0.0, 1.0, n_jobs)
    theta = np.r_[0.0, speed]

    def condition(r: np.ndarray) -> bool:
        have = np.maximum(speed[None, :] - theta[:, None], 0.0) @ total
        need = np.maximum(r[None, :] - theta[:, None], 0.0).sum(axis=1)
        return bool(np.all(have >= need))

    low, high = 0.0, 1.0 / demand.max()
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if condition(mid * demand) else (low, mid)
    for factor, expected in ((low * (1 - 1e-6), True), (high * (1 + 1e-4), False)):
        if factor * demand.max() > 1 + 1e-9:
            continue
        x = cp.Variable((n_jobs, n_types), nonneg=True)
        program = cp.Problem(
            cp.Minimize(0),
            [cp.sum(x, axis=0) <= total, cp.sum(x, axis=1) <= 1, x @ speed >= factor * demand],
        )
        program.solve(solver="HIGHS")
        assert (program.status == cp.OPTIMAL) is expected


def test_many_binding_jobs_still_converge_fast() -> None:
    rng = np.random.default_rng(7)
    n = 60
    jobs = [
        make_job(f"j{i}").tput(v100=float(rng.uniform(2, 10)), k80=float(rng.uniform(0.5, 2)))
        for i in range(n)
    ]
    problem = with_fields(
        make_problem(jobs, v100=10, k80=20),
        steps=rng.uniform(1e3, 1e5, n),
        arrival_s=-rng.uniform(0, 1e4, n),
    )
    highs = FinishTimeFairnessPerf().allocate(problem)
    reference = FinishTimeFairnessPerf(backend="cvxpy").allocate(problem)
    assert highs.objective == pytest.approx(reference.objective, rel=1e-5)
    assert highs.solves <= 8
