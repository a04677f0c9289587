"""Astraea's fairness properties (notes/astraea-oasis.md section 7) for the product policy, on
random small instances of one round in the paper's setting: a fixed price base theta (posted
prices no job's report moves), no restart cost, every run within one slot (so a borrower's
payment for the round is the price of its whole run).

- Sharing incentive: every account gains at least what it gains alone on its quota
  (batchsche): its jobs' utility, minus what they pay, plus what it is paid.
- Strategy-proofness for an account with a single job: misreporting the job's utility (scaled
  up or down) or inflating its GPU demand never raises its utility minus its payment, both
  counted at its true utility and speed.
- No free riding: what borrowers pay, the owners and the cluster receive, to rounding.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_hetsched.core.model import Account, Allocation, Node, Problem
from slurm_hetsched.core.policies.astraea import Astraea, BatchSche
from slurm_hetsched.core.utility import Utility

TYPES = ("v100", "p100", "k80")
SLOT_S = 1e6  # every run fits one slot
THETA = 50.0


@st.composite
def instances(draw: st.DrawFn) -> Problem:
    nodes = [Node(f"n{i}", {t: draw(st.integers(2, 4))}) for i, t in enumerate(TYPES)]
    if draw(st.booleans()):
        nodes.append(Node("n3", {draw(st.sampled_from(TYPES)): draw(st.integers(1, 4))}))
    capacity = {t: sum(n.gpus.get(t, 0) for n in nodes) for t in TYPES}
    names = ["acct-a", "acct-b", "acct-c"]
    quotas: dict[str, dict[str, int]] = {name: {} for name in names[:2]}  # acct-c: none
    for gpu_type, count in capacity.items():
        for _ in range(count):  # each GPU: to acct-a, acct-b, or the pool
            owner = draw(st.sampled_from(["acct-a", "acct-b", None]))
            if owner is not None:
                quotas[owner][gpu_type] = quotas[owner].get(gpu_type, 0) + 1
    n_jobs = draw(st.integers(1, 6))
    rates = [[draw(st.sampled_from([1.0, 2.0, 5.0])) for _ in TYPES] for _ in range(n_jobs)]
    steps = [draw(st.floats(100.0, 5000.0)) for _ in range(n_jobs)]
    utilities = tuple(
        Utility("linear", draw(st.floats(1.0, 100.0)), draw(st.floats(200.0, 20000.0)))
        for _ in range(n_jobs)
    )
    ids = tuple(f"j{m}" for m in range(n_jobs))
    return Problem(
        job_ids=ids,
        gpu_types=TYPES,
        throughput=np.array(rates, dtype=float),
        capacity=np.array([capacity[t] for t in TYPES], dtype=float),
        num_gpus=np.array([draw(st.sampled_from([1, 1, 2])) for _ in ids], dtype=np.int64),
        job_accounts=tuple(draw(st.sampled_from(names)) for _ in ids),
        accounts={name: Account(name, quota=q) for name, q in quotas.items()},
        arrival_s=np.array([float(m) for m in range(n_jobs)]),
        steps=np.array(steps),
        utilities=utilities,
        nodes=tuple(nodes),
    )


def _policy(kind: type[Astraea] = Astraea) -> Astraea:
    return kind(slot_s=SLOT_S, restart_s=0.0, theta=THETA)


def _job_gain(problem: Problem, alloc: Allocation, m: int, true: Problem) -> float:
    """Job row m's true utility on its placement minus what it pays (0 when not placed)."""
    job = problem.job_ids[m]
    placement = (alloc.placements or {}).get(job)
    if placement is None:
        return 0.0
    column = TYPES.index(placement.main_gpu_type())
    rate = float(true.throughput[m, column])
    done = true.now_s + float(true.steps[m]) / rate
    payment = (alloc.payments or {}).get(job)
    return true.utility(m).value(done, 0.0) - (payment.amount if payment else 0.0)


def _account_gain(problem: Problem, alloc: Allocation, account: str) -> float:
    jobs = sum(
        _job_gain(problem, alloc, m, problem)
        for m in range(problem.n_jobs)
        if problem.job_accounts[m] == account
    )
    income = sum(p.shares.get(account, 0.0) for p in (alloc.payments or {}).values())
    return jobs + income


@settings(max_examples=60, deadline=None)
@given(instances())
def test_no_account_gains_less_than_alone_on_its_quota(problem: Problem) -> None:
    shared = _policy().allocate(problem)
    alone = _policy(BatchSche).allocate(problem)
    for account in set(problem.job_accounts):
        assert _account_gain(problem, shared, account) >= _account_gain(
            problem, alone, account
        ) - 1e-9 * max(1.0, abs(_account_gain(problem, alone, account)))


@settings(max_examples=60, deadline=None)
@given(instances())
def test_what_borrowers_pay_is_what_owners_receive(problem: Problem) -> None:
    alloc = _policy().allocate(problem)
    for payment in (alloc.payments or {}).values():
        assert abs(math.fsum(payment.shares.values()) - payment.amount) <= 1e-9 * max(
            1.0, payment.amount
        )
        assert abs(math.fsum(payment.lent.values()) - sum(payment.borrowed.values())) <= 1e-9


@settings(max_examples=80, deadline=None)
@given(instances(), st.data())
def test_a_single_job_account_never_gains_by_misreporting(
    problem: Problem, data: st.DataObject
) -> None:
    alone = [
        m for m in range(problem.n_jobs) if problem.job_accounts.count(problem.job_accounts[m]) == 1
    ]
    if not alone:
        return
    m = data.draw(st.sampled_from(alone))
    truthful = _job_gain(problem, _policy().allocate(problem), m, problem)
    assert problem.utilities is not None
    true_utility = problem.utilities[m]
    scale = data.draw(st.sampled_from([0.1, 0.5, 2.0, 10.0]))
    lied = list(problem.utilities)
    lied[m] = dataclasses.replace(true_utility, max_utility=true_utility.max_utility * scale)
    misreport = dataclasses.replace(problem, utilities=tuple(lied))
    assert _job_gain(misreport, _policy().allocate(misreport), m, problem) <= truthful + 1e-9
    gpus = problem.num_gpus.copy()
    gpus[m] += 1
    if gpus[m] > problem.capacity.max():
        return  # no type could hold the inflated gang: the problem itself is refused
    inflated = dataclasses.replace(problem, num_gpus=gpus)
    assert _job_gain(inflated, _policy().allocate(inflated), m, problem) <= truthful + 1e-9
