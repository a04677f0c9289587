"""Throughput per cost, with and without SLOs: cheaper types per step win, every SLO that can
be met is met, the others are reported, and the two backends agree."""

from __future__ import annotations

import numpy as np
import pytest
from extended_problems import random_full_problem, with_fields
from problem_builders import make_job, make_problem

from slurm_hetsched.core.model import InvalidProblemError, Problem
from slurm_hetsched.core.policies.base import rate_matrix, rates
from slurm_hetsched.core.policies.cost import (
    MaxSumThroughputNormalizedByCostPerf,
    MaxSumThroughputNormalizedByCostPerfSLOs,
)
from slurm_hetsched.core.policies.throughput import MaxSumThroughputPerf

BACKENDS = ["highs", "cvxpy"]
PRICES = np.array([0.74, 0.135])  # v100, k80: Gavel's $/h


def a3c(job_id: str = "a3c") -> object:
    return make_job(job_id).tput(v100=7.18, k80=3.44)  # Gavel's table, A3C


def priced(problem: Problem, **fields: object) -> Problem:
    return with_fields(problem, price_per_hour=PRICES, **fields)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cheaper_per_step_beats_faster(backend: str) -> None:
    # A3C is 2x faster on a V100 that costs 5.5x more: per dollar the K80 wins.
    problem = priced(make_problem([a3c()], v100=1, k80=1))
    fastest = MaxSumThroughputPerf(backend=backend).allocate(problem)
    cheapest = MaxSumThroughputNormalizedByCostPerf(backend=backend).allocate(problem)
    assert fastest.share("a3c") == pytest.approx({"v100": 1.0, "k80": 0.0}, abs=1e-6)
    assert cheapest.share("a3c") == pytest.approx({"v100": 0.0, "k80": 1.0}, abs=1e-6)
    assert cheapest.unmet_slos is None  # the policy without SLOs does not report any


def slo_problem() -> Problem:
    """One V100 and one K80, now = 0, every job arrived at 0:
    - tight: A3C with 3600 s for 18000 steps (5 steps/s: more than the K80 gives, so it
      needs some V100 time);
    - hopeless: 36000 steps in 3600 s (10 steps/s > 7.18 on its fastest type);
    - late: its deadline passed (arrived 7200 s ago with a 3600 s SLO);
    - free: no SLO."""
    jobs = [a3c("tight"), a3c("hopeless"), a3c("late").arrives(-7200), a3c("free")]
    return priced(
        make_problem(jobs, v100=1, k80=1),
        steps=np.array([18000.0, 36000.0, 1000.0, 1000.0]),
        slo_s=np.array([3600.0, 3600.0, 3600.0, np.inf]),
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_meets_every_slo_it_can_and_reports_the_others(backend: str) -> None:
    problem = slo_problem()
    alloc = MaxSumThroughputNormalizedByCostPerfSLOs(backend=backend).allocate(problem)
    assert alloc.unmet_slos == ("hopeless", "late")
    rate = rates(rate_matrix(problem), alloc.x)
    assert rate[0] >= 5.0 * (1 - 1e-6)
    # Without SLOs the cost policy would leave "tight" short of its rate.
    plain = MaxSumThroughputNormalizedByCostPerf(backend=backend).allocate(problem)
    assert rates(rate_matrix(problem), plain.x)[0] < 5.0
    out = alloc.to_json()
    assert out["unmet_slos"] == ["hopeless", "late"]
    assert "unmet_slos" not in plain.to_json()


@pytest.mark.parametrize("backend", BACKENDS)
def test_slos_that_cannot_all_be_met_together_keep_as_many_as_possible(backend: str) -> None:
    # One V100 and one K80 give at most 7.18 + 3.44 = 10.62 steps/s of A3C in all; "a" and
    # "b" need 5 steps/s each and "c" 2: any two SLOs fit together, all three do not.
    jobs = [a3c("a"), a3c("b"), a3c("c")]
    problem = priced(
        make_problem(jobs, v100=1, k80=1),
        steps=np.array([18000.0, 18000.0, 7200.0]),
        slo_s=np.array([3600.0, 3600.0, 3600.0]),
    )
    alloc = MaxSumThroughputNormalizedByCostPerfSLOs(backend=backend).allocate(problem)
    assert alloc.unmet_slos is not None and len(alloc.unmet_slos) == 1
    assert alloc.solves == 3  # the LP, the selection MILP, the LP with the chosen SLOs
    rate = rates(rate_matrix(problem), alloc.x)
    met = [m for m, job in enumerate("abc") if job not in alloc.unmet_slos]
    assert np.all(rate[met] >= np.array([5.0, 5.0, 2.0])[met] * (1 - 1e-6))


def test_without_any_slo_it_is_the_plain_cost_policy() -> None:
    problem = priced(make_problem([a3c("x"), a3c("y")], v100=1, k80=1))
    alloc = MaxSumThroughputNormalizedByCostPerfSLOs().allocate(problem)
    plain = MaxSumThroughputNormalizedByCostPerf().allocate(problem)
    assert alloc.unmet_slos == ()
    assert alloc.objective == pytest.approx(plain.objective, rel=1e-9)


def test_prices_are_required_and_positive() -> None:
    problem = make_problem([a3c()], v100=1, k80=1)
    with pytest.raises(InvalidProblemError, match="needs `price_per_hour`"):
        MaxSumThroughputNormalizedByCostPerf().allocate(problem)
    free = with_fields(problem, price_per_hour=np.array([0.74, 0.0]))
    with pytest.raises(InvalidProblemError, match=r"GPU type 'k80': price_per_hour 0.0"):
        MaxSumThroughputNormalizedByCostPerf().allocate(free)


def test_slos_need_steps() -> None:
    problem = priced(make_problem([a3c()], v100=1, k80=1), slo_s=np.array([100.0]))
    with pytest.raises(InvalidProblemError, match="`steps`"):
        MaxSumThroughputNormalizedByCostPerfSLOs().allocate(problem)


@pytest.mark.parametrize("seed", range(16))
def test_backends_agree(seed: int) -> None:
    problem = random_full_problem(seed)
    for cls in (MaxSumThroughputNormalizedByCostPerf, MaxSumThroughputNormalizedByCostPerfSLOs):
        highs = cls().allocate(problem)
        reference = cls(backend="cvxpy").allocate(problem)
        assert highs.objective == pytest.approx(reference.objective, rel=1e-6, abs=1e-7)
        if highs.unmet_slos is not None and len(highs.unmet_slos) != len(reference.unmet_slos):
            pytest.fail(f"unmet SLOs differ: {highs.unmet_slos} vs {reference.unmet_slos}")
