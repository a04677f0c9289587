"""OASiS's prices and dual subroutine (notes/astraea-oasis.md section 17): p(0) = L and
p(capacity) = U, monotone; the greedy single-slot cost against the integer programme; the
dynamic programme against brute force over every slot's choice; an exhausted GPU never pays;
a completion counted within its slot."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from scipy.optimize import Bounds, LinearConstraint, milp

from slurm_hetsched.core.model import Node, Problem
from slurm_hetsched.core.policies.hadar_alloc import JobView, Units, units_of
from slurm_hetsched.core.policies.oasis_book import Book, current_slot
from slurm_hetsched.core.policies.oasis_bound import payoff_bound
from slurm_hetsched.core.policies.oasis_market import Market
from slurm_hetsched.core.policies.oasis_prices import JobWorth, PriceBounds, estimate_bounds
from slurm_hetsched.core.policies.oasis_programme import Tables
from slurm_hetsched.core.policies.oasis_schedule import (
    _options,
    _unit_steps,
    best_schedule,
    config_rates,
    slot_cost,
)
from slurm_hetsched.core.utility import Utility

TYPES = ("k80", "v100")


def _job(rates: tuple[float, ...], steps: float, utility: Utility, restart_s: float = 0.0,
         num_gpus: int = 1) -> JobView:  # fmt: skip
    return JobView(
        job_id="j",
        num_gpus=num_gpus,
        steps=steps,
        restart_s=restart_s,
        rate=rates,
        rate_spread=tuple(r * 0.5 for r in rates),
        utility=utility,
        arrival_s=0.0,
    )


def _units(nodes: tuple[Node, ...]) -> Units:
    problem = Problem(
        job_ids=(),
        gpu_types=TYPES,
        throughput=np.zeros((0, 2)),
        capacity=np.array([sum(n.free_gpus(t) for n in nodes) for t in TYPES], float),
        nodes=nodes,
    )
    return units_of(problem)


def test_price_is_lower_bound_when_empty_upper_bound_when_full_and_rises() -> None:
    bounds = PriceBounds(upper=(50.0, 80.0), lower=(0.01, 0.02))
    assert bounds.price(0, 0, 4) == pytest.approx(0.01)
    assert bounds.price(0, 4, 4) == pytest.approx(50.0)
    assert bounds.price(1, 0, 8) == pytest.approx(0.02)
    assert bounds.price(1, 8, 8) == pytest.approx(80.0)
    prices = [bounds.price(1, used, 8) for used in range(9)]
    assert all(a < b for a, b in itertools.pairwise(prices))
    assert bounds.alpha == pytest.approx(max(1.0, math.log(50 / 0.01), math.log(80 / 0.02)))


def test_estimated_bounds_follow_oasis_23_to_26() -> None:
    jobs = [
        JobWorth(gpus=1, best_utility=40.0, late_utility=10.0, gpu_slots=(8.0, 4.0)),
        JobWorth(gpus=2, best_utility=100.0, late_utility=30.0, gpu_slots=(math.inf, 6.0)),
    ]
    bounds = estimate_bounds(jobs, n_types=2, horizon_slots=10, total_gpus=8)
    # U: the most a job is worth per GPU it holds in a slot, among jobs that can use the type.
    assert bounds.upper == pytest.approx((40.0, 50.0))
    # L: 1/(4 eta) x least utility per GPU-slot at the horizon's end; 1/eta = 4 / (10 x 8).
    eta_inverse = 4.0 / 80.0
    assert bounds.lower[0] == pytest.approx(10.0 / 8.0 * eta_inverse / 4)
    assert bounds.lower[1] == pytest.approx(min(10.0 / 4.0, 30.0 / 6.0) * eta_inverse / 4)
    biased = estimate_bounds(jobs, n_types=2, horizon_slots=10, total_gpus=8, bias=0.8)
    assert biased.upper == pytest.approx((32.0, 40.0))


def _milp_cost(size: int, free: list[int], price: list[float], whole: bool) -> float | None:
    """The least price of `size` GPUs among units with `free` GPUs at `price`, all on one unit
    (`whole`) or anywhere, as an integer programme solved by HiGHS."""
    n = len(free)
    if whole:  # z_u binary: the one unit holding them; y_u = size z_u <= free_u
        c = np.array([p * size for p in price])
        constraints = [LinearConstraint(np.ones((1, n)), 1, 1)]
        upper = np.array([1.0 if f >= size else 0.0 for f in free])
    else:
        c = np.array(price)
        constraints = [LinearConstraint(np.ones((1, n)), size, size)]
        upper = np.array(free, float)
    result = milp(c, constraints=constraints, integrality=np.ones(n),
                  bounds=Bounds(np.zeros(n), upper))  # fmt: skip
    return float(result.fun) if result.success else None


@pytest.mark.parametrize("seed", range(40))
def test_greedy_slot_cost_equals_the_integer_programme(seed: int) -> None:
    rng = random.Random(seed)
    nodes = tuple(Node(f"n{i}", {"v100": rng.randint(1, 4)}) for i in range(rng.randint(1, 5)))
    units = _units(nodes)
    free = [rng.randint(0, cap) for cap in units.capacity]
    price = [round(rng.uniform(0.1, 10.0), 3) for _ in free]
    size = rng.randint(1, 4)
    job = _job((1.0, 2.0), 100.0, Utility("flat", 10.0), num_gpus=size)
    found = slot_cost(job, size, 1, units, free, price)
    whole = _milp_cost(size, free, price, whole=True)
    spread = _milp_cost(size, free, price, whole=False)
    if whole is not None:  # a node holds them all: the cheapest such node
        assert found is not None and found[1] == pytest.approx(whole)
        assert len(found[0]) == 1
    elif spread is not None:  # no node does: the cheapest GPUs over nodes
        assert found is not None and found[1] == pytest.approx(spread)
        assert found[2] == pytest.approx(job.rate_spread[1])
    else:
        assert found is None


def _market(units: Units, free: np.ndarray, price: np.ndarray, slot_s: float) -> Market:
    slots = free.shape[0]
    return Market(
        units=units,
        free=free,
        price=price,
        usable_s=np.full(slots, slot_s),
        slot_ends=(1 + np.arange(slots)) * slot_s,
        slot_s=slot_s,
        horizon=slots,
        base_free=free[-1].copy(),
        base_price=price[-1].copy(),
    )


def _brute_force(job: JobView, market: Market, granularity: int, max_changes: int) -> float:
    """The best payoff over every sequence of per-slot choices (not running, or one
    configuration's greedy placement), with the programme's own work units, restart and change
    rules, completing at the moment within its last slot its steps are done, and a tail past
    the horizon on the last slot's placement."""
    configs = [(size, c) for size, rates in job.sizes() for c, r in enumerate(rates) if r > 0]
    options = _options(job, market, configs, None)
    rates = config_rates(options)
    if max(rates, default=0.0) <= 0:
        return -math.inf
    unit = _unit_steps(job.steps, granularity, rates, market)
    total = math.ceil(job.steps / unit - 1e-9)
    tables = Tables.of(job, market, options, unit)
    best = -math.inf
    for choice in itertools.product(range(-1, len(configs)), repeat=market.slots):
        work, cost, changes, last, started = 0, 0.0, 0, -1, False
        for t, c in enumerate(choice):
            if c < 0:
                last = -1
                continue
            if not math.isfinite(tables.cost[t, c]):
                cost = math.inf
                break
            before, waited = work, 0.0
            if c == last:
                work += int(tables.full[t, c])
            else:
                work += int(tables.cut[t, c])
                changes += 1 if started else 0
                started = True
                waited = min(job.restart_s, market.slot_s)
            cost += float(tables.cost[t, c])
            last = c
            if work >= total:
                if changes <= max_changes:
                    run = (job.steps - before * unit) / float(tables.rate[t, c])
                    done = t * market.slot_s + min(waited + run, market.slot_s)
                    best = max(best, job.utility.value(done, 0.0) - cost)
                break
        else:
            if last >= 0 and work < total and changes <= max_changes:
                option = options[-1][last]
                assert option is not None
                per_slot = option.rate * market.slot_s
                left = max(job.steps - work * unit, 0.0)
                extra = math.ceil(left / per_slot - 1e-9)
                tail = market.tail_costs(option.take, extra)[0]
                end = float(market.slot_ends[-1]) + left / option.rate
                best = max(best, job.utility.value(end, 0.0) - cost - tail)
    return best


@pytest.mark.parametrize("seed", range(30))
def test_dynamic_programme_equals_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    nodes = (Node("a", {"k80": 2}), Node("b", {"v100": 1}))
    units = _units(nodes)
    slots = rng.randint(2, 4)
    free = np.array([[rng.randint(0, cap) for cap in units.capacity] for _ in range(slots)])
    price = np.round(np.array([[rng.uniform(0.0, 4.0) for _ in units.capacity]
                               for _ in range(slots)]), 3)  # fmt: skip
    slot_s = 100.0
    rates = (rng.choice([0.0, 1.0, 2.0]), rng.choice([2.0, 3.0, 5.0]))
    steps = rng.uniform(100.0, 900.0)
    utility = rng.choice([
        Utility("sigmoid", rng.uniform(5, 30), rng.uniform(100, 500), rng.uniform(0, 40)),
        Utility("linear", rng.uniform(5, 30), rng.uniform(300, 900)),
        Utility("flat", rng.uniform(5, 30)),
    ])  # fmt: skip
    restart = rng.choice([0.0, 20.0])
    changes = rng.choice([0, 1, 5])
    job = _job(rates, steps, utility, restart_s=restart)
    market = _market(units, free, price, slot_s)
    found = best_schedule(job, market, granularity=20, max_changes=changes)
    expected = _brute_force(job, market, 20, changes)
    if not math.isfinite(expected):
        assert found is None
        return
    assert found is not None
    # One node per type: pinning changes nothing, so the price is the programme's own.
    assert found.payoff == pytest.approx(expected, abs=1e-9)


def test_a_running_job_staying_put_pays_no_restart() -> None:
    units = _units((Node("a", {"v100": 1}), Node("b", {"v100": 1})))
    free = np.ones((3, 2), dtype=np.int64)
    price = np.array([[1.0, 0.5]] * 3)  # the other node is cheaper
    market = _market(units, free, price, 100.0)
    job = _job((0.0, 1.0), 300.0, Utility("linear", 100.0, 1000.0), restart_s=50.0)
    stay = best_schedule(job, market, granularity=30, max_changes=2, current=((0, 1),))
    assert stay is not None
    assert all(take == ((0, 1),) for take in stay.takes)  # moving would cost half a slot
    fresh = best_schedule(job, market, granularity=30, max_changes=2)
    assert fresh is not None and fresh.takes[0] == ((1, 1),)


def test_an_exhausted_gpu_never_pays() -> None:
    """A GPU-slot at price U costs at least what the job is worth (U x its GPUs >= its best
    utility, eq. (23)): no schedule touching it has a positive payoff."""
    utility = Utility("sigmoid", 60.0, 3600.0, 1.0)
    job = _job((0.0, 2.0), 1000.0, utility)
    worth = JobWorth(1, utility.value(500.0, 0.0), utility.value(7200.0, 0.0), (math.inf, 2.0))
    bounds = estimate_bounds([worth], 2, horizon_slots=4, total_gpus=1)
    units = _units((Node("b", {"v100": 1}),))
    full = np.array([[bounds.price(1, 1, 1)]] * 4)  # every slot priced as exhausted
    market = _market(units, np.ones((4, 1), dtype=np.int64), full, 360.0)
    found = best_schedule(job, market, granularity=20, max_changes=2)
    assert found is not None and found.price >= bounds.upper[1]
    assert found.payoff <= 0


def test_book_holds_a_tail_past_the_horizon_and_prices_it() -> None:
    units = _units((Node("b", {"v100": 2}),))
    bounds = PriceBounds(upper=(10.0, 10.0), lower=(0.1, 0.1))
    book = Book(units, TYPES, bounds, first_slot=5, slots=2, slot_s=60.0, now_s=300.0)
    job = _job((0.0, 1.0), 60.0 * 4, Utility("flat", 50.0))
    found = best_schedule(job, book.market(), granularity=8, max_changes=0)
    assert found is not None and found.tail_slots == 2  # two slots in, two past the horizon
    reservation = book.reservation("j", found)
    assert (reservation.first_slot, reservation.last_slot) == (5, 8)
    book.hold(reservation)
    market = book.market()
    assert market.free.shape[0] == 4 and (market.free[:, 0] == 1).all()
    assert market.price[3, 0] == pytest.approx(bounds.price(1, 1, 2))
    # past the horizon never below the last slot's price (one of two held there): the two
    # rows the tail holds, then a slot nobody holds, at that price too
    assert market.tail_costs(((0, 1),), 3)[0] == pytest.approx(3 * bounds.price(1, 1, 2))
    assert math.isinf(market.tail_costs(((0, 2),), 1)[0])  # one GPU is held there


def test_gpus_outside_our_control_are_not_part_of_the_market() -> None:
    """A node half busy with jobs we do not manage sells its free GPU at the lowest price, and
    one reserved GPU of its two free ones makes the price of the other rise halfway."""
    busy = (Node("b", {"v100": 3}, gpus_in_use={"v100": 1}),)
    units = _units(busy)
    bounds = PriceBounds(upper=(10.0, 10.0), lower=(0.1, 0.1))
    book = Book(units, TYPES, bounds, first_slot=0, slots=2, slot_s=60.0, now_s=0.0)
    assert book.market().price[0, 0] == pytest.approx(0.1)
    assert list(book.market().free[:, 0]) == [2, 2]
    job = _job((0.0, 1.0), 60.0, Utility("flat", 50.0))
    found = best_schedule(job, book.market(), granularity=4, max_changes=0)
    assert found is not None
    book.hold(book.reservation("j", found))
    assert book.market().price[0, 0] == pytest.approx(bounds.price(1, 1, 2))


def test_a_round_late_in_its_slot_plans_from_now_with_a_whole_slot() -> None:
    """Rounds come at a phase of their own: the slot nearest the round is taken to start at
    it, so a round 300 s into a grid slot of 360 s neither gets a 60-s sliver nor runs the
    next slot's work on this round's placement."""
    assert current_slot(300.0, 360.0) == 1 and current_slot(100.0, 360.0) == 0
    units = _units((Node("a", {"v100": 1}),))
    bounds = PriceBounds(upper=(10.0, 10.0), lower=(0.1, 0.1))
    book = Book(units, TYPES, bounds, first_slot=1, slots=3, slot_s=360.0, now_s=300.0)
    market = book.market()
    assert list(market.usable_s) == [360.0] * 3
    assert list(market.slot_ends) == [660.0, 1020.0, 1380.0]
    job = _job((0.0, 1.0), 360.0, Utility("sigmoid", 50.0, 3600.0, 1.0))
    found = best_schedule(job, market, granularity=4, max_changes=0)
    assert found is not None and found.takes[0] == ((0, 1),)  # runs now, done in one slot
    assert found.completion_s == pytest.approx(660.0)


def test_a_stretch_is_never_pinned_to_gpus_slower_than_the_programme_counted() -> None:
    """A 2-GPU job runs slot 0 on a whole node (rate 1) and slot 1 spread over two nodes (rate
    0.5), 12 work units in all. GPUs spread over both nodes are free in both slots and cheaper,
    but pinned there slot 0 would do half its work and the job would overrun its schedule."""
    units = _units((Node("a", {"v100": 2}), Node("b", {"v100": 2})))
    a, b = (units.nodes.index(n) for n in ("a", "b"))
    free = np.zeros((2, len(units.nodes)), dtype=np.int64)
    free[0, [a, b]] = (2, 1)
    free[1, [a, b]] = (1, 1)
    price = np.ones((2, len(units.nodes)))
    price[0, a] = 5.0
    market = Market(
        units, free, price, np.full(2, 360.0), np.array([360.0, 720.0]), 360.0, horizon=2,
        base_free=np.full(len(units.nodes), 2), base_price=np.ones(len(units.nodes)),
    )  # fmt: skip
    job = _job((0.0, 1.0), 540.0, Utility("deadline", 50.0, 720.0), num_gpus=2)
    found = best_schedule(job, market, granularity=12, max_changes=2)
    assert found is not None and found.tail_slots == 0
    assert found.takes[0] == ((a, 2),)  # the whole node the programme counted
    assert found.takes[1] == tuple(sorted(((a, 1), (b, 1))))


def test_a_running_job_moved_to_a_faster_type_is_pinned_there_not_left_where_it_runs() -> None:
    """A job running on a K80 whose best schedule is the V100 (8x faster): its stretch is
    pinned to the V100, not to the K80 it runs on now. (It was: the current GPUs were a
    candidate for any first stretch, and the job ran its V100 schedule at the K80's rate,
    overran it and was planned again, round after round.)"""
    units = _units((Node("a", {"k80": 1}), Node("b", {"v100": 1})))
    k80, v100 = (units.nodes.index(n) for n in ("a", "b"))
    free = np.ones((4, 2), dtype=np.int64)
    price = np.full((4, 2), 0.01)
    market = _market(units, free, price, 100.0)
    job = _job((1.0, 8.0), 1600.0, Utility("linear", 100.0, 1000.0), restart_s=10.0)
    found = best_schedule(job, market, granularity=32, max_changes=2, current=((k80, 1),))
    assert found is not None and found.tail_slots == 0
    assert found.takes[0] == ((v100, 1),) and found.takes[1] == ((v100, 1),)
    assert all(take in (None, ((v100, 1),)) for take in found.takes)


def test_a_small_job_keeps_a_whole_free_node_for_gangs_and_pays_the_cheapest_price() -> None:
    """Two 2-GPU V100 nodes, one GPU of node a held (dearer), node b wholly free: a 1-GPU
    job goes to a's free GPU, keeping b whole for a 2-GPU gang, and pays no more than b's
    price (a market without offers: the cheapest node's). With a held whole, it takes b."""
    units = _units((Node("a", {"v100": 2}), Node("b", {"v100": 2})))
    a, b = (units.nodes.index(n) for n in ("a", "b"))
    free = np.zeros((2, len(units.nodes)), dtype=np.int64)
    free[:, [a, b]] = (1, 2)
    price = np.ones((2, len(units.nodes)))
    price[:, a] = 3.0
    job = _job((0.0, 1.0), 720.0, Utility("flat", 100.0))
    found = best_schedule(job, _market(units, free, price, 360.0), granularity=8, max_changes=0)
    assert found is not None and found.takes == (((a, 1),), ((a, 1),))
    assert found.price == pytest.approx(2 * 1.0)  # b's price for two slots
    free[:, a] = 0
    found = best_schedule(job, _market(units, free, price, 360.0), granularity=8, max_changes=0)
    assert found is not None and found.takes == (((b, 1),), ((b, 1),))


def test_a_type_costs_the_same_packed_or_spread() -> None:
    """The book's offers price a type's GPUs as if those held were spread evenly over its
    nodes: two 1-GPU jobs packed on node a (full, at U) leave node b wholly free (at L), and
    both nodes are offered at the price of a node half held, as if one ran on each."""
    units = _units((Node("a", {"v100": 2}), Node("b", {"v100": 2})))
    a, b = (units.nodes.index(n) for n in ("a", "b"))
    bounds = PriceBounds(upper=(10.0, 10.0), lower=(0.1, 0.1))
    book = Book(units, TYPES, bounds, first_slot=0, slots=2, slot_s=60.0, now_s=0.0)
    job = _job((0.0, 1.0), 120.0, Utility("flat", 50.0))
    first = best_schedule(job, book.market(), granularity=4, max_changes=0)
    assert first is not None and first.price == pytest.approx(2 * 0.1)  # one held of 4: L
    book.hold(book.reservation("first", first))
    second = best_schedule(job, book.market(), granularity=4, max_changes=0)
    assert second is not None and second.takes == first.takes  # packed: b stays whole
    assert second.price == pytest.approx(2 * 0.1)
    book.hold(book.reservation("second", second))
    market = book.market()
    assert market.price[0, first.takes[0][0][0]] == pytest.approx(10.0)
    assert market.offer is not None
    assert market.offer[0, a] == market.offer[0, b] == pytest.approx(bounds.price(1, 1, 2))


@pytest.mark.parametrize("seed", range(30))
def test_the_cheap_bound_is_never_below_the_best_payoff(seed: int) -> None:
    """The bound that settles held jobs without a programme is an upper bound on the
    programme's payoff, also for schedules that mix types (a fast dear type in the horizon, a
    cheap slow one in the tail) and on a book with other schedules held."""
    rng = random.Random(seed)
    nodes = (Node("a", {"k80": 2}), Node("b", {"v100": 1}), Node("c", {"v100": 2}))
    units = _units(nodes)
    bounds = PriceBounds(upper=(rng.uniform(5, 20), rng.uniform(5, 40)), lower=(0.05, 0.1))
    book = Book(units, TYPES, bounds, first_slot=0, slots=rng.randint(2, 6), slot_s=100.0,
                now_s=0.0)  # fmt: skip

    def random_job() -> JobView:
        utility = rng.choice([
            Utility("sigmoid", rng.uniform(5, 60), rng.uniform(100, 900), rng.uniform(0, 40)),
            Utility("linear", rng.uniform(5, 60), rng.uniform(300, 1500)),
            Utility("flat", rng.uniform(5, 60)),
        ])  # fmt: skip
        rates = (rng.choice([0.0, 1.0, 2.0]), rng.choice([2.0, 3.0, 5.0]))
        return _job(rates, rng.uniform(100.0, 2000.0), utility, restart_s=rng.choice([0, 10]))

    for _ in range(rng.randint(0, 3)):
        held = best_schedule(random_job(), book.market(True), granularity=50, max_changes=2)
        if held is not None:
            book.hold(book.reservation(f"h{_}", held))
    job = random_job()
    found = best_schedule(job, book.market(True), granularity=200, max_changes=2)
    bound, _utility, _price = payoff_bound(job, book)
    if found is not None:
        # The programme counts a slot's work to the nearest of its units (1/200 of the job).
        assert bound >= found.payoff - 1e-6 - found.price / 200


@pytest.mark.parametrize("steps", [1000.0, 12345.0, 4e6])
def test_a_slot_of_the_fastest_configuration_is_whole_work_units(steps: float) -> None:
    """Rounded there, the horizon's slots did less than the tail past it (counted exactly),
    and a job paused through the horizon to finish in the tail a slot cheaper."""
    market = Book(_units((Node("a", {"k80": 1}),)), TYPES, PriceBounds((1.0, 1.0), (0.1, 0.1)),
                  first_slot=0, slots=4, slot_s=360.0, now_s=0.0).market()  # fmt: skip
    unit = _unit_steps(steps, 100, [1.0, 3.7], market)
    per_slot = 3.7 * 360.0 / unit
    assert per_slot == pytest.approx(round(per_slot)) and 1 <= round(per_slot) <= 16
    asked = max(min(steps / 100, 360.0), 3.7 * 360.0 / 16)  # 1/16 of the fastest's slot at most
    assert unit <= asked + 1e-9
    bounds = estimate_bounds([JobWorth(1, 10.0, 0.0, (4.0, 2.0))], 2, 10, 8, floor=0.01)
    # worth nothing at the horizon's end: the paper's L is 0, the floor gives L = 0.01 U
    assert bounds.lower == pytest.approx(tuple(0.01 * up for up in bounds.upper))


def test_a_completion_counts_when_the_work_is_done_within_its_slot() -> None:
    """Both GPUs finish the job within the first slot: the K80 at 90 s, the V100 at 30 s. At
    the slot's end both would be worth the same and the cheaper K80 would win; done 60 s
    sooner on the V100 is worth more than its dearer slot, so it wins, done at 30 s."""
    units = _units((Node("a", {"k80": 1}), Node("b", {"v100": 1})))
    market = _market(units, np.ones((2, 2), dtype=np.int64), np.array([[0.1, 0.5]] * 2), 100.0)
    job = _job((1.0, 3.0), 90.0, Utility("sigmoid", 10.0, 60.0, 3600.0 / 30))
    found = best_schedule(job, market, granularity=30, max_changes=0)
    assert found is not None and found.takes == (((1, 1),),)
    assert found.completion_s == pytest.approx(30.0) and found.end_s == pytest.approx(100.0)
    assert found.utility == pytest.approx(job.utility.value(30.0, 0.0))
    # A flat utility gains nothing from finishing sooner: the cheaper K80.
    flat = best_schedule(_job((1.0, 3.0), 90.0, Utility("flat", 10.0)), market,
                         granularity=30, max_changes=0)  # fmt: skip
    assert flat is not None and flat.takes == (((0, 1),),)
    assert flat.completion_s == pytest.approx(90.0)


def test_within_the_horizon_no_schedule_goes_past_it() -> None:
    """A flat job is cheapest paused through a dear first slot and finished past the horizon;
    held within it (the paper's T), it runs in both slots, or not at all when it cannot."""
    units = _units((Node("b", {"v100": 1}),))
    market = _market(units, np.ones((2, 1), dtype=np.int64), np.array([[0.5], [0.1]]), 100.0)
    job = _job((0.0, 1.0), 200.0, Utility("flat", 10.0))
    free_to_tail = best_schedule(job, market, granularity=20, max_changes=1)
    assert free_to_tail is not None and free_to_tail.tail_slots == 1
    assert free_to_tail.takes == (None, ((0, 1),))
    assert free_to_tail.completion_s == pytest.approx(300.0)
    within = best_schedule(job, market, granularity=20, max_changes=1, tails=False)
    assert within is not None and within.takes == (((0, 1),), ((0, 1),))
    assert within.completion_s == pytest.approx(200.0)
    too_long = _job((0.0, 1.0), 250.0, Utility("flat", 10.0))
    assert best_schedule(too_long, market, granularity=20, max_changes=1, tails=False) is None
