"""core/policies/yarn_cs.py and tiresias.py: the queue baselines of the Hadar evaluation, on
small node problems worked out by hand, and on random node problems."""

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
from slurm_hetsched.core.policies.tiresias import Tiresias
from slurm_hetsched.core.policies.yarn_cs import (
    YarnCapacityScheduler,
    first_fit,
    placement_of,
    usable_types,
)
from slurm_hetsched.errors import ConfigError

TYPES = ("v100", "k80")
GPU_H = 3600.0  # GPU-seconds in one GPU-hour


def make(
    nodes: Sequence[Node],
    jobs: Sequence[tuple[str, int, float]],
    tput: Mapping[str, Sequence[float]] | None = None,
    running: Sequence[tuple[str, str, str, int]] = (),
    attained_gpu_h: Mapping[str, float] | None = None,
) -> Problem:
    """A nodes problem. jobs: (id, GPUs, arrival); tput: id -> steps/s per TYPES (default 1
    everywhere); running: (job, node, type, GPUs); attained_gpu_h: id -> GPU-hours run."""
    ids = tuple(j for j, _g, _a in jobs)
    attained = None
    if attained_gpu_h is not None:
        attained = np.array([attained_gpu_h.get(j, 0.0) * GPU_H for j in ids])
    return Problem(
        job_ids=ids,
        gpu_types=TYPES,
        throughput=np.array([(tput or {}).get(j, (1.0,) * len(TYPES)) for j in ids]).reshape(
            len(ids), len(TYPES)
        ),
        capacity=np.array([sum(n.free_gpus(t) for n in nodes) for t in TYPES], dtype=float),
        num_gpus=np.array([g for _j, g, _a in jobs], dtype=np.int64),
        arrival_s=np.array([a for _j, _g, a in jobs], dtype=float),
        nodes=tuple(nodes),
        running={j: Placement(j, (GpuSlice(n, t, g),)) for j, n, t, g in running},
        attained_gpu_s=attained,
    )


def placed(alloc: Allocation) -> dict[str, set[tuple[str, str, int]]]:
    """job -> its slices as (node, type, GPUs)."""
    assert alloc.placements is not None
    return {
        job: {(s.node, s.gpu_type, s.count) for s in p.slices}
        for job, p in alloc.placements.items()
    }


QueuePolicy = YarnCapacityScheduler | Tiresias
BOTH: list[QueuePolicy] = [YarnCapacityScheduler(), Tiresias()]


# ----------------------------------------------------------------------------------------------
# Placement and order (both policies alike when nothing runs and nothing has attained service)


@pytest.mark.parametrize("policy", BOTH, ids=lambda p: p.name)
def test_fifo_first_fit_without_head_of_line_blocking(policy: QueuePolicy) -> None:
    nodes = [Node("n1", {"v100": 4}), Node("n2", {"k80": 2})]
    # Rows out of arrival order. "a" takes 2 v100s; "big" (4 GPUs) then fits no type and
    # waits, and the later jobs still run. "a" runs 3x faster on k80s, which the
    # heterogeneity-unaware policies ignore: the first type in column order with room.
    problem = make(
        nodes,
        [("e", 1, 4.0), ("c", 2, 2.0), ("big", 4, 1.0), ("a", 2, 0.0), ("d", 2, 3.0)],
        tput={"a": (1.0, 3.0)},
    )
    alloc = policy.allocate(problem)
    assert placed(alloc) == {
        "a": {("n1", "v100", 2)},
        "c": {("n1", "v100", 2)},
        "d": {("n2", "k80", 2)},
    }  # e arrived last: no GPU left
    assert alloc.objective == 3.0
    assert alloc.x.tolist() == [[0, 0], [1, 0], [0, 0], [1, 0], [0, 1]]


@pytest.mark.parametrize("policy", BOTH, ids=lambda p: p.name)
def test_only_types_the_job_can_run_on(policy: QueuePolicy) -> None:
    # "a" cannot run on v100s (throughput 0, e.g. too little memory): it goes to the k80s.
    nodes = [Node("n1", {"v100": 4}), Node("n2", {"k80": 2})]
    alloc = policy.allocate(make(nodes, [("a", 2, 0.0)], tput={"a": (0.0, 1.0)}))
    assert placed(alloc) == {"a": {("n2", "k80", 2)}}


