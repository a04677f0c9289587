"""The rate LP solved through the GPU types' prices (rate_lp.py, type_prices.py,
price_search.py) against HiGHS on the whole LP: same optimum, a feasible x, valid duals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from random_problems import random_problem

from slurm_hetsched.core.mechanism import plan_round
from slurm_hetsched.core.model import ClusterSnapshot, Job, Node, RoundState
from slurm_hetsched.core.policies import by_prices, rate_lp
from slurm_hetsched.core.policies.finish_time_fairness import FinishTimeFairnessPerf
from slurm_hetsched.core.policies.lp import INF
from slurm_hetsched.core.policies.makespan import MinTotalDurationPerf
from slurm_hetsched.core.policies.max_min_fairness import MaxMinFairnessPerf
from slurm_hetsched.core.policies.rate_lp import RateRows, RateSolution, solve_rate_lp
from slurm_hetsched.core.policies.rates import normalized_rates
from slurm_hetsched.core.policies.type_prices import Hulls, certify
from slurm_hetsched.core.policies.water_filling import MaxMinFairnessWaterFillingPerf
from slurm_hetsched.core.problem import SiteData, build_problem
from slurm_hetsched.data_files import shipped_throughputs
from slurm_hetsched.errors import SolverError


def random_rows(rng: np.random.Generator, crowded: bool) -> RateRows:
    """Distinct rows (or copies of a few, scaled), GPUs 1-8, weights with some zeros above
    floors that a feasible point keeps, sometimes a bound on t."""
    n_rows = int(rng.integers(20, 160))
    n_types = int(rng.choice([1, 2, 3, 5, 8]))
    if rng.random() < 0.3:  # a few classes, each row a noisy copy
        classes = rng.uniform(0.2, 4.0, size=(4, n_types))
        a = classes[rng.integers(4, size=n_rows)] * rng.uniform(0.9, 1.1, (n_rows, n_types))
    else:
        a = rng.uniform(0.2, 4.0, size=(n_rows, n_types))
    a[rng.random((n_rows, n_types)) < 0.15] = 0.0
    a[np.arange(n_rows), rng.integers(n_types, size=n_rows)] = rng.uniform(0.5, 3.0, n_rows)
    gpus = rng.choice([1.0, 2.0, 4.0, 8.0], p=[0.7, 0.1, 0.15, 0.05], size=n_rows)
    per_type = gpus.sum() / n_types * (rng.uniform(0.2, 0.6) if crowded else rng.uniform(1, 2))
    capacity = np.full(n_types, per_type) * rng.uniform(0.5, 1.5, n_types)
    weight = rng.choice([0.5, 1.0, 2.0], size=n_rows)
    floor = np.zeros(n_rows)
    if rng.random() < 0.4:
        # Water filling's later levels: some rows frozen (weight 0) at floors that the equal
        # split (share capacity / total GPUs of every type) reaches with room to spare.
        share = np.minimum(capacity.sum() / gpus.sum() / n_types, 1.0 / n_types)
        reach = (a * share).sum(axis=1)
        frozen = rng.random(n_rows) < 0.3
        weight[frozen] = 0.0
        floor = np.where(rng.random(n_rows) < 0.6, reach * rng.uniform(0.2, 0.9, n_rows), 0.0)
    t_max = float(rng.uniform(0.1, 1.0)) if rng.random() < 0.2 else INF
    return RateRows(a, gpus, capacity, weight, floor, t_max)


def assert_solves(data: RateRows, solution: RateSolution, whole: RateSolution) -> None:
    x, t = solution.x, solution.t
    assert t == pytest.approx(whole.t, rel=1e-6, abs=1e-9)
    assert x.min() >= -1e-9
    assert x.sum(axis=1).max() <= 1 + 1e-9
    assert np.all(data.gpus @ x <= data.capacity * (1 + 1e-9) + 1e-9)
    assert np.all(x[data.a == 0] == 0)
    rate = (data.a * x).sum(axis=1)
    assert np.all(rate >= data.floor + data.weight * t - 1e-7 * np.maximum(1, rate))
    # One optimal dual: non-negative, and the t column's condition sum(dual * weight) <= 1.
    assert solution.dual.min() >= 0
    assert float(solution.dual @ data.weight) <= 1 + 1e-6


@pytest.mark.parametrize("crowded", [True, False])
def test_prices_give_the_whole_lps_optimum(crowded: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rate_lp, "DIRECT_ROWS", 0)
    methods: dict[str, int] = {}
    for seed in range(60):
        rng = np.random.default_rng(seed + (1000 if crowded else 0))
        data = random_rows(rng, crowded)
        try:
            whole = solve_rate_lp(data, policy="test", n_jobs=data.n_rows, direct=True)
        except SolverError:  # an infeasible draw (floors too high)
            continue
        solution = solve_rate_lp(data, policy="test", n_jobs=data.n_rows)
        methods[solution.method] = methods.get(solution.method, 0) + 1
        assert_solves(data, solution, whole)
    # Not a vacuous pass: where GPUs are scarce, most LPs went the priced way. Where they are
    # plentiful, several types often have price 0 and rows tie between them: those LPs may
    # go whole (rate_lp.py), and only the answer is checked.
    priced = methods.get("prices", 0) + methods.get("no prices", 0)
    assert priced >= (0.8 if crowded else 0.2) * sum(methods.values())


def test_sampled_start_on_many_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    # The sample's prices start the search from SAMPLE_FROM_ROWS rows on.
    monkeypatch.setattr(by_prices, "SAMPLE_FROM_ROWS", 1000)
    rng = np.random.default_rng(7)
    n_rows, n_types = 3000, 3
    classes = rng.uniform(0.3, 3.0, size=(30, n_types))
    a = classes[rng.integers(30, size=n_rows)] * rng.uniform(0.9, 1.1, (n_rows, n_types))
    gpus = rng.choice([1.0, 2.0, 4.0], size=n_rows)
    capacity = np.full(n_types, gpus.sum() / 10)  # scarce: every type has a price
    data = RateRows(a, gpus, capacity, np.ones(n_rows), np.zeros(n_rows))
    solution = solve_rate_lp(data, policy="test", n_jobs=n_rows)
    whole = solve_rate_lp(data, policy="test", n_jobs=n_rows, direct=True)
    assert solution.method == "prices"
    assert_solves(data, solution, whole)


def test_hulls_price_each_row_like_a_tiny_lp() -> None:
    # Row: rates 1 (type 0, price 1), 3 (type 1, price 6), 2 (type 2, price 3).
    # Per unit of rate: 1, 2, 1.5; the hull goes 0 -> type 0 -> type 2 -> type 1.
    a = np.array([[1.0, 3.0, 2.0]])
    q = np.array([[1.0, 6.0, 3.0]])
    hulls = Hulls.walk(a, q)
    assert hulls.kind[0, 1:].tolist() == [0, 2, 1]
    x, cost = hulls.spend(np.array([0.5]))  # half its time on type 0
    np.testing.assert_allclose(x, [[0.5, 0, 0]])
    assert cost[0] == pytest.approx(0.5)
    x, cost = hulls.spend(np.array([1.5]))  # all of its time, half on type 0, half on 2
    np.testing.assert_allclose(x, [[0.5, 0, 0.5]])
    assert cost[0] == pytest.approx(2.0)
    responses = hulls.responses_at(np.array([1.5]), np.zeros(1), np.ones(1))
    assert certify(responses, a, q, np.array([1.5]), 1.5).all()
    # Type 1 made cheap: the same response is no longer the cheapest.
    assert not certify(responses, a, np.array([[1.0, 1.0, 3.0]]), np.array([1.5]), 1.5).all()


POLICIES_ON_RATE_LPS = [
    MaxMinFairnessPerf,
    MaxMinFairnessWaterFillingPerf,
    FinishTimeFairnessPerf,
    MinTotalDurationPerf,
]


@pytest.mark.parametrize("cls", POLICIES_ON_RATE_LPS)
@pytest.mark.parametrize("duplicates", [False, True])
def test_policies_answer_the_same_through_prices(
    cls: type, duplicates: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for seed in range(6):
        rng = np.random.default_rng(300 + seed)
        problem = random_problem(
            rng, n_jobs=int(rng.integers(30, 60)), n_types=3, duplicates=duplicates
        )
        problem = dataclasses.replace(
            problem,
            steps=rng.uniform(1e3, 1e5, problem.n_jobs),
            arrival_s=-rng.uniform(0, 3600, problem.n_jobs),
        )
        monkeypatch.setattr(rate_lp, "DIRECT_ROWS", 10**9)
        whole = cls().allocate(problem)
        monkeypatch.setattr(rate_lp, "DIRECT_ROWS", 0)
        priced = cls().allocate(problem)
        assert priced.objective == pytest.approx(whole.objective, rel=1e-6)
        if cls is MaxMinFairnessWaterFillingPerf:
            # Water filling's rates are unique (the weighted leximin optimum): same allocation
            # as far as any job can tell.
            np.testing.assert_allclose(
                normalized_rates(problem, priced.x), normalized_rates(problem, whole.x), rtol=1e-6
            )


def test_the_round_after_the_fill_is_as_full_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    # The max-min LP is degenerate: prices and HiGHS may pick different optimal x. After the
    # mechanism's work-conserving fill, both rounds keep every GPU type equally busy.
    rng = np.random.default_rng(11)
    table = shipped_throughputs()
    keys = [(c, g) for (c, g) in table.rows if g in (1, 2, 4)]
    nodes = tuple(Node(f"{t}-{i}", {t: 4}) for t in ("v100", "p100", "k80") for i in range(3))
    jobs = tuple(
        Job(
            f"j{m}",
            keys[k][0],
            num_gpus=keys[k][1],
            measured_steps_per_s={"v100": float(rng.uniform(0.5, 2.0))},
        )
        for m, k in enumerate(rng.integers(len(keys), size=60))
    )
    snapshot = ClusterSnapshot(0.0, nodes, jobs)
    problem = build_problem(snapshot, SiteData(table))
    busy = []
    for direct_rows in (10**9, 0):
        monkeypatch.setattr(rate_lp, "DIRECT_ROWS", direct_rows)
        allocation = MaxMinFairnessPerf().allocate(problem)
        plan, _ = plan_round(
            allocation, RoundState.initial(problem.gpu_types), snapshot, 360.0, table=table
        )
        used = {t: 0 for t in problem.gpu_types}
        for placement in plan.placements.values():
            for piece in placement.slices:
                used[piece.gpu_type] += piece.count
        busy.append((allocation.objective, used))
    (whole_objective, whole_used), (priced_objective, priced_used) = busy
    assert priced_objective == pytest.approx(whole_objective, rel=1e-6)
    assert priced_used == whole_used
    assert sum(whole_used.values()) >= 30  # 36 GPUs, 60 jobs waiting: nearly all busy
