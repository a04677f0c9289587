"""core/policies/exclusive.py: ANDREAS's FIFO, EDF and priority baselines (one job per node,
never preempted), on the two-node instance of test_policy_andreas.py worked out by hand, and
on random node problems."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from test_policy_andreas import (
    EUR_PER_KWH,
    HAND,
    PROPERTY,
    V100_T4,
    assert_within_capacity,
    job,
    node_problems,
    placed,
)

from slurm_hetsched.allocate import parse_problem, run_allocate
from slurm_hetsched.core.model import InvalidProblemError, Problem
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.andreas import Andreas

# Whole-node costs on HAND (no base power; V100 idle 40 W, T4 idle 10 W), per 3600-step job:
#   n1 v100 x 1: 3600 s x (300 + 3 x 40) W = 1.512 MJ;  v100 x 2: 2000 s x (600 + 2 x 40) W
#   = 1.36 MJ;  n2 t4: 7200 s x 70 W = 0.504 MJ (urgent: 14400 s, 1.008 MJ).


def test_fifo_takes_free_nodes_in_arrival_order() -> None:
    alloc = get_policy("fifo_exclusive").allocate(parse_problem(HAND))
    # urgent: only v100 x 2 meets 2500 s -> n1, whole; relaxed: the T4 is free and meets its
    # due date -> n2; late: no free node left, it waits.
    assert placed(alloc) == {"urgent": ("n1", "v100", 2), "relaxed": ("n2", "t4", 1)}
    # Proxy objective: late postponed, worst case on its slowest configuration (the T4,
    # 7200 s), 7100 s late: 100 x 0.01 x 7100; n1's job 1/3 kWh, n2's 0.14 kWh.
    assert alloc.objective == pytest.approx(7100.0 + (1 / 3 + 0.14) * EUR_PER_KWH)


def test_edf_serves_the_earliest_due_date_first() -> None:
    alloc = get_policy("edf_exclusive").allocate(parse_problem(HAND))
    # late (due 100): nothing meets it, the fastest is v100 x 2 on n1; urgent (2500): only n2
    # is free and misses 2500 anyway, so the fastest there, the T4; relaxed waits.
    assert placed(alloc) == {"late": ("n1", "v100", 2), "urgent": ("n2", "t4", 1)}


def test_priority_serves_the_highest_tardiness_weight_first() -> None:
    data = {**HAND, "jobs": [dict(j) for j in HAND["jobs"]]}
    data["jobs"][1]["tardiness_weight"] = 0.05  # relaxed first, then urgent, then late
    alloc = get_policy("priority_exclusive").allocate(parse_problem(data))
    # relaxed: every configuration meets 10000 s, the cheapest node-hour is the T4 (0.504 MJ);
    # urgent: v100 x 2 on n1; late waits.
    assert placed(alloc) == {"relaxed": ("n2", "t4", 1), "urgent": ("n1", "v100", 2)}


def test_running_jobs_keep_their_node_and_block_it() -> None:
    data: dict[str, Any] = {**HAND, "jobs": [dict(j) for j in HAND["jobs"]]}
    data["jobs"][0]["running_on"] = [{"node": "n2", "type": "t4", "count": 1}]  # urgent
    problem = parse_problem(data)
    alloc = get_policy("fifo_exclusive").allocate(problem)
    # urgent stays on n2 although it will be late there; relaxed gets n1, where v100 x 2 is
    # the cheaper whole node (1.36 < 1.512 MJ); late waits.
    assert placed(alloc) == {"urgent": ("n2", "t4", 1), "relaxed": ("n1", "v100", 2)}
    # ANDREAS re-plans everything (preemption and migration are free in its model).
    assert placed(Andreas().allocate(problem))["urgent"] == ("n1", "v100", 2)
    out = run_allocate(data, "edf_exclusive")
    assert out["placement"]["urgent"] == [{"node": "n2", "type": "t4", "count": 1}]
    assert out["costs"]["not_running"] == ["relaxed"]


def test_exclusive_prices_the_whole_node() -> None:
    # One 4-GPU V100 node with a 200 W base. Alone on the node, a job pays for all of it:
    # 1 GPU: 3600 s x (200 + 300 + 3 x 40) W = 2.232 MJ; 2 GPUs: 2000 s x (200 + 600 + 80) W
    # = 1.76 MJ, so two GPUs. ANDREAS, sharing nodes, charges a job only its GPUs and their
    # base share: 1.26 MJ against 1.4 MJ, so one GPU.
    data = {
        "nodes": [{"name": "n1", "gpus": {"v100": 4}}],
        "gpu_types": {**HAND["gpu_types"], "node_base_w": 200.0},
        "jobs": [job("a", 10000, V100_T4 | {"t4": 0.0})],
    }
    data["jobs"][0]["throughput"] = {"v100": {"1": 1.0, "2": 1.8}}
    problem = parse_problem(data)
    assert placed(get_policy("fifo_exclusive").allocate(problem)) == {"a": ("n1", "v100", 2)}
    assert placed(Andreas().allocate(problem)) == {"a": ("n1", "v100", 1)}


def test_running_on_needs_nodes_and_room() -> None:
    gpus_only = {
        "gpus": {"v100": 2},
        "jobs": [
            {
                "id": "a",
                "throughput": {"v100": 1.0},
                "running_on": [{"node": "n1", "type": "v100", "count": 1}],
            }
        ],
    }
    with pytest.raises(InvalidProblemError, match="needs a problem with `nodes`"):
        parse_problem(gpus_only)
    too_many = {
        "nodes": [{"name": "n1", "gpus": {"v100": 2}}],
        "jobs": [
            {
                "id": "a",
                "throughput": {"v100": {"1": 1.0, "4": 2.0}},
                "allowed_gpus": [1, 4],
                "running_on": [{"node": "n1", "type": "v100", "count": 4}],
            }
        ],
    }
    with pytest.raises(InvalidProblemError, match="runs on 4 v100 GPU"):
        parse_problem(too_many)
    bad_key = {
        "nodes": [{"name": "n1", "gpus": {"v100": 2}}],
        "jobs": [{**gpus_only["jobs"][0], "running_on": [{"node": "n1", "gpu": "v100"}]}],
    }
    with pytest.raises(InvalidProblemError, match="unknown key"):
        parse_problem(bad_key)


@pytest.mark.parametrize("name", ["fifo_exclusive", "edf_exclusive", "priority_exclusive"])
@PROPERTY
@given(problem=node_problems(running=True))
def test_one_job_per_node_within_capacity_running_kept(name: str, problem: Problem) -> None:
    alloc = get_policy(name).allocate(problem)
    assert_within_capacity(problem, alloc)
    assert alloc.placements is not None
    for job_id, placement in problem.running.items():
        assert alloc.placements[job_id] == placement  # never moved or stopped
    # Exclusive: a job started now is alone on its node (running jobs may share one, e.g.
    # when another policy placed them).
    nodes = [p.slices[0].node for p in alloc.placements.values()]
    for job_id, placement in alloc.placements.items():
        if job_id not in problem.running:
            assert nodes.count(placement.slices[0].node) == 1
