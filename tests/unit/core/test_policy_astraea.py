"""core/policies/astraea.py: tenants inside their quota for free, borrowing idle GPUs at
posted prices paid to their owners, and the batchsche baseline, on the dev cluster's shape:
n1 = 2 v100 (acct-a's quota), n2 = 2 p100 (in no quota: the pool), n3 = 4 k80 (acct-b's).

Jobs run 10 / 6 / 2 steps/s per GPU gang on v100 / p100 / k80 unless said otherwise; restarts
cost nothing (`restart_s=0`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from slurm_hetsched.core.model import (
    POOL_OWNER,
    Account,
    Allocation,
    GpuSlice,
    Node,
    Placement,
    Problem,
)
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.astraea import Astraea, BatchSche
from slurm_hetsched.core.policies.astraea_book import gang_price
from slurm_hetsched.core.policies.astraea_pricing import posted_price
from slurm_hetsched.core.utility import Utility
from slurm_hetsched.errors import ConfigError

TYPES = ("v100", "p100", "k80")
NODES = (Node("n1", {"v100": 2}), Node("n2", {"p100": 2}), Node("n3", {"k80": 4}))
QUOTAS = {"acct-a": {"v100": 2}, "acct-b": {"k80": 4}}
FLAT = Utility("flat", 100.0)
STEEP = Utility("linear", 100.0, 3600.0)  # worth nothing an hour after arrival
RATES = (10.0, 6.0, 2.0)


def make(
    jobs: Sequence[tuple[str, str, float, Utility]],
    running: Sequence[tuple[str, str, str, int]] = (),
    gpus: Mapping[str, int] | None = None,
    arrival: Mapping[str, float] | None = None,
    preemptible: Mapping[str, bool] | None = None,
    quotas: Mapping[str, Mapping[str, int]] = QUOTAS,
    rates: Sequence[float] = RATES,
) -> Problem:
    """jobs: (id, account, steps left, utility); running: (job, node, type, GPUs); rates:
    every job's steps/s per TYPES."""
    ids = tuple(j for j, _a, _s, _u in jobs)
    flags = tuple((preemptible or {}).get(j, True) for j in ids)
    return Problem(
        job_ids=ids,
        gpu_types=TYPES,
        throughput=np.array([rates for _ in ids]).reshape(len(ids), len(TYPES)),
        capacity=np.array([sum(n.free_gpus(t) for n in NODES) for t in TYPES], dtype=float),
        num_gpus=np.array([(gpus or {}).get(j, 2) for j in ids], dtype=np.int64),
        job_accounts=tuple(a for _j, a, _s, _u in jobs),
        accounts={name: Account(name, quota=q) for name, q in quotas.items()},
        arrival_s=np.array([(arrival or {}).get(j, 0.0) for j in ids]),
        steps=np.array([s for _j, _a, s, _u in jobs], dtype=float),
        utilities=tuple(u for _j, _a, _s, u in jobs),
        nodes=NODES,
        running={j: Placement(j, (GpuSlice(n, t, g),)) for j, n, t, g in running},
        preemptible=None if all(flags) else flags,
    )


def where(alloc: Allocation) -> dict[str, str]:
    """job -> its GPU type this round."""
    assert alloc.placements is not None
    return {j: p.main_gpu_type() for j, p in alloc.placements.items()}


def run(problem: Problem, policy: type[Astraea] = Astraea) -> Allocation:
    return policy(restart_s=0.0).allocate(problem)


def test_inside_its_quota_a_job_runs_free_where_speed_is_worth_nothing() -> None:
    alloc = run(make([("b1", "acct-b", 3600, FLAT)]))
    assert where(alloc) == {"b1": "k80"}
    assert not alloc.payments


def test_a_job_borrows_idle_fast_gpus_when_finishing_sooner_pays_for_them() -> None:
    alloc = run(make([("b1", "acct-b", 3000, STEEP)]))
    assert where(alloc) == {"b1": "v100"}
    assert alloc.payments is not None
    payment = alloc.payments["b1"]
    assert payment.payer == "acct-b" and dict(payment.borrowed) == {"v100": 2}
    # The v100s are acct-a's idle quota: acct-a is paid all of it, for both GPUs.
    assert set(payment.shares) == {"acct-a"} and payment.lent == {"acct-a": 2.0}
    assert payment.amount > 0
    assert math.fsum(payment.shares.values()) == pytest.approx(payment.amount)


def test_the_owner_gets_its_quota_back_and_the_borrower_moves_off() -> None:
    problem = make(
        [("b1", "acct-b", 3000, STEEP), ("a1", "acct-a", 3000, STEEP)],
        running=[("b1", "n1", "v100", 2)],
        arrival={"a1": 100.0},
    )
    alloc = run(problem)
    assert where(alloc)["a1"] == "v100"
    assert where(alloc)["b1"] in ("p100", "k80")
    assert "a1" not in (alloc.payments or {})  # inside its quota: free


