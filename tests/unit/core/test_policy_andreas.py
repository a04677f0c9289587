"""core/policies/andreas.py: ANDREAS's randomized greedy, on problems small enough to check by
hand, and its invariants on random node problems (hypothesis). Also the what-if keys it
needs (`allowed_gpus`, per-count throughputs) and Problem.rates_at.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_hetsched.allocate import parse_problem, run_allocate
from slurm_hetsched.core.costs import EnergyModel, SiteEnergy
from slurm_hetsched.core.model import (
    SUBLINEAR_EXPONENT,
    Allocation,
    GpuSlice,
    InvalidProblemError,
    Node,
    Placement,
    Problem,
)
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.andreas import Andreas, proxy_objective
from slurm_hetsched.data_files import shipped_throughputs

EUR_PER_KWH = 0.172 * 1.33  # ANDREAS's price x PUE
# No node base power, so a configuration's energy is just its busy GPUs' (easy by hand).
ENERGY = {
    "electricity_per_kwh": 0.172,
    "pue": 1.33,
    "node_base_w": 0.0,
    "v100": {"busy_w": 300.0, "idle_w": 40.0},
    "t4": {"busy_w": 70.0, "idle_w": 10.0},
}


def job(job_id: str, due_s: float, tput: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "throughput": tput,
        "steps": 3600,
        "due_s": due_s,
        "tardiness_weight": 0.01,
        "allowed_gpus": [1, 2],
        **extra,
    }


V100_T4 = {"v100": {"1": 1.0, "2": 1.8}, "t4": {"1": 0.5}}

# Two nodes, three jobs. Per job (3600 steps), time and energy of each configuration:
#   v100 x 1: 3600 s x 300 W = 1.08 MJ;  v100 x 2: 2000 s x 600 W = 1.2 MJ;
#   t4 x 1 (0.5 steps/s): 7200 s x 70 W = 0.504 MJ  (urgent runs at 0.25 there: 14400 s).
HAND = {
    "nodes": [{"name": "n1", "gpus": {"v100": 4}}, {"name": "n2", "gpus": {"t4": 1}}],
    "gpu_types": ENERGY,
    "jobs": [
        # D* = {v100 x 2} only: the one configuration that meets 2500 s.
        job("urgent", 2500, {"v100": {"1": 1.0, "2": 1.8}, "t4": {"1": 0.25}}),
        # D* = everything: the cheapest is the T4 (0.504 MJ), the fastest v100 x 2.
        job("relaxed", 10000, V100_T4),
        # D* is empty (due at 100 s): the fastest is v100 x 2, the cheapest the T4.
        job("late", 100, V100_T4),
    ],
}


def placed(alloc: Allocation) -> dict[str, tuple[str, str, int]]:
    assert alloc.placements is not None
    out = {}
    for job_id, placement in alloc.placements.items():
        (piece,) = placement.slices
        out[job_id] = (piece.node, piece.gpu_type, piece.count)
    return out


HAND_RESULT = {
    "late": ("n1", "v100", 2),  # no configuration meets its due date: the fastest
    "urgent": ("n1", "v100", 2),  # its only deadline-meeting configuration
    "relaxed": ("n2", "t4", 1),  # the cheapest that meets its due date, not the fastest
}
# Objective (eq. 1): late is 1900 s late at 0.01/s = 19; n1's first-ending job runs 2000 s
# on 600 W = 1.2 MJ = 1/3 kWh; n2's 0.504 MJ = 0.14 kWh.
HAND_OBJECTIVE = 19.0 + (1 / 3 + 0.14) * EUR_PER_KWH


def test_hand_instance_takes_cheapest_feasible_else_fastest() -> None:
    problem = parse_problem(HAND)
    alloc = Andreas().allocate(problem)
    assert placed(alloc) == HAND_RESULT
    assert alloc.objective == pytest.approx(HAND_OBJECTIVE)
    assert proxy_objective(problem, alloc.placements or {}, rho=100.0) == pytest.approx(
        HAND_OBJECTIVE
    )
    assert alloc.x.tolist() == [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]
    out = run_allocate(HAND, "andreas")
    assert out["placement"]["relaxed"] == [{"node": "n2", "type": "t4", "count": 1}]
    assert out["costs"]["tardiness_cost"] == pytest.approx(19.0)


def test_greedy_rule_with_room_everywhere() -> None:
    # With 6 V100s nothing is forced by lack of room: the plain greedy (MaxIt 1) shows the
    # rule itself. relaxed takes the T4 (0.504 MJ) although v100 x 2 is faster and fits.
    roomy = parse_problem(
        {**HAND, "nodes": [{"name": "n1", "gpus": {"v100": 6}}, HAND["nodes"][1]]}
    )
    greedy = Andreas(max_it=1).allocate(roomy)
    assert placed(greedy) == HAND_RESULT
    assert greedy.objective == pytest.approx(HAND_OBJECTIVE)
    # Eq. (1) charges only each node's first-ending job, so the randomized constructions
    # find that relaxed on n1 (v100 x 1, 3600 s: not first-ending there) costs nothing in
    # the objective and empties n2: consolidation onto open nodes (docs/policies.md).
    alloc = Andreas().allocate(roomy)
    assert placed(alloc) == {**HAND_RESULT, "relaxed": ("n1", "v100", 1)}
    assert alloc.objective == pytest.approx(19.0 + 1 / 3 * EUR_PER_KWH)


def test_cheapest_is_the_attributed_cost_including_base_power() -> None:
    # One 4-GPU V100 node with a 200 W base: a job on g GPUs draws g x 300 + g/4 x 200 W.
    # g = 1: 3600 s x 350 W = 1.26 MJ; g = 2: 2000 s x 700 W = 1.4 MJ -> one GPU is cheaper.
    data = {
        "nodes": [{"name": "n1", "gpus": {"v100": 4}}],
        "gpu_types": {**ENERGY, "node_base_w": 200.0},
        "jobs": [job("a", 10000, {"v100": {"1": 1.0, "2": 1.8}})],
    }
    assert placed(Andreas(max_it=1).allocate(parse_problem(data))) == {"a": ("n1", "v100", 1)}
    assert placed(Andreas().allocate(parse_problem(data))) == {"a": ("n1", "v100", 1)}


@pytest.mark.parametrize("counts", [{"1": 1.0, "2": 1.8, "4": 3.0}, {"1": 1.0}])
def test_a_job_that_cannot_meet_its_due_date_gets_the_fastest(counts: dict[str, float]) -> None:
    # Due in 60 s: nothing makes it. 4 GPUs is the fastest (1200 s measured, or
    # 3600 / 4**0.8 s scaled from one GPU), although one GPU would cost the least energy.
    data = {
        "nodes": [{"name": "n1", "gpus": {"v100": 4}}, {"name": "n2", "gpus": {"t4": 1}}],
        "gpu_types": ENERGY,
        "jobs": [job("a", 60, {"v100": counts, "t4": 0.5}, allowed_gpus=[1, 2, 4])],
    }
    for policy in (Andreas(max_it=1), Andreas()):
        assert placed(policy.allocate(parse_problem(data))) == {"a": ("n1", "v100", 4)}


def test_postponed_job_pays_rho_times_worst_case_tardiness() -> None:
    # One node, two jobs that need both its GPUs: 3600 steps at 1.8 steps/s = 2000 s each.
    # a (due 1000, pressure +1000) goes first; b (due 5000, pressure -3000) is postponed.
    data = {
        "nodes": [{"name": "n1", "gpus": {"v100": 2}}],
        "gpu_types": ENERGY,
        "jobs": [
            job("b", 5000, {"v100": {"2": 1.8}}, allowed_gpus=[2], tardiness_weight=0.02),
            job("a", 1000, {"v100": {"2": 1.8}}, allowed_gpus=[2]),
        ],
    }
    problem = parse_problem(data)
    energy_a = 1 / 3 * EUR_PER_KWH  # 2000 s x 600 W
    # H = 0: b's worst case (start now, 2000 s) ends before 5000: no penalty; a is 1000 s late.
    alloc = Andreas().allocate(problem)
    assert placed(alloc) == {"a": ("n1", "v100", 2)}
    assert alloc.objective == pytest.approx(10.0 + energy_a)
    # H = 3600 s: b may start at 3600 and end at 5600, 600 s late: rho x 0.02 x 600 = 1200.
    alloc = Andreas(interval_s=3600.0).allocate(problem)
    assert placed(alloc) == {"a": ("n1", "v100", 2)}
    assert alloc.objective == pytest.approx(10.0 + 1200.0 + energy_a)
    assert run_allocate(data, "andreas")["costs"]["not_running"] == ["b"]


def random_instance(n_nodes: int, n_jobs: int, seed: int) -> Problem:
    """Half V100 nodes with 2 GPUs, half T4 nodes with 1 (ANDREAS's scenario 1)."""
    rng = np.random.default_rng(seed)
    nodes = tuple(Node(f"n{i}", {"v100": 2} if i % 2 == 0 else {"t4": 1}) for i in range(n_nodes))
    v100 = rng.uniform(1.0, 5.0, n_jobs)
    throughput = np.stack([v100, v100 / rng.uniform(2.0, 4.0, n_jobs)], axis=1)
    steps = rng.uniform(1e3, 1e5, n_jobs)
    fastest = steps / (v100 * 2**SUBLINEAR_EXPONENT)
    return Problem(
        job_ids=tuple(f"j{m}" for m in range(n_jobs)),
        gpu_types=("v100", "t4"),
        throughput=throughput,
        capacity=np.array([2.0 * ((n_nodes + 1) // 2), float(n_nodes // 2)]),
        steps=steps,
        due_s=rng.uniform(1.0, 3.0, n_jobs) * fastest,
        tardiness_weight=rng.uniform(0.003, 0.015, n_jobs),
        nodes=nodes,
        allowed_gpus=tuple((1, 2) for _ in range(n_jobs)),
        energy=EnergyModel(
            {"v100": 300.0, "t4": 70.0},
            {"v100": 40.0, "t4": 10.0},
            SiteEnergy(0.172, 1.33, 200.0),
        ),
    )


def test_same_seed_same_schedule_and_never_worse_than_greedy() -> None:
    problem = random_instance(20, 20, seed=0)
    first = Andreas(max_it=200, seed=7).allocate(problem)
    again = Andreas(max_it=200, seed=7).allocate(problem)
    assert placed(first) == placed(again)
    assert first.objective == again.objective
    greedy = Andreas(max_it=1).allocate(problem)
    # The first construction is the plain greedy, so more constructions never do worse ...
    for seed in range(4):
        assert Andreas(max_it=200, seed=seed).allocate(problem).objective <= greedy.objective
    # ... and here the randomized ones find something better.
    assert first.objective < greedy.objective
    # The reported objective is eq. (1) of the schedule returned.
    assert proxy_objective(problem, first.placements or {}, rho=100.0) == pytest.approx(
        first.objective
    )


def test_needs_nodes_steps_and_power() -> None:
    policy = get_policy("andreas")
    no_nodes = {"gpus": {"v100": 2}, "jobs": [{"id": "a", "throughput": {"v100": 1.0}}]}
    with pytest.raises(InvalidProblemError, match="give `nodes`"):
        policy.allocate(parse_problem(no_nodes))
    no_steps = {"nodes": [{"name": "n", "gpus": {"v100": 2}}], "jobs": no_nodes["jobs"]}
    with pytest.raises(InvalidProblemError, match="needs `steps`"):
        policy.allocate(parse_problem(no_steps))
    no_power = {
        "nodes": [{"name": "n", "gpus": {"x9": 2}}],
        "jobs": [{"id": "a", "throughput": {"x9": 1.0}, "steps": 10}],
    }
    with pytest.raises(InvalidProblemError, match="busy_w and idle_w"):
        policy.allocate(parse_problem(no_power))


# ----------------------------------------------------------------------------------------------
# Random node problems (hypothesis): every placement policy stays within capacity

TYPES = ("v100", "t4", "k80")
POWER = EnergyModel(
    {"v100": 300.0, "t4": 70.0, "k80": 150.0},
    {"v100": 40.0, "t4": 10.0, "k80": 25.0},
    SiteEnergy(0.172, 1.33, 200.0),
)


@st.composite
def node_problems(draw: st.DrawFn, running: bool = False) -> Problem:
    """A valid nodes problem: every job runs on some node's GPU type at its num_gpus."""
    n_nodes = draw(st.integers(1, 6))
    nodes = []
    for i in range(n_nodes):
        t = draw(st.sampled_from(TYPES))
        count = draw(st.integers(1, 4))
        in_use = draw(st.integers(0, count - 1))
        available = draw(st.booleans()) if i > 0 else True
        nodes.append(Node(f"n{i}", {t: count}, {t: in_use}, available=available))
    types_ = tuple(dict.fromkeys(t for node in nodes for t in node.gpus))
    capacity = np.array([sum(node.free_gpus(t) for node in nodes) for t in types_], dtype=float)
    n_jobs = draw(st.integers(1, 10))
    rate = st.floats(0.1, 10.0)
    rows, allowed = [], []
    for _ in range(n_jobs):
        counts = sorted(draw(st.sets(st.sampled_from([1, 2, 4]), min_size=1, max_size=3)))
        row = [draw(st.one_of(st.just(0.0), rate)) for _ in types_]
        if not any(r > 0 and c >= counts[0] for r, c in zip(row, capacity, strict=True)):
            counts = [1]
            row[int(np.argmax(capacity))] = draw(rate)
        rows.append(row)
        allowed.append(tuple(counts))
    due = [draw(st.one_of(st.just(math.nan), st.floats(1.0, 1e5))) for _ in range(n_jobs)]
    problem = Problem(
        job_ids=tuple(f"j{m}" for m in range(n_jobs)),
        gpu_types=types_,
        throughput=np.array(rows),
        capacity=capacity,
        num_gpus=np.array([a[0] for a in allowed]),
        steps=np.array([draw(st.floats(0.0, 1e5)) for _ in range(n_jobs)]),
        due_s=np.array(due),
        tardiness_weight=np.array([draw(st.floats(0.0, 0.02)) for _ in range(n_jobs)]),
        nodes=tuple(nodes),
        allowed_gpus=tuple(allowed),
        energy=POWER,
    )
    if not running:
        return problem
    # Some jobs already run, each on one node's free GPUs at its num_gpus.
    free = {(node.name, t): node.free_gpus(t) for node in nodes for t in node.gpus}
    placements = {}
    for m, job_id in enumerate(problem.job_ids):
        if not draw(st.booleans()):
            continue
        g = int(problem.num_gpus[m])
        for (name, t), left in free.items():
            if left >= g and problem.throughput[m, types_.index(t)] > 0:
                placements[job_id] = Placement(job_id, (GpuSlice(name, t, g),))
                free[(name, t)] -= g
                break
    return Problem(**{**_fields(problem), "running": placements})


def _fields(problem: Problem) -> dict[str, Any]:
    names = [
        "job_ids",
        "gpu_types",
        "throughput",
        "capacity",
        "num_gpus",
        "steps",
        "due_s",
        "tardiness_weight",
        "nodes",
        "allowed_gpus",
        "energy",
    ]
    return {name: getattr(problem, name) for name in names}


def assert_within_capacity(problem: Problem, alloc: Allocation) -> None:
    """Each placed job: one node's GPUs of one type, an allowed count, never more than free."""
    assert alloc.placements is not None
    used: dict[tuple[str, str], int] = {}
    nodes = {node.name: node for node in problem.nodes}
    for m, job_id in enumerate(problem.job_ids):
        placement = alloc.placements.get(job_id)
        if placement is None:
            assert not alloc.x[m].any()
            continue
        (piece,) = placement.slices  # one node, one type
        assert piece.count in problem.gpu_options(m)
        j = problem.gpu_types.index(piece.gpu_type)
        assert problem.rates_at(piece.count)[m, j] > 0  # it can run there
        assert alloc.x[m].tolist() == [1.0 if k == j else 0.0 for k in range(problem.n_types)]
        key = (piece.node, piece.gpu_type)
        used[key] = used.get(key, 0) + piece.count
    for (name, t), count in used.items():
        assert count <= nodes[name].free_gpus(t), (name, t, count)
    assert np.all(problem.num_gpus @ alloc.x <= problem.capacity + 1e-9)


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(problem=node_problems(), seed=st.integers(0, 3))
def test_andreas_never_exceeds_capacity(problem: Problem, seed: int) -> None:
    alloc = Andreas(max_it=20, seed=seed).allocate(problem)
    assert_within_capacity(problem, alloc)
    assert alloc.objective == pytest.approx(
        proxy_objective(problem, alloc.placements or {}, rho=100.0), rel=1e-9, abs=1e-9
    )


@PROPERTY
@given(problem=node_problems())
def test_andreas_places_a_lone_job_whenever_it_fits(problem: Problem) -> None:
    # A job is postponed only if no configuration of its list has room, so alone on the
    # cluster it runs whenever some node can take it.
    one = Problem(**{**_fields(problem), **_row(problem, 0)})
    alloc = Andreas(max_it=5).allocate(one)
    fits = any(
        g <= node.free_gpus(t) and one.rates_at(g)[0, one.gpu_types.index(t)] > 0
        for node in one.nodes
        for t in node.gpus
        for g in one.gpu_options(0)
    )
    assert (alloc.placements is not None and "j0" in alloc.placements) == fits


def _row(problem: Problem, m: int) -> dict[str, Any]:
    """The fields of a problem with only job row m."""
    pick = [m]
    out: dict[str, Any] = {
        "job_ids": (problem.job_ids[m],),
        "throughput": problem.throughput[pick],
        "num_gpus": problem.num_gpus[pick],
        "steps": problem.require("steps", "t")[pick],
        "due_s": problem.require("due_s", "t")[pick],
        "tardiness_weight": problem.require("tardiness_weight", "t")[pick],
        "allowed_gpus": (problem.gpu_options(m),),
    }
    return out


# ----------------------------------------------------------------------------------------------
# GPU counts: Problem.rates_at and the what-if keys


def test_rates_at_uses_measured_counts_and_scales_the_rest() -> None:
    problem = Problem(
        job_ids=("a",),
        gpu_types=("v100", "t4"),
        throughput=np.array([[2.0, 0.0]]),  # at 1 GPU; cannot run on the T4
        capacity=np.array([8.0, 4.0]),
        allowed_gpus=((1, 2, 4, 8),),
        throughput_at=np.array([[[np.nan, np.nan, np.nan, 6.0], [np.nan] * 4]]),
    )
    assert problem.rates_at(1)[0].tolist() == [2.0, 0.0]
    assert problem.rates_at(2)[0, 0] == pytest.approx(2.0 * 2**0.8)  # scaled from 1 GPU
    assert problem.rates_at(4)[0, 0] == pytest.approx(6.0)  # measured
    assert problem.rates_at(8)[0, 0] == pytest.approx(6.0 * 2**0.8)  # scaled from 4 GPUs
    assert problem.rates_at(8)[0, 1] == 0.0


def test_allowed_gpus_in_the_what_if_format() -> None:
    data = {
        "nodes": [{"name": "n1", "gpus": {"v100": 8}}],
        "jobs": [{"id": "r", "class": "ResNet-18 (batch size 32)", "allowed_gpus": [4, 1, 2]}],
    }
    problem = parse_problem(data)
    assert problem.allowed_gpus == ((1, 2, 4),)
    assert problem.num_gpus.tolist() == [1]  # the smallest allowed count
    table = shipped_throughputs()
    for g in (1, 2, 4):  # the shipped table measures these counts: no scaling
        expected = table.steps_per_s("ResNet-18 (batch size 32)", "v100", g)
        assert problem.rates_at(g)[0, 0] == pytest.approx(expected)
    with pytest.raises(InvalidProblemError, match="smallest of allowed_gpus"):
        parse_problem({**data, "jobs": [{**data["jobs"][0], "num_gpus": 2}]})
    with pytest.raises(InvalidProblemError, match="allowed_gpus"):
        parse_problem({**data, "jobs": [{**data["jobs"][0], "allowed_gpus": []}]})
    with pytest.raises(InvalidProblemError, match="start at its num_gpus 2"):
        Problem(
            job_ids=("a",),
            gpu_types=("v100",),
            throughput=np.ones((1, 1)),
            capacity=np.array([4.0]),
            num_gpus=np.array([2]),
            allowed_gpus=((1, 2),),
        )


def test_nodes_must_agree_with_capacity() -> None:
    with pytest.raises(InvalidProblemError, match="disagrees with the nodes"):
        Problem(
            job_ids=("a",),
            gpu_types=("v100",),
            throughput=np.ones((1, 1)),
            capacity=np.array([3.0]),
            nodes=(Node("n1", {"v100": 2}),),
        )
