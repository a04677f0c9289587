"""The `oasis` policy round by round: admission at a positive payoff, a job that cannot pay
waits with its price and utility, reservations carried from round to round (never revised,
never counted twice), admission when prices fall, a schedule that ran out or lost its GPUs
planned again, and a job that changes GPU count within its schedule."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from slurm_hetsched.core.model import Allocation, Node, Problem
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.oasis import Oasis
from slurm_hetsched.core.utility import Utility
from slurm_hetsched.errors import ConfigError

TYPES = ("k80", "v100")
SLOT_S = 360.0


def _problem(
    nodes: tuple[Node, ...],
    jobs: dict[str, tuple[tuple[float, float], float, Utility]],
    *,
    now_s: float = 0.0,
    last: Allocation | None = None,
    allowed: dict[str, tuple[int, ...]] | None = None,
) -> Problem:
    ids = tuple(jobs)
    capacity = [sum(n.free_gpus(t) for n in nodes) for t in TYPES]
    return Problem(
        job_ids=ids,
        gpu_types=TYPES,
        throughput=np.array([jobs[j][0] for j in ids], float),
        capacity=np.array(capacity, float),
        steps=np.array([jobs[j][1] for j in ids], float),
        utilities=tuple(jobs[j][2] for j in ids),
        nodes=nodes,
        now_s=now_s,
        arrival_s=np.zeros(len(ids)),
        running={} if last is None else {j: p for j, p in last.placements.items() if j in jobs},
        reservations={} if last is None else dict(last.reservations or {}),
        allowed_gpus=None if allowed is None else tuple(allowed.get(j, (1,)) for j in ids),
    )


def test_registered_with_its_options() -> None:
    policy = get_policy("oasis", {"slot_s": 600, "horizon": 12, "max_changes": 0})
    assert isinstance(policy, Oasis)
    assert (policy.slot_s, policy.horizon, policy.max_changes) == (600.0, 12, 0)


def test_a_job_that_pays_is_admitted_and_runs_on_its_fastest_type() -> None:
    nodes = (Node("a", {"k80": 1}), Node("b", {"v100": 1}))
    jobs = {"j0": ((1.0, 3.0), 3.0 * SLOT_S * 2, Utility("sigmoid", 50.0, 3 * SLOT_S, 20.0))}
    allocation = Oasis(slot_s=SLOT_S, restart_s=0.0).allocate(_problem(nodes, jobs))
    assert allocation.placements["j0"].slices[0].gpu_type == "v100"
    reservation = allocation.reservations["j0"]
    assert (reservation.first_slot, reservation.last_slot) == (0, 1)
    assert reservation.utility > reservation.price > 0


def test_a_job_that_cannot_pay_waits_with_price_and_utility_and_is_admitted_later() -> None:
    nodes = (Node("b", {"v100": 1}),)
    rich = ((0.0, 1.0), 8 * SLOT_S, Utility("sigmoid", 100.0, 8 * SLOT_S, 30.0))
    poor = ((0.0, 1.0), 2 * SLOT_S, Utility("linear", 0.2, 9 * SLOT_S))
    jobs = {"rich": rich, "poor": poor}
    policy = Oasis(slot_s=SLOT_S, horizon=12)
    first = policy.allocate(_problem(nodes, jobs))
    assert set(first.reservations) == {"rich"}
    assert first.waiting["poor"].startswith("price=")
    price, utility = (float(w) for w in first.waiting["poor"][6:].split(">utility="))
    assert price > utility
    # The next round: the reservation is kept, not counted twice, and the poor job still waits.
    second = policy.allocate(_problem(nodes, jobs, now_s=SLOT_S, last=first))
    assert (
        second.reservations["rich"].stretches == first.reservations["rich"].from_slot(1).stretches
    )
    assert "poor" in second.waiting and "poor" not in second.reservations
    # The rich job is done early: its GPUs are free again and the poor job pays for them now.
    third = policy.allocate(_problem(nodes, {"poor": poor}, now_s=2 * SLOT_S, last=second))
    assert set(third.reservations) == {"poor"}
    assert third.placements["poor"].slices[0].node == "b"


def test_a_schedule_is_never_revised_for_a_later_job() -> None:
    nodes = (Node("b", {"v100": 1}),)
    early = ((0.0, 1.0), 3 * SLOT_S, Utility("flat", 10.0))
    policy = Oasis(slot_s=SLOT_S, horizon=8)
    first = policy.allocate(_problem(nodes, {"early": early}))
    late = ((0.0, 1.0), 1 * SLOT_S, Utility("sigmoid", 1000.0, 8 * SLOT_S, 5.0))
    jobs = {"early": early, "late": late}
    second = policy.allocate(_problem(nodes, jobs, now_s=SLOT_S, last=first))
    assert second.placements["early"] == first.placements["early"]
    assert second.reservations["early"].last_slot == first.reservations["early"].last_slot
    # The late job, worth far more, fits only after it: it waits its turn.
    late_runs = [s for s in second.reservations["late"].stretches if s.placement]
    assert late_runs[0].first_slot == first.reservations["early"].last_slot + 1
    assert second.waiting["late"] == "paused-by-schedule"


def test_a_job_behind_its_schedule_is_planned_again_and_kept() -> None:
    nodes = (Node("b", {"v100": 1}),)
    job = ((0.0, 1.0), 2 * SLOT_S, Utility("flat", 10.0))
    policy = Oasis(slot_s=SLOT_S, horizon=6, restart_s=0.0)
    first = policy.allocate(_problem(nodes, {"j": job}))
    assert first.reservations["j"].last_slot == 1
    # Two slots later it is still not done (it ran slower than its rate): planned again.
    slow = ((0.0, 1.0), 1 * SLOT_S, Utility("flat", 10.0))
    third = policy.allocate(_problem(nodes, {"j": slow}, now_s=2 * SLOT_S, last=first))
    assert third.reservations["j"].first_slot == 2
    assert third.placements["j"].slices[0].node == "b"


def test_a_drained_node_sends_its_jobs_to_be_planned_again() -> None:
    nodes = (Node("a", {"v100": 1}), Node("b", {"v100": 1}))
    job = ((0.0, 1.0), 4 * SLOT_S, Utility("flat", 10.0))
    policy = Oasis(slot_s=SLOT_S, horizon=8)
    first = policy.allocate(_problem(nodes, {"j": job}))
    node = first.placements["j"].slices[0].node
    other = "b" if node == "a" else "a"
    drained = tuple(dataclasses.replace(n, available=n.name != node) for n in nodes)
    # Slurm requeued it when its node drained: it no longer runs, its reservation is there.
    gone = dataclasses.replace(first, placements={})
    second = policy.allocate(_problem(drained, {"j": job}, now_s=SLOT_S, last=gone))
    assert second.placements["j"].slices[0].node == other


def test_an_elastic_job_may_change_its_gpu_count_within_its_schedule() -> None:
    """Two V100s are free only after a first job's slot: a 1-2 GPU job that is worth a lot
    early starts on one and grows to two (one change, charged its restart)."""
    nodes = (Node("b", {"v100": 2}),)
    first_job = ((0.0, 1.0), 1 * SLOT_S, Utility("flat", 10.0))
    policy = Oasis(slot_s=SLOT_S, horizon=8, max_changes=1, restart_s=10.0)
    first = policy.allocate(_problem(nodes, {"a": first_job}))
    elastic = ((0.0, 1.0), 4 * SLOT_S, Utility("linear", 100.0, 8 * SLOT_S))
    jobs = {"a": first_job, "e": elastic}
    allocation = policy.allocate(_problem(nodes, jobs, last=first, allowed={"e": (1, 2)}))
    counts = [s.placement.num_gpus for s in allocation.reservations["e"].stretches if s.placement]
    assert counts[0] == 1 and 2 in counts
    never = Oasis(slot_s=SLOT_S, horizon=8, max_changes=0, restart_s=10.0)
    fixed = never.allocate(_problem(nodes, jobs, last=first, allowed={"e": (1, 2)}))
    counts = {s.placement.num_gpus for s in fixed.reservations["e"].stretches if s.placement}
    assert len(counts) == 1


@pytest.mark.parametrize("bad", [{"slot_s": 0}, {"bias": 0}])
def test_bad_options_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(Exception, match=r"oasis|slot_s|bias"):
        get_policy("oasis", bad)


def test_a_job_priced_out_by_the_floor_runs_once_no_schedule_holds_a_gpu() -> None:
    """With L at half of U (`floor`), no job pays for a run of 4 slots. On the idle cluster the
    first held job (arrival, then row order) is admitted anyway, one a round; the other waits
    for its price while that one runs, and is admitted once the cluster is idle again."""
    nodes = (Node("a", {"v100": 1}), Node("b", {"v100": 1}))
    first_job = ((0.0, 1.0), 4 * SLOT_S, Utility("flat", 100.0))
    second_job = ((0.0, 1.0), 4 * SLOT_S, Utility("flat", 0.5))
    jobs = {"first": first_job, "second": second_job}
    policy = Oasis(slot_s=SLOT_S, horizon=8, floor=0.5)
    one = policy.allocate(_problem(nodes, jobs))
    assert set(one.reservations) == {"first"} and "first" in one.placements
    assert one.waiting["second"].startswith("price=")
    two = policy.allocate(_problem(nodes, jobs, now_s=SLOT_S, last=one))
    assert set(two.reservations) == {"first"} and two.waiting["second"].startswith("price=")
    # The first job is done: nothing holds a GPU now.
    three = policy.allocate(_problem(nodes, {"second": second_job}, now_s=2 * SLOT_S, last=two))
    assert "second" in three.placements and "second" not in three.waiting


def test_the_floor_option_raises_the_least_price() -> None:
    policy = get_policy("oasis", {"floor": 0.01})
    assert isinstance(policy, Oasis) and policy.floor == 0.01
    with pytest.raises(ConfigError, match="floor"):
        get_policy("oasis", {"floor": 1.0})


def test_idle_gpus_of_this_slot_cost_an_arriving_job_nothing() -> None:
    """L at half of U (`floor`) prices a 1-slot run above a job worth 0.4 of U: in the
    paper's setting (`within_horizon`) it waits, though a schedule holds the other GPU.
    Ours: the GPU nobody holds in this slot is lost unless used now, so it costs nothing and
    the job runs."""
    nodes = (Node("a", {"v100": 1}), Node("b", {"v100": 1}))
    long_job = ((0.0, 1.0), 4 * SLOT_S, Utility("flat", 100.0))
    short_job = ((0.0, 1.0), 1 * SLOT_S, Utility("flat", 40.0))
    for paper in (True, False):
        policy = Oasis(slot_s=SLOT_S, horizon=4, floor=0.5, restart_s=0.0, within_horizon=paper)
        first = policy.allocate(_problem(nodes, {"long": long_job}))
        jobs = {"long": long_job, "short": short_job}
        second = policy.allocate(_problem(nodes, jobs, now_s=SLOT_S, last=first))
        assert ("short" in second.placements) is not paper
        assert second.waiting.get("short", "").startswith("price=") is paper


def test_a_running_job_moves_to_faster_gpus_left_idle() -> None:
    """A job admitted on the K80 because the V100 was reserved; the V100's job is done early:
    the next round the K80 job moves to the idle V100 (it finishes sooner, its restart
    charged, at no higher price)."""
    nodes = (Node("a", {"k80": 1}), Node("b", {"v100": 1}))
    policy = Oasis(slot_s=SLOT_S, horizon=12, restart_s=10.0)
    first_job = ((0.0, 4.0), 4 * 4 * SLOT_S, Utility("flat", 100.0))
    slow_job = ((1.0, 4.0), 8 * SLOT_S, Utility("linear", 50.0, 12 * SLOT_S))
    jobs = {"first": first_job, "slow": slow_job}
    one = policy.allocate(_problem(nodes, jobs))
    assert one.placements["slow"].slices[0].gpu_type == "k80"
    two = policy.allocate(_problem(nodes, {"slow": slow_job}, now_s=SLOT_S, last=one))
    assert two.placements["slow"].slices[0].gpu_type == "v100"
    assert two.reservations["slow"].completion_s < one.reservations["slow"].completion_s