@pytest.mark.parametrize("policy", BOTH, ids=lambda p: p.name)
def test_one_node_of_a_later_type_before_spreading(policy: QueuePolicy) -> None:
    # 4 v100s on two nodes, 4 k80s on one: a 4-GPU job fits on one node only as k80s.
    nodes = [Node("n1", {"v100": 2}), Node("n2", {"v100": 2}), Node("n3", {"k80": 4})]
    assert placed(policy.allocate(make(nodes, [("a", 4, 0.0)]))) == {"a": {("n3", "k80", 4)}}


@pytest.mark.parametrize("policy", BOTH, ids=lambda p: p.name)
def test_larger_than_any_node_spreads_over_fewest_nodes_of_one_type(
    policy: QueuePolicy,
) -> None:
    # 6 GPUs, no node has 6: v100s would need three nodes, k80s two (4 + 2, the fuller node
    # first). n6's v100s are busy with a job outside our control.
    nodes = [
        Node("n1", {"v100": 2}),
        Node("n2", {"v100": 2}),
        Node("n3", {"v100": 2}),
        Node("n4", {"k80": 3}),
        Node("n5", {"k80": 4}),
        Node("n6", {"v100": 8}, gpus_in_use={"v100": 8}),
    ]
    alloc = policy.allocate(make(nodes, [("a", 6, 0.0)]))
    assert placed(alloc) == {"a": {("n5", "k80", 4), ("n4", "k80", 2)}}
    assert alloc.x.tolist() == [[0.0, 1.0]]
    # With only the v100 nodes it takes all three.
    alloc = policy.allocate(make(nodes[:3], [("a", 6, 0.0)]))
    assert placed(alloc) == {"a": {("n1", "v100", 2), ("n2", "v100", 2), ("n3", "v100", 2)}}


@pytest.mark.parametrize("policy", BOTH, ids=lambda p: p.name)
def test_never_mixes_types(policy: QueuePolicy) -> None:
    # "r" keeps n2's v100s (it came first). Then 4 GPUs are free in all, 2 of each type on
    # n1: the 4-GPU job waits, the 2-GPU job after it runs.
    nodes = [Node("n1", {"v100": 2, "k80": 2}), Node("n2", {"v100": 2})]
    problem = make(
        nodes, [("r", 2, 0.0), ("a", 4, 1.0), ("b", 2, 2.0)], running=[("r", "n2", "v100", 2)]
    )
    alloc = policy.allocate(problem)
    assert placed(alloc) == {"r": {("n2", "v100", 2)}, "b": {("n1", "v100", 2)}}


@pytest.mark.parametrize("name", ["yarn_cs", "tiresias"])
def test_needs_nodes(name: str) -> None:
    gpus_only = Problem(
        job_ids=("a",), gpu_types=("v100",), throughput=np.ones((1, 1)), capacity=np.array([1.0])
    )
    with pytest.raises(InvalidProblemError, match="places jobs on nodes"):
        get_policy(name).allocate(gpus_only)
    empty = make([Node("n1", {"v100": 1})], [])
    alloc = get_policy(name).allocate(empty)
    assert alloc.placements == {} and alloc.objective == 0.0


# ----------------------------------------------------------------------------------------------
# Running jobs: never moved under yarn_cs, re-planned by priority under tiresias


def test_yarn_never_moves_a_running_job() -> None:
    # "r" (arrived last) runs on one of n2's two k80s; "w" (first) needs both: under YARN-CS
    # it waits, although moving r to n1 would make room. Tiresias (both in queue 1, w first)
    # gives w the k80s and places r anew on the v100 (a move).
    nodes = [Node("n1", {"v100": 1}), Node("n2", {"k80": 2})]
    problem = make(
        nodes,
        [("w", 2, 0.0), ("r", 1, 5.0)],
        tput={"w": (0.0, 1.0)},
        running=[("r", "n2", "k80", 1)],
    )
    alloc = YarnCapacityScheduler().allocate(problem)
    assert placed(alloc) == {"r": {("n2", "k80", 1)}}
    assert alloc.placements is not None and alloc.placements["r"] == problem.running["r"]
    assert placed(Tiresias().allocate(problem)) == {
        "w": {("n2", "k80", 2)},
        "r": {("n1", "v100", 1)},
    }


def test_yarn_requeues_a_running_job_that_can_no_longer_run_there() -> None:
    # "r" runs on a k80 where its throughput is now 0 (its memory need grew): it cannot make
    # progress there, so it is placed again like a waiting job (on the v100).
    nodes = [Node("n1", {"v100": 1}), Node("n2", {"k80": 1})]
    problem = make(nodes, [("r", 1, 0.0)], tput={"r": (1.0, 0.0)}, running=[("r", "n2", "k80", 1)])
    for policy in BOTH:
        assert placed(policy.allocate(problem)) == {"r": {("n1", "v100", 1)}}, policy.name


