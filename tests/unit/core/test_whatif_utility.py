"""A what-if job's `utility` object (whatif/fields.py `utility_at`): parsed by the job spec's
rules and bounds into Problem.utilities, and what `hetsched allocate` reports it is worth."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from slurm_hetsched.allocate import parse_problem, run_allocate
from slurm_hetsched.core.model import InvalidProblemError
from slurm_hetsched.core.utility import Utility, default_utility

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "andreas_two_nodes.json"
SIGMOID = {"kind": "sigmoid", "umax": 50, "target_s": 3600, "sharp": 2}


def andreas(**utilities: Any) -> dict[str, Any]:
    """The ANDREAS example (due dates, steps: the output has "utility") with these jobs'
    `utility` objects."""
    data = json.loads(EXAMPLE.read_text())
    for job in data["jobs"]:
        if job["id"] in utilities:
            job["utility"] = copy.deepcopy(utilities[job["id"]])
    return data


def test_without_a_utility_object_the_problem_has_none() -> None:
    problem = parse_problem(andreas())
    assert problem.utilities is None
    assert problem.utility(0) == default_utility(2500.0, 0.01)


def test_a_utility_object_is_parsed_and_the_others_keep_the_default() -> None:
    problem = parse_problem(andreas(urgent=SIGMOID, late={"kind": "deadline"}, relaxed={"umax": 7}))
    assert problem.utilities == (
        Utility("sigmoid", 50.0, 3600.0, 2.0, due_s=2500.0),
        default_utility(10000.0, 0.01, 7.0),
        Utility("deadline", 100.0, None, 1.0, due_s=100.0),
    )
    mixed = parse_problem(andreas(urgent=SIGMOID))
    assert mixed.utilities is not None and mixed.utilities[1:] == (
        default_utility(10000.0, 0.01),
        default_utility(100.0, 0.01),
    )


def test_a_good_utility_changes_what_allocate_reports() -> None:
    before = run_allocate(andreas(), "andreas")
    after = run_allocate(andreas(urgent=SIGMOID), "andreas")
    assert after["costs"] == before["costs"]  # the same decision: only its worth differs
    end = after["costs"]["jobs"]["urgent"]["end_s"]
    worth = Utility("sigmoid", 50.0, 3600.0, 2.0).value(end, 0.0)
    assert after["utility"]["jobs"]["urgent"] == pytest.approx(worth, abs=1e-3)
    assert before["utility"]["jobs"]["urgent"] != pytest.approx(worth, abs=1e-3)
    others = {k: v for k, v in after["utility"]["jobs"].items() if k != "urgent"}
    assert others == {k: v for k, v in before["utility"]["jobs"].items() if k != "urgent"}
    assert after["utility"]["total"] == pytest.approx(sum(after["utility"]["jobs"].values()))


@pytest.mark.parametrize(
    ("utility", "message"),
    [
        ({"kind": "cubic", "target_s": 60}, "kind is 'cubic'; expected one of sigmoid, linear"),
        ({"kind": "tardiness"}, "kind is 'tardiness'; expected one of"),
        ({"umax": -5}, "umax is -5.0; expected a number above 0 up to 1e\\+06"),
        ({"kind": "linear", "umax": 2e6, "target_s": 60}, "umax is 2000000.0"),
        ({"kind": "linear", "target_s": 4e8}, "target_s is 400000000.0; expected seconds"),
        ({"kind": "linear", "target_s": 0}, "target_s is 0.0; expected seconds"),
        ({"kind": "sigmoid"}, "kind is 'sigmoid' without target_s; expected target_s"),
        ({"target_s": 60}, "target_s is 60.0 without kind; expected it only with kind"),
        ({"kind": "linear", "target_s": 60, "sharp": 1}, "sharp is 1.0 with kind linear"),
        ({"kind": "sigmoid", "target_s": 60, "sharp": 5000}, "sharp is 5000.0; expected"),
        ({"kind": "sigmoid", "target_s": "1h"}, "`target_s` must be a number, got '1h'"),
        ({"umax": True}, "`umax` must be a number, got True"),
        ({"kind": "linear", "target": 60}, "unknown key\\(s\\) \\['target'\\]"),
        ("sigmoid", "`utility` must be an object"),
    ],
)
def test_a_bad_utility_is_an_error_naming_the_job(utility: Any, message: str) -> None:
    with pytest.raises(InvalidProblemError, match=f"^job 'relaxed'.*{message}"):
        run_allocate(andreas(relaxed=utility), "andreas")


def test_a_deadline_needs_a_target_or_the_jobs_due_date() -> None:
    data = andreas(relaxed={"kind": "deadline"})
    del data["jobs"][1]["due_s"]
    with pytest.raises(
        InvalidProblemError, match=r"^job 'relaxed' / utility: kind is 'deadline' without target_s"
    ):
        parse_problem(data)
