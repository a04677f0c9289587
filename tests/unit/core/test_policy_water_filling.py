"""Water filling: the notes' example level by level, lifting non-bottlenecks, accounts (fair and
FIFO), and equality with the reference formulations (per-job test and Gavel's MILP)."""

from __future__ import annotations

import numpy as np
import pytest
from problem_builders import gavel_example, make_job, make_problem
from random_problems import random_problem
from reference_policies import reference_water_filling

from slurm_hetsched.core.model import Account, AccountPolicy, Problem
from slurm_hetsched.core.policies.base import normalized_rate_matrix, normalized_rates
from slurm_hetsched.core.policies.max_min_fairness import MaxMinFairnessPerf
from slurm_hetsched.core.policies.symmetry import group_jobs
from slurm_hetsched.core.policies.water_filling import (
    Hierarchy,
    HighsLevels,
    MaxMinFairnessWaterFilling,
    MaxMinFairnessWaterFillingPerf,
    water_fill,
)

BACKENDS = ["highs", "cvxpy"]


def notes_example() -> Problem:
    """Gavel's hierarchical example: weights 3, 1, 1, 1 on 4 identical GPUs."""
    jobs = [make_job(f"job{i}").w(w).tput(v100=1.0) for i, w in enumerate([3, 1, 1, 1], 1)]
    return make_problem(jobs, v100=4)


def test_notes_example_level_by_level() -> None:
    problem = notes_example()
    a = normalized_rate_matrix(problem)
    hierarchy = Hierarchy.of(problem)
    n = problem.n_jobs
    path = hierarchy.path(np.zeros(n), np.zeros(n, dtype=bool), a.max(axis=1))
    # Level 1 ends when job 1 reaches throughput 1.0 (a whole GPU), the others a third each ...
    np.testing.assert_allclose(path.demand(path.times[1]), [1.0, 1 / 3, 1 / 3, 1 / 3])
    # ... then job 1 has no weight left and jobs 2 to 4 grow alike, to full GPUs.
    np.testing.assert_allclose(path.direction(1, 2)[0], 0.0)
    assert np.allclose(path.direction(1, 2)[1:], path.direction(1, 2)[1])
    np.testing.assert_allclose(path.demand(path.times[-1]), [1.0, 1.0, 1.0, 1.0])
    # 4 GPUs serve that whole path: one feasibility LP settles it.
    features = np.column_stack([a, problem.num_gpus, hierarchy.group_features()])
    levels = HighsLevels(problem, a, group_jobs(features), "test")
    x, _, count = water_fill(a, hierarchy, levels, "test")
    assert count == 1
    np.testing.assert_allclose(x, np.ones((4, 1)), atol=1e-6)


