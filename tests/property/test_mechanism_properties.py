"""Properties of the round mechanism on random clusters, allocations and round histories.

Each example draws nodes (types, GPU counts, GPUs in use by others, availability), jobs of 1 to
8 GPUs and an allocation (any fractions, zeros included; the mechanism does not need a feasible
one), then plans a few rounds, changing node availability and outside use between rounds.
Every round must keep all the invariants below.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_hetsched.core.mechanism import RoundOptions, plan_round, record_round
from slurm_hetsched.core.model import (
    Allocation,
    ClusterSnapshot,
    Job,
    Node,
    RoundPlan,
    RoundState,
)

ROUND_S = 360.0
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TYPES = ("k80", "p100", "v100")


@dataclass
class Case:
    allocation: Allocation
    sizes: dict[str, int]
    rounds: list[tuple[Node, ...]]  # the nodes as observed at each round
    ran_fraction: list[float]  # how much of the round each placed job runs (record_round)
    min_reset_interval_s: float
    options: RoundOptions  # plain, or amortized with restarts that often hold jobs


@st.composite
def nodes_for_round(draw: st.DrawFn, layout: list[dict[str, int]]) -> tuple[Node, ...]:
    """The fixed node layout with this round's availability and outside use drawn anew."""
    nodes = []
    for i, gpus in enumerate(layout):
        in_use = {t: draw(st.integers(0, g)) if draw(st.booleans()) else 0 for t, g in gpus.items()}
        nodes.append(
            Node(f"n{i}", gpus, gpus_in_use=in_use, available=draw(st.booleans()) or i == 0)
        )
    return tuple(nodes)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    types = TYPES[: draw(st.integers(1, len(TYPES)))]
    layout = [
        {
            t: draw(st.sampled_from([1, 2, 4, 8]))
            for t in draw(st.lists(st.sampled_from(types), min_size=1, max_size=2, unique=True))
        }
        for _ in range(draw(st.integers(1, 5)))
    ]
    n_jobs = draw(st.integers(1, 10))
    job_ids = tuple(f"j{m}" for m in range(n_jobs))
    sizes = {j: draw(st.sampled_from([1, 1, 2, 3, 4, 8])) for j in job_ids}
    # Repeated values make ties in priority, which order-independence must survive.
    fraction = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.01, 1.0))
    x = np.array([[draw(fraction) for _ in types] for _ in job_ids])
    allocation = Allocation(job_ids, types, x, 0.0, 0.0, "random")
    n_rounds = draw(st.integers(1, 4))
    return Case(
        allocation=allocation,
        sizes=sizes,
        rounds=[draw(nodes_for_round(layout)) for _ in range(n_rounds)],
        ran_fraction=[draw(st.sampled_from([1.0, 1.0, 0.5, 0.0])) for _ in range(n_rounds)],
        min_reset_interval_s=draw(st.sampled_from([0.0, 720.0, 1920.0])),
        options=draw(
            st.sampled_from(
                [RoundOptions(moves="plain"), RoundOptions(), RoundOptions(restart_s=600.0)]
            )
        ),
    )


def snapshot(case: Case, r: int) -> ClusterSnapshot:
    jobs = tuple(Job(j, "A3C", num_gpus=g) for j, g in case.sizes.items())
    return ClusterSnapshot(r * ROUND_S, case.rounds[r], jobs)


def run(case: Case) -> list[tuple[RoundPlan, ClusterSnapshot, RoundState]]:
    """Plan every round; returns (plan, snapshot, state before the round) per round."""
    state = RoundState.initial(case.allocation.gpu_types)
    history = []
    for r in range(len(case.rounds)):
        snap = snapshot(case, r)
        plan, after = plan_round(
            case.allocation,
            state,
            snap,
            ROUND_S,
            min_reset_interval_s=case.min_reset_interval_s,
            options=case.options,
        )
        history.append((plan, snap, state))
        ran = ROUND_S * case.ran_fraction[r]
        state = record_round(after, {j: ran for j in plan.placements})
    return history


