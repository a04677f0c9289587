"""core/policies/risk_reward.py: the simplified Risk-Reward Heuristic (the OASiS evaluation's
baseline after Irwin et al.), on small node problems whose utilities are worked out by hand.

Every job runs at 1 step/s on every type unless said otherwise, and restarts cost nothing
(`restart_s=0`), so a job of N steps started now ends N seconds from now."""

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
from slurm_hetsched.core.policies.risk_reward import RiskReward
from slurm_hetsched.core.utility import Utility
from slurm_hetsched.errors import ConfigError

TYPES = ("v100", "k80")
FLAT = Utility("flat", 100.0)
ONE_GPU = (Node("n1", {"v100": 1}),)


def make(
    nodes: Sequence[Node],
    jobs: Sequence[tuple[str, float, Utility]],
    now_s: float = 0.0,
    tput: Mapping[str, Sequence[float]] | None = None,
    gpus: Mapping[str, int] | None = None,
    running: Sequence[tuple[str, str, str, int]] = (),
) -> Problem:
    """A nodes problem. jobs: (id, steps left, utility), all arrived at 0; tput: id -> steps/s
    per TYPES (default 1); gpus: id -> GPUs (default 1); running: (job, node, type, GPUs)."""
    ids = tuple(j for j, _s, _u in jobs)
    return Problem(
        job_ids=ids,
        gpu_types=TYPES,
        throughput=np.array([(tput or {}).get(j, (1.0,) * len(TYPES)) for j in ids]).reshape(
            len(ids), len(TYPES)
        ),
        capacity=np.array([sum(n.free_gpus(t) for n in nodes) for t in TYPES], dtype=float),
        num_gpus=np.array([(gpus or {}).get(j, 1) for j in ids], dtype=np.int64),
        now_s=now_s,
        steps=np.array([s for _j, s, _u in jobs], dtype=float),
        utilities=tuple(u for _j, _s, u in jobs),
        nodes=tuple(nodes),
        running={j: Placement(j, (GpuSlice(n, t, g),)) for j, n, t, g in running},
    )


def placed(alloc: Allocation) -> dict[str, set[tuple[str, str, int]]]:
    assert alloc.placements is not None
    return {
        job: {(s.node, s.gpu_type, s.count) for s in p.slices}
        for job, p in alloc.placements.items()
    }


RR = RiskReward(restart_s=0.0)


def test_a_time_critical_job_goes_before_a_time_insensitive_one() -> None:
    # One GPU, two jobs of 1000 s. "calm" is worth 100 whenever it ends; "urgent" is a sharp
    # sigmoid around 1200 s: 96.5 if it starts now (ends at 1000 s), 0.67 after calm (2000 s).
    # By utility per GPU-second alone calm (0.100) would go first (urgent: 0.0965), and
    # calm's 100 beats the 95.8 it costs urgent; but calm loses nothing by waiting, so
    # urgent's net value ranks first, and starts.
    urgent = Utility("sigmoid", 100.0, target_s=1200.0, sharpness_per_h=60.0)
    assert urgent.value(1000.0, 0.0) == pytest.approx(96.5, abs=0.1)
    assert urgent.value(2000.0, 0.0) < 1.0
    alloc = RR.allocate(make(ONE_GPU, [("calm", 1000.0, FLAT), ("urgent", 1000.0, urgent)]))
    assert placed(alloc) == {"urgent": {("n1", "v100", 1)}}
    assert alloc.waiting == {"calm": "no-room:1-GPUs"}
    assert alloc.objective == pytest.approx(urgent.value(1000.0, 0.0))


def test_a_job_whose_admission_costs_the_queue_more_than_it_gains_waits() -> None:
    # One GPU. "short" (100 s, linear: 25 at 100 s, 0 from 200 s) ranks first: 0.25 a
    # GPU-second, and the job that would take its GPU otherwise, "filler" (flat 30, top by
    # utility per GPU-second), loses nothing by waiting. But starting it delays "deadline"
    # (400 s, worth 90 by 450 s, else 0), next in line, past its deadline: a delay cost of 90
    # > 25, so short waits, and deadline starts (filler behind it loses nothing).
    short = Utility("linear", 50.0, target_s=200.0)
    deadline = Utility("deadline", 90.0, target_s=450.0)
    filler = Utility("flat", 30.0)
    problem = make(
        ONE_GPU, [("short", 100.0, short), ("deadline", 400.0, deadline), ("filler", 100.0, filler)]
    )
    alloc = RR.allocate(problem)
    assert placed(alloc) == {"deadline": {("n1", "v100", 1)}}
    assert alloc.waiting == {
        "short": "utility=25,delay-cost=90,threshold=0",
        "filler": "no-room:1-GPUs",
    }
    # Without the deadline job, short starts: filler loses nothing by waiting.
    alone = RR.allocate(make(ONE_GPU, [("short", 100.0, short), ("filler", 100.0, filler)]))
    assert set(placed(alone)) == {"short"}


