"""Completion-time utilities (core/utility.py) and their spec keys (core/jobspec.py)."""

from __future__ import annotations

import itertools
from datetime import UTC

import numpy as np
import pytest

from slurm_hetsched.core.jobspec import JobSpecError, parse_job_spec
from slurm_hetsched.core.utility import DEFAULT_MAX_UTILITY, SHARP_MAX, Utility, default_utility
from slurm_hetsched.core.utility_values import utility_values

NOW = 1_800_000_000.0
H = 3600.0


def spec_utility(text: str) -> Utility:
    return parse_job_spec(f"hetsched:class=c;{text}", local_tz=UTC, now_s=NOW).utility


def test_sigmoid_is_half_at_its_target_and_steeper_with_sharpness() -> None:
    soft = Utility("sigmoid", 50.0, target_s=6 * H, sharpness_per_h=1.0)
    assert soft.value(6 * H, 0.0) == pytest.approx(25.0)
    assert soft.value(0.0, 0.0) == pytest.approx(50.0 / (1 + 2.718281828**-6))
    sharp = Utility("sigmoid", 50.0, target_s=6 * H, sharpness_per_h=20.0)
    assert sharp.value(5 * H, 0.0) > 49.9 and sharp.value(7 * H, 0.0) < 0.1
    # Time-insensitive at sharpness 0; never overflows far past the target.
    assert Utility("sigmoid", 8.0, 6 * H, 0.0).value(1e9, 0.0) == pytest.approx(4.0)
    assert sharp.value(1e12, 0.0) == 0.0


def test_linear_deadline_tardiness_and_flat() -> None:
    linear = Utility("linear", 10.0, target_s=10 * H)
    assert [linear.value(t * H, 0.0) for t in (0, 5, 10, 20)] == [10.0, 5.0, 0.0, 0.0]
    by_target = Utility("deadline", 7.0, target_s=2 * H)
    assert by_target.value(100 + 2 * H, 100.0) == 7.0 and by_target.value(101 + 2 * H, 100) == 0
    by_due = Utility("deadline", 7.0, due_s=500.0)
    assert by_due.value(500.0, 0.0) == 7.0 and by_due.value(501.0, 0.0) == 0.0
    late = default_utility(due_s=1000.0, tardiness_weight=0.01)
    assert late.kind == "tardiness" and late.value(1000.0, 0.0) == DEFAULT_MAX_UTILITY
    assert late.value(1000.0 + 5000, 0.0) == pytest.approx(DEFAULT_MAX_UTILITY - 50.0)
    assert late.value(1e9, 0.0) == 0.0  # floored: never negative
    assert default_utility(None, 0.5).value(1e9, 0.0) == DEFAULT_MAX_UTILITY


@pytest.mark.parametrize(
    "utility",
    [
        Utility("sigmoid", 3.0, 100.0, 5.0),
        Utility("linear", 3.0, 100.0),
        Utility("deadline", 3.0, 100.0),
        default_utility(50.0, 0.1, 3.0),
    ],
)
def test_every_shape_is_bounded_and_never_rises_with_completion(utility: Utility) -> None:
    values = [utility.value(t, 0.0) for t in range(0, 400, 7)]
    assert all(0.0 <= v <= 3.0 for v in values)
    assert all(a >= b for a, b in itertools.pairwise(values))


@pytest.mark.parametrize(
    "utility",
    [
        Utility("sigmoid", 3.0, 100.0, 5.0),
        Utility("sigmoid", 3.0, 100.0, 0.0),
        Utility("sigmoid", 3.0, 100.0, SHARP_MAX),  # overflows past its target
        Utility("linear", 3.0, 100.0),
        Utility("deadline", 3.0, 100.0),
        Utility("deadline", 3.0, None, due_s=150.0),
        Utility("deadline", 3.0),  # neither: never in time
        default_utility(50.0, 0.1, 3.0),
        Utility("flat", 3.0),
    ],
)
def test_values_at_once_equal_each_value(utility: Utility) -> None:
    """The vectorised form a schedule search uses gives what `value` gives, one by one."""
    times = np.array([-50.0, 0.0, 49.5, 100.0, 100.5, 150.0, 151.0, 3.6e6, 1e12])
    expected = [utility.value(float(t), 10.0) for t in times]
    assert utility_values(utility, times, 10.0).tolist() == pytest.approx(expected, abs=1e-12)


def test_spec_keys_give_the_utility() -> None:
    assert spec_utility("utility=sigmoid;umax=50;target=6h;sharp=2") == Utility(
        "sigmoid", 50.0, 6 * H, 2.0
    )
    assert spec_utility("utility=linear;target=90m").target_s == 90 * 60
    assert spec_utility("utility=deadline;target=3600").target_s == 3600.0
    assert spec_utility("utility=deadline;target=1.5d").target_s == 1.5 * 86400
    due = spec_utility("utility=deadline;due=2027-01-15T00:00Z")
    assert due.kind == "deadline" and due.target_s is None and due.due_s is not None
    # Without utility=: the due date and tardiness weight, as ANDREAS's specs have them.
    derived = spec_utility("due=2027-01-15T00:00Z;tw=0.5;umax=20")
    assert derived.kind == "tardiness" and derived.max_utility == 20.0
    assert derived.tardiness_weight == 0.5
    assert spec_utility("steps=10").kind == "flat"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("utility=cubic;target=1h", "utility='cubic': expected one of sigmoid, linear, deadline"),
        ("utility=sigmoid", "utility=sigmoid needs target="),
        ("utility=deadline", "utility=deadline needs target= or due="),
        ("target=6h", "target= needs utility="),
        ("sharp=2", "sharp= needs utility="),
        ("utility=linear;target=1h;sharp=2", "sharp= is the steepness of utility=sigmoid"),
        ("utility=linear;target=0", "target='0': expected a duration > 0"),
        ("utility=linear;target=11000d", "target='11000d'"),
        ("utility=linear;target=6y", "target='6y'"),
        ("utility=linear;target=nan", "target='nan'"),
        ("utility=sigmoid;target=1h;sharp=4000", "sharp='4000'"),
        ("umax=0", "umax='0': expected a number > 0"),
        ("umax=1e7", "umax='1e7'"),
        ("umax=-3", "umax='-3'"),
    ],
)
def test_bad_utility_keys_are_one_clear_error(text: str, message: str) -> None:
    with pytest.raises(JobSpecError, match=message.replace("(", r"\(").replace("?", r"\?")):
        spec_utility(text)
