"""core/policies/drf.py: dominant resource fairness over the GPU types (the OASiS evaluation's
DRF baseline), on small node problems worked out by hand and on random node problems."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from slurm_hetsched.core.model import (
    Allocation,
    GpuSlice,
    InvalidProblemError,
    Node,
    Placement,
    Problem,
)
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.drf import DominantResourceFairness, gang

TYPES = ("v100", "k80")


def make(
    nodes: Sequence[Node],
    jobs: Sequence[tuple[str, int, float]],
    tput: Mapping[str, Sequence[float]] | None = None,
    allowed: Mapping[str, Sequence[int]] | None = None,
    running: Sequence[tuple[str, str, str, int]] = (),
    weight: Mapping[str, float] | None = None,
) -> Problem:
    """A nodes problem. jobs: (id, GPUs, arrival); tput: id -> steps/s per TYPES (default 1
    everywhere); allowed: id -> GPU counts (elastic jobs; the others only their own);
    running: (job, node, type, GPUs)."""
    ids = tuple(j for j, _g, _a in jobs)
    gpus = {j: g for j, g, _a in jobs}
    return Problem(
        job_ids=ids,
        gpu_types=TYPES,
        throughput=np.array([(tput or {}).get(j, (1.0,) * len(TYPES)) for j in ids]).reshape(
            len(ids), len(TYPES)
        ),
        capacity=np.array([sum(n.free_gpus(t) for n in nodes) for t in TYPES], dtype=float),
        num_gpus=np.array([gpus[j] for j in ids], dtype=np.int64),
        arrival_s=np.array([a for _j, _g, a in jobs], dtype=float),
        weight=np.array([(weight or {}).get(j, 1.0) for j in ids]),
        nodes=tuple(nodes),
        running={j: Placement(j, (GpuSlice(n, t, g),)) for j, n, t, g in running},
        allowed_gpus=None
        if allowed is None
        else tuple(tuple(allowed.get(j, (gpus[j],))) for j in ids),
    )


def placed(alloc: Allocation) -> dict[str, set[tuple[str, str, int]]]:
    """job -> its slices as (node, type, GPUs)."""
    assert alloc.placements is not None
    return {
        job: {(s.node, s.gpu_type, s.count) for s in p.slices}
        for job, p in alloc.placements.items()
    }


def gpus_of(alloc: Allocation) -> dict[str, int]:
    assert alloc.placements is not None
    return {job: p.num_gpus for job, p in alloc.placements.items()}


DRF = DominantResourceFairness()


def test_two_equal_elastic_jobs_split_two_gpus() -> None:
    # Each may take 1 or 2 GPUs; one first-come job would take both under FIFO growth. DRF:
    # a gets 1 (share 1/2), b gets 1 (share 0 < 1/2), then no GPU is left for a's growth.
    problem = make(
        [Node("n1", {"v100": 2})],
        [("a", 1, 0.0), ("b", 1, 1.0)],
        allowed={"a": (1, 2), "b": (1, 2)},
    )
    alloc = DRF.allocate(problem)
    assert placed(alloc) == {"a": {("n1", "v100", 1)}, "b": {("n1", "v100", 1)}}
    assert alloc.waiting == {}
    assert alloc.objective == pytest.approx(0.5)  # the smallest dominant share
    assert alloc.x.tolist() == [[1.0, 0.0], [1.0, 0.0]]


def test_the_smaller_dominant_share_gets_the_next_gpu() -> None:
    # 4 v100s. a (first, 2 GPUs, may grow to 3) and b (1 GPU, may grow to 2): after the first
    # steps a holds 2/4, b 1/4, one GPU left: it goes to b, the smaller share, although a
    # arrived first. Then a cannot grow (nothing left): 2 and 2.
    problem = make(
        [Node("n1", {"v100": 4})],
        [("a", 2, 0.0), ("b", 1, 1.0)],
        allowed={"a": (2, 3), "b": (1, 2)},
    )
    assert gpus_of(DRF.allocate(problem)) == {"a": 2, "b": 2}
    # With a fifth GPU a grows too (b is at its largest count).
    problem = make(
        [Node("n1", {"v100": 5})],
        [("a", 2, 0.0), ("b", 1, 1.0)],
        allowed={"a": (2, 3), "b": (1, 2)},
    )
    assert gpus_of(DRF.allocate(problem)) == {"a": 3, "b": 2}


def test_shares_are_over_each_types_capacity() -> None:
    # a runs only on the 2 v100s, b only on the 4 k80s, both may take 1 to 3 GPUs. Shares:
    # a 1/2 and b 1/4 after the first steps; b grows to 2 (2/4); the tie at 1/2 goes to a
    # (arrival): 2/2; b grows to 3 (3/4); a is full. The objective, the smallest dominant
    # share, is over each type's capacity: 3/4, not 2/2 or a count of GPUs.
    problem = make(
        [Node("n1", {"v100": 2}), Node("n2", {"k80": 4})],
        [("a", 1, 0.0), ("b", 1, 1.0)],
        tput={"a": (1.0, 0.0), "b": (0.0, 1.0)},
        allowed={"a": (1, 2, 3), "b": (1, 2, 3)},
    )
    alloc = DRF.allocate(problem)
    assert placed(alloc) == {"a": {("n1", "v100", 2)}, "b": {("n2", "k80", 3)}}
    assert alloc.objective == pytest.approx(0.75)


def test_weight_scales_the_share() -> None:
    # As the 4-GPU case above, but b has weight 0.25: its share 1/4 counts as 1, more than
    # a's 2/4, so the spare GPU goes to a.
    problem = make(
        [Node("n1", {"v100": 4})],
        [("a", 2, 0.0), ("b", 1, 1.0)],
        allowed={"a": (2, 3), "b": (1, 2)},
        weight={"b": 0.25},
    )
    assert gpus_of(DRF.allocate(problem)) == {"a": 3, "b": 1}


def test_elastic_growth_to_the_allowed_counts_only() -> None:
    alone = {"a": (1, 2, 4)}
    four = DRF.allocate(make([Node("n1", {"v100": 4})], [("a", 1, 0.0)], allowed=alone))
    assert placed(four) == {"a": {("n1", "v100", 4)}}
    # With 3 free GPUs it stops at 2: 3 is not one of its counts.
    three = DRF.allocate(make([Node("n1", {"v100": 3})], [("a", 1, 0.0)], allowed=alone))
    assert placed(three) == {"a": {("n1", "v100", 2)}}


def test_first_step_on_the_fastest_type_with_room() -> None:
    # a is 3x faster on k80s here (the column order would put it on a v100): DRF chooses the
    # type by speed. b, only on k80s, then finds the k80 taken and runs nowhere else.
    problem = make(
        [Node("n1", {"v100": 1}), Node("n2", {"k80": 1})],
        [("a", 1, 0.0), ("b", 1, 1.0)],
        tput={"a": (1.0, 3.0), "b": (0.0, 1.0)},
    )
    alloc = DRF.allocate(problem)
    assert placed(alloc) == {"a": {("n2", "k80", 1)}}
    assert alloc.waiting == {"b": "no-room:1-GPUs"}
    assert alloc.objective == 0.0  # a job waits


def test_a_job_no_type_has_room_for_waits_with_the_reason() -> None:
    # "a" takes both v100s; "b" needs 2 and only the single k80 is left: it waits, and the
    # later 1-GPU job still runs (every job is admitted; none blocks the others).
    problem = make(
        [Node("n1", {"v100": 2}), Node("n2", {"k80": 1})],
        [("a", 2, 0.0), ("b", 2, 1.0), ("c", 1, 2.0)],
    )
    alloc = DRF.allocate(problem)
    assert placed(alloc) == {"a": {("n1", "v100", 2)}, "c": {("n2", "k80", 1)}}
    assert alloc.waiting == {"b": "no-room:2-GPUs"}


def test_never_more_gpus_than_free_on_a_node() -> None:
    # n1 has 4 v100s, 3 busy with a job outside our control: an elastic job that may take 4
    # ends with the 3 free GPUs (n1's one and n2's two), not 4.
    nodes = [Node("n1", {"v100": 4}, gpus_in_use={"v100": 3}), Node("n2", {"v100": 2})]
    alloc = DRF.allocate(make(nodes, [("a", 1, 0.0)], allowed={"a": (1, 2, 3, 4)}))
    assert placed(alloc) == {"a": {("n1", "v100", 1), ("n2", "v100", 2)}}


def test_random_problems_respect_every_nodes_free_gpus() -> None:
    rng = np.random.default_rng(7)
    for _ in range(60):
        nodes = [
            Node(
                f"n{i}",
                {t: int(rng.integers(0, 5)) for t in TYPES},
                available=bool(rng.random() > 0.1),
            )
            for i in range(int(rng.integers(1, 5)))
        ]
        free = {(n.name, t): n.free_gpus(t) for n in nodes for t in TYPES}
        cap = {t: sum(n.free_gpus(t) for n in nodes) for t in TYPES}
        if max(cap.values()) == 0:
            continue
        jobs, tput, allowed = [], {}, {}
        for j in range(int(rng.integers(1, 8))):
            rates = tuple(
                float(v) if cap[t] else 0.0 for t, v in zip(TYPES, rng.random(2), strict=True)
            )
            if not any(rates):
                rates = tuple(1.0 if cap[t] else 0.0 for t in TYPES)
            most = max(cap[t] for t, r in zip(TYPES, rates, strict=True) if r > 0)
            g = int(rng.integers(1, most + 1))
            jobs.append((f"j{j}", g, float(rng.integers(0, 3))))
            tput[f"j{j}"] = rates
            allowed[f"j{j}"] = tuple(range(g, g + int(rng.integers(1, 4))))
        alloc = DRF.allocate(make(nodes, jobs, tput=tput, allowed=allowed))
        used: dict[tuple[str, str], int] = {}
        assert alloc.placements is not None
        for job, placement in alloc.placements.items():
            assert len(placement.gpu_types) == 1  # one type a job
            assert placement.num_gpus in allowed[job]
            for s in placement.slices:
                used[s.node, s.gpu_type] = used.get((s.node, s.gpu_type), 0) + s.count
        assert all(count <= free[key] for key, count in used.items()), (used, free)
        assert set(alloc.placements) | set(alloc.waiting) == {j for j, _g, _a in jobs}
        assert not set(alloc.placements) & set(alloc.waiting)


# ----------------------------------------------------------------------------------------------
# Running jobs


def test_a_running_job_whose_share_is_unchanged_stays_exactly_where_it_is() -> None:
    # a runs on n2; n1 has a free v100 too (a new job would take the fullest-fitting node
    # first, n1 by node order). a stays on n2 (the very same placement: no restart); b, new,
    # takes n1.
    nodes = [Node("n1", {"v100": 1}), Node("n2", {"v100": 1})]
    problem = make(nodes, [("a", 1, 0.0), ("b", 1, 1.0)], running=[("a", "n2", "v100", 1)])
    alloc = DRF.allocate(problem)
    assert alloc.placements is not None
    assert alloc.placements["a"] is problem.running["a"]
    assert placed(alloc) == {"a": {("n2", "v100", 1)}, "b": {("n1", "v100", 1)}}


def test_a_running_elastic_job_shrinks_when_a_job_arrives() -> None:
    # a grew to 2 GPUs while alone; b arrives: recomputed, each gets 1, a keeps one of its own.
    nodes = [Node("n1", {"v100": 2})]
    problem = make(
        nodes,
        [("a", 1, 0.0), ("b", 1, 5.0)],
        allowed={"a": (1, 2), "b": (1, 2)},
        running=[("a", "n1", "v100", 2)],
    )
    assert gpus_of(DRF.allocate(problem)) == {"a": 1, "b": 1}


def test_new_jobs_spare_a_running_jobs_gpus_where_they_can() -> None:
    # b arrived before the running a (a later row order would not matter): it gets its first
    # step first, but on n1's free GPU, not on a's.
    nodes = [Node("n1", {"v100": 1}), Node("n2", {"v100": 1})]
    problem = make(nodes, [("a", 1, 3.0), ("b", 1, 0.0)], running=[("a", "n1", "v100", 1)])
    assert placed(DRF.allocate(problem)) == {"a": {("n1", "v100", 1)}, "b": {("n2", "v100", 1)}}


def test_an_earlier_job_that_fits_with_a_later_running_jobs_gpus_takes_them() -> None:
    # "big" (4 GPUs, arrived first) waited while others ran; now 3 of n1's 4 GPUs are free and
    # the later "small" runs on the fourth. Recomputed from scratch, first steps go by
    # arrival: big takes all of n1, and small, whose GPU is gone, waits (preempted).
    nodes = [Node("n1", {"v100": 4})]
    problem = make(
        nodes, [("big", 4, 0.0), ("small", 1, 5.0)], running=[("small", "n1", "v100", 1)]
    )
    alloc = DRF.allocate(problem)
    assert placed(alloc) == {"big": {("n1", "v100", 4)}}
    assert alloc.waiting == {"small": "no-room:1-GPUs"}


# ----------------------------------------------------------------------------------------------
# Placement helper, inputs


def test_gang_prefers_one_node_then_unheld_gpus() -> None:
    left = np.array([[3], [2], [4]])
    held = np.array([[0], [0], [2]])
    assert gang(left, held, 0, 2) == ((1, 0, 2),)  # best fit among unheld: n1 (2 free)
    assert gang(left, held, 0, 4) == ((2, 0, 4),)  # only n2 holds 4, taking held GPUs
    assert gang(left, held, 0, 6) == ((0, 0, 3), (1, 0, 2), (2, 0, 1))  # unheld first
    assert gang(left, held, 0, 10) is None


def test_needs_nodes_and_registration() -> None:
    gpus_only = Problem(
        job_ids=("a",), gpu_types=("v100",), throughput=np.ones((1, 1)), capacity=np.ones(1)
    )
    with pytest.raises(InvalidProblemError, match="`nodes`"):
        DRF.allocate(gpus_only)
    empty = Problem(
        job_ids=(), gpu_types=("v100",), throughput=np.zeros((0, 1)), capacity=np.ones(1)
    )
    assert DRF.allocate(empty).placements == {}
    assert isinstance(get_policy("drf"), DominantResourceFairness)
