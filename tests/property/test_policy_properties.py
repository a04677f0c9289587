"""Properties every registered policy keeps on random problems (hypothesis), plus the ones
specific to the max-min family: sharing incentive, homogeneous clusters, water filling on top
of max-min."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from problem_strategies import permuted, problems

from slurm_hetsched.core.model import Allocation, Problem
from slurm_hetsched.core.policies import POLICIES, get_policy
from slurm_hetsched.core.policies.base import normalized_rates

TOL = 1e-6
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
AGNOSTIC = {name: name.endswith("_perf") is False for name in POLICIES}
# The node-placing policies (ANDREAS and its exclusive baselines) need a problem with nodes;
# their own properties are in tests/unit/core/test_policy_andreas.py and test_policy_exclusive.py.
SHARE_POLICIES = sorted(n for n in POLICIES if not getattr(get_policy(n), "needs_nodes", False))
PAIRS = [
    ("max_min_fairness_perf", "max_min_fairness"),
    ("max_min_fairness_water_filling_perf", "max_min_fairness_water_filling"),
    ("fifo_perf", "fifo"),
    ("min_total_duration_perf", "min_total_duration"),
    ("finish_time_fairness_perf", "finish_time_fairness"),
]
# Policies whose objective is the smallest weighted normalized rate of x alone (the packed
# variant's rates include pair time: tests/property/test_steps_cost_packing_properties.py).
MAX_MIN = sorted(n for n in POLICIES if n.startswith("max_min_fairness") and "packed" not in n)
# When not all SLOs fit together, which ones are kept among equally many is up to the solver,
# and with it the objective; the number kept is unique.
TIED_OBJECTIVE = {"max_sum_throughput_normalized_by_cost_perf_SLOs"}


def rates_per_weight(problem: Problem, alloc: Allocation, name: str) -> np.ndarray:
    return normalized_rates(problem, alloc.x, AGNOSTIC[name]) / problem.weight


def assert_feasible(problem: Problem, x: np.ndarray) -> None:
    assert x.shape == (problem.n_jobs, problem.n_types)
    assert np.all(x >= 0) and np.all(x <= 1)
    assert np.all(x.sum(axis=1) <= 1 + TOL)
    assert np.all(problem.num_gpus @ x <= problem.capacity + TOL * np.maximum(problem.capacity, 1))
    assert np.all(x[~problem.runnable] == 0)


@pytest.mark.parametrize("name", SHARE_POLICIES)
@PROPERTY
@given(problem=problems())
def test_allocation_is_feasible(name: str, problem: Problem) -> None:
    alloc = get_policy(name).allocate(problem)
    assert (alloc.job_ids, alloc.gpu_types, alloc.policy) == (
        problem.job_ids,
        problem.gpu_types,
        name,
    )
    assert_feasible(problem, alloc.x)
    assert np.isfinite(alloc.objective)


@pytest.mark.parametrize("name", SHARE_POLICIES)
@PROPERTY
@given(problem=problems(), data=st.data())
def test_permuting_jobs_and_types_keeps_the_objective(
    name: str, problem: Problem, data: st.DataObject
) -> None:
    jobs = np.array(data.draw(st.permutations(range(problem.n_jobs))))
    types = np.array(data.draw(st.permutations(range(problem.n_types))))
    before = get_policy(name).allocate(problem)
    after = get_policy(name).allocate(permuted(problem, jobs, types))
    if name in TIED_OBJECTIVE:
        assert before.unmet_slos is not None and after.unmet_slos is not None
        assert len(after.unmet_slos) == len(before.unmet_slos)
        return
    assert after.objective == pytest.approx(before.objective, rel=TOL, abs=1e-7)
    if "water_filling" in name:  # water-filling rates are unique, so they permute too
        np.testing.assert_allclose(
            rates_per_weight(permuted(problem, jobs, types), after, name),
            rates_per_weight(problem, before, name)[jobs],
            rtol=1e-5,
            atol=1e-7,
        )


def weighted_equal_split(problem: Problem) -> np.ndarray:
    """Each job w_m / sum(w) of every type's GPUs where it can run, rows capped at 1."""
    share = problem.weight / problem.weight.sum()
    x = share[:, None] * problem.capacity[None, :] / problem.num_gpus[:, None]
    x = np.where(problem.runnable, x, 0.0)
    return x / np.maximum(x.sum(axis=1, keepdims=True), 1.0)


@pytest.mark.parametrize("name", MAX_MIN)
@PROPERTY
@given(problem=problems(accounts=False))
def test_sharing_incentive(name: str, problem: Problem) -> None:
    split = weighted_equal_split(problem)
    assert_feasible(problem, split)  # the split is always available to the policy ...
    baseline = (normalized_rates(problem, split, AGNOSTIC[name]) / problem.weight).min()
    alloc = get_policy(name).allocate(problem)
    # ... so the worst-off job does at least as well as the worst-off job under the split,
    assert alloc.objective >= baseline - TOL
    # and when no job's split is capped at a whole row, every job gets total capacity /
    # total weight under it, so every job does at least that well.
    if np.all(split.sum(axis=1) < 1 - 1e-12):
        level = problem.capacity.sum() / problem.weight.sum()
        assert np.all(rates_per_weight(problem, alloc, name) >= level - TOL)


@pytest.mark.parametrize(("aware", "agnostic"), PAIRS)
@PROPERTY
@given(problem=problems(homogeneous=True))
def test_homogeneous_cluster_aware_equals_agnostic(
    aware: str, agnostic: str, problem: Problem
) -> None:
    a = get_policy(aware).allocate(problem)
    b = get_policy(agnostic).allocate(problem)
    assert a.objective == pytest.approx(b.objective, rel=TOL, abs=1e-7)


@pytest.mark.parametrize(("aware", "agnostic"), PAIRS)
@PROPERTY
@given(problem=problems(max_types=1))
def test_single_gpu_type_aware_equals_agnostic(aware: str, agnostic: str, problem: Problem) -> None:
    a = get_policy(aware).allocate(problem)
    b = get_policy(agnostic).allocate(problem)
    assert a.objective == pytest.approx(b.objective, rel=TOL, abs=1e-7)


@PROPERTY
@given(problem=problems(accounts=False))
def test_water_filling_starts_at_max_min_and_only_lifts(problem: Problem) -> None:
    max_min = get_policy("max_min_fairness_perf").allocate(problem)
    water = get_policy("max_min_fairness_water_filling_perf").allocate(problem)
    assert water.objective == pytest.approx(max_min.objective, rel=TOL, abs=1e-7)
    assert np.all(rates_per_weight(problem, water, water.policy) >= max_min.objective - TOL)


@PROPERTY
@given(problem=problems(), factor=st.floats(0.2, 5.0), data=st.data())
def test_rescaling_a_jobs_row_changes_nothing(
    problem: Problem, factor: float, data: st.DataObject
) -> None:
    # The online update rescales a job's whole row; normalization by the equal-share rate
    # makes the aware policies blind to that, so allocations only move once ratios change.
    m = data.draw(st.integers(0, problem.n_jobs - 1))
    throughput = problem.throughput.copy()
    throughput[m] *= factor
    scaled = dataclasses.replace(problem, throughput=throughput)
    for name in ("max_min_fairness_perf", "max_min_fairness_water_filling_perf"):
        before = get_policy(name).allocate(problem)
        after = get_policy(name).allocate(scaled)
        assert after.objective == pytest.approx(before.objective, rel=TOL, abs=1e-7)