def left_over(plan: RoundPlan, nodes: tuple[Node, ...]) -> dict[tuple[str, str], int]:
    """Free GPUs per (node, type) after the plan; negative would mean over-committed."""
    left = {(n.name, t): n.free_gpus(t) for n in nodes for t in n.gpus}
    for placement in plan.placements.values():
        for piece in placement.slices:
            left[piece.node, piece.gpu_type] = (
                left.get((piece.node, piece.gpu_type), 0) - piece.count
            )
    return left


@PROPERTY
@given(cases())
def test_capacity_never_exceeded_and_unusable_gpus_never_used(case: Case) -> None:
    for plan, snap, _ in run(case):
        left = left_over(plan, snap.nodes)
        assert min(left.values(), default=0) >= 0, left  # per node and type
        for t in case.allocation.gpu_types:  # per type
            used = sum(p.num_gpus for p in plan.placements.values() if p.gpu_types == (t,))
            assert used <= snap.capacity([t])[0]
        down = {n.name for n in snap.nodes if not n.available}
        assert not any(s.node in down for p in plan.placements.values() for s in p.slices)


@PROPERTY
@given(cases())
def test_each_placed_job_gets_its_gpus_of_one_type_with_a_share_there(case: Case) -> None:
    alloc = case.allocation
    for plan, _, _ in run(case):
        sets = [set(plan.keep), set(plan.move), set(plan.start)]
        assert sum(map(len, sets)) == len(set().union(*sets))  # disjoint
        for job, placement in plan.placements.items():
            assert placement.job_id == job and placement.num_gpus == case.sizes[job]
            assert len(placement.gpu_types) == 1
            m, t = alloc.job_ids.index(job), alloc.gpu_types.index(placement.gpu_types[0])
            assert alloc.x[m, t] > 0


@PROPERTY
@given(cases())
def test_no_job_waits_while_a_type_it_has_a_share_of_has_room(case: Case) -> None:
    alloc = case.allocation
    for plan, snap, _ in run(case):
        left = left_over(plan, snap.nodes)
        for m, job in enumerate(alloc.job_ids):
            if job in plan.placements:
                continue
            for t, gpu_type in enumerate(alloc.gpu_types):
                room = sum(v for (_, typ), v in left.items() if typ == gpu_type)
                assert alloc.x[m, t] == 0 or room < case.sizes[job], (job, gpu_type, room)


@PROPERTY
@given(cases())
def test_multi_gpu_job_spread_only_when_no_node_could_hold_it(case: Case) -> None:
    # A job is placed before any later one can take GPUs, so if it was spread, no node of its
    # type had enough free GPUs then, and none can have them after the whole plan either.
    for plan, snap, _ in run(case):
        left = left_over(plan, snap.nodes)
        for placement in {**plan.move, **plan.start}.values():
            if len(placement.nodes) > 1:
                gpu_type = placement.gpu_types[0]
                assert all(v < placement.num_gpus for (_, t), v in left.items() if t == gpu_type)


@PROPERTY
@given(cases())
def test_plan_is_the_difference_from_the_last_round(case: Case) -> None:
    for plan, _, before in run(case):
        for job, placement in plan.keep.items():
            assert before.placements[job] == placement
        for job, placement in plan.move.items():
            assert before.placements[job] != placement
        assert not set(plan.start) & set(before.placements)
        assert set(plan.stop) == set(before.placements) - set(plan.placements)


@PROPERTY
@given(cases())
def test_jobs_chosen_again_keep_their_gpus_when_those_are_still_free(case: Case) -> None:
    # Lease extension: the jobs chosen again on the type and GPU count they hold are placed
    # before any other, so if the GPUs they all held are still free, each keeps exactly its own.
    for plan, snap, before in run(case):
        again = {
            job: held
            for job, held in before.placements.items()
            if job in plan.placements
            and plan.placements[job].gpu_types == held.gpu_types
            and plan.placements[job].num_gpus == held.num_gpus
        }
        need: dict[tuple[str, str], int] = {}
        for held in again.values():
            for piece in held.slices:
                need[piece.node, piece.gpu_type] = (
                    need.get((piece.node, piece.gpu_type), 0) + piece.count
                )
        free = {(n.name, t): n.free_gpus(t) for n in snap.nodes for t in n.gpus}
        if all(free.get(key, 0) >= count for key, count in need.items()):
            assert {job: plan.keep.get(job) for job in again} == again