def test_gpus_in_no_quota_are_paid_to_the_cluster() -> None:
    problem = make(
        [("a1", "acct-a", 3000, STEEP), ("b1", "acct-b", 3000, STEEP)],
        running=[("a1", "n1", "v100", 2)],
    )
    alloc = run(problem)
    assert where(alloc) == {"a1": "v100", "b1": "p100"}
    assert alloc.payments is not None
    assert set(alloc.payments["b1"].shares) == {POOL_OWNER}


def test_an_account_without_quota_only_borrows() -> None:
    alloc = run(make([("c1", "acct-c", 3000, STEEP)]))
    assert alloc.payments is not None and "c1" in alloc.payments
    assert alloc.payments["c1"].payer == "acct-c"
    batch = run(make([("c1", "acct-c", 3000, STEEP)]), BatchSche)
    assert batch.placements == {} and batch.waiting["c1"] == "no-quota"
    assert not batch.payments


def test_a_job_that_cannot_be_checkpointed_stays_in_its_quota_and_is_never_moved() -> None:
    problem = make([("b1", "acct-b", 3000, STEEP)], preemptible={"b1": False})
    assert where(run(problem)) == {"b1": "k80"}  # v100s would pay, but it may not borrow
    # Running over its quota (quotas changed since), it is still not moved.
    problem = make(
        [("b1", "acct-b", 3000, STEEP), ("a1", "acct-a", 3000, STEEP)],
        running=[("b1", "n1", "v100", 2)],
        preemptible={"b1": False},
    )
    alloc = run(problem)
    assert where(alloc)["b1"] == "v100"
    nowhere = make([("c1", "acct-c", 3000, STEEP)], preemptible={"c1": False})
    assert run(nowhere).waiting == {"c1": "no-quota"}


def test_prices_rise_with_the_gpus_taken_and_each_gpu_of_a_gang_is_priced_after_the_last() -> None:
    theta = 16.0
    assert posted_price(theta, 0, 8) == 0.0
    assert posted_price(theta, 2, 8) == pytest.approx(1.0)
    assert gang_price(theta, 0, 2, 8) == pytest.approx(posted_price(theta, 1, 8))
    assert gang_price(theta, 2, 2, 8) > gang_price(theta, 0, 2, 8)
    # Two 1-GPU borrowers of the two idle v100s (they run nowhere else): the later pays
    # more for the same kind of GPU.
    problem = make(
        [("c1", "acct-c", 3000, STEEP), ("c2", "acct-c", 3000, STEEP)],
        gpus={"c1": 1, "c2": 1},
        arrival={"c2": 1.0},
        rates=(10.0, 0.0, 0.0),
    )
    alloc = run(problem)
    assert where(alloc) == {"c1": "v100", "c2": "v100"}
    assert alloc.payments is not None
    assert alloc.payments["c2"].amount > alloc.payments["c1"].amount


def test_a_posted_price_does_not_depend_on_the_utility_a_job_reports() -> None:
    low = run(make([("c1", "acct-c", 3000, STEEP)]))
    high = run(make([("c1", "acct-c", 3000, Utility("linear", 1000.0, 3600.0))]))
    assert where(low) == where(high)
    assert low.payments is not None and high.payments is not None
    # theta comes from the jobs present (here only c1): the same job alone on an empty type
    # pays the price of its second GPU either way, scaled by the theta its worth sets.
    assert low.payments["c1"].amount > 0 and high.payments["c1"].amount > 0


def test_a_job_priced_out_waits_with_the_price_and_its_utility() -> None:
    worthless = Utility("linear", 1.0, 60.0)  # worth nothing after a minute: cannot pay
    alloc = run(make([("c1", "acct-c", 3000, worthless)]))
    assert alloc.placements == {}
    assert alloc.waiting["c1"].startswith("price=")


def test_a_quota_busy_past_the_horizon_is_expected_free_at_its_end_not_never() -> None:
    """acct-b's K80s are busy for 100 slots, past a horizon of 2. Its new job, losing 0.1 an
    hour while it waits, expects its K80s at the horizon's end at the soonest: borrowing the
    V100s (7.3 for its 10 slots) is worth less than that wait. Counted as never free (0), it
    paid the 7.3 to gain under 0.6."""
    slow = Utility("linear", 100.0, 1000 * 3600.0)
    problem = make(
        [("b0", "acct-b", 72000, FLAT), ("b1", "acct-b", 36000, slow)],
        running=[("b0", "n3", "k80", 4)],
        gpus={"b0": 4},
    )
    alloc = Astraea(restart_s=0.0, horizon=2, theta=3.0).allocate(problem)
    assert where(alloc) == {"b0": "k80"}
    assert alloc.waiting["b1"].startswith("own-quota-later:")
    assert not alloc.payments


def test_batchsche_keeps_every_account_to_its_own_quota() -> None:
    problem = make([("b1", "acct-b", 3000, STEEP), ("a1", "acct-a", 3000, STEEP)])
    alloc = run(problem, BatchSche)
    assert where(alloc) == {"b1": "k80", "a1": "v100"}
    assert not alloc.payments


def test_options_are_registered_and_checked() -> None:
    assert isinstance(get_policy("astraea"), Astraea)
    assert isinstance(get_policy("batchsche"), BatchSche)
    with pytest.raises(ConfigError):
        Astraea(bias=-1.0)
