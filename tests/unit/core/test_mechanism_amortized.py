"""core/amortize.py and plan_round under RoundOptions(moves="amortized"): a running job is moved
or stopped only when the move pays for its restart. Every number is worked out by hand in the
test that uses it.

The table: class "net" runs 20 steps/s on a "fast" GPU and 10 steps/s on a "slow" one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from slurm_hetsched.core.amortize import (
    MoveCase,
    hold_reason,
    min_residence_s,
    move_pays,
    move_rates,
)
from slurm_hetsched.core.mechanism import RoundOptions, plan_round, record_round
from slurm_hetsched.core.model import (
    Allocation,
    ClusterSnapshot,
    GpuSlice,
    Job,
    Node,
    Placement,
    RoundPlan,
    RoundState,
)
from slurm_hetsched.core.throughput import ThroughputTable

TYPES = ("fast", "slow")
TABLE = ThroughputTable(TYPES, {("net", 1): np.array([20.0, 10.0])}, {}, {})
NODES = (Node("f1", {"fast": 1}), Node("s1", {"slow": 1}))
PLAIN = RoundOptions(moves="plain")


def alloc(rows: dict[str, dict[str, float]]) -> Allocation:
    x = np.array([[rows[j].get(t, 0.0) for t in TYPES] for j in rows])
    return Allocation(tuple(rows), TYPES, x, 0.0, 0.0, "test")


def on(job_id: str, node: str, gpu_type: str) -> Placement:
    return Placement(job_id, (GpuSlice(node, gpu_type, 1),))


def running(allocation: Allocation, placed: dict[str, tuple[Placement, float]]) -> RoundState:
    """The state after some round: each job of `placed` runs on its placement since the time
    given; nothing received (so no job is behind another by history)."""
    return RoundState(
        round=5,
        job_ids=allocation.job_ids,
        gpu_types=TYPES,
        received_s=np.zeros((len(allocation.job_ids), len(TYPES))),
        allocation=allocation,
        placements={j: p for j, (p, _) in placed.items()},
        last_reset_s=0.0,
        placed_at_s={j: t for j, (_, t) in placed.items()},
    )


def snap(now_s: float, jobs: Sequence[Job], nodes: Sequence[Node] = NODES) -> ClusterSnapshot:
    return ClusterSnapshot(now_s, tuple(nodes), tuple(jobs))


def interruptions(plan: RoundPlan) -> int:
    """Running jobs this round moves or stops: each pays a restart."""
    return len(plan.move) + len(plan.stop)


# ----------------------------------------------------------------------------------------------
# The rules on their own


def test_residence_is_the_stay_that_keeps_restarts_under_the_share() -> None:
    # 30 s restarts at most 10 % of the time: 30 / (R + 30) = 0.1  =>  R = 270 s.
    assert min_residence_s(30.0, 0.1) == pytest.approx(270.0)
    assert min_residence_s(30.0, 1.0) == 0.0


def test_a_faster_move_whose_gain_is_smaller_than_its_restart_is_not_made() -> None:
    # 1000 steps left: here at 10/s 100 s; there 60 s restart + 1000/20 = 110 s. Stay.
    case = MoveCase(
        stayed_s=1000.0,
        restart_s=60.0,
        rate_now=10.0,
        rate_next=20.0,
        steps_remaining=1000.0,
        round_s=60.0,
    )
    assert not move_pays(case, residence_s=0.0)
    assert hold_reason(case, share=1.0) == "no gain: a 60 s restart for 2.00x"


def test_a_faster_move_whose_gain_is_larger_than_its_restart_is_made() -> None:
    # 3000 steps left: here 300 s; there 60 + 3000/20 = 210 s. Move.
    case = MoveCase(1000.0, 60.0, 10.0, 20.0, 3000.0, 60.0)
    assert move_pays(case, residence_s=0.0)
    assert hold_reason(case, share=1.0) is None


def test_with_unknown_steps_a_move_must_gain_over_one_residence() -> None:
    # Residence 270 s (30 s restarts, share 0.1). Over 270 s: here 10 x 270 = 2700 steps;
    # there 11 x (270 - 30) = 2640 (stay) or 12 x 240 = 2880 (move).
    slower = MoveCase(1000.0, 30.0, 10.0, 11.0, None, 60.0)
    faster = MoveCase(1000.0, 30.0, 10.0, 12.0, None, 60.0)
    assert hold_reason(slower, 0.1) == "no gain: a 30 s restart for 1.10x"
    assert hold_reason(faster, 0.1) is None


def test_a_job_that_has_not_stayed_its_residence_is_kept_even_for_a_stop() -> None:
    # 270 s residence; it stayed 200 s.
    case = MoveCase(200.0, 30.0, 10.0, None, None, 60.0)
    assert hold_reason(case, 0.1) == "residence: stayed 200 of 270 s"
    assert hold_reason(MoveCase(270.0, 30.0, 10.0, None, None, 60.0), 0.1) is None


def test_a_faster_move_that_pays_needs_no_residence() -> None:
    # Stayed 10 s of a 270 s residence; 3000 steps: here 300 s, there 30 + 150 = 180 s.
    case = MoveCase(10.0, 30.0, 10.0, 20.0, 3000.0, 60.0)
    assert hold_reason(case, 0.1) is None
    # A move to a GPU no faster (here: a stop) waits out the residence.
    assert hold_reason(MoveCase(10.0, 30.0, 10.0, 10.0, 3000.0, 60.0), 0.1) == (
        "residence: stayed 10 of 270 s"
    )


def test_a_job_that_finishes_within_its_residence_is_kept() -> None:
    # 2000 steps at 10/s: 200 s left, within the 270 s residence.
    assert hold_reason(MoveCase(1000.0, 30.0, 10.0, None, 2000.0, 60.0), 0.1) == (
        "finishing: done in 200 s"
    )
    assert hold_reason(MoveCase(1000.0, 30.0, 10.0, None, 2800.0, 60.0), 0.1) is None


def test_rates_are_compared_on_the_jobs_own_scale() -> None:
    """Measured 5 steps/s on slow (the table says 10): half the table everywhere, so 10 on
    fast. Measured on both: its own figures. Measured nowhere: the table."""
    slow, fast = on("a", "s1", "slow"), on("a", "f1", "fast")
    half = Job("a", "net", measured_steps_per_s={"slow": 5.0})
    assert move_rates(half, slow, fast, TABLE) == (5.0, 10.0)
    assert move_rates(half, fast, slow, TABLE) == (10.0, 5.0)
    both = Job("a", "net", measured_steps_per_s={"slow": 5.0, "fast": 7.0})
    assert move_rates(both, slow, fast, TABLE) == (5.0, 7.0)
    assert move_rates(Job("a", "net"), slow, fast, TABLE) == (10.0, 20.0)
    assert move_rates(half, slow, None, TABLE) == (5.0, None)


# ----------------------------------------------------------------------------------------------
# In plan_round


@pytest.mark.parametrize(("steps_left", "moves"), [(1000.0, False), (3000.0, True)])
def test_plan_keeps_or_moves_a_job_by_its_gain(steps_left: float, moves: bool) -> None:
    """Job a runs on the slow GPU since t=0; at t=1000 the allocation gives it the fast one.
    With 60 s restarts and share 0.5 the residence is 60 s (long over). As worked out above:
    1000 steps left stay (100 s here vs 110 s there), 3000 move (300 s vs 210 s)."""
    allocation = alloc({"a": {"fast": 1.0}})
    state = running(allocation, {"a": (on("a", "s1", "slow"), 0.0)})
    job = Job("a", "net", steps_remaining=steps_left, restart_s=60.0)
    options = RoundOptions(restart_share=0.5)
    plan, after = plan_round(
        allocation, state, snap(1000.0, [job]), 60.0, options=options, table=TABLE
    )
    plain, _ = plan_round(allocation, state, snap(1000.0, [job]), 60.0, options=PLAIN, table=TABLE)
    assert set(plain.move) == {"a"}
    if moves:
        assert plan.move == {"a": on("a", "f1", "fast")} and plan.held == {}
        assert after.placed_at_s == {"a": 1000.0}
    else:
        assert plan.keep == {"a": on("a", "s1", "slow")} and plan.move == {}
        assert plan.held == {"a": "no gain: a 60 s restart for 2.00x"}
        assert after.placed_at_s == {"a": 0.0}  # the stay goes on


def test_two_jobs_sharing_one_gpu_swap_once_per_residence_not_every_round() -> None:
    """a and b are each allocated half of the one fast GPU (the slow node is out). Rounds of
    60 s, 30 s restarts, share 0.1: residence 270 s. Plain swaps them every round; amortized
    lets each stay until the first round at which it has stayed 270 s: 300 s = 5 rounds."""
    allocation = alloc({"a": {"fast": 0.5}, "b": {"fast": 0.5}})
    nodes = (Node("f1", {"fast": 1}),)
    jobs = [Job("a", "net", restart_s=30.0), Job("b", "net", restart_s=30.0)]

    def run(options: RoundOptions) -> list[RoundPlan]:
        state, plans = RoundState.initial(TYPES), []
        for r in range(20):
            plan, state = plan_round(
                allocation, state, snap(60.0 * r, jobs, nodes), 60.0, options=options, table=TABLE
            )
            state = record_round(state, dict.fromkeys(plan.placements, 60.0))
            plans.append(plan)
        return plans

    plain = run(PLAIN)
    amortized = run(RoundOptions())
    assert sum(map(interruptions, plain)) == 19  # a swap in every round after the first
    runner = [next(iter(p.placements)) for p in amortized]
    assert runner == ["a"] * 5 + ["b"] * 5 + ["a"] * 5 + ["b"] * 5
    assert sum(map(interruptions, amortized)) == 3
    assert amortized[1].held == {"a": "residence: stayed 60 of 270 s"}


def test_a_job_about_to_finish_is_not_stopped_for_a_newcomer() -> None:
    """a has run on the fast GPU for 1000 s and has 100 steps (5 s) left; b arrives with the
    higher priority. Plain stops a; amortized lets it finish (5 s < 270 s residence)."""
    allocation = alloc({"a": {"fast": 1.0}, "b": {"fast": 1.0}})
    state = running(allocation, {"a": (on("a", "f1", "fast"), 0.0)})
    state = record_round(state, {"a": 1000.0})  # a received 1000 s, b nothing: b comes first
    jobs = [Job("a", "net", steps_remaining=100.0, restart_s=30.0), Job("b", "net")]
    nodes = (Node("f1", {"fast": 1}),)
    plain, _ = plan_round(
        allocation, state, snap(1000.0, jobs, nodes), 60.0, options=PLAIN, table=TABLE
    )
    plan, _ = plan_round(allocation, state, snap(1000.0, jobs, nodes), 60.0, table=TABLE)
    assert plain.stop == ("a",) and set(plain.start) == {"b"}
    assert plan.keep == {"a": on("a", "f1", "fast")} and plan.start == {} and plan.stop == ()
    assert plan.held == {"a": "finishing: done in 5 s"}


def test_a_held_job_gives_way_when_its_gpus_are_gone() -> None:
    """a would be held (it just started) but its node is down: it moves as plain says."""
    allocation = alloc({"a": {"fast": 0.5, "slow": 0.5}})
    state = running(allocation, {"a": (on("a", "s1", "slow"), 990.0)})
    nodes = (Node("f1", {"fast": 1}), Node("s1", {"slow": 1}, available=False))
    plan, _ = plan_round(
        allocation, state, snap(1000.0, [Job("a", "net")], nodes), 60.0, table=TABLE
    )
    assert plan.move == {"a": on("a", "f1", "fast")} and plan.held == {}


def test_the_gpus_of_a_held_job_go_to_nobody_else_and_the_rest_is_planned_around_it() -> None:
    """Three jobs, one fast and one slow GPU. Plain stops a (on fast, just started) for c and
    keeps b on slow. Amortized holds a; c then waits: b, which plain kept, keeps its GPU."""
    allocation = alloc({"a": {"fast": 0.5}, "b": {"slow": 1.0}, "c": {"fast": 0.5}})
    state = running(
        allocation, {"a": (on("a", "f1", "fast"), 950.0), "b": (on("b", "s1", "slow"), 0.0)}
    )
    state = record_round(state, {"a": 50.0})  # a has received time on fast, c none
    jobs = [Job(k, "net", restart_s=30.0) for k in "abc"]
    plain, _ = plan_round(allocation, state, snap(1000.0, jobs), 60.0, options=PLAIN, table=TABLE)
    plan, _ = plan_round(allocation, state, snap(1000.0, jobs), 60.0, table=TABLE)
    assert plain.stop == ("a",) and set(plain.start) == {"c"} and set(plain.keep) == {"b"}
    assert plan.keep == {"a": on("a", "f1", "fast"), "b": on("b", "s1", "slow")}
    assert plan.start == {} and plan.stop == ()
    assert plan.held == {"a": "residence: stayed 50 of 270 s"}


def test_zero_restart_costs_make_amortized_the_plain_mechanism() -> None:
    allocation = alloc({"a": {"fast": 0.5}, "b": {"fast": 0.5, "slow": 0.5}, "c": {"slow": 1.0}})
    jobs = [Job(k, "net", restart_s=0.0) for k in "abc"]
    states = {"plain": RoundState.initial(TYPES), "amortized": RoundState.initial(TYPES)}
    for r in range(30):
        plans = {}
        for name, options in (("plain", PLAIN), ("amortized", RoundOptions())):
            plans[name], states[name] = plan_round(
                allocation, states[name], snap(60.0 * r, jobs), 60.0, options=options, table=TABLE
            )
            states[name] = record_round(states[name], dict.fromkeys(plans[name].placements, 60.0))
        assert plans["plain"].placements == plans["amortized"].placements


def test_policy_placements_are_taken_as_they_are() -> None:
    """A policy that places jobs itself (ANDREAS) weighs moves in its own costs: the mechanism
    applies its placements, amortized or not."""
    allocation = alloc({"a": {"fast": 1.0}})
    allocation = Allocation(
        allocation.job_ids,
        TYPES,
        allocation.x,
        0.0,
        0.0,
        "placing",
        placements={"a": on("a", "f1", "fast")},
    )
    state = running(alloc({"a": {"slow": 1.0}}), {"a": (on("a", "s1", "slow"), 990.0)})
    plan, _ = plan_round(allocation, state, snap(1000.0, [Job("a", "net")]), 60.0, table=TABLE)
    assert plan.move == {"a": on("a", "f1", "fast")}


def test_moves_is_checked() -> None:
    with pytest.raises(ValueError, match="moves 'sometimes'"):
        RoundOptions(moves="sometimes")
    with pytest.raises(ValueError, match="restart_share 0"):
        RoundOptions(restart_share=0.0)
    with pytest.raises(ValueError, match="restart cost -1"):
        Job("a", "net", restart_s=-1.0)
