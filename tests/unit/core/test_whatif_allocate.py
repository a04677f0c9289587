"""slurm_hetsched/allocate.py: the what-if JSON in and out (docs/interfaces.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slurm_hetsched.allocate import parse_problem, policy_descriptions, run_allocate
from slurm_hetsched.core.model import AccountPolicy, InvalidProblemError
from slurm_hetsched.core.policies import POLICIES
from slurm_hetsched.data_files import shipped_throughputs
from slurm_hetsched.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
GAVEL_IN = {
    "gpus": {"v100": 1, "k80": 1},
    "jobs": [
        {"id": "j0", "throughput": {"v100": 4.0, "k80": 1.0}},
        {"id": "j1", "throughput": {"v100": 3.0, "k80": 1.0}},
        {"id": "j2", "throughput": {"v100": 2.0, "k80": 1.0}},
    ],
}


def test_gavel_example_gives_the_documented_output() -> None:
    out = run_allocate(GAVEL_IN, "max_min_fairness_perf")
    solve_s = out.pop("solve_s")
    assert out == {
        "policy": "max_min_fairness_perf",
        "allocation": {
            "j0": {"v100": 0.455, "k80": 0.0},
            "j1": {"v100": 0.455, "k80": 0.091},
            "j2": {"v100": 0.091, "k80": 0.909},
        },
        "objective": 0.727,
    }
    assert 0 <= solve_s < 5


def test_every_example_file_solves_with_every_policy() -> None:
    files = sorted(EXAMPLES.glob("*.json"))
    assert files, EXAMPLES
    solved: set[str] = set()
    for path in files:
        problem = json.loads(path.read_text())
        for name in POLICIES:
            try:
                out = run_allocate(problem, name)
            except InvalidProblemError:
                continue  # the example lacks a field this policy needs (e.g. `steps`)
            except ConfigError:
                assert "policy_options" in problem, (path, name)
                continue  # the example's policy_options are another policy's
            assert set(out["allocation"]) == {job["id"] for job in problem["jobs"]}, path
            solved.add(name)
    # ... but every policy has an example it solves.
    assert solved == set(POLICIES)


def test_policy_descriptions_cover_the_registry() -> None:
    descriptions = policy_descriptions()
    assert set(descriptions) == set(POLICIES)
    assert all(isinstance(d, str) and d for d in descriptions.values())


def test_nodes_instead_of_gpus() -> None:
    problem = parse_problem(
        {
            "nodes": [
                {"name": "n1", "gpus": {"v100": 2}},
                {"name": "n2", "gpus": {"v100": 2, "k80": 4}, "gpus_in_use": {"k80": 1}},
                {"name": "n3", "gpus": {"k80": 4}, "available": False},
            ],
            "jobs": [{"id": "a", "throughput": {"v100": 1.0}}],
        }
    )
    assert problem.gpu_types == ("v100", "k80")
    assert problem.capacity.tolist() == [4.0, 3.0]


def test_optional_job_keys() -> None:
    problem = parse_problem(
        {
            "gpus": {"v100": 4, "k80": 4},
            "accounts": {"ml": {"weight": 2, "policy": "fifo"}},
            "gpu_types": {"v100": {"price_per_hour": 2.5}},
            "jobs": [
                {
                    "id": "a",
                    "scale_factor": 2,
                    "weight": 3,
                    "account": "ml",
                    "arrival_s": -60,
                    "steps": 1000,
                    "due_s": 3600,
                    "tardiness_weight": 0.5,
                    "slo_s": 7200,
                    "time_received_s": {"v100": 30},
                    "throughput": {"v100": {"1": 2.0, "2": 3.5}, "k80": 1.0},
                    "packed": {"b": {"v100": [1.5, 0.7]}},
                },
                {"id": "b", "num_gpus": 2, "throughput": {"v100": 2.0}, "steps": 10},
            ],
        }
    )
    assert problem.num_gpus.tolist() == [2, 2]
    assert problem.throughput.tolist() == [[3.5, 1.0], [2.0, 0.0]]  # at num_gpus = 2
    assert problem.weight.tolist() == [3.0, 1.0]
    assert problem.job_accounts == ("ml", "")
    assert problem.account("ml").policy is AccountPolicy.FIFO and problem.account("ml").weight == 2
    assert problem.steps is not None and problem.steps.tolist() == [1000.0, 10.0]
    assert problem.due_s is not None and np.isnan(problem.due_s[1]) and problem.due_s[0] == 3600
    assert problem.slo_s is not None and problem.slo_s.tolist() == [7200.0, np.inf]
    assert problem.tardiness_weight is not None and problem.tardiness_weight.tolist() == [0.5, 0.0]
    assert problem.received_s is not None and problem.received_s.tolist() == [
        [30.0, 0.0],
        [0.0, 0.0],
    ]
    assert problem.price_per_hour is not None and problem.price_per_hour.tolist() == [2.5, 0.135]
    assert problem.packed is not None
    assert problem.packed.pairs.tolist() == [[0, 1]]
    assert problem.packed.throughput[0].tolist() == [[1.5, 0.7], [0.0, 0.0]]


def test_jobs_by_class_read_the_shipped_table() -> None:
    problem = parse_problem(
        {
            "gpus": {"v100": 4, "a100": 2},
            "jobs": [{"id": "r", "class": "ResNet-50 (batch size 64)", "num_gpus": 4}],
        }
    )
    expected = shipped_throughputs().steps_per_s("ResNet-50 (batch size 64)", "v100", 4)
    v100, a100 = problem.throughput[0].tolist()
    assert v100 == expected
    # No a100 column: estimated from the datasheet figures, faster than a V100 by them.
    assert a100 > v100


def test_allocate_marks_what_is_estimated() -> None:
    data = {
        "gpus": {"v100": 4, "a100": 2},
        "jobs": [
            {"id": "known", "class": "ResNet-50 (batch size 64)"},
            {"id": "new", "class": "my-own-model"},
            {"id": "given", "throughput": {"v100": 2.0, "a100": 3.0}},
        ],
    }
    out = run_allocate(data, "max_min_fairness_perf")
    # a100 is an estimated column for a known class; a class in no table is estimated on
    # every type; a job that gives its own throughputs is estimated nowhere.
    assert out["estimated"] == {"known": ["a100"], "new": ["v100", "a100"]}
    problem = parse_problem(data)
    row = problem.throughput[1]
    assert (row > 0).all()  # the neutral prior runs it everywhere with figures


def _problem(**job: Any) -> dict[str, Any]:
    return {"gpus": {"v100": 2, "k80": 2}, "jobs": [{"id": "j1", **job}]}


@pytest.mark.parametrize(
    ("problem", "message"),
    [
        (
            {**_problem(throughput={"v100": 1.0}), "clusters": 1},
            "unknown key\\(s\\) \\['clusters'\\]",
        ),
        (_problem(throughput={"v100": 1.0}, gpu=1), "job 'j1': unknown key\\(s\\) \\['gpu'\\]"),
        (_problem(throughput={"a100": 1.0}), "job 'j1' / throughput: unknown GPU type 'a100'"),
        (_problem(throughput={"v100": 0.0}), "job 'j1' .* cannot run on any GPU type"),
        (_problem(throughput={"v100": 1.0}, num_gpus=4), "job 'j1' \\(num_gpus=4\\) cannot run"),
        (_problem(throughput={"v100": 1.0}, steps=-5), "job 'j1': `steps` -5.0 must be >= 0"),
        (_problem(throughput={"v100": -1.0}), "job 'j1' / throughput / 'v100'"),
        (_problem(throughput={"v100": 1.0}, num_gpus=2, scale_factor=1), "disagree"),
        (_problem(throughput={"v100": 1.0}, weight=0), "job 'j1': `weight` must be > 0"),
        (_problem(), "exactly one of `throughput` and `class`"),
        (_problem(throughput={"v100": 1.0}, packed={"j9": {}}), "unknown partner job 'j9'"),
        (
            {"gpus": {"v100": 0}, "jobs": [{"id": "a", "throughput": {"v100": 1.0}}]},
            "zero total capacity",
        ),
        ({"gpus": {"v100": 1}, "nodes": [], "jobs": []}, "exactly one of `gpus` and `nodes`"),
        ({"gpus": {"v100": 1.5}, "jobs": []}, "whole number"),
        (
            {
                "gpus": {"v100": 1},
                "jobs": [
                    {"id": "a", "throughput": {"v100": 1}},
                    {"id": "a", "throughput": {"v100": 1}},
                ],
            },
            "'a' appears twice",
        ),
        (
            {"gpus": {"v100": 1}, "accounts": {"x": {"policy": "lottery"}}, "jobs": []},
            "account 'x': policy 'lottery'",
        ),
        (
            {
                "gpus": {"v100": 1},
                "jobs": [
                    {"id": "a", "throughput": {"v100": 1}, "steps": 1},
                    {"id": "b", "throughput": {"v100": 1}},
                ],
            },
            "job 'b': `steps` is missing",
        ),
    ],
)
def test_invalid_problems_are_reported_by_name(problem: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidProblemError, match=message):
        run_allocate(problem, "max_min_fairness_perf")


def test_unknown_policy() -> None:
    with pytest.raises(ConfigError, match="unknown policy 'fastest'"):
        run_allocate(GAVEL_IN, "fastest")


def test_allocate_reports_what_the_jobs_are_worth_at_their_expected_ends() -> None:
    data = json.loads(Path("examples/andreas_two_nodes.json").read_text())
    out = run_allocate(data, "andreas")
    jobs = out["costs"]["jobs"]
    # Each job keeps the default maximum utility less its tardiness cost (never below 0).
    expected = {job: max(0.0, 100.0 - figures["tardiness_cost"]) for job, figures in jobs.items()}
    assert out["utility"]["jobs"] == pytest.approx(expected)
    assert out["utility"]["total"] == pytest.approx(sum(expected.values()))
    assert any(v < 100.0 for v in expected.values())
