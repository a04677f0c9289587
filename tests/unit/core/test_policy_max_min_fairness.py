"""Max-min fairness: Gavel's worked example, weights, GPU counts, backends, solver errors."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp
from problem_builders import gavel_example, make_job, make_problem
from random_problems import random_problem
from reference_policies import reference_max_min

from slurm_hetsched.core.model import Problem
from slurm_hetsched.core.policies import POLICIES, get_policy, rate_lp
from slurm_hetsched.core.policies.base import (
    clean_solution,
    normalized_rates,
    solve_cvxpy,
)
from slurm_hetsched.core.policies.lp import INF, RowBlock, SparseLP, solve_highs
from slurm_hetsched.core.policies.max_min_fairness import MaxMinFairness, MaxMinFairnessPerf
from slurm_hetsched.errors import ConfigError, SolverError

BACKENDS = ["highs", "cvxpy"]
GAVEL_X = [[0.455, 0.0], [0.455, 0.091], [0.091, 0.909]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_gavel_worked_example(backend: str) -> None:
    problem = gavel_example()
    alloc = MaxMinFairnessPerf(backend=backend).allocate(problem)
    np.testing.assert_allclose(alloc.x, GAVEL_X, atol=1e-3)
    np.testing.assert_allclose(normalized_rates(problem, alloc.x), 8 / 11, atol=1e-3)
    assert alloc.objective == pytest.approx(0.727, abs=1e-3)
    assert (alloc.policy, alloc.status) == ("max_min_fairness_perf", "optimal")
    # The equal split (a third of each GPU per job) gives every job 2/3: about 9% less.
    equal_split = np.full((3, 2), 1 / 3)
    np.testing.assert_allclose(normalized_rates(problem, equal_split), 2 / 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_agnostic_baseline_on_the_worked_example(backend: str) -> None:
    alloc = MaxMinFairness(backend=backend).allocate(gavel_example())
    assert alloc.objective == pytest.approx(2 / 3, abs=1e-6)
    # Its allocation, judged by the real throughputs, is worse than the aware one.
    real = normalized_rates(gavel_example(), alloc.x).min()
    assert real < 0.727 - 1e-3


@pytest.mark.parametrize("backend", BACKENDS)
def test_weights_scale_normalized_rates(backend: str) -> None:
    problem = make_problem(
        [make_job("heavy").w(2).tput(v100=1.0), make_job("light").tput(v100=1.0)], v100=1
    )
    alloc = MaxMinFairnessPerf(backend=backend).allocate(problem)
    np.testing.assert_allclose(alloc.x[:, 0], [2 / 3, 1 / 3], atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_multi_gpu_jobs_count_their_gpus(backend: str) -> None:
    # One type, so a job's normalized rate is num_gpus x its time fraction. B cannot exceed
    # rate 1 (its row sums to <= 1), so the minimum is 1: B runs all the time, and A at least
    # half of it on 2 GPUs (the LP may give A more: it is not the bottleneck).
    problem = make_problem(
        [make_job("A").gpus(2).tput(v100=5.0), make_job("B").tput(v100=3.0)], v100=3
    )
    alloc = MaxMinFairnessPerf(backend=backend).allocate(problem)
    assert alloc.objective == pytest.approx(1.0, abs=1e-6)
    assert alloc.x[1, 0] == pytest.approx(1.0, abs=1e-6)
    assert problem.num_gpus @ alloc.x[:, 0] <= 3 + 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_type_with_too_few_gpus_for_the_job_is_not_used(backend: str) -> None:
    problem = make_problem(
        [make_job("big").gpus(4).tput(v100=10.0, k80=2.0), make_job("small").tput(v100=1, k80=1)],
        v100=2,
        k80=4,
    )
    alloc = MaxMinFairnessPerf(backend=backend).allocate(problem)
    assert alloc.x[0, 0] == 0.0


@pytest.mark.parametrize("seed", range(12))
def test_backends_agree_with_the_reference_lp(seed: int) -> None:
    rng = np.random.default_rng(seed)
    problem = random_problem(rng, n_jobs=int(rng.integers(1, 9)), n_types=int(rng.integers(1, 4)))
    for agnostic, cls in ((False, MaxMinFairnessPerf), (True, MaxMinFairness)):
        expected = reference_max_min(problem, agnostic)
        for backend in BACKENDS:
            alloc = cls(backend=backend).allocate(problem)
            assert alloc.objective == pytest.approx(expected, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("seed", range(4))
def test_interior_point_path_agrees(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Large LPs of distinct jobs go to HiGHS's interior point method; force it on small ones.
    monkeypatch.setattr(rate_lp, "IPM_ROWS", 0)
    monkeypatch.setattr(rate_lp, "DIRECT_ROWS", 10**9)
    rng = np.random.default_rng(50 + seed)
    problem = random_problem(rng, n_jobs=8, n_types=3, duplicates=False)
    alloc = MaxMinFairnessPerf().allocate(problem)
    assert alloc.objective == pytest.approx(reference_max_min(problem), rel=1e-6)


def test_identical_jobs_get_identical_rows() -> None:
    jobs = [make_job(f"j{i}").tput(v100=4.0, k80=1.0) for i in range(5)]
    alloc = MaxMinFairnessPerf().allocate(make_problem(jobs, v100=2, k80=1))
    np.testing.assert_allclose(alloc.x, np.tile(alloc.x[0], (5, 1)))
    assert alloc.objective == pytest.approx(
        MaxMinFairnessPerf(backend="cvxpy").allocate(make_problem(jobs, v100=2, k80=1)).objective,
        rel=1e-6,
    )


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_empty_problem_needs_no_solver(name: str) -> None:
    problem = Problem(job_ids=(), gpu_types=("v100",), throughput=np.zeros((0, 1)), capacity=[2])
    alloc = get_policy(name).allocate(problem)
    assert alloc.x.shape == (0, 1) and alloc.policy == name


def test_registry_names_and_descriptions() -> None:
    assert {
        "max_min_fairness_perf",
        "max_min_fairness",
        "max_min_fairness_water_filling_perf",
        "max_min_fairness_water_filling",
    } <= set(POLICIES)
    for name, cls in POLICIES.items():
        assert cls.name == name
        assert cls.description and "\n" not in cls.description
    with pytest.raises(ConfigError, match=r"unknown policy 'las'.*max_min_fairness_perf"):
        get_policy("las")


def test_unknown_backend_is_rejected() -> None:
    with pytest.raises(ValueError, match="backend 'gurobi'"):
        MaxMinFairnessPerf(backend="gurobi")


# ----------------------------------------------------------------------------------------------
# Solver failures are errors, never allocations


def test_highs_infeasible_lp_raises_solver_error() -> None:
    # x >= 2 and x <= 1.
    lp = SparseLP(
        cost=np.array([1.0]),
        col_lower=np.array([2.0]),
        col_upper=np.array([INF]),
        rows=RowBlock(matrix=sp.csr_matrix([[1.0]]), lower=np.array([-INF]), upper=np.array([1.0])),
        maximize=True,
    )
    with pytest.raises(SolverError, match=r"policy 'test'.*[Ii]nfeasible") as info:
        solve_highs(lp, policy="test", n_jobs=1, n_types=1)
    assert (info.value.policy, info.value.n_jobs, info.value.n_types) == ("test", 1, 1)


def test_cvxpy_unbounded_raises_solver_error() -> None:
    x = cp.Variable()
    with pytest.raises(SolverError, match="unbounded"):
        solve_cvxpy(cp.Problem(cp.Maximize(x), [x >= 0]), "test", gavel_example(), "CLARABEL")


def test_solution_violating_capacity_is_rejected() -> None:
    problem = gavel_example()
    with pytest.raises(SolverError, match="violates constraints"):
        clean_solution(problem, np.full((3, 2), 0.5), "test")