def test_tiresias_queue_split_by_attained_service() -> None:
    # One GPU. "old" arrived first but has run 2 GPU-hours (queue 2); "new" is below the
    # 1 GPU-hour threshold (queue 1) and goes first although it arrived later.
    nodes = [Node("n1", {"v100": 1})]
    jobs = [("old", 1, 0.0), ("new", 1, 10.0)]
    problem = make(nodes, jobs, attained_gpu_h={"old": 2.0, "new": 0.5})
    assert placed(Tiresias().allocate(problem)) == {"new": {("n1", "v100", 1)}}
    assert placed(YarnCapacityScheduler().allocate(problem)) == {"old": {("n1", "v100", 1)}}
    # A higher threshold puts both in queue 1: FIFO again.
    lenient = get_policy("tiresias", {"threshold_gpu_h": "3"})
    assert placed(lenient.allocate(problem)) == {"old": {("n1", "v100", 1)}}
    # Exactly at the threshold is queue 2; both in queue 2 is FIFO as well.
    at = make(nodes, jobs, attained_gpu_h={"old": 1.0, "new": 0.99})
    assert placed(Tiresias().allocate(at)) == {"new": {("n1", "v100", 1)}}
    both_low = make(nodes, jobs, attained_gpu_h={"old": 5.0, "new": 1.5})
    assert placed(Tiresias().allocate(both_low)) == {"old": {("n1", "v100", 1)}}


def test_tiresias_keeps_a_running_jobs_gpus_when_it_stays() -> None:
    # "r" runs on n2 while n1 is empty: placed anew, first fit would pick n1; it keeps n2.
    nodes = [Node("n1", {"v100": 4}), Node("n2", {"v100": 4})]
    problem = make(nodes, [("r", 2, 0.0), ("a", 2, 1.0)], running=[("r", "n2", "v100", 2)])
    alloc = Tiresias().allocate(problem)
    assert placed(alloc) == {"r": {("n2", "v100", 2)}, "a": {("n1", "v100", 2)}}
    assert alloc.placements is not None and alloc.placements["r"] == problem.running["r"]


def test_tiresias_spares_a_lower_priority_jobs_gpus_where_it_can() -> None:
    # "r" (queue 2) holds 2 of n1's 4 GPUs; "a" (queue 1) needs 4. First fit over all free
    # GPUs would pick n1 and preempt r; n2 has room without preempting anyone.
    nodes = [Node("n1", {"v100": 4}), Node("n2", {"v100": 4})]
    problem = make(
        nodes,
        [("r", 2, 0.0), ("a", 4, 1.0)],
        running=[("r", "n1", "v100", 2)],
        attained_gpu_h={"r": 3.0},
    )
    alloc = Tiresias().allocate(problem)
    assert placed(alloc) == {"r": {("n1", "v100", 2)}, "a": {("n2", "v100", 4)}}


def test_tiresias_preempts_a_queue_2_job_when_a_queue_1_job_needs_its_gpus() -> None:
    # One 4-GPU node, all held by "r" (10 GPU-hours attained: queue 2). "a" (queue 1) needs 2:
    # it takes them; r no longer has its 4 GPUs and waits (preempted). YARN-CS keeps r.
    nodes = [Node("n1", {"v100": 4})]
    problem = make(
        nodes,
        [("r", 4, 0.0), ("a", 2, 100.0)],
        running=[("r", "n1", "v100", 4)],
        attained_gpu_h={"r": 10.0},
    )
    alloc = Tiresias().allocate(problem)
    assert placed(alloc) == {"a": {("n1", "v100", 2)}}
    assert alloc.objective == 1.0
    assert placed(YarnCapacityScheduler().allocate(problem)) == {"r": {("n1", "v100", 4)}}
    # Below the threshold r is in queue 1 and, having arrived first, keeps its GPUs.
    light = make(
        nodes,
        [("r", 4, 0.0), ("a", 2, 100.0)],
        running=[("r", "n1", "v100", 4)],
        attained_gpu_h={"r": 0.5},
    )
    assert placed(Tiresias().allocate(light)) == {"r": {("n1", "v100", 4)}}


def test_tiresias_threshold_option() -> None:
    assert Tiresias().threshold_gpu_h == 1.0
    assert get_policy("tiresias", {"threshold_gpu_h": 0.25}).threshold_gpu_h == 0.25  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="threshold_gpu_h"):
        get_policy("tiresias", {"threshold_gpu_h": -1})
    with pytest.raises(ConfigError, match="no option"):
        get_policy("yarn_cs", {"threshold_gpu_h": 1})