@PROPERTY
@given(cases(), st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_node_and_job_order(
    case: Case, rnd: random.Random
) -> None:
    history = run(case)
    plan, snap, before = history[-1]
    again, _ = plan_round(
        case.allocation,
        before,
        snap,
        ROUND_S,
        min_reset_interval_s=case.min_reset_interval_s,
        options=case.options,
    )
    assert again == plan
    alloc = case.allocation
    order = list(range(len(alloc.job_ids)))
    rnd.shuffle(order)
    nodes = list(snap.nodes)
    rnd.shuffle(nodes)
    shuffled = Allocation(
        tuple(alloc.job_ids[i] for i in order), alloc.gpu_types, alloc.x[order], 0.0, 0.0, "random"
    )
    jobs = list(snap.jobs)
    rnd.shuffle(jobs)
    reordered, _ = plan_round(
        shuffled,
        before,
        ClusterSnapshot(snap.now_s, tuple(nodes), tuple(jobs)),
        ROUND_S,
        min_reset_interval_s=case.min_reset_interval_s,
        options=case.options,
    )
    assert reordered == plan


@st.composite
def fixed_allocations(draw: st.DrawFn) -> tuple[Allocation, dict[str, int], tuple[Node, ...]]:
    """An allocation, job sizes and nodes that stay the same round after round."""
    types = TYPES[: draw(st.integers(1, len(TYPES)))]
    nodes = tuple(
        Node(f"n{i}", {t: draw(st.sampled_from([1, 2, 4])) for t in node_types})
        for i, node_types in enumerate(
            draw(
                st.lists(
                    st.lists(st.sampled_from(types), min_size=1, max_size=2, unique=True),
                    min_size=1,
                    max_size=3,
                )
            )
        )
    )
    job_ids = tuple(f"j{m}" for m in range(draw(st.integers(1, 8))))
    sizes = {j: draw(st.sampled_from([1, 1, 1, 2, 4])) for j in job_ids}
    fraction = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.01, 1.0))
    x = np.array([[draw(fraction) for _ in types] for _ in job_ids])
    return Allocation(job_ids, types, x, 0.0, 0.0, "random"), sizes, nodes


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fixed_allocations(),
    st.lists(st.sampled_from([0.0, 10.0, 60.0, 250.0, 900.0]), min_size=8, max_size=8),
    st.sampled_from([60.0, 360.0]),
)
def test_amortized_moves_never_interrupt_more_jobs_than_the_plain_mechanism(
    fixed: tuple[Allocation, dict[str, int], tuple[Node, ...]],
    restart_s: list[float],
    round_s: float,
) -> None:
    """Over 40 rounds of one allocation, the moves and stops of running jobs (each a restart)
    under amortized moves are never more than under the plain mechanism."""
    allocation, sizes, nodes = fixed
    jobs = tuple(
        Job(j, "A3C", num_gpus=g, restart_s=restart_s[m]) for m, (j, g) in enumerate(sizes.items())
    )
    counts = {}
    for options in (RoundOptions(moves="plain"), RoundOptions()):
        state = RoundState.initial(allocation.gpu_types)
        counts[options.moves] = 0
        for r in range(40):
            snap = ClusterSnapshot(r * round_s, nodes, jobs)
            plan, state = plan_round(allocation, state, snap, round_s, options=options)
            counts[options.moves] += len(plan.move) + len(plan.stop)
            state = record_round(state, dict.fromkeys(plan.placements, round_s))
    assert counts["amortized"] <= counts["plain"], counts