def test_notes_example_on_three_gpus_stops_at_the_shared_bottleneck() -> None:
    # With 3 GPUs, job 1 still saturates first (level 1: 1.0 and 1/3 each), then the other
    # three share the remaining 2 GPUs: 2/3 each.
    jobs = [make_job(f"job{i}").w(w).tput(v100=1.0) for i, w in enumerate([3, 1, 1, 1], 1)]
    alloc = MaxMinFairnessWaterFillingPerf().allocate(make_problem(jobs, v100=3))
    np.testing.assert_allclose(alloc.x[:, 0], [1.0, 2 / 3, 2 / 3, 2 / 3], atol=1e-6)
    assert 1 < alloc.solves <= 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_notes_example_final_allocation(backend: str) -> None:
    alloc = MaxMinFairnessWaterFillingPerf(backend=backend).allocate(notes_example())
    np.testing.assert_allclose(alloc.x, np.ones((4, 1)), atol=1e-6)
    # Plain max-min stops at the first level's minimum: 1/3 (job 1's 1.0 / weight 3).
    assert alloc.objective == pytest.approx(1 / 3, abs=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lifts_a_job_that_max_min_fairness_leaves_at_the_minimum(backend: str) -> None:
    # 2 V100 + 1 K80. v1 and v2 run only on V100s, k only on the K80, "both" on either. The
    # max-min level is 1: v1, v2 and "both" get 2/3 of a V100 each, and "both" needs 1/3 of
    # the K80 on top. Max-min fairness may leave k at 1 (1/3 of the K80, the rest idle);
    # water filling gives k the remaining 2/3 of the K80: rate 2.
    problem = make_problem(
        [
            make_job("k").tput(k80=1.0),
            make_job("v1").tput(v100=1.0),
            make_job("v2").tput(v100=1.0),
            make_job("both").tput(v100=3.0, k80=0.5),
        ],
        v100=2,
        k80=1,
    )
    max_min = MaxMinFairnessPerf(backend=backend).allocate(problem)
    alloc = MaxMinFairnessWaterFillingPerf(backend=backend).allocate(problem)
    rates = normalized_rates(problem, alloc.x)
    assert max_min.objective == pytest.approx(1.0, rel=1e-6)
    assert alloc.objective == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_allclose(rates, [2.0, 1.0, 1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(problem.num_gpus @ alloc.x, [2.0, 1.0], rtol=1e-6)  # nothing idle
    np.testing.assert_allclose(rates, reference_water_filling(problem), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_accounts_share_by_weight(backend: str) -> None:
    jobs = [make_job(f"a{i}").acct("a").tput(v100=1.0) for i in range(2)]
    jobs += [make_job(f"b{i}").acct("b").tput(v100=1.0) for i in range(4)]
    problem = make_problem(jobs, accounts={"a": Account("a", 2.0)}, v100=3)
    alloc = MaxMinFairnessWaterFillingPerf(backend=backend).allocate(problem)
    # a: 2 of the 3 GPUs (one per job); b: 1 GPU over 4 jobs.
    np.testing.assert_allclose(alloc.x[:, 0], [1, 1, 0.25, 0.25, 0.25, 0.25], atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fifo_account_serves_its_earliest_job_first(backend: str) -> None:
    queue = Account("q", 1.0, AccountPolicy.FIFO)
    jobs = [
        make_job(f"q{arrival}").acct("q").arrives(arrival).tput(v100=1.0) for arrival in (3, 1, 2)
    ]
    jobs += [make_job(f"f{i}").acct("f").tput(v100=1.0) for i in range(2)]
    problem = make_problem(jobs, accounts={"q": queue}, v100=2)
    alloc = MaxMinFairnessWaterFillingPerf(backend=backend).allocate(problem)
    # Each account gets one GPU; all of q's goes to q1 (earliest arrival).
    np.testing.assert_allclose(alloc.x[:, 0], [0, 1, 0, 0.5, 0.5], atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fifo_passes_the_weight_on_when_the_head_is_satisfied(backend: str) -> None:
    queue = Account("q", 1.0, AccountPolicy.FIFO)
    jobs = [
        make_job(f"q{arrival}").acct("q").arrives(arrival).tput(v100=1.0) for arrival in (3, 1, 2)
    ]
    alloc = MaxMinFairnessWaterFillingPerf(backend=backend).allocate(
        make_problem(jobs, accounts={"q": queue}, v100=2)
    )
    np.testing.assert_allclose(alloc.x[:, 0], [0, 1, 1], atol=1e-6)


def test_agnostic_variant_ignores_speed_differences() -> None:
    alloc = MaxMinFairnessWaterFilling().allocate(gavel_example())
    np.testing.assert_allclose(alloc.x.sum(axis=1), 2 / 3, atol=1e-6)
    assert alloc.objective == pytest.approx(2 / 3, abs=1e-6)


CASES = [(seed, accounts) for seed in range(10) for accounts in (False, True)]


@pytest.mark.parametrize(("seed", "accounts"), CASES)
def test_same_rates_as_the_per_job_reference(seed: int, accounts: bool) -> None:
    rng = np.random.default_rng(100 + seed)
    problem = random_problem(rng, int(rng.integers(2, 8)), int(rng.integers(1, 4)), accounts)
    expected = reference_water_filling(problem, detect="per_job")
    for backend in BACKENDS:
        alloc = MaxMinFairnessWaterFillingPerf(backend=backend).allocate(problem)
        np.testing.assert_allclose(
            normalized_rates(problem, alloc.x), expected, rtol=1e-5, atol=1e-7
        )


@pytest.mark.parametrize("seed", range(6))
def test_same_rates_as_gavels_milp_formulation(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    problem = random_problem(rng, int(rng.integers(2, 7)), int(rng.integers(2, 4)), seed % 2 == 1)
    expected = reference_water_filling(problem, detect="milp")
    alloc = MaxMinFairnessWaterFillingPerf().allocate(problem)
    # The MILP calls a job a bottleneck when it cannot grow by 0.01% (and 1e-4): compare to 1e-3.
    np.testing.assert_allclose(normalized_rates(problem, alloc.x), expected, rtol=1e-3, atol=1e-3)