def test_a_job_with_room_elsewhere_costs_nothing() -> None:
    # As above, with a second GPU: deadline no longer waits for short's GPU, so both start.
    short = Utility("linear", 50.0, target_s=200.0)
    deadline = Utility("deadline", 90.0, target_s=450.0)
    nodes = (Node("n1", {"v100": 1}), Node("n2", {"k80": 1}))
    alloc = RR.allocate(make(nodes, [("short", 100.0, short), ("deadline", 400.0, deadline)]))
    assert set(placed(alloc)) == {"short", "deadline"}


def test_threshold() -> None:
    # A lone job worth 25: it starts when 25 exceeds the threshold, else waits.
    jobs = [("a", 100.0, Utility("flat", 25.0))]
    assert placed(RiskReward(threshold=20.0).allocate(make(ONE_GPU, jobs))) != {}
    alloc = RiskReward(threshold=30.0).allocate(make(ONE_GPU, jobs))
    assert alloc.placements == {}
    assert alloc.waiting == {"a": "utility=25,delay-cost=0,threshold=30"}


def test_best_placement_is_the_fastest_type_with_room() -> None:
    # 2x faster on the k80 here: it goes there (one type, exactly its num_gpus).
    nodes = (Node("n1", {"v100": 2}), Node("n2", {"k80": 2}))
    alloc = RR.allocate(make(nodes, [("a", 100.0, FLAT)], tput={"a": (1.0, 2.0)}, gpus={"a": 2}))
    assert placed(alloc) == {"a": {("n2", "k80", 2)}}


# ----------------------------------------------------------------------------------------------
# Running jobs: continue, or pause when worth nothing


def test_running_jobs_keep_their_gpus() -> None:
    # "old" (worth 10) runs on n2 although n1 is as fast; "rich" (worth 100) waits for a GPU.
    # old continues on exactly its GPUs: no preemption for a richer job, no move.
    nodes = (Node("n1", {"v100": 1}), Node("n2", {"v100": 1}))
    problem = make(
        nodes,
        [("old", 500.0, Utility("flat", 10.0)), ("rich", 100.0, FLAT), ("late", 100.0, FLAT)],
        running=[("old", "n2", "v100", 1)],
    )
    alloc = RR.allocate(problem)
    assert alloc.placements is not None
    assert alloc.placements["old"] is problem.running["old"]
    assert placed(alloc) == {"old": {("n2", "v100", 1)}, "rich": {("n1", "v100", 1)}}
    assert alloc.waiting == {"late": "no-room:1-GPUs"}


def test_a_running_job_worth_nothing_pauses_and_its_gpus_go_to_others() -> None:
    # At 1000 s, "missed" (deadline at 500 s) is worth 0 whenever it ends: it pauses, and
    # "next" takes its GPU.
    missed = Utility("deadline", 100.0, target_s=500.0)
    problem = make(
        ONE_GPU,
        [("missed", 300.0, missed), ("next", 100.0, FLAT)],
        now_s=1000.0,
        running=[("missed", "n1", "v100", 1)],
    )
    alloc = RR.allocate(problem)
    assert placed(alloc) == {"next": {("n1", "v100", 1)}}
    assert alloc.waiting == {"missed": "preempted:utility=0"}
    # Before its deadline (with time to finish), it continues.
    early = RR.allocate(
        make(
            ONE_GPU,
            [("missed", 300.0, missed), ("next", 100.0, FLAT)],
            now_s=100.0,
            running=[("missed", "n1", "v100", 1)],
        )
    )
    assert set(placed(early)) == {"missed"}


def test_a_waiting_job_worth_nothing_waits() -> None:
    gone = Utility("deadline", 100.0, target_s=50.0)
    alloc = RR.allocate(make(ONE_GPU, [("a", 100.0, gone)]))
    assert alloc.placements == {}
    assert alloc.waiting == {"a": "utility=0"}


# ----------------------------------------------------------------------------------------------
# Inputs and options


def test_needs_nodes_and_steps() -> None:
    gpus_only = Problem(
        job_ids=("a",), gpu_types=("v100",), throughput=np.ones((1, 1)), capacity=np.ones(1)
    )
    with pytest.raises(InvalidProblemError, match="`nodes`"):
        RR.allocate(gpus_only)
    no_steps = Problem(
        job_ids=("a",),
        gpu_types=("v100",),
        throughput=np.ones((1, 1)),
        capacity=np.ones(1),
        nodes=(Node("n1", {"v100": 1}),),
    )
    with pytest.raises(InvalidProblemError, match="`steps`"):
        RR.allocate(no_steps)
    empty = Problem(
        job_ids=(), gpu_types=("v100",), throughput=np.zeros((0, 1)), capacity=np.ones(1)
    )
    assert RR.allocate(empty).placements == {}


def test_options() -> None:
    policy = get_policy("risk_reward", {"threshold": "5", "restart_s": 12})
    assert isinstance(policy, RiskReward)
    assert (policy.threshold, policy.restart_s) == (5.0, 12.0)
    assert RiskReward().restart_s == 30.0  # hadar's default restart cost
    with pytest.raises(ConfigError, match="threshold"):
        get_policy("risk_reward", {"threshold": -1})