# ----------------------------------------------------------------------------------------------
# Random node problems


def random_problem(rng: np.random.Generator) -> Problem:
    """Nodes of one or two types (some GPUs busy outside our control, some nodes down), jobs
    with random GPU counts and throughputs (some 0), some of them running, random service."""
    nodes = []
    for i in range(int(rng.integers(1, 6))):
        gpus = {t: int(rng.integers(1, 9)) for t in TYPES if rng.random() < 0.6} or {"v100": 2}
        in_use = {t: int(rng.integers(0, n + 1)) for t, n in gpus.items()}
        nodes.append(Node(f"n{i}", gpus, in_use, available=i == 0 or rng.random() < 0.9))
    capacity = np.array([sum(n.free_gpus(t) for n in nodes) for t in TYPES], dtype=float)
    if capacity.max() == 0:
        nodes[0] = Node("n0", {"v100": 2})
        capacity = np.array([2.0, 0.0])
    n_jobs = int(rng.integers(1, 12))
    tput = rng.uniform(0.1, 5.0, (n_jobs, len(TYPES))) * (rng.random((n_jobs, len(TYPES))) < 0.8)
    num_gpus = np.zeros(n_jobs, dtype=np.int64)
    for m in range(n_jobs):
        if not (tput[m] > 0).any() or capacity[tput[m] > 0].max() == 0:
            tput[m, int(np.argmax(capacity))] = 1.0
        top = int(capacity[tput[m] > 0].max())
        num_gpus[m] = int(rng.integers(1, top + 1))
    ids = tuple(f"j{m}" for m in range(n_jobs))
    plain = Problem(
        job_ids=ids,
        gpu_types=TYPES,
        throughput=tput,
        capacity=capacity,
        num_gpus=num_gpus,
        nodes=tuple(nodes),
    )
    # Some jobs run already: placed by first fit in a random order.
    free = np.array([[n.free_gpus(t) for t in TYPES] for n in nodes], dtype=np.int64)
    running = {}
    for m in rng.permutation(n_jobs):
        if rng.random() < 0.4:
            slices = first_fit(free, usable_types(plain, int(m)), int(num_gpus[m]))
            if slices is not None:
                for n, t, count in slices:
                    free[n, t] -= count
                running[ids[m]] = placement_of(plain, ids[m], slices)
    return Problem(
        job_ids=ids,
        gpu_types=TYPES,
        throughput=tput,
        capacity=capacity,
        num_gpus=num_gpus,
        arrival_s=rng.integers(0, 5, n_jobs).astype(float),
        nodes=tuple(nodes),
        running=running,
        attained_gpu_s=rng.uniform(0.0, 2.0, n_jobs) * GPU_H,
    )


def leftover(problem: Problem, alloc: Allocation) -> np.ndarray:
    """(n_nodes, n_types) free GPUs the allocation leaves; checks it is never negative."""
    assert alloc.placements is not None
    free = np.array([[n.free_gpus(t) for t in TYPES] for n in problem.nodes], dtype=np.int64)
    index = {node.name: i for i, node in enumerate(problem.nodes)}
    for placement in alloc.placements.values():
        for s in placement.slices:
            free[index[s.node], TYPES.index(s.gpu_type)] -= s.count
    assert (free >= 0).all(), free
    return free


@pytest.mark.parametrize("policy", BOTH, ids=lambda p: p.name)
def test_random_instances_stay_within_capacity(policy: QueuePolicy) -> None:
    rng = np.random.default_rng(20240611)
    for _ in range(50):
        problem = random_problem(rng)
        alloc = policy.allocate(problem)
        assert alloc.placements is not None
        free = leftover(problem, alloc)
        assert alloc.objective == len(alloc.placements)
        for m, job in enumerate(problem.job_ids):
            placement = alloc.placements.get(job)
            if placement is None:
                assert not alloc.x[m].any()
                # Nothing waits that would fit in what is left (no reservation, no blocking).
                assert first_fit(free, usable_types(problem, m), int(problem.num_gpus[m])) is None
                continue
            (t,) = placement.gpu_types  # one type, never mixed
            assert problem.throughput[m, TYPES.index(t)] > 0
            assert placement.num_gpus == problem.num_gpus[m]
            assert alloc.x[m].tolist() == [float(k == t) for k in TYPES]
            assert len(placement.nodes) == len(placement.slices)  # one slice per node
        if policy.name == "yarn_cs":
            for job, placement in problem.running.items():
                assert alloc.placements[job] == placement  # never moved or stopped
