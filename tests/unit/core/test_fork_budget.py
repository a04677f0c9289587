"""HadarE's step budgets (core/fork_budget.py): proportional to the copies' throughput, whole
steps adding up exactly to the steps left."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_hetsched.core.fork_budget import step_budgets


def test_budgets_follow_the_nodes_throughput() -> None:
    # A V100 three times a K80's speed, a P100 twice: 600 steps split 3 : 2 : 1.
    assert step_budgets(600, {"v100": 3.0, "p100": 2.0, "k80": 1.0}) == {
        "v100": 300,
        "p100": 200,
        "k80": 100,
    }


def test_the_odd_steps_go_to_the_largest_remainders() -> None:
    # 10 over three equal copies: 3.33 each; the one step left goes to the first.
    assert step_budgets(10, {"a": 1.0, "b": 1.0, "c": 1.0}) == {"a": 4, "b": 3, "c": 3}
    # 7 split 2 : 1 is 4.67 : 2.33: the first's remainder is larger.
    assert step_budgets(7, {"fast": 2.0, "slow": 1.0}) == {"fast": 5, "slow": 2}


def test_a_copy_that_cannot_run_gets_nothing_and_no_steps_mean_no_budgets() -> None:
    assert step_budgets(5, {"a": 1.0, "dead": 0.0}) == {"a": 5, "dead": 0}
    assert step_budgets(0, {"a": 1.0, "b": 2.0}) == {"a": 0, "b": 0}


@pytest.mark.parametrize(
    ("remaining", "rates", "message"),
    [
        (-1, {"a": 1.0}, "remaining steps"),
        (5, {"a": float("nan")}, "copy 'a'"),
        (5, {"a": -1.0}, "copy 'a'"),
        (5, {"a": 0.0}, "no copy can run"),
    ],
)
def test_bad_input_is_refused(remaining: int, rates: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        step_budgets(remaining, rates)


@given(
    st.integers(min_value=0, max_value=10**9),
    st.lists(st.floats(min_value=0.0, max_value=1e6), min_size=1, max_size=8).filter(
        lambda rates: sum(rates) > 0
    ),
)
def test_budgets_add_up_and_stay_within_one_step_of_the_exact_share(
    remaining: int, rates: list[float]
) -> None:
    named = {f"c{i}": rate for i, rate in enumerate(rates)}
    budgets = step_budgets(remaining, named)
    assert sum(budgets.values()) == remaining
    total = sum(rates)
    for copy, rate in named.items():
        assert budgets[copy] >= 0
        assert abs(budgets[copy] - remaining * rate / total) < 1 + 1e-6 * remaining
        if rate == 0:
            assert budgets[copy] == 0
