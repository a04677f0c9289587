"""Cost-aware policy options: `energy_slack` (give up a fraction of the objective for less
power), due dates as SLOs for the cost policy, and the option plumbing (get_policy, the
what-if file's `policy_options`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_hetsched.allocate import run_allocate
from slurm_hetsched.core.costs import EnergyModel, SiteEnergy, decision_costs
from slurm_hetsched.core.model import InvalidProblemError, Problem
from slurm_hetsched.core.policies import POLICIES, get_policy
from slurm_hetsched.core.policies.base import rate_matrix, rates
from slurm_hetsched.core.policies.energy import gpu_power_w
from slurm_hetsched.core.policies.max_min_fairness import MaxMinFairnessPerf
from slurm_hetsched.errors import ConfigError
from tests.property.problem_strategies import problems

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
BACKENDS = ["highs", "cvxpy"]
ENERGY_POLICIES = [n for n, cls in POLICIES.items() if "energy_slack" in cls.options]
# Objective direction: +1 = larger is better (max-min, throughput), -1 = smaller (makespan, rho).
SENSE = {
    "max_min_fairness_perf": 1,
    "max_min_fairness": 1,
    "max_sum_throughput_perf": 1,
    "min_total_duration_perf": -1,
    "min_total_duration": -1,
    "finish_time_fairness_perf": -1,
    "finish_time_fairness": -1,
}
TOL = 1e-6
PRICE = 0.2  # per kWh, PUE 1: the cost per hour is kW x 0.2


def two_types(energy: bool = True) -> Problem:
    """Two identical jobs (100 steps each), one "fast" and one "slow" GPU.

    fast: 2 steps/s at 300 W busy, 40 W idle (260 W over idle: 130 W per step/s);
    slow: 1 step/s at 70 W busy, 10 W idle (60 W over idle: 60 W per step/s).
    The slow GPU is slower but cheaper per step. Normalized rates (equal-share rate 1.5):
    a = 4/3 on fast, 2/3 on slow, so 195 W and 90 W per unit of normalized rate.
    """
    model = EnergyModel(
        {"fast": 300.0, "slow": 70.0},
        {"fast": 40.0, "slow": 10.0},
        SiteEnergy(electricity_per_kwh=PRICE, pue=1.0, node_base_w=0.0),
    )
    return Problem(
        job_ids=("a", "b"),
        gpu_types=("fast", "slow"),
        throughput=np.array([[2.0, 1.0], [2.0, 1.0]]),
        capacity=np.array([1.0, 1.0]),
        num_gpus=np.array([1, 1]),
        weight=np.ones(2),
        steps=np.array([100.0, 100.0]),
        energy=model if energy else None,
    )


def policy(name: str, slack: float, backend: str = "highs") -> object:
    chosen = get_policy(name, {"energy_slack": slack})
    chosen.backend = backend  # type: ignore[attr-defined]
    return chosen


def power(problem: Problem, x: np.ndarray) -> float:
    assert problem.energy is not None
    return gpu_power_w(problem, problem.energy, x)


# ----------------------------------------------------------------------------------------------
# Hand-derived trade-offs on two_types()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("slack", [0.0, 0.1, 0.25])
@pytest.mark.parametrize("name", ["max_min_fairness_perf", "max_sum_throughput_perf"])
def test_rate_policies_move_work_to_the_cheaper_type(name: str, slack: float, backend: str) -> None:
    problem = two_types()
    alloc = policy(name, slack, backend).allocate(problem)  # type: ignore[attr-defined]
    # Optimum: every GPU busy, each job at normalized rate 1 (370 W). With the slack the jobs
    # need 2 (1 - slack) units of rate: the slow GPU's 2/3 units at 90 W/unit (60 W), the rest
    # on the fast one at 195 W/unit; plus 50 W idle.
    expected_w = 50.0 + 60.0 + 195.0 * (2 * (1 - slack) - 2 / 3)
    assert power(problem, alloc.x) == pytest.approx(expected_w, rel=1e-6)
    costs = decision_costs(problem, alloc.x)
    assert costs["energy_cost_per_h"] == pytest.approx(expected_w / 1000 * PRICE, abs=1e-6)
    optimum = 1.0 if name == "max_min_fairness_perf" else 2.0
    assert alloc.objective == pytest.approx((1 - slack) * optimum, rel=1e-6)
    assert alloc.x[:, 1].sum() == pytest.approx(1.0, rel=1e-6)  # the slow GPU stays busy
    if slack > 0:
        assert power(problem, alloc.x) < 370.0 - 1.0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("slack", [0.0, 0.1, 0.25])
@pytest.mark.parametrize("name", ["min_total_duration_perf", "finish_time_fairness_perf"])
def test_steps_policies_move_work_to_the_cheaper_type(
    name: str, slack: float, backend: str
) -> None:
    problem = two_types()
    alloc = policy(name, slack, backend).allocate(problem)  # type: ignore[attr-defined]
    # Optimum: 1.5 steps/s each (makespan 100 / 1.5 s; rho 1, the equal split). With the
    # slack each job needs 1.5 / (1 + slack) steps/s (for rho: t = 0, so rho scales as 1 /
    # rate): the slow GPU's 1 step/s at 60 W, the rest on the fast one at 130 W per step/s.
    expected_w = 50.0 + 60.0 + 130.0 * (3 / (1 + slack) - 1)
    assert power(problem, alloc.x) == pytest.approx(expected_w, rel=1e-6)
    optimum = 100 / 1.5 if name == "min_total_duration_perf" else 1.0
    assert alloc.objective == pytest.approx((1 + slack) * optimum, rel=1e-6)


def test_agnostic_max_min_holds_its_own_objective() -> None:
    problem = two_types()
    alloc = policy("max_min_fairness", 0.1).allocate(problem)  # type: ignore[attr-defined]
    # Agnostic: every runnable type counts 1 unit of rate per unit of time, so the slow GPU
    # (60 W over idle) is filled first and each job gets 0.9 - 0.5 = 0.4 on the fast one.
    assert alloc.x == pytest.approx(np.array([[0.4, 0.5], [0.4, 0.5]]), abs=1e-6)
    assert alloc.objective == pytest.approx(0.9, rel=1e-6)


# ----------------------------------------------------------------------------------------------
# Slack 0, missing data, options


@pytest.mark.parametrize("name", ENERGY_POLICIES)
def test_slack_zero_is_the_plain_policy(name: str) -> None:
    for problem in (two_types(), two_types(energy=False)):  # slack 0 needs no power data
        plain = get_policy(name).allocate(problem)
        zero = get_policy(name, {"energy_slack": 0}).allocate(problem)
        np.testing.assert_array_equal(zero.x, plain.x)
        assert zero.objective == plain.objective and zero.solves == plain.solves


@pytest.mark.parametrize("name", ENERGY_POLICIES)
def test_slack_without_power_data_says_what_is_missing(name: str) -> None:
    with pytest.raises(InvalidProblemError, match="busy_w and idle_w"):
        get_policy(name, {"energy_slack": 0.1}).allocate(two_types(energy=False))
    partial = dataclasses.replace(two_types(), energy=EnergyModel({"fast": 300.0}, {"fast": 40.0}))
    with pytest.raises(InvalidProblemError, match=r"missing for \['slow'\]"):
        get_policy(name, {"energy_slack": 0.1}).allocate(partial)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("max_min_fairness_perf", {"energy_slak": 0.1}, r"no option\(s\) \['energy_slak'\].*"),
        ("max_min_fairness_perf", {"energy_slack": -0.1}, "must be a fraction >= 0 and < 1"),
        ("max_min_fairness_perf", {"energy_slack": 1.0}, "must be a fraction >= 0 and < 1"),
        ("max_min_fairness_perf", {"energy_slack": "lots"}, "'lots' is not a number"),
        ("max_min_fairness_perf", {"energy_slack": True}, "is not a number"),
        ("fifo_perf", {"energy_slack": 0.1}, "its options are: none"),
        ("max_sum_throughput_normalized_by_cost_perf_SLOs", {"due_dates_as_slos": "maybe"}, "true"),
    ],
)
def test_bad_options_list_the_valid_ones(
    name: str, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        get_policy(name, options)
    for valid in POLICIES[name].options:
        assert valid in str(error.value)


def test_options_parse_strings_and_reach_the_policy() -> None:
    chosen = get_policy("max_min_fairness_perf", {"energy_slack": "0.25"})
    assert isinstance(chosen, MaxMinFairnessPerf) and chosen.energy_slack == 0.25
    slos = get_policy(
        "max_sum_throughput_normalized_by_cost_perf_SLOs", {"due_dates_as_slos": "no"}
    )
    assert slos.due_dates_as_slos is False  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="energy_slack"):
        MaxMinFairnessPerf(energy_slack=2.0)


# ----------------------------------------------------------------------------------------------
# Properties on random problems


@st.composite
def energy_problems(draw: st.DrawFn) -> Problem:
    """problems() with steps, plus busy and idle watts per type (idle <= busy)."""
    problem = draw(problems(max_jobs=6, max_types=3, accounts=False))
    busy = draw(
        st.lists(
            st.sampled_from([70.0, 250.0, 300.0, 700.0]),
            min_size=problem.n_types,
            max_size=problem.n_types,
        )
    )
    idle_share = draw(
        st.lists(
            st.sampled_from([0.0, 0.1, 0.3, 1.0]),
            min_size=problem.n_types,
            max_size=problem.n_types,
        )
    )
    model = EnergyModel(
        dict(zip(problem.gpu_types, busy, strict=True)),
        {t: b * f for t, b, f in zip(problem.gpu_types, busy, idle_share, strict=True)},
        SiteEnergy(electricity_per_kwh=0.2, pue=1.3, node_base_w=200.0),
    )
    return dataclasses.replace(problem, energy=model)


def within_slack(name: str, objective: float, optimum: float, slack: float) -> bool:
    if SENSE[name] > 0:
        return objective >= (1 - slack) * optimum - TOL * max(1.0, abs(optimum))
    return objective <= (1 + slack) * optimum + TOL * max(1.0, abs(optimum))


@pytest.mark.parametrize("name", ENERGY_POLICIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=energy_problems())
def test_energy_never_rises_as_slack_grows(name: str, problem: Problem) -> None:
    plain = get_policy(name).allocate(problem)
    previous = power(problem, plain.x)
    for slack in (0.05, 0.2, 0.5):
        alloc = get_policy(name, {"energy_slack": slack}).allocate(problem)
        drawn = power(problem, alloc.x)
        assert drawn <= previous + TOL * max(1.0, previous), (slack, drawn, previous)
        assert within_slack(name, alloc.objective, plain.objective, slack)
        assert np.all(problem.num_gpus @ alloc.x <= problem.capacity + TOL)
        assert np.all(alloc.x.sum(axis=1) <= 1 + TOL)
        previous = drawn


# ----------------------------------------------------------------------------------------------
# Due dates as SLOs (max_sum_throughput_normalized_by_cost_perf_SLOs)


def due_problem() -> Problem:
    """One V100 (0.74 $/h) and one K80 (0.135 $/h), now = 0. A3C-like rates (7.18 and 3.44
    steps/s): per dollar the K80 wins, so without deadlines every job leans to the K80.
    - soon: 18000 steps due in 3600 s: needs 5 steps/s, more than the K80 gives;
    - hopeless: 36000 steps due in 3600 s (10 steps/s > 7.18, its fastest);
    - slo: a due date, but its slo_s (3600 s from arrival, 1000 steps) wins over it;
    - free: no due date."""
    return Problem(
        job_ids=("soon", "hopeless", "slo", "free"),
        gpu_types=("v100", "k80"),
        throughput=np.tile([7.18, 3.44], (4, 1)),
        capacity=np.array([1.0, 1.0]),
        num_gpus=np.ones(4, dtype=np.int64),
        weight=np.ones(4),
        steps=np.array([18000.0, 36000.0, 1000.0, 1000.0]),
        due_s=np.array([3600.0, 3600.0, 10.0, np.nan]),
        slo_s=np.array([np.inf, np.inf, 3600.0, np.inf]),
        price_per_hour=np.array([0.74, 0.135]),
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_due_dates_are_deadlines_unless_an_slo_is_given(backend: str) -> None:
    problem = due_problem()
    name = "max_sum_throughput_normalized_by_cost_perf_SLOs"
    chosen = get_policy(name)
    chosen.backend = backend  # type: ignore[attr-defined]
    alloc = chosen.allocate(problem)
    rate = rates(rate_matrix(problem), alloc.x)
    assert rate[0] >= 18000 / 3600 * (1 - 1e-6)  # "soon" is given enough to finish on time
    assert rate[2] >= 1000 / 3600 * (1 - 1e-6)  # "slo": its SLO, not its (impossible) due date
    assert alloc.unmet_slos == ("hopeless",)
    ignored = get_policy(name, {"due_dates_as_slos": False}).allocate(problem)
    assert rates(rate_matrix(problem), ignored.x)[0] < 5.0  # no deadline: it leans to the K80
    assert ignored.unmet_slos == ()


# ----------------------------------------------------------------------------------------------
# The what-if file: policy_options, costs, the example


def test_policy_options_in_the_file_and_the_call() -> None:
    problem = json.loads((EXAMPLES / "energy_tradeoff.json").read_text())
    assert problem["policy_options"] == {"energy_slack": 0.1}
    plain = run_allocate({**problem, "policy_options": {}}, "max_min_fairness_perf")
    from_file = run_allocate(problem, "max_min_fairness_perf")
    overridden = run_allocate(problem, "max_min_fairness_perf", options={"energy_slack": "0.25"})
    assert from_file["policy_options"] == {"energy_slack": 0.1}
    assert overridden["policy_options"] == {"energy_slack": 0.25}
    cost = [out["costs"]["energy_cost_per_h"] for out in (plain, from_file, overridden)]
    assert cost[0] > cost[1] > cost[2]
    objective = [out["objective"] for out in (plain, from_file, overridden)]
    assert objective[1] >= 0.9 * objective[0] - 1e-3 and objective[2] >= 0.75 * objective[0] - 1e-3
    with pytest.raises(ConfigError, match="energy_slack"):
        run_allocate(problem, "max_min_fairness_perf", options={"slack": 0.1})
    with pytest.raises(InvalidProblemError, match="policy_options"):
        run_allocate({**problem, "policy_options": 0.1}, "max_min_fairness_perf")


def test_every_energy_policy_solves_the_example() -> None:
    problem = json.loads((EXAMPLES / "energy_tradeoff.json").read_text())
    for name in ENERGY_POLICIES:
        out = run_allocate(problem, name)
        assert out["costs"]["energy_cost_per_h"] > 0, name


def test_every_policy_reports_costs_when_the_problem_has_power_data() -> None:
    reported: set[str] = set()
    for path in sorted(EXAMPLES.glob("*.json")):
        problem = json.loads(path.read_text())
        problem.pop("policy_options", None)
        has_steps = any("steps" in job for job in problem["jobs"])
        if not (has_steps or "nodes" in problem):
            continue
        for name in POLICIES:
            try:
                out = run_allocate(problem, name)
            except InvalidProblemError:
                continue  # the example lacks a field this policy needs
            assert "energy_kwh_per_h" in out["costs"], (path.name, name)
            reported.add(name)
    assert reported == set(POLICIES)
