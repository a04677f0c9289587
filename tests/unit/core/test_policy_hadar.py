"""The `hadar` policy: prices (5)-(7), FIND_ALLOC on hand-worked cases, the exact dynamic
programme against brute force, admission only at a positive payoff, incremental allocation,
and Hadar's motivating example (notes/hadar.md section 6) against max-min fairness."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from slurm_hetsched.core.mechanism import plan_round
from slurm_hetsched.core.model import (
    ClusterSnapshot,
    GpuSlice,
    InvalidProblemError,
    Job,
    Node,
    Placement,
    Problem,
    RoundState,
)
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.hadar import Hadar
from slurm_hetsched.core.policies.hadar_alloc import find_alloc
from slurm_hetsched.core.policies.hadar_alloc import job_view as _view
from slurm_hetsched.core.policies.hadar_alloc import restart_seconds as _restart_s
from slurm_hetsched.core.policies.hadar_alloc import units_of as _units
from slurm_hetsched.core.policies.hadar_prices import PriceBounds, price_bounds, type_values
from slurm_hetsched.core.utility import Utility

TYPES = ("k80", "p100", "v100")


def problem_on(
    nodes: tuple[Node, ...],
    throughput: list[list[float]],
    num_gpus: list[int],
    steps: list[float],
    *,
    spread: list[list[float]] | None = None,
    utilities: tuple[Utility, ...] | None = None,
    running: dict[str, Placement] | None = None,
    arrival: list[float] | None = None,
    now_s: float = 0.0,
) -> Problem:
    n = len(num_gpus)
    ids = tuple(f"j{m}" for m in range(n))
    capacity = [sum(node.free_gpus(t) for node in nodes) for t in TYPES]
    return Problem(
        job_ids=ids,
        gpu_types=TYPES,
        throughput=np.array(throughput, float).reshape(n, len(TYPES)),
        capacity=np.array(capacity, float),
        num_gpus=np.array(num_gpus),
        steps=np.array(steps, float),
        nodes=nodes,
        throughput_spread=None if spread is None else np.array(spread, float),
        utilities=utilities,
        running=running or {},
        arrival_s=None if arrival is None else np.array(arrival, float),
        now_s=now_s,
        mixed_gangs=True,
    )


# -- the price function ---------------------------------------------------------------------


def test_price_is_u_min_empty_geometric_mean_at_half_and_u_max_full() -> None:
    bounds = PriceBounds(low=np.array([0.01]), high=np.array([4.0]))
    assert bounds.price(0, 0, 4) == pytest.approx(0.01)
    assert bounds.price(0, 2, 4) == pytest.approx(math.sqrt(0.01 * 4.0))
    assert bounds.price(0, 4, 4) == pytest.approx(4.0)
    assert bounds.price(0, 1, 4) < bounds.price(0, 2, 4) < bounds.price(0, 3, 4)


def test_bounds_are_densities_of_the_jobs_utility_per_gpu_second() -> None:
    # One job, 1 GPU: 1000 steps at 10/s on v100 and 2/s on k80, utility 100 flat.
    problem = problem_on((Node("n", {"v100": 1, "k80": 1}),), [[2, 0, 10]], [1], [1000])
    bounds = price_bounds(problem, problem.steps, np.zeros(1), eta=1.0)
    v100, k80 = TYPES.index("v100"), TYPES.index("k80")
    assert bounds.high[v100] == pytest.approx(100 / 100)  # U / (W t_min), t_min = 100 s
    assert bounds.low[k80] == pytest.approx(100 / 500 / 4)  # U / (W t_max) / 4, t_max = 500 s


# -- FIND_ALLOC ------------------------------------------------------------------------------


def offer_for(problem: Problem, m: int = 0):  # type: ignore[no-untyped-def]
    restart = _restart_s(problem, 0.0)
    bounds = price_bounds(problem, problem.steps, restart)
    units = _units(problem)
    used = tuple(c - f for c, f in zip(units.capacity, units.free, strict=True))
    view = _view(problem, m, problem.steps, restart)
    return find_alloc(view, units, used, bounds, problem.now_s), units


NODES_2V_2K = (Node("a", {"v100": 1}), Node("b", {"v100": 1}), Node("c", {"k80": 2}))


def test_find_alloc_packs_when_spreading_costs_more_than_the_faster_type_gains() -> None:
    # 2 GPUs: v100 does 20 steps/s together but 8 spread over a and b (communication),
    # k80 10 on node c: packed on the k80s is faster, so cheaper and worth more.
    problem = problem_on(NODES_2V_2K, [[10, 0, 20]], [2], [10_000], spread=[[10, 0, 8]])
    offer, units = offer_for(problem)
    assert offer is not None
    assert {units.nodes[u] for u, _ in offer.take} == {"c"}
    assert offer.duration_s == pytest.approx(10_000 / 10)


def test_find_alloc_spreads_when_the_faster_type_outweighs_the_communication() -> None:
    problem = problem_on(NODES_2V_2K, [[10, 0, 20]], [2], [10_000], spread=[[10, 0, 18]])
    offer, units = offer_for(problem)
    assert offer is not None
    assert {units.nodes[u] for u, _ in offer.take} == {"a", "b"}
    assert offer.duration_s == pytest.approx(10_000 / 18)


def test_a_gang_across_types_runs_at_its_slowest_types_rate() -> None:
    # 3 GPUs; one node has 2 v100 and 1 k80: the job runs at the k80's rate at 3 GPUs.
    problem = problem_on((Node("n", {"v100": 2, "k80": 1}),), [[30, 0, 90]], [3], [9000])
    offer, units = offer_for(problem)
    assert offer is not None
    assert sorted(TYPES[units.columns[u]] for u, _ in offer.take) == ["k80", "v100"]
    assert offer.duration_s == pytest.approx(9000 / 30)


def test_no_offer_without_enough_gpus_it_can_run_on() -> None:
    # 2 GPUs of v100 only, one of the two v100s already given out: no offer at all.
    problem = problem_on(NODES_2V_2K, [[0, 0, 20]], [2], [100])
    restart = _restart_s(problem, 0.0)
    units = _units(problem)
    used = tuple(1 if units.nodes[u] == "a" else 0 for u in range(len(units.nodes)))
    view = _view(problem, 0, problem.steps, restart)
    bounds = price_bounds(problem, problem.steps, restart)
    assert find_alloc(view, units, used, bounds, 0.0) is None
    assert find_alloc(view, units, (0,) * len(used), bounds, 0.0) is not None


# -- admission -------------------------------------------------------------------------------


def test_a_job_whose_payoff_is_not_positive_is_not_admitted() -> None:
    # A hard deadline one hour after arrival; the job needs two hours even on the v100.
    late = Utility("deadline", 10.0, target_s=3600.0)
    problem = problem_on(
        (Node("n", {"v100": 2}),),
        [[0, 0, 1], [0, 0, 1]],
        [1, 1],
        [7200, 600],
        utilities=(late, Utility("flat", 10.0)),
    )
    allocation = Hadar(restart_s=0.0).allocate(problem)
    assert allocation.placements is not None
    assert set(allocation.placements) == {"j1"}
    assert allocation.waiting["j0"].startswith("price=")
    assert allocation.waiting["j0"].endswith(">=utility=0")


def test_a_running_job_keeps_its_gpus_and_one_worth_nothing_is_preempted() -> None:
    node = Node("n", {"v100": 2})
    keep = Placement("j0", (GpuSlice("n", "v100", 1),))
    over = Placement("j1", (GpuSlice("n", "v100", 1),))
    problem = problem_on(
        (node,),
        [[0, 0, 1], [0, 0, 1], [0, 0, 5]],
        [1, 1, 1],
        [500, 500, 500],
        utilities=(
            Utility("flat", 10.0),
            Utility("deadline", 10.0, target_s=100.0),  # past its deadline
            Utility("flat", 10.0),
        ),
        running={"j0": keep, "j1": over},
        now_s=200.0,
    )
    allocation = Hadar(restart_s=0.0).allocate(problem)
    assert allocation.placements is not None
    assert allocation.placements["j0"] == keep  # exactly its GPUs
    assert "j1" not in allocation.placements and "preempted" in allocation.waiting["j1"]
    assert set(allocation.placements) == {"j0", "j2"}  # j2 gets the GPU j1 held


def test_a_running_job_whose_node_left_is_placed_again() -> None:
    gone = Placement("j0", (GpuSlice("n1", "v100", 1),))
    nodes = (Node("n1", {"v100": 1}, available=False), Node("n2", {"v100": 1}))
    problem = Problem(
        job_ids=("j0",),
        gpu_types=TYPES,
        throughput=np.array([[0, 0, 1.0]]),
        capacity=np.array([0, 0, 1.0]),
        steps=np.array([100.0]),
        nodes=nodes,
    )
    # (The round mechanism drops a placement on a vanished node before the policy runs;
    # the policy itself re-places a job whose GPUs are not all free.)
    allocation = Hadar().allocate(problem)
    assert allocation.placements == {"j0": Placement("j0", (GpuSlice("n2", "v100", 1),))}
    assert gone not in allocation.placements.values()


def test_needs_nodes_and_steps() -> None:
    with pytest.raises(InvalidProblemError, match="nodes"):
        Hadar().allocate(
            Problem(
                job_ids=("a",),
                gpu_types=("v100",),
                throughput=np.ones((1, 1)),
                capacity=np.ones(1),
                steps=np.ones(1),
            )
        )
    with pytest.raises(InvalidProblemError, match="steps"):
        problem = problem_on((Node("n", {"v100": 1}),), [[0, 0, 1]], [1], [1])
        Hadar().allocate(Problem(**{**_fields(problem), "steps": None}))


def _fields(problem: Problem) -> dict[str, object]:
    names = ("job_ids", "gpu_types", "throughput", "capacity", "num_gpus", "nodes")
    return {name: getattr(problem, name) for name in names}


# -- the dynamic programme against brute force ------------------------------------------------


def random_problem(rng: np.random.Generator, n_jobs: int) -> Problem:
    nodes = []
    for h in range(int(rng.integers(1, 4))):
        kinds = rng.choice(TYPES, size=int(rng.integers(1, 3)), replace=False)
        nodes.append(Node(f"n{h}", {str(t): int(rng.integers(1, 5)) for t in kinds}))
    capacity = np.array([sum(node.gpus.get(t, 0) for node in nodes) for t in TYPES])
    throughput = rng.uniform(0.5, 10, (n_jobs, 3)) * (rng.random((n_jobs, 3)) < 0.85)
    throughput[(throughput > 0) @ capacity == 0] = 1.0  # every job runs somewhere
    room = (throughput > 0) @ capacity  # GPUs of the types each job runs on
    gpus = np.minimum(rng.choice([1, 1, 2, 3, 4], size=n_jobs), room)
    kinds = [
        Utility("flat", float(rng.uniform(1, 100))),
        Utility(
            "sigmoid",
            float(rng.uniform(1, 100)),
            target_s=float(rng.uniform(600, 7200)),
            sharpness_per_h=float(rng.uniform(0, 5)),
        ),
        Utility("linear", float(rng.uniform(1, 100)), target_s=float(rng.uniform(600, 7200))),
    ]
    utilities = tuple(kinds[int(rng.integers(0, 3))] for _ in range(n_jobs))
    return problem_on(
        tuple(nodes),
        throughput.tolist(),
        [int(g) for g in gpus],
        rng.uniform(100, 20_000, n_jobs).tolist(),
        utilities=utilities,
        arrival=rng.uniform(0, 10, n_jobs).round().tolist(),
        now_s=10.0,
    )


def brute_force_payoff(problem: Problem, restart: float, values: str = "fluid") -> float:
    """The best total payoff over every subset of jobs, each subset allocated in arrival
    order by FIND_ALLOC, every member admitted at a positive payoff."""
    restarts = _restart_s(problem, restart)
    weights = type_values(problem, problem.steps) if values == "fluid" else None
    bounds = price_bounds(problem, problem.steps, restarts, values=weights)
    units = _units(problem)
    start = tuple(c - f for c, f in zip(units.capacity, units.free, strict=True))
    order = [int(m) for m in np.lexsort((np.arange(problem.n_jobs), problem.arrival_s))]
    views = [_view(problem, m, problem.steps, restarts) for m in order]
    best = 0.0
    for size in range(1, len(views) + 1):
        for subset in itertools.combinations(range(len(views)), size):
            used, total = list(start), 0.0
            for i in subset:
                offer = find_alloc(views[i], units, tuple(used), bounds, problem.now_s)
                if offer is None or offer.payoff <= 0:
                    break
                total += offer.payoff
                for u, count in offer.take:
                    used[u] += count
            else:
                best = max(best, total)
    return best


@pytest.mark.parametrize("values", ["fluid", "none"])
@pytest.mark.parametrize("seed", range(40))
def test_exact_programme_equals_brute_force(seed: int, values: str) -> None:
    rng = np.random.default_rng(seed)
    problem = random_problem(rng, int(rng.integers(1, 9)))
    # No critical jobs: they start before the programme runs (hadar_batch.py).
    allocation = Hadar(restart_s=30.0, type_values=values, critical=0).allocate(problem)
    expected = brute_force_payoff(problem, 30.0, values)
    assert allocation.objective == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("seed", range(20))
def test_placements_never_exceed_free_gpus_exact_or_greedy(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    problem = random_problem(rng, int(rng.integers(5, 30)))
    for policy in (Hadar(), Hadar(exact_jobs=0), Hadar(exact_jobs=0, order="arrival")):
        allocation = policy.allocate(problem)
        assert allocation.placements is not None
        taken: dict[tuple[str, str], int] = {}
        for job_id, placement in allocation.placements.items():
            m = problem.job_ids.index(job_id)
            assert placement.num_gpus == problem.num_gpus[m]
            for piece in placement.slices:
                taken[(piece.node, piece.gpu_type)] = taken.get((piece.node, piece.gpu_type), 0)
                taken[(piece.node, piece.gpu_type)] += piece.count
        free = {(n.name, t): n.free_gpus(t) for n in problem.nodes for t in n.gpus}
        assert all(count <= free[key] for key, count in taken.items())
        assert set(allocation.placements) | set(allocation.waiting) == set(problem.job_ids)
        assert np.allclose(allocation.x.sum(axis=1)[allocation.x.sum(axis=1) > 0], 1.0)


def test_greedy_admits_in_arrival_order_while_the_payoff_is_positive() -> None:
    # Four 1-GPU jobs for 2 GPUs, beyond the exact size: the first two by arrival run.
    problem = problem_on(
        (Node("n", {"v100": 2}),),
        [[0, 0, 1]] * 4,
        [1] * 4,
        [100] * 4,
        arrival=[3, 0, 2, 1],
    )
    allocation = Hadar(exact_jobs=0, order="arrival").allocate(problem)
    assert allocation.placements is not None
    assert set(allocation.placements) == {"j1", "j3"}
    assert allocation.waiting["j0"].startswith("no-room:1-GPUs")


# -- Hadar's motivating example (notes/hadar.md section 6) ----------------------------------

# Per-GPU iterations/s on (k80, p100, v100) and GPUs of J1, J2, J3; epochs as steps x 1000.
MOTIVATING = {"J1": ((30, 20, 40), 3, 80), "J2": ((5, 15, 5), 2, 30), "J3": ((20, 2, 10), 2, 50)}
MOTIVATING_NODES = (Node("n1", {"v100": 2}), Node("n2", {"p100": 3}), Node("n3", {"k80": 1}))


def test_motivating_example_hadar_uses_more_of_the_cluster_and_spreads_j1() -> None:
    jobs = tuple(
        Job(key, "c", num_gpus=gpus, steps_remaining=epochs * 1000.0)
        for key, (_, gpus, epochs) in MOTIVATING.items()
    )
    problem = problem_on(
        MOTIVATING_NODES,
        [[gpus * rate for rate in per_gpu] for per_gpu, gpus, _ in MOTIVATING.values()],
        [gpus for _, gpus, _ in MOTIVATING.values()],
        [epochs * 1000.0 for _, _, epochs in MOTIVATING.values()],
    )
    problem = Problem(**{**_fields(problem), "steps": problem.steps, "job_ids": tuple(MOTIVATING)})
    snapshot = ClusterSnapshot(now_s=0.0, nodes=MOTIVATING_NODES, jobs=jobs)
    busy = {}
    # The paper's Hadar: our additions for long batches (type values, critical jobs) off. With
    # them, J3, whose run is the longest, starts first on the two V100s (docs/policies.md).
    paper = {"type_values": "none", "critical": 0}
    for name in ("hadar", "max_min_fairness_perf"):
        allocation = get_policy(name, paper if name == "hadar" else None).allocate(problem)
        plan, _ = plan_round(allocation, RoundState.initial(TYPES), snapshot, 360.0)
        busy[name] = sum(p.num_gpus for p in plan.start.values())
        if name == "hadar":
            assert len(plan.start["J1"].gpu_types) > 1  # J1's gang spans GPU types
    assert busy["hadar"] > busy["max_min_fairness_perf"]


# -- work conservation and upgrades (ours) ----------------------------------------------------


def test_idle_gpus_the_prices_leave_go_to_jobs_still_worth_something() -> None:
    # j0 is short and dense, j1 long: once j0 holds one of the two GPUs the other's price is
    # sqrt(U_min U_max) per second, far above what j1's 100 pays over 10,000 s.
    problem = problem_on((Node("n", {"v100": 2}),), [[0, 0, 1], [0, 0, 1]], [1, 1], [10, 10_000])
    plain = Hadar(restart_s=0.0, fill_idle=False, critical=0).allocate(problem)
    assert plain.placements is not None and set(plain.placements) == {"j0"}
    assert plain.waiting["j1"].startswith("price=") and ">=utility=100" in plain.waiting["j1"]
    filled = Hadar(restart_s=0.0).allocate(problem)
    assert filled.placements is not None and set(filled.placements) == {"j0", "j1"}
    assert not filled.waiting


def test_a_running_job_moves_to_a_faster_placement_when_it_pays_for_the_restart() -> None:
    nodes = (Node("slow", {"k80": 1}), Node("fast", {"v100": 1}))
    on_k80 = Placement("j0", (GpuSlice("slow", "k80", 1),))
    problem = problem_on(nodes, [[1, 0, 3]], [1], [30_000], running={"j0": on_k80})
    stays = Hadar(restart_s=30.0, upgrade=False).allocate(problem)
    assert stays.placements == {"j0": on_k80}
    moves = Hadar(restart_s=30.0).allocate(problem)
    assert moves.placements == {"j0": Placement("j0", (GpuSlice("fast", "v100", 1),))}
    # Nearly done, the restart costs more than the faster GPU saves: it stays.
    almost = problem_on(nodes, [[1, 0, 3]], [1], [20], running={"j0": on_k80})
    assert Hadar(restart_s=30.0).allocate(almost).placements == {"j0": on_k80}


def test_a_site_caps_what_a_self_declared_utility_counts_for() -> None:
    # One GPU, two alike jobs; the later one declares umax=1e6. Uncapped it goes first;
    # with max_utility=100 both count 100 and the first by arrival goes.
    problem = problem_on(
        (Node("n", {"v100": 1}),),
        [[0, 0, 1], [0, 0, 1]],
        [1, 1],
        [100, 100],
        utilities=(Utility("flat", 100.0), Utility("flat", 1e6)),
        arrival=[0, 1],
        now_s=1.0,
    )
    uncapped = Hadar(exact_jobs=0).allocate(problem)
    assert uncapped.placements is not None and set(uncapped.placements) == {"j1"}
    capped = Hadar(exact_jobs=0, max_utility=100.0).allocate(problem)
    assert capped.placements is not None and set(capped.placements) == {"j0"}
    assert capped.waiting["j1"].endswith("utility=100")
