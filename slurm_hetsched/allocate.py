"""The what-if allocation: a problem in JSON -> a policy's allocation in JSON.

`hetsched allocate --problem P.json --policy NAME` calls `run_allocate`; `--list` prints
`policy_descriptions()`. The formats are docs/interfaces.md "What-if allocation" (input and
output), with one addition: instead of `throughput`, a job may name a `class` of the shipped
throughput table (Gavel's, see docs/throughput.md), read at the job's `num_gpus`.

The problem is parsed by `parse_problem` (whatif/problem.py, strict: unknown keys are rejected
with the valid ones listed, and every error names the job, GPU type or key at fault). The
reported `solve_s` is the wall time of the policy's `allocate` call, measured here (the core
reads no clock).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from slurm_hetsched.core.costs import decision_costs
from slurm_hetsched.core.model import Problem
from slurm_hetsched.core.policies import POLICIES, get_policy
from slurm_hetsched.core.policies.options import parse_options
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.core.throughput.prior import estimated_entries
from slurm_hetsched.whatif.fields import object_at
from slurm_hetsched.whatif.problem import decision_table, parse_problem

__all__ = ["parse_problem", "policy_descriptions", "policy_options", "run_allocate"]


def policy_descriptions() -> dict[str, str]:
    """Every registered policy name -> its one-line description (for `allocate --list`)."""
    return {name: cls.description for name, cls in POLICIES.items()}


def run_allocate(
    problem_json: Mapping[str, Any],
    policy_name: str,
    table: ThroughputTable | None = None,
    *,
    options: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """Solve a what-if problem with one policy.

    Args:
        problem_json: the parsed problem file (docs/interfaces.md).
        policy_name: a name from `policy_descriptions()`.
        table: the throughput table for jobs given by `class`; default the shipped one.
        options: policy options (e.g. {"energy_slack": 0.1}; values may be strings such as
            "0.1"), merged over the file's `policy_options`: a key given here wins.

    Returns:
        {"policy", "allocation": {job: {gpu type: time fraction}}, "objective", "solve_s"},
        values rounded to 3 digits; placement policies add "placement" (job -> its GPUs on
        nodes; a job left out is postponed). When every GPU type has busy_w and idle_w and
        the problem gives `nodes` or `steps`, or options are in effect, "costs": the
        decision's expected energy and tardiness (core/costs.py `decision_costs`); options
        in effect are echoed as "policy_options".

    Raises:
        ConfigError: unknown policy name, or an option it does not accept or a bad value.
        InvalidProblemError: the problem is malformed or cannot be solved as given.
        SolverError: the solver did not reach an optimal solution.
    """
    merged = {**policy_options(problem_json), **(options or {})}
    policy = get_policy(policy_name, merged)
    problem = parse_problem(problem_json, table)
    started = time.perf_counter()
    allocation = policy.allocate(problem)
    elapsed = time.perf_counter() - started
    out = dataclasses.replace(allocation, solve_s=elapsed).to_json()
    if merged:
        out["policy_options"] = parse_options(policy_name, policy.options, merged)
    if problem.energy is not None and (problem.nodes or problem.steps is not None or merged):
        out["costs"] = decision_costs(problem, allocation.x, allocation.placements)
        utility = expected_utility(problem, out["costs"])
        if utility is not None:
            out["utility"] = utility
    estimated = estimated_rates(problem_json, problem.gpu_types, table)
    if estimated:
        out["estimated"] = estimated
    return out


def expected_utility(problem: Problem, costs: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the jobs are worth if the decision is kept until they finish: each job's utility
    (its `utility`, else its due date and tardiness weight read as one; core/utility.py) at the
    end `costs` expects, and their total; None when the costs give no ends (no `steps`)."""
    ends = {job: figures.get("end_s") for job, figures in (costs.get("jobs") or {}).items()}
    if not ends:
        return None
    values: dict[str, float] = {}
    for m, job in enumerate(problem.job_ids):
        end = ends.get(job)
        if end is None:
            continue  # not running: no end to value
        value = problem.utility(m).value(float(end), float(problem.arrival_s[m]))
        values[job] = round(value, 3)
    return {"total": round(sum(values.values()), 3), "jobs": values}


def estimated_rates(
    problem_json: Mapping[str, Any], gpu_types: Sequence[str], table: ThroughputTable | None
) -> dict[str, list[str]]:
    """Job -> the GPU types its steps/s are an estimate on, not a measurement (a job given by
    `class`: the table's estimated columns, every type for a class in no table); jobs with
    none are left out."""
    used = decision_table(problem_json, table)
    out: dict[str, list[str]] = {}
    for job in problem_json.get("jobs") or ():
        if isinstance(job, Mapping) and "class" in job:
            types = estimated_entries(used, str(job["class"]), gpu_types)
            if types:
                out[str(job.get("id"))] = types
    return out


def policy_options(data: Mapping[str, Any]) -> dict[str, object]:
    """The file's optional top-level `policy_options` object ({} if absent).

    Raises:
        InvalidProblemError: it is not an object.
    """
    return dict(object_at(data, "policy_options", "problem", required=False))
