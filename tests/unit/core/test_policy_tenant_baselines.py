"""core/policies/gandiva_fair.py and hived.py, the tenant baselines of the Astraea evaluation,
on small node problems worked out by hand and on random ones: shares in proportion to quotas,
unused shares redistributed, an owner reclaiming its GPUs from a borrower, no GPU given twice,
an account without quota on idle GPUs only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from slurm_hetsched.core.model import (
    Account,
    Allocation,
    GpuSlice,
    InvalidProblemError,
    Node,
    Placement,
    Problem,
)
from slurm_hetsched.core.policies import POLICIES, get_policy
from slurm_hetsched.core.policies.gandiva_fair import GandivaFair, type_shares
from slurm_hetsched.core.policies.hived import HiveD
from slurm_hetsched.errors import ConfigError

TYPES = ("v100", "k80")
Job = tuple[str, str, int, float]  # id, account, GPUs, arrival


def make(
    nodes: Sequence[Node],
    jobs: Sequence[Job],
    quotas: Mapping[str, Mapping[str, int]],
    tput: Mapping[str, Sequence[float]] | None = None,
    running: Mapping[str, Placement] | None = None,
    preemptible: Mapping[str, bool] | None = None,
) -> Problem:
    """A nodes problem; tput: id -> steps/s per TYPES (default 1 everywhere)."""
    ids = tuple(j[0] for j in jobs)
    return Problem(
        job_ids=ids,
        gpu_types=TYPES,
        throughput=np.array([(tput or {}).get(j, (1.0, 1.0)) for j in ids]).reshape(
            len(ids), len(TYPES)
        ),
        capacity=np.array([sum(n.free_gpus(t) for n in nodes) for t in TYPES], dtype=float),
        num_gpus=np.array([j[2] for j in jobs], dtype=np.int64),
        arrival_s=np.array([j[3] for j in jobs], dtype=float),
        job_accounts=tuple(j[1] for j in jobs),
        accounts={a: Account(a, quota=dict(q)) for a, q in quotas.items()},
        nodes=tuple(nodes),
        running=dict(running or {}),
        preemptible=None if preemptible is None else tuple(preemptible.get(j, True) for j in ids),
    )


def on(job: str, node: str, gpu_type: str, count: int = 1) -> Placement:
    return Placement(job, (GpuSlice(node, gpu_type, count),))


def gpus_by_account(problem: Problem, alloc: Allocation) -> dict[str, dict[str, int]]:
    """account -> type -> GPUs its placed jobs hold."""
    assert alloc.placements is not None
    out: dict[str, dict[str, int]] = {}
    for m, job in enumerate(problem.job_ids):
        for s in alloc.placements[job].slices if job in alloc.placements else ():
            per = out.setdefault(problem.job_accounts[m], {})
            per[s.gpu_type] = per.get(s.gpu_type, 0) + s.count
    return out


def assert_no_gpu_twice(problem: Problem, alloc: Allocation) -> None:
    assert alloc.placements is not None
    left = {(n.name, t): n.free_gpus(t) for n in problem.nodes for t in n.gpus}
    for job, placement in alloc.placements.items():
        m = problem.job_ids.index(job)
        assert placement.num_gpus == problem.num_gpus[m], job
        assert len(placement.gpu_types) == 1, job
        for s in placement.slices:
            left[(s.node, s.gpu_type)] -= s.count
    assert min(left.values(), default=0) >= 0, left
    assert not set(alloc.waiting) & set(alloc.placements)
    assert set(alloc.waiting) | set(alloc.placements) == set(problem.job_ids)


ONE_TYPE = [Node(f"v{i}", {"v100": 1}) for i in range(8)]


def test_type_shares_are_in_proportion_to_tickets_among_active_accounts() -> None:
    shares = type_shares(np.array([8, 5]), np.array([3.0, 1.0, 4.0]), np.array([1, 1, 0], bool))
    assert shares.tolist() == [[6, 4], [2, 1], [0, 0]]  # k80: 3.75 / 1.25 -> 4 / 1
    assert type_shares(np.array([4]), np.zeros(2), np.ones(2, bool)).sum() == 0


def test_gandiva_shares_follow_quotas_on_every_type() -> None:
    nodes = [Node("v", {"v100": 4}), Node("k", {"k80": 4})]
    jobs = [(f"a{i}", "A", 1, float(i)) for i in range(8)]
    jobs += [(f"b{i}", "B", 1, 0.5 + i) for i in range(8)]
    problem = make(nodes, jobs, {"A": {"v100": 3, "k80": 3}, "B": {"v100": 1, "k80": 1}})
    alloc = GandivaFair(gain=0).allocate(problem)
    assert gpus_by_account(problem, alloc) == {
        "A": {"v100": 3, "k80": 3},
        "B": {"v100": 1, "k80": 1},
    }
    assert_no_gpu_twice(problem, alloc)
    # Jobs inside a share go in arrival order; the others wait, saying why.
    assert alloc.placements is not None and {"b0", "b1"} <= set(alloc.placements)
    assert alloc.waiting["b2"] == "over-share:B"


def test_gandiva_redistributes_unused_shares_to_accounts_with_demand() -> None:
    jobs = [("a0", "A", 1, 0.0)] + [(f"b{i}", "B", 1, 1.0 + i) for i in range(6)]
    quotas = {"A": {"v100": 4}, "B": {"v100": 2}, "C": {"v100": 2}}  # C has no job
    problem = make(ONE_TYPE, jobs, quotas)
    alloc = GandivaFair().allocate(problem)
    # A's share is 5 of 8 (C has no job, so no share), it uses 1: B gets its 3 and 3 more.
    assert gpus_by_account(problem, alloc) == {"A": {"v100": 1}, "B": {"v100": 6}}


def test_gandiva_takes_gpus_back_from_an_account_over_its_share() -> None:
    # B ran alone on all 4 GPUs; A (quota 3 of 4) arrives with 3 jobs: B keeps 1.
    nodes = ONE_TYPE[:4]
    running = {f"b{i}": on(f"b{i}", f"v{i}", "v100") for i in range(4)}
    jobs = [(f"b{i}", "B", 1, float(i)) for i in range(4)]
    jobs += [(f"a{i}", "A", 1, 10.0 + i) for i in range(3)]
    problem = make(nodes, jobs, {"A": {"v100": 3}, "B": {"v100": 1}}, running=running)
    alloc = GandivaFair().allocate(problem)
    assert gpus_by_account(problem, alloc) == {"A": {"v100": 3}, "B": {"v100": 1}}
    assert (
        alloc.placements is not None and alloc.placements["b0"] == running["b0"]
    )  # the oldest stays


def test_gandiva_account_without_quota_gets_only_what_others_leave_idle() -> None:
    jobs = [(f"a{i}", "A", 1, float(i)) for i in range(3)]
    jobs += [(f"n{i}", "N", 1, -1.0 - i) for i in range(3)]  # N's jobs came first
    problem = make(ONE_TYPE[:4], jobs, {"A": {"v100": 2}})
    alloc = GandivaFair().allocate(problem)
    assert gpus_by_account(problem, alloc) == {"A": {"v100": 3}, "N": {"v100": 1}}


def test_gandiva_moves_a_job_to_idle_faster_gpus_when_it_gains_enough() -> None:
    nodes = [Node("v", {"v100": 1}), Node("k", {"k80": 1})]
    running = {"a": on("a", "k", "k80")}
    quotas = {"A": {"k80": 1}, "B": {"v100": 1}}
    for speed, moved in (((3.0, 1.0), True), ((1.2, 1.0), False)):
        problem = make(nodes, [("a", "A", 1, 0.0)], quotas, {"a": speed}, running)
        alloc = GandivaFair().allocate(problem)
        assert alloc.placements is not None
        assert (alloc.placements["a"].gpu_types == ("v100",)) is moved
        kept = GandivaFair(gain=0).allocate(problem)
        assert kept.placements is not None and kept.placements["a"] == running["a"]


def test_hived_owner_reclaims_its_gpus_from_a_borrower() -> None:
    nodes = ONE_TYPE[:2]
    quotas = {"A": {"v100": 1}, "B": {"v100": 1}}
    # B alone: its second job borrows A's idle GPU.
    before = make(nodes, [("b0", "B", 1, 0.0), ("b1", "B", 1, 1.0)], quotas)
    first = HiveD().allocate(before)
    assert gpus_by_account(before, first) == {"B": {"v100": 2}}
    assert first.placements is not None
    # A's job arrives: guaranteed in A's virtual cluster, it preempts the borrower b1.
    jobs = [("b0", "B", 1, 0.0), ("b1", "B", 1, 1.0), ("a0", "A", 1, 5.0)]
    after = make(nodes, jobs, quotas, running=first.placements)
    alloc = HiveD().allocate(after)
    assert alloc.placements is not None
    assert alloc.placements["b0"] == first.placements["b0"]  # guaranteed: untouched
    assert alloc.placements["a0"].slices == first.placements["b1"].slices  # reclaimed
    assert alloc.waiting == {"b1": "preempted:owner-reclaimed"}
    assert_no_gpu_twice(after, alloc)


def test_hived_borrower_moves_to_other_idle_gpus_instead_of_waiting() -> None:
    quotas = {"A": {"v100": 1}, "B": {"v100": 1}}  # two GPUs of the three in no quota
    nodes = ONE_TYPE[:3]
    running = {"b1": on("b1", "v0", "v100"), "b0": on("b0", "v1", "v100")}
    jobs = [("b0", "B", 1, 0.0), ("b1", "B", 1, 1.0), ("a0", "A", 1, 5.0)]
    problem = make(nodes, jobs, quotas, running=running)
    alloc = HiveD().allocate(problem)
    assert not alloc.waiting and gpus_by_account(problem, alloc) == {
        "A": {"v100": 1},
        "B": {"v100": 2},
    }
    assert alloc.placements is not None and alloc.placements["b1"] == running["b1"]


def test_hived_account_without_quota_only_gets_idle_gpus_and_loses_them() -> None:
    nodes = ONE_TYPE[:2]
    quotas = {"A": {"v100": 2}}
    jobs = [("n0", "N", 1, 0.0), ("n1", "N", 1, 1.0), ("a0", "A", 1, 2.0)]
    problem = make(nodes, jobs, quotas)
    alloc = HiveD().allocate(problem)
    assert gpus_by_account(problem, alloc) == {"A": {"v100": 1}, "N": {"v100": 1}}
    assert alloc.waiting == {"n1": "no-quota:N,no-idle-GPUs"}
    assert alloc.placements is not None
    jobs.append(("a1", "A", 1, 3.0))
    again = make(nodes, jobs, quotas, running=alloc.placements)
    second = HiveD().allocate(again)
    assert gpus_by_account(again, second) == {"A": {"v100": 2}}
    assert second.waiting["n0"] == "preempted:owner-reclaimed"


def test_hived_runs_a_job_that_cannot_be_checkpointed_only_inside_its_quota() -> None:
    nodes = ONE_TYPE[:2]
    jobs = [("a0", "A", 1, 0.0), ("a1", "A", 1, 1.0)]
    problem = make(nodes, jobs, {"A": {"v100": 1}}, preemptible={"a1": False})
    alloc = HiveD().allocate(problem)
    assert alloc.waiting == {"a1": "quota-full:A,not-preemptible"}


def test_hived_guaranteed_job_takes_its_fastest_type_with_room_in_its_virtual_cluster() -> None:
    nodes = [Node("v", {"v100": 2}), Node("k", {"k80": 2})]
    quotas = {"A": {"v100": 1, "k80": 2}}
    jobs = [("a0", "A", 1, 0.0), ("a1", "A", 1, 1.0), ("a2", "A", 2, 2.0)]
    tput = {j: (4.0, 1.0) for j in ("a0", "a1", "a2")}
    problem = make(nodes, jobs, quotas, tput)
    alloc = HiveD().allocate(problem)
    assert alloc.placements is not None
    assert alloc.placements["a0"].gpu_types == ("v100",)  # guaranteed on the v100
    assert alloc.placements["a1"].gpu_types == ("k80",)  # guaranteed on a k80
    # a2 needs 2: its virtual cluster has 1 k80 left, and no type has 2 idle GPUs left.
    assert alloc.waiting == {"a2": "quota-full:A,no-idle-GPUs"}


@pytest.mark.parametrize("policy", [GandivaFair(), HiveD()])
def test_random_rounds_never_give_a_gpu_twice(policy: GandivaFair | HiveD) -> None:
    rng = np.random.default_rng(5)
    nodes = [Node(f"v{i}", {"v100": 4}) for i in range(3)] + [
        Node(f"k{i}", {"k80": 4}) for i in range(3)
    ]
    quotas = {"A": {"v100": 6, "k80": 4}, "B": {"v100": 4, "k80": 4}, "C": {"v100": 2}}
    accounts = ["A", "B", "C", "D"]  # D owns nothing
    live: dict[str, Job] = {}
    placements: dict[str, Placement] = {}
    for step in range(40):
        for k in range(int(rng.integers(0, 4))):
            job = f"j{step}-{k}"
            live[job] = (job, str(rng.choice(accounts)), int(rng.choice([1, 1, 2, 4, 8])), step)
        for job in [j for j in live if rng.random() < 0.15]:
            del live[job]
            placements.pop(job, None)
        if not live:
            continue
        tput = {j: tuple(rng.uniform(0.5, 3.0, 2)) for j in live}
        problem = make(nodes, list(live.values()), quotas, tput, placements)
        alloc = policy.allocate(problem)
        assert_no_gpu_twice(problem, alloc)
        usage = gpus_by_account(problem, alloc)
        free = {t: sum(n.free_gpus(t) for n in nodes) for t in TYPES}
        left = {t: free[t] - sum(u.get(t, 0) for u in usage.values()) for t in TYPES}
        for job in alloc.waiting:  # work conserving: nothing left that a waiting job fits
            _id, account, gpus, _arrival = live[job]
            assert max(left.values()) < gpus, (step, job, left)
            if isinstance(policy, HiveD):  # nor room in its own virtual cluster
                room = {
                    t: quotas.get(account, {}).get(t, 0) - usage.get(account, {}).get(t, 0)
                    for t in TYPES
                }
                assert max(room.values()) < gpus, (step, job, room)
        assert alloc.placements is not None
        placements = dict(alloc.placements)


@pytest.mark.parametrize("name", ["gandiva_fair", "hived"])
def test_registered_needs_nodes_and_handles_no_quota_at_all(name: str) -> None:
    policy = get_policy(name)
    assert POLICIES[name].name == name and getattr(policy, "needs_nodes", False)
    empty = Problem(job_ids=(), gpu_types=("v100",), throughput=np.zeros((0, 1)), capacity=[2])
    assert policy.allocate(empty).placements == {}
    with pytest.raises(InvalidProblemError, match="places jobs on nodes"):
        policy.allocate(
            Problem(job_ids=("a",), gpu_types=("v100",), throughput=np.ones((1, 1)), capacity=[1])
        )
    # No account owns anything: every job still runs where there is room.
    jobs = [("a", "", 1, 0.0), ("b", "x", 2, 1.0), ("c", "y", 4, 2.0)]
    problem = make(ONE_TYPE[:4], jobs, {})
    alloc = policy.allocate(problem)
    assert_no_gpu_twice(problem, alloc)
    assert set(alloc.waiting) == {"c"}


def test_gandiva_gain_option() -> None:
    assert get_policy("gandiva_fair", {"gain": "2"}).gain == 2.0  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="gain"):
        get_policy("gandiva_fair", {"gain": -1})
