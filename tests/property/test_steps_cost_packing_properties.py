"""Properties of the policies on steps, cost and space sharing (hypothesis): the makespan a
policy reports is the one its allocation implies, sharing incentive in each policy's own
terms, FIFO and shortest job first serve their first job at full speed, SLOs, and the
constraints with pairs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from problem_strategies import problems

from slurm_hetsched.core.model import Problem
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.base import (
    best_rate,
    equal_split,
    fifo_order,
    normalized_rate_matrix,
    rate_matrix,
    rates,
)
from slurm_hetsched.core.policies.finish_time_fairness import FinishTimes
from slurm_hetsched.core.policies.makespan import makespan_s
from slurm_hetsched.core.policies.packing import SharingLayout
from slurm_hetsched.core.policies.shortest_job_first import duration_order

TOL = 1e-6
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAKESPAN = ["min_total_duration_perf", "min_total_duration", "min_total_duration_perf_packed"]


def implied_makespan(problem: Problem, name: str) -> tuple[float, float]:
    """(the policy's objective, max_m steps_m / rate_m recomputed from its allocation)."""
    alloc = get_policy(name).allocate(problem)
    throughput = rate_matrix(problem, agnostic=name == "min_total_duration")
    rate = rates(throughput, alloc.x)
    if alloc.pair_x is not None and problem.packed is not None:
        for k, (a, b) in enumerate(problem.packed.pairs):
            shared = problem.packed.throughput[k] * alloc.pair_x[k][:, None]  # (n_types, 2)
            rate[a] += shared[:, 0].sum()
            rate[b] += shared[:, 1].sum()
    steps = problem.require("steps", "test")
    left = steps > 0
    implied = float(np.max(steps[left] / rate[left])) if left.any() else 0.0
    return alloc.objective, implied


@pytest.mark.parametrize("name", MAKESPAN)
@PROPERTY
@given(problem=problems())
def test_makespan_is_the_one_the_allocation_implies(name: str, problem: Problem) -> None:
    reported, implied = implied_makespan(problem, name)
    assert reported == pytest.approx(implied, rel=1e-9)


@PROPERTY
@given(problem=problems())
def test_makespan_is_no_worse_than_the_equal_split(problem: Problem) -> None:
    # Sharing incentive in makespan terms: the equal split is one allocation the LP considers.
    steps = problem.require("steps", "test")
    split = makespan_s(steps, rates(rate_matrix(problem), equal_split(problem)))
    assert get_policy("min_total_duration_perf").allocate(problem).objective <= split * (1 + TOL)


@pytest.mark.parametrize("name", ["finish_time_fairness_perf", "finish_time_fairness"])
@PROPERTY
@given(problem=problems())
def test_finish_time_fairness_is_at_most_one(name: str, problem: Problem) -> None:
    # Every job has rho = 1 under the equal split, so the optimum is at most 1; and the
    # reported objective is the worst rho of the returned allocation.
    alloc = get_policy(name).allocate(problem)
    assert alloc.objective <= 1 + TOL
    throughput = rate_matrix(problem, agnostic=name == "finish_time_fairness")
    times = FinishTimes.of(problem, throughput, problem.require("steps", "test"))
    assert alloc.objective == pytest.approx(times.worst(rates(throughput, alloc.x)), rel=1e-12)


@pytest.mark.parametrize("name", ["fifo_perf", "fifo"])
@PROPERTY
@given(problem=problems())
def test_fifo_runs_the_first_job_all_the_time(name: str, problem: Problem) -> None:
    first = int(np.argmin(fifo_order(problem)))
    alloc = get_policy(name).allocate(problem)
    assert alloc.x[first].sum() == pytest.approx(1.0, abs=TOL)
    # A job with time left has no later job on any of its fastest types.
    throughput = rate_matrix(problem, agnostic=name == "fifo")
    fastest = problem.runnable & (throughput >= best_rate(throughput)[:, None] * (1 - 1e-12))
    order = fifo_order(problem)
    for m in np.flatnonzero(alloc.x.sum(axis=1) < 1 - TOL):
        later = order > order[m]
        assert np.all(alloc.x[np.ix_(later, fastest[m])] <= TOL)


@PROPERTY
@given(problem=problems())
def test_shortest_job_first_serves_the_shortest_job_at_full_speed(problem: Problem) -> None:
    throughput = rate_matrix(problem)
    steps = problem.require("steps", "test")
    rank = duration_order(problem, steps, throughput)
    if not np.any(rank >= 0):
        return
    shortest = int(np.flatnonzero(rank == 0)[0])
    alloc = get_policy("shortest_job_first_perf").allocate(problem)
    rate = rates(throughput, alloc.x)
    assert rate[shortest] == pytest.approx(best_rate(throughput)[shortest], rel=TOL)
    assert alloc.objective == pytest.approx(steps[shortest] / rate[shortest], rel=TOL)


@PROPERTY
@given(problem=problems())
def test_slo_policy_meets_the_slos_it_does_not_report(problem: Problem) -> None:
    alloc = get_policy("max_sum_throughput_normalized_by_cost_perf_SLOs").allocate(problem)
    assert alloc.unmet_slos is not None
    assert problem.slo_s is not None and problem.steps is not None
    throughput = rate_matrix(problem)
    rate = rates(throughput, alloc.x)
    deadline_in_s = problem.arrival_s + problem.slo_s - problem.now_s
    for m, job in enumerate(problem.job_ids):
        if not np.isfinite(problem.slo_s[m]) or problem.steps[m] == 0:
            assert job not in alloc.unmet_slos
            continue
        # Within a relative 1e-6 of the job's best rate an SLO is on the boundary: the policy
        # may count it met (its LP has the solver's tolerance) or unmet; beyond, it may not.
        can_alone = deadline_in_s[m] > 0 and problem.steps[m] / deadline_in_s[m] <= (
            best_rate(throughput)[m] * (1 + 1e-6)
        )
        if job in alloc.unmet_slos:
            assert rate[m] < problem.steps[m] / max(deadline_in_s[m], 1e-300)
        else:
            assert can_alone
            assert rate[m] >= problem.steps[m] / deadline_in_s[m] * (1 - 1e-5)
        if not can_alone:
            assert job in alloc.unmet_slos


@pytest.mark.parametrize("name", ["max_min_fairness_perf_packed", "min_total_duration_perf_packed"])
@PROPERTY
@given(problem=problems())
def test_packed_allocations_keep_the_sharing_constraints_and_never_lose(
    name: str, problem: Problem
) -> None:
    alloc = get_policy(name).allocate(problem)
    assert alloc.pair_x is not None
    layout = SharingLayout.of(problem)
    assert len(alloc.pairs) == len(layout.pairs)
    assert np.all(alloc.pair_x >= 0) and np.all(alloc.pair_x[~layout.pair_allowed] == 0)
    assert np.all(layout.time_used(alloc.x, alloc.pair_x) <= 1 + TOL)
    usage = problem.num_gpus @ alloc.x + layout.pair_gpus @ alloc.pair_x
    assert np.all(usage <= problem.capacity + TOL * np.maximum(problem.capacity, 1))
    unpacked = get_policy(name.replace("_packed", "")).allocate(problem)
    if name.startswith("max_min"):
        assert alloc.objective >= unpacked.objective - TOL * max(1.0, unpacked.objective)
        # Without pair time, the reported level is max-min's: the smallest weighted rate.
        if not alloc.pair_x.any():
            a = normalized_rate_matrix(problem)
            level = float(np.min(np.sum(a * alloc.x, axis=1) / problem.weight))
            assert alloc.objective == pytest.approx(level, rel=1e-12)
    else:
        assert alloc.objective <= unpacked.objective * (1 + TOL)
