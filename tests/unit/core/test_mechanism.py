"""core/mechanism.py: Gavel's round mechanism (priorities, greedy choice, placement, reset rule).

The convergence tests simulate rounds exactly as the simulator and the controller will: plan a
round, let every placed job run the whole round, record it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np
import pytest
from problem_builders import gavel_example

from slurm_hetsched.core.mechanism import (
    RoundOptions,
    compute_priorities,
    plan_round,
    record_round,
    type_speeds,
)
from slurm_hetsched.core.model import (
    Allocation,
    ClusterSnapshot,
    GpuSlice,
    InvalidProblemError,
    Job,
    Node,
    Placement,
    RoundPlan,
    RoundState,
)
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.base import round_options_for
from slurm_hetsched.data_files import shipped_throughputs

ROUND_S = 360.0
GLOBAL = RoundOptions(queue="global")


# ----------------------------------------------------------------------------------------------
# Builders


def alloc(rows: dict[str, dict[str, float]], gpu_types: Sequence[str]) -> Allocation:
    """An allocation from {job: {type: fraction}} (missing types are 0)."""
    x = [[rows[j].get(t, 0.0) for t in gpu_types] for j in rows]
    return Allocation(
        tuple(rows), tuple(gpu_types), np.array(x).reshape(len(rows), -1), 0.0, 0.0, "test"
    )


def snap(nodes: Sequence[Node], sizes: dict[str, int], now_s: float = 0.0) -> ClusterSnapshot:
    """A snapshot with jobs of the given GPU counts."""
    jobs = tuple(Job(key, "A3C", num_gpus=g) for key, g in sizes.items())
    return ClusterSnapshot(now_s, tuple(nodes), jobs)


def simulate(
    allocation: Allocation,
    nodes: Sequence[Node],
    sizes: dict[str, int],
    rounds: int = 200,
) -> tuple[RoundState, list[RoundPlan]]:
    """Run `rounds` full rounds of a fixed allocation; every placed job runs the whole round."""
    state = RoundState.initial(allocation.gpu_types)
    plans = []
    for r in range(rounds):
        plan, state = plan_round(allocation, state, snap(nodes, sizes, r * ROUND_S), ROUND_S)
        assert_within_capacity(plan, nodes)
        state = record_round(state, {job: ROUND_S for job in plan.placements})
        plans.append(plan)
    return state, plans


def used_gpus(plan: RoundPlan) -> dict[tuple[str, str], int]:
    used: dict[tuple[str, str], int] = {}
    for placement in plan.placements.values():
        for piece in placement.slices:
            used[piece.node, piece.gpu_type] = (
                used.get((piece.node, piece.gpu_type), 0) + piece.count
            )
    return used


def assert_within_capacity(plan: RoundPlan, nodes: Sequence[Node]) -> None:
    by_name = {node.name: node for node in nodes}
    for (node, gpu_type), count in used_gpus(plan).items():
        assert count <= by_name[node].free_gpus(gpu_type), (node, gpu_type, count)


def random_allocation(
    seed: int, n_jobs: int = 30, n_configs: int = 8
) -> tuple[Allocation, list[Node], dict[str, int]]:
    """A random allocation that fills every GPU and can be realised exactly.

    Cluster: 3 k80 nodes x 4, 2 p100 nodes x 4, 2 v100 nodes x 8. Jobs of 1, 2 and 4 GPUs. The
    allocation is a random mixture of `n_configs` configurations, each running some jobs (one
    type each) so that every GPU is busy; so the time-sharing of those configurations realises
    it exactly, and the mechanism has no idle capacity to hand out beyond it.
    """
    rng = np.random.default_rng(seed)
    layout = {"k80": (3, 4), "p100": (2, 4), "v100": (2, 8)}
    types = tuple(layout)
    nodes = [Node(f"{t}-{i}", {t: g}) for t, (n, g) in layout.items() for i in range(n)]
    capacity = np.array([n * g for n, g in layout.values()])
    sizes = rng.choice([1, 1, 1, 2, 4], size=n_jobs)
    x = np.zeros((n_jobs, len(types)))
    for weight in rng.dirichlet(np.ones(n_configs)):
        while True:
            config = np.zeros_like(x)
            left = capacity.copy()
            for m in rng.permutation(n_jobs):
                options = np.flatnonzero(left >= sizes[m])
                if options.size:
                    t = rng.choice(options)
                    config[m, t] = 1.0
                    left[t] -= sizes[m]
            if not left.any():
                break
        x += weight * config
    job_ids = tuple(f"j{m:02d}" for m in range(n_jobs))
    allocation = Allocation(job_ids, types, x, 0.0, 0.0, "test")
    return allocation, nodes, {j: int(g) for j, g in zip(job_ids, sizes, strict=True)}


# ----------------------------------------------------------------------------------------------
# Convergence


def test_gavel_worked_example_converges_to_the_allocation() -> None:
    allocation = get_policy("max_min_fairness_perf").allocate(gavel_example())
    nodes = [Node("n1", {"v100": 1}), Node("n2", {"k80": 1})]
    state, plans = simulate(allocation, nodes, dict.fromkeys(allocation.job_ids, 1))
    fractions = state.received_s / (len(plans) * ROUND_S)
    np.testing.assert_allclose(fractions, allocation.x, atol=0.05)
    # Both GPUs are busy every round: the allocation fills them.
    assert all(len(plan.placements) == 2 for plan in plans)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_multi_gpu_allocation_converges(seed: int) -> None:
    allocation, nodes, sizes = random_allocation(seed)
    assert max(sizes.values()) == 4 and min(sizes.values()) == 1
    state, plans = simulate(allocation, nodes, sizes)
    fractions = state.received_s / (len(plans) * ROUND_S)
    assert np.abs(fractions - allocation.x).max() <= 0.05
    assert state.received_s[allocation.x == 0].sum() == 0  # never on a type with no share


def test_priorities_are_allocation_over_share_with_half_round_prior() -> None:
    x = np.array([[0.5, 0.0], [0.5, 0.2]])
    received = np.array([[3.0, 0.0], [1.0, 0.0]])
    # round 2 s -> prior 1 s per job and type; v100 total 4 + 2*1 = 6, k80 total 0 + 2 = 2.
    priority = compute_priorities(x, received, round_s=2.0)
    np.testing.assert_allclose(priority, [[0.5 / (4 / 6), 0.0], [0.5 / (2 / 6), 0.2 / (1 / 2)]])
    # Nothing received yet: every share is 1/n, the priority is n * allocation (finite).
    np.testing.assert_allclose(compute_priorities(x, np.zeros((2, 2)), 360.0), 2 * x)


# ----------------------------------------------------------------------------------------------
# Selection


def test_higher_priority_first_and_one_type_per_job() -> None:
    allocation = alloc({"a": {"v100": 0.9, "k80": 0.1}, "b": {"v100": 0.1}}, ["v100", "k80"])
    nodes = [Node("n1", {"v100": 1, "k80": 1})]
    plan, _ = plan_round(
        allocation,
        RoundState.initial(["v100", "k80"]),
        snap(nodes, {"a": 1, "b": 1}),
        ROUND_S,
        options=GLOBAL,
    )
    assert plan.placements["a"].slices == (GpuSlice("n1", "v100", 1),)
    assert "b" not in plan.placements  # v100 is taken, and b has no share of k80
    assert plan.priority["a"] == pytest.approx(2 * 0.9)  # chosen on v100: 0.9 / (1/2)


def test_largest_job_first_among_equal_priorities() -> None:
    allocation = alloc({"small": {"v100": 0.5}, "big": {"v100": 0.5}}, ["v100"])
    nodes = [Node("n1", {"v100": 2})]
    plan, _ = plan_round(
        allocation, RoundState.initial(["v100"]), snap(nodes, {"small": 1, "big": 2}), ROUND_S
    )
    assert list(plan.placements) == ["big"]


def test_zero_allocation_type_is_never_used_even_when_idle() -> None:
    allocation = alloc({"a": {"v100": 0.5}, "b": {"v100": 0.5}}, ["v100", "k80"])
    nodes = [Node("n1", {"v100": 1}), Node("n2", {"k80": 4})]
    _, plans = simulate(allocation, nodes, {"a": 1, "b": 1}, rounds=10)
    assert all(p.gpu_types == ("v100",) for plan in plans for p in plan.placements.values())


def test_job_waits_when_its_type_is_full_and_lower_priorities_fill_the_rest() -> None:
    allocation = alloc({"big": {"v100": 0.9}, "small": {"v100": 0.1}}, ["v100"])
    nodes = [Node("n1", {"v100": 4}, gpus_in_use={"v100": 2})]
    plan, _ = plan_round(
        allocation, RoundState.initial(["v100"]), snap(nodes, {"big": 4, "small": 1}), ROUND_S
    )
    assert list(plan.placements) == ["small"]  # big does not fit in 2 free GPUs; small does


# ----------------------------------------------------------------------------------------------
# Placement


def test_chosen_again_keeps_node_and_gpus_even_where_a_fresh_placement_would_differ() -> None:
    allocation = alloc({"a": {"v100": 1.0}}, ["v100"])
    state = RoundState.initial(["v100"])
    busy = [Node("n1", {"v100": 2}, gpus_in_use={"v100": 2}), Node("n2", {"v100": 4})]
    plan, state = plan_round(allocation, state, snap(busy, {"a": 2}), ROUND_S)
    assert plan.start == {"a": Placement("a", (GpuSlice("n2", "v100", 2),))}
    state = record_round(state, {"a": ROUND_S})
    # n1 is free now and a fresh 2-GPU job would go there (best fit); a stays on n2.
    free = [Node("n1", {"v100": 2}), Node("n2", {"v100": 4})]
    plan, state = plan_round(allocation, state, snap(free, {"a": 2}, ROUND_S), ROUND_S)
    assert plan.keep == {"a": Placement("a", (GpuSlice("n2", "v100", 2),))}
    assert not plan.move and not plan.start and not plan.stop
    fresh, _ = plan_round(allocation, RoundState.initial(["v100"]), snap(free, {"a": 2}), ROUND_S)
    assert fresh.start["a"].slices == (GpuSlice("n1", "v100", 2),)


def test_jobs_chosen_again_keep_their_gpus_over_many_rounds() -> None:
    allocation, nodes, sizes = random_allocation(0)
    _, plans = simulate(allocation, nodes, sizes, rounds=60)
    kept = 0
    for before, after in itertools.pairwise(plans):
        for job, placement in after.placements.items():
            held = before.placements.get(job)
            if held is not None and held.gpu_types == placement.gpu_types:
                assert after.keep.get(job) == held, (after.round, job)
                kept += 1
    assert kept > 50


def test_job_moves_when_its_node_becomes_unavailable() -> None:
    allocation = alloc({"a": {"v100": 1.0}}, ["v100"])
    nodes = [Node("n1", {"v100": 2}), Node("n2", {"v100": 2})]
    plan, state = plan_round(
        allocation, RoundState.initial(["v100"]), snap(nodes, {"a": 2}), ROUND_S
    )
    assert plan.start["a"].nodes == ("n1",)
    down = [Node("n1", {"v100": 2}, available=False), Node("n2", {"v100": 2})]
    plan, state = plan_round(allocation, state, snap(down, {"a": 2}, ROUND_S), ROUND_S)
    assert plan.move == {"a": Placement("a", (GpuSlice("n2", "v100", 2),))}
    assert state.placements == plan.move


def test_unavailable_nodes_and_gpus_in_use_by_others_are_never_used() -> None:
    nodes = [
        Node("down", {"v100": 8}, available=False),
        Node("shared", {"v100": 4}, gpus_in_use={"v100": 3}),
        Node("free", {"v100": 2}),
    ]
    allocation = alloc({f"j{i}": {"v100": 0.5} for i in range(8)}, ["v100"])
    _, plans = simulate(allocation, nodes, {f"j{i}": 1 for i in range(8)}, rounds=20)
    for plan in plans:
        used = used_gpus(plan)
        assert used.get(("down", "v100"), 0) == 0
        assert used.get(("shared", "v100"), 0) <= 1
        assert sum(used.values()) == 3  # every GPU we may use is used


def test_multi_gpu_job_is_consolidated_when_one_node_can_hold_it() -> None:
    nodes = [
        Node("a", {"v100": 4}, gpus_in_use={"v100": 2}),
        Node("b", {"v100": 3}),
        Node("c", {"v100": 8}, gpus_in_use={"v100": 4}),
    ]
    allocation = alloc({"j": {"v100": 1.0}}, ["v100"])
    plan, _ = plan_round(allocation, RoundState.initial(["v100"]), snap(nodes, {"j": 4}), ROUND_S)
    assert plan.start["j"].slices == (GpuSlice("c", "v100", 4),)


def test_multi_gpu_job_is_spread_over_nodes_of_one_type_only_when_none_can_hold_it() -> None:
    nodes = [
        Node("a", {"v100": 2, "k80": 4}),
        Node("b", {"v100": 4}, gpus_in_use={"v100": 1}),
        Node("c", {"k80": 8}),
    ]
    allocation = alloc({"j": {"v100": 1.0}}, ["v100", "k80"])
    plan, _ = plan_round(
        allocation, RoundState.initial(["v100", "k80"]), snap(nodes, {"j": 4}), ROUND_S
    )
    # Most free GPUs first: 3 on b, then 1 on a; all v100, although k80 nodes could hold it.
    assert plan.start["j"].slices == (GpuSlice("b", "v100", 3), GpuSlice("a", "v100", 1))


def test_largest_jobs_are_placed_first() -> None:
    # Chosen in the order x (2 GPUs), y (3), z (2). Placed in that order, x would take node a
    # (best fit), y node b, and z would have to spread over the 1 GPU left on each. Largest
    # first: y fills a, then x and z share b; every job on one node.
    allocation = alloc({"x": {"v100": 0.5}, "y": {"v100": 0.3}, "z": {"v100": 0.2}}, ["v100"])
    nodes = [Node("a", {"v100": 3}), Node("b", {"v100": 4})]
    sizes = {"x": 2, "y": 3, "z": 2}
    plan, _ = plan_round(allocation, RoundState.initial(["v100"]), snap(nodes, sizes), ROUND_S)
    assert plan.start == {
        "x": Placement("x", (GpuSlice("b", "v100", 2),)),
        "y": Placement("y", (GpuSlice("a", "v100", 3),)),
        "z": Placement("z", (GpuSlice("b", "v100", 2),)),
    }


def test_best_fit_keeps_the_big_holes_for_big_jobs() -> None:
    nodes = [Node("a", {"v100": 4}), Node("b", {"v100": 2}, gpus_in_use={"v100": 1})]
    allocation = alloc({"j": {"v100": 1.0}}, ["v100"])
    plan, _ = plan_round(allocation, RoundState.initial(["v100"]), snap(nodes, {"j": 1}), ROUND_S)
    assert plan.start["j"].slices == (GpuSlice("b", "v100", 1),)


# ----------------------------------------------------------------------------------------------
# Plan, state, reset


def test_plan_lists_differences_only() -> None:
    allocation = alloc({"a": {"v100": 0.5}, "b": {"v100": 0.5}, "c": {"v100": 0.5}}, ["v100"])
    nodes = [Node("n1", {"v100": 2})]
    sizes = {"a": 1, "b": 1, "c": 1}
    plan, state = plan_round(allocation, RoundState.initial(["v100"]), snap(nodes, sizes), ROUND_S)
    assert (sorted(plan.start), plan.keep, plan.move, plan.stop) == (["a", "b"], {}, {}, ())
    state = record_round(state, {"a": ROUND_S, "b": ROUND_S})
    plan, state = plan_round(allocation, state, snap(nodes, sizes, ROUND_S), ROUND_S)
    # c has received nothing: it runs; one of a, b keeps its GPU, the other stops.
    assert list(plan.start) == ["c"] and len(plan.keep) == 1 and not plan.move
    assert plan.stop == tuple(sorted({"a", "b"} - set(plan.keep)))
    # A job that left the cluster is not in `stop`, and its row is dropped.
    state = record_round(state, {"c": 10.0})
    gone = alloc({"a": {"v100": 0.5}, "b": {"v100": 0.5}}, ["v100"])
    plan, state = plan_round(gone, state, snap(nodes, {"a": 1, "b": 1}, 2 * ROUND_S), ROUND_S)
    assert "c" not in plan.stop and state.job_ids == ("a", "b")


def test_record_round_adds_wall_seconds_on_the_placed_type() -> None:
    allocation = alloc({"a": {"v100": 0.5, "k80": 0.5}, "b": {"k80": 0.5}}, ["v100", "k80"])
    nodes = [Node("n1", {"v100": 2}), Node("n2", {"k80": 1})]
    plan, state = plan_round(
        allocation, RoundState.initial(["v100", "k80"]), snap(nodes, {"a": 2, "b": 1}), ROUND_S
    )
    assert plan.placements["a"].gpu_types == ("v100",) and plan.placements["b"].gpu_types == (
        "k80",
    )
    after = record_round(state, {"a": 100.0})  # finished early; b not reported: 0 s
    np.testing.assert_array_equal(after.received_s, [[100.0, 0.0], [0.0, 0.0]])
    assert after.placements == state.placements and after.round == state.round
    with pytest.raises(InvalidProblemError, match=r"'c' reported .* not placed"):
        record_round(state, {"c": 1.0})
    with pytest.raises(InvalidProblemError, match="'a': ran -1"):
        record_round(state, {"a": -1.0})


def test_reset_rule_resets_received_time_on_a_new_allocation_at_most_every_interval() -> None:
    nodes = [Node("n1", {"v100": 1})]
    sizes = {"a": 1, "b": 1}
    first = alloc({"a": {"v100": 0.5}, "b": {"v100": 0.5}}, ["v100"])
    second = alloc({"a": {"v100": 0.8}, "b": {"v100": 0.2}}, ["v100"])

    def step(
        allocation: Allocation, state: RoundState, now_s: float
    ) -> tuple[RoundPlan, RoundState]:
        plan, state = plan_round(
            allocation, state, snap(nodes, sizes, now_s), ROUND_S, min_reset_interval_s=1000.0
        )
        return plan, record_round(state, {job: ROUND_S for job in plan.placements})

    plan, state = step(first, RoundState.initial(["v100"]), 0.0)
    assert plan.reset and state.last_reset_s == 0.0
    plan, state = step(first, state, 360.0)  # same allocation: no reset
    assert not plan.reset and state.received_s.sum() == 2 * ROUND_S
    # A new allocation 720 s after the reset: used at once, the reset waits for 1000 s.
    plan, state = step(second, state, 720.0)
    assert not plan.reset and state.reset_pending and state.allocation is second
    assert state.received_s.sum() == 3 * ROUND_S
    # Due now (1080 s >= 1000 s): reset although the allocation did not change again.
    received = state.received_s[:, 0].copy()
    plan, state = step(second, state, 1080.0)
    assert plan.reset and not state.reset_pending and state.last_reset_s == 1080.0
    assert state.received_s.sum() == ROUND_S  # only the round just recorded
    # Deficit: the allocation in force (second) times 1080 s, minus what each job received.
    np.testing.assert_allclose(state.deficit_s[:, 0], np.array([0.8, 0.2]) * 1080.0 - received)


def test_interval_zero_resets_at_every_change_and_new_jobs_join_at_zero() -> None:
    nodes = [Node("n1", {"v100": 1})]
    two = alloc({"a": {"v100": 0.5}, "b": {"v100": 0.5}}, ["v100"])
    plan, state = plan_round(
        two,
        RoundState.initial(["v100"]),
        snap(nodes, {"a": 1, "b": 1}),
        ROUND_S,
        min_reset_interval_s=0.0,
    )
    state = record_round(state, {j: ROUND_S for j in plan.placements})
    three = alloc({"a": {"v100": 0.3}, "b": {"v100": 0.3}, "c": {"v100": 0.4}}, ["v100"])
    plan, state = plan_round(
        three,
        state,
        snap(nodes, {"a": 1, "b": 1, "c": 1}, ROUND_S),
        ROUND_S,
        min_reset_interval_s=0.0,
    )
    assert plan.reset and state.job_ids == ("a", "b", "c")
    assert state.received_s.sum() == 0.0
    assert list(plan.placements) == ["c"]  # equal shares after the reset: largest allocation


def test_new_job_without_reset_is_scheduled_soon() -> None:
    # With the reset deferred, a job that arrives has received nothing while the others have
    # received a lot: its share is tiny and its priority high, so it runs in the next round.
    nodes = [Node("n1", {"v100": 2})]
    two = alloc({"a": {"v100": 1.0}, "b": {"v100": 1.0}}, ["v100"])
    sizes = {"a": 1, "b": 1}
    state = RoundState.initial(["v100"])
    for r in range(3):
        plan, state = plan_round(two, state, snap(nodes, sizes, r * ROUND_S), ROUND_S)
        state = record_round(state, {j: ROUND_S for j in plan.placements})
    three = alloc({"a": {"v100": 0.6}, "b": {"v100": 0.6}, "c": {"v100": 0.8}}, ["v100"])
    plan, state = plan_round(three, state, snap(nodes, {**sizes, "c": 1}, 3 * ROUND_S), ROUND_S)
    assert not plan.reset and state.reset_pending
    assert "c" in plan.start


def test_same_inputs_same_plan_whatever_the_order_of_nodes_and_jobs() -> None:
    allocation, nodes, sizes = random_allocation(1)
    state, _ = simulate(allocation, nodes, sizes, rounds=7)
    plan, next_state = plan_round(allocation, state, snap(nodes, sizes, 7 * ROUND_S), ROUND_S)
    again, again_state = plan_round(allocation, state, snap(nodes, sizes, 7 * ROUND_S), ROUND_S)
    assert plan == again
    np.testing.assert_array_equal(next_state.received_s, again_state.received_s)
    order = np.arange(len(allocation.job_ids))[::-1]
    flipped = Allocation(
        tuple(allocation.job_ids[i] for i in order),
        allocation.gpu_types,
        allocation.x[order],
        0.0,
        0.0,
        "test",
    )
    reordered, _ = plan_round(
        flipped, state, snap(nodes[::-1], dict(reversed(sizes.items())), 7 * ROUND_S), ROUND_S
    )
    assert reordered == plan


def test_invalid_inputs_are_reported() -> None:
    allocation = alloc({"a": {"v100": 1.0}}, ["v100"])
    nodes = [Node("n1", {"v100": 1})]
    state = RoundState.initial(["v100"])
    with pytest.raises(InvalidProblemError, match="round_s 0"):
        plan_round(allocation, state, snap(nodes, {"a": 1}), 0.0)
    with pytest.raises(InvalidProblemError, match=r"not in the snapshot: \['a'\]"):
        plan_round(allocation, state, snap(nodes, {"b": 1}), ROUND_S)
    with pytest.raises(InvalidProblemError, match=r"node names appear twice: \['n1'\]"):
        plan_round(allocation, state, snap(nodes * 2, {"a": 1}), ROUND_S)
    packed = Allocation(
        ("a",), ("v100",), [[0.5]], 0.0, 0.0, "x_packed", pairs=(("a", "b"),), pair_x=[[0.5]]
    )
    with pytest.raises(InvalidProblemError, match="'x_packed' shares GPUs between pairs"):
        plan_round(packed, state, snap(nodes, {"a": 1}), ROUND_S)
    with pytest.raises(InvalidProblemError, match="filed under"):
        RoundState(
            round=1,
            job_ids=("a",),
            gpu_types=("v100",),
            received_s=np.zeros((1, 1)),
            placements={"b": Placement("b", (GpuSlice("n1", "v100", 1),))},
        )


# ----------------------------------------------------------------------------------------------
# Queue order and work conservation (RoundOptions)

# Two jobs, one v100 and one k80. Nothing received yet, so every priority is 2 x allocation:
# a: v100 1.2, k80 0.8; b: v100 0.8, k80 0.2.
CROSS = {"a": {"v100": 0.6, "k80": 0.4}, "b": {"v100": 0.4, "k80": 0.1}}


def cross_plan(options: RoundOptions, round_: int = 0) -> dict[str, str]:
    allocation = alloc(CROSS, ["v100", "k80"])
    nodes = [Node("n1", {"v100": 1}), Node("n2", {"k80": 1})]
    state = dataclasses.replace(RoundState.initial(["v100", "k80"]), round=round_)
    plan, _ = plan_round(allocation, state, snap(nodes, {"a": 1, "b": 1}), ROUND_S, options=options)
    return {job: p.gpu_types[0] for job, p in plan.placements.items()}


def test_global_queue_takes_the_highest_priority_entry_of_any_type() -> None:
    # a-v100 (1.2) first; b-v100 (0.8) no longer fits, a-k80 is a's second entry, b-k80 fits.
    assert cross_plan(GLOBAL) == {"a": "v100", "b": "k80"}


def test_per_type_queue_fills_the_first_type_before_looking_at_the_next() -> None:
    # k80 first: a (0.8) beats b (0.2) there; then v100: a is taken, b (0.8) gets it.
    assert cross_plan(RoundOptions(type_order=("k80",))) == {"a": "k80", "b": "v100"}
    # v100 first gives the global queue's answer here.
    assert cross_plan(RoundOptions(type_order=("v100", "k80"))) == {"a": "v100", "b": "k80"}


def test_default_per_type_order_is_fastest_first_by_the_table() -> None:
    table = shipped_throughputs()
    speed = type_speeds(table, ["k80", "p100", "v100"])
    assert sorted(speed, key=lambda t: -speed[t]) == ["v100", "p100", "k80"]  # Gavel's order
    allocation = alloc(CROSS, ["k80", "v100"])  # column order must not matter
    nodes = [Node("n1", {"v100": 1}), Node("n2", {"k80": 1})]
    plan, _ = plan_round(
        allocation,
        RoundState.initial(["k80", "v100"]),
        snap(nodes, {"a": 1, "b": 1}),
        ROUND_S,
        options=RoundOptions(work_conserving=False),
        table=table,
    )
    assert plan.placements["a"].gpu_types == ("v100",)
    # Without a table the types go by name: k80 first.
    assert cross_plan(RoundOptions()) == {"a": "k80", "b": "v100"}


def test_shuffled_type_order_is_reproducible_and_takes_both_orders() -> None:
    options = RoundOptions(shuffle=True, seed=3)
    plans = [cross_plan(options, r) for r in range(40)]
    assert plans == [cross_plan(options, r) for r in range(40)]  # same seed and round
    assert {"a": "v100", "b": "k80"} in plans and {"a": "k80", "b": "v100"} in plans
    assert plans != [cross_plan(RoundOptions(shuffle=True, seed=4), r) for r in range(40)]


def test_work_conservation_fills_idle_gpus_where_the_table_says_the_job_can_run() -> None:
    # Both jobs are allocated half of the one v100 and nothing on k80; 4 k80s are idle.
    allocation = alloc({"a": {"v100": 0.5}, "b": {"v100": 0.5}}, ["v100", "k80"])
    nodes = [Node("n1", {"v100": 1}), Node("n2", {"k80": 4})]
    table = shipped_throughputs()
    plan, _ = plan_round(
        allocation,
        RoundState.initial(["v100", "k80"]),
        snap(nodes, {"a": 1, "b": 1}),
        ROUND_S,
        table=table,
    )
    # Equal priorities on v100: a (job id) gets it; b, allocated 0 on k80, fills a k80.
    assert {j: p.gpu_types[0] for j, p in plan.placements.items()} == {"a": "v100", "b": "k80"}
    assert plan.priority["b"] == 0.0  # chosen with priority 0: a fill
    # Off: b waits, as without a table.
    plan, _ = plan_round(
        allocation,
        RoundState.initial(["v100", "k80"]),
        snap(nodes, {"a": 1, "b": 1}),
        ROUND_S,
        options=RoundOptions(work_conserving=False),
        table=table,
    )
    assert list(plan.placements) == ["a"]


def test_work_conservation_never_fills_a_type_the_job_cannot_run_on() -> None:
    # ResNet-50 (batch size 128) on 2 GPUs: 0 steps/s on k80 in Gavel's table.
    assert shipped_throughputs().steps_per_s("ResNet-50 (batch size 128)", "k80", 2) == 0.0
    allocation = alloc({"a": {"v100": 0.5}, "b": {"v100": 0.5}}, ["v100", "k80"])
    nodes = [Node("n1", {"v100": 2}), Node("n2", {"k80": 4})]
    jobs = tuple(Job(k, "ResNet-50 (batch size 128)", num_gpus=2) for k in ("a", "b"))
    plan, _ = plan_round(
        allocation,
        RoundState.initial(["v100", "k80"]),
        ClusterSnapshot(0.0, tuple(nodes), jobs),
        ROUND_S,
        table=shipped_throughputs(),
    )
    assert list(plan.placements) == ["a"]


def test_fill_goes_to_the_highest_deficit_after_the_allocated_entries() -> None:
    allocation = alloc({"a": {"v100": 1.0}, "b": {}, "c": {}}, ["v100", "k80"])
    nodes = [Node("n1", {"v100": 1}), Node("n2", {"k80": 1})]
    deficit = np.array([[0.0, 0.0], [0.0, 10.0], [0.0, 50.0]])
    state = RoundState(0, ("a", "b", "c"), ("v100", "k80"), np.zeros((3, 2)), deficit_s=deficit)
    plan, _ = plan_round(
        allocation,
        state,
        snap(nodes, {"a": 1, "b": 1, "c": 1}),
        ROUND_S,
        table=shipped_throughputs(),
    )
    assert {j: p.gpu_types[0] for j, p in plan.placements.items()} == {"a": "v100", "c": "k80"}


def test_round_options_follow_the_policy() -> None:
    base = RoundOptions()
    perf = round_options_for(get_policy("max_min_fairness_perf"), base)
    assert (perf.shuffle, perf.work_conserving) == (False, True)
    agnostic = round_options_for(get_policy("max_min_fairness"), base)
    assert (agnostic.shuffle, agnostic.work_conserving) == (True, True)
    for name in ("fifo", "fifo_perf", "max_sum_throughput_normalized_by_cost_perf"):
        assert not round_options_for(get_policy(name), base).work_conserving, name
    saving = get_policy("max_min_fairness_perf", {"energy_slack": 0.1})
    assert not round_options_for(saving, base).work_conserving


def test_round_options_are_checked() -> None:
    with pytest.raises(InvalidProblemError, match="queue"):
        RoundOptions(queue="random")
    with pytest.raises(InvalidProblemError, match="twice"):
        RoundOptions(type_order=("v100", "v100"))
