"""The paper-faithful Astraea reference against the paper's own figures (Wang et al., IEEE
Trans. Computers 2022, section 4 example; shared notes astraea-oasis.md sections 6 and 17), and
the properties the paper claims for one round: payments conserve, prices rise with use, no
sharing gives every tenant alpha_u = 1, a job that does not fit the round is carried."""

from __future__ import annotations

from itertools import pairwise

import pytest

from slurm_hetsched.core.policies.astraea_pricing import duration_slots, posted_price, quota_shares
from slurm_hetsched.core.policies.astraea_reference import (
    AstraeaRun,
    Turn,
    astraea_round,
    best_schedule,
    candidates,
    fairness_ratios,
    income_by_owner,
    interval_of,
    round_window,
    run_astraea,
)
from slurm_hetsched.core.policies.astraea_reference_place import (
    Cluster,
    Ledger,
    LinearUtility,
    Placement,
    Pool,
    RefJob,
    Server,
    Tenant,
)

APPROX = 1e-9
LAMBDA = 2
# The example's utility: f = 100 - 2 x (t^+ - round start), "ideal" utility of Alg. 3.
F = LinearUtility(k=-2.0, g=100.0)


def example_cluster() -> Cluster:
    """U = 2 tenants (q_w = 4, q_p = 2), S = 4 servers (C_sw = 2, C_sp = 1), theta = 16."""
    servers = tuple(Server(workers=2, ps=1) for _ in range(4))
    tenants = (Tenant("u1", workers=4, ps=2), Tenant("u2", workers=4, ps=2))
    return Cluster(servers, tenants, theta_w=16.0, theta_p=16.0, b_w=1.0, b_p=1.0)


def example_job(job: str, tenant: str, chunks: int, fixed: bool = True) -> RefJob:
    """r = 3, E = 2, M = 1, n = 1 centralised / 0.5 distributed; with `fixed` the job takes
    its D workers (the reading the example's outcome needs, see the module doc)."""
    return RefJob(
        job, tenant, arrival=3, epochs=2, chunks=chunks, minibatches=1,
        rate_central=1.0, rate_distributed=0.5, utility=F,
        workers=chunks if fixed else None,
    )  # fmt: skip


def example_jobs(fixed: bool = True) -> list[RefJob]:
    chunks = {"j11": ("u1", 2), "j12": ("u1", 3), "j21": ("u2", 2), "j22": ("u2", 30)}
    return [example_job(j, u, d, fixed) for j, (u, d) in chunks.items()]


@pytest.fixture(scope="module")
def example_run() -> AstraeaRun:
    return run_astraea(example_cluster(), example_jobs(), LAMBDA, max_interval=3)


def own_turn(window: range) -> Turn:
    return Turn(2, 1, window, Pool(), shared=False)


# --- section 17: price and duration oracles ------------------------------------------------


def test_price_oracles() -> None:
    assert posted_price(16.0, 2, 8) == pytest.approx(1.0, abs=APPROX)
    assert posted_price(16.0, 1, 4) == pytest.approx(1.0, abs=APPROX)
    assert posted_price(16.0, 0, 8) == pytest.approx(0.0, abs=APPROX)
    ledger = Ledger(example_cluster())
    assert ledger.prices(9) == pytest.approx((0.0, 0.0), abs=APPROX)
    ledger.commit("u1", Placement((2, 0, 0, 0), (1, 0, 0, 0), True, ()), range(9, 11))
    assert ledger.prices(9) == pytest.approx((1.0, 1.0), abs=APPROX)
    assert ledger.prices(11) == pytest.approx((0.0, 0.0), abs=APPROX)


def test_duration_oracles() -> None:
    assert duration_slots(2 * 3 * 1, 0.5 * 3) == 4
    assert duration_slots(2 * 2 * 1, 1.0 * 2) == 2
    assert duration_slots(example_job("j12", "u1", 3).work, 0.5 * 3) == 4


# --- section 6: the worked example -----------------------------------------------------------


def test_quota_shares_weigh_each_gpu_type_alike() -> None:
    """Section 8.2's share is the mean of a tenant's shares of each resource: owning all of
    the 2 V100s is half the quotas, as owning all of the 6 K80s is (by GPUs, a quarter and
    three quarters). The benchmark and `hetsched tenants` both count it so."""
    quotas = {"a": {"v100": 2}, "b": {"k80": 6}, "c": {}}
    assert quota_shares(quotas) == {"a": 0.5, "b": 0.5, "c": 0.0}
    assert quota_shares({"a": {"v100": 1, "k80": 1}, "b": {"k80": 3}}) == pytest.approx(
        {"a": (1 + 0.25) / 2, "b": 0.75 / 2}
    )
    assert quota_shares({"x": {}}) == {"x": 0.0}


def test_example_batch_is_j2_in_8_to_16() -> None:
    assert interval_of(3) == 2
    assert round_window(2, 1, LAMBDA) == range(9, 13)  # (8, 12]
    assert round_window(2, 2, LAMBDA) == range(13, 17)  # (12, 16]


def test_example_round_one(example_run: AstraeaRun) -> None:
    first = example_run.rounds[0]
    assert (first.interval, first.round_index) == (2, 1)
    by_job = {s.job: s for s in first.schedules}
    assert [s.job for s in first.schedules] == ["j11", "j21", "j12"]

    j11 = by_job["j11"]
    assert j11.during == (8, 10) and j11.placement.centralised and not j11.shared
    assert (j11.placement.workers, j11.placement.ps) == ((2, 0, 0, 0), (1, 0, 0, 0))
    assert j11.payoff == pytest.approx(96.0, abs=APPROX)

    j21 = by_job["j21"]
    assert j21.during == (10, 12) and j21.placement.centralised and not j21.shared
    assert (j21.placement.workers, j21.placement.ps) == ((0, 2, 0, 0), (0, 1, 0, 0))
    assert j21.payoff == pytest.approx(92.0, abs=APPROX)

    j12 = by_job["j12"]
    assert j12.during == (8, 12) and not j12.placement.centralised and j12.shared
    assert (j12.placement.workers, j12.placement.ps) == ((0, 0, 2, 1), (0, 0, 1, 0))
    assert j12.cost == pytest.approx(16.0, abs=APPROX)
    assert j12.payoff == pytest.approx(76.0, abs=APPROX)
    assert first.carried == ("j22",)


def test_example_payments(example_run: AstraeaRun) -> None:
    incomes = example_run.rounds[0].incomes
    assert income_by_owner(incomes) == pytest.approx({"u1": 8.0, "u2": 8.0}, abs=APPROX)
    self_paid = sum(i.amount for i in incomes if i.owner == i.payer == "u1")
    assert self_paid == pytest.approx(8.0, abs=APPROX)


def test_example_j22_is_carried(example_run: AstraeaRun) -> None:
    second = example_run.rounds[1]
    assert (second.interval, second.round_index, second.schedules) == (2, 2, ())
    assert second.carried == ("j22",)
    assert example_run.rounds[2].interval == 3 and example_run.carried == ("j22",)


def test_example_j11_distributed_would_give_92() -> None:
    ledger = Ledger(example_cluster())
    options = candidates(ledger, example_job("j11", "u1", 2), own_turn(range(9, 13)))
    distributed = [s for s in options if not s.placement.centralised]
    assert [(s.during, s.payoff) for s in distributed] == [((8, 12), pytest.approx(92.0))]


def test_example_j21_in_8_to_10_would_pay_6(example_run: AstraeaRun) -> None:
    ledger = Ledger(example_cluster())
    j11 = example_run.rounds[0].schedules[0]
    ledger.commit("u1", j11.placement, j11.slots)
    options = candidates(ledger, example_job("j21", "u2", 2), own_turn(range(9, 13)))
    early = next(s for s in options if s.during == (8, 10) and s.placement.centralised)
    assert early.cost == pytest.approx(6.0, abs=APPROX)
    assert early.payoff == pytest.approx(90.0, abs=APPROX)


def test_enumerating_workers_puts_j12_in_its_own_quota() -> None:
    """Why the example fixes D_w: with D_w in 1..D_j (Alg. 3 as printed) j12 runs on 2
    centralised workers inside u1's quota (payoff 89 > the paper's 76)."""
    run = run_astraea(example_cluster(), example_jobs(fixed=False), LAMBDA, max_interval=2)
    j12 = next(s for s in run.schedules if s.job == "j12")
    assert (j12.shared, j12.placement.centralised, j12.during) == (False, True, (9, 12))
    assert j12.payoff == pytest.approx(89.0, abs=APPROX)


# --- properties ------------------------------------------------------------------------------


def test_no_sharing_gives_every_tenant_alpha_one() -> None:
    servers = tuple(Server(workers=2, ps=1) for _ in range(3))
    tenants = (Tenant("a", workers=4, ps=2), Tenant("b", workers=2, ps=1))
    cluster = Cluster(servers, tenants, theta_w=16.0, theta_p=16.0)
    flat = LinearUtility(k=0.0, g=100.0)
    jobs = [
        RefJob(j, u, 1, 1, 2, 1, 1.0, 0.5, flat, workers=2)
        for j, u in (("a1", "a"), ("a2", "a"), ("b1", "b"))
    ]
    run = run_astraea(cluster, jobs, LAMBDA)
    assert len(run.schedules) == 3 and not any(s.shared for s in run.schedules)
    assert run.incomes == ()
    assert fairness_ratios(run, jobs, cluster) == pytest.approx({"a": 1.0, "b": 1.0}, abs=APPROX)


def sharing_run() -> tuple[AstraeaRun, list[RefJob]]:
    """Three tenants, one of which lends everything: several sharing-pass jobs."""
    servers = tuple(Server(workers=2, ps=1) for _ in range(4))
    tenants = (Tenant("a", 4, 2), Tenant("b", 2, 1), Tenant("c", 2, 1))
    cluster = Cluster(servers, tenants, theta_w=8.0, theta_p=8.0)
    jobs = [
        RefJob(f"{u}{k}", u, r, 1, 2, 1, 1.0, 0.5, LinearUtility(-1.0, 40.0))
        for k, (u, r) in enumerate([("b", 1)] * 4 + [("c", 3)] * 3 + [("b", 4)])
    ]
    return run_astraea(cluster, jobs, LAMBDA), jobs


def test_payments_conserve() -> None:
    run, _ = sharing_run()
    shared = [s for s in run.schedules if s.shared]
    assert len(shared) == 2, "the scenario must exercise the sharing pass"
    paid = sum(s.payment for s in shared)
    assert sum(i.amount for i in run.incomes) == pytest.approx(paid, abs=APPROX)
    for s in shared:
        got = sum(i.amount for i in run.incomes if i.job == s.job)
        assert got == pytest.approx(s.cost, abs=APPROX)


def test_prices_rise_as_units_are_committed() -> None:
    cluster = example_cluster()
    ledger = Ledger(cluster)
    seen = [ledger.prices(9)]
    for s in range(4):
        for _ in range(2):
            one = [0, 0, 0, 0]
            one[s] = 1
            ledger.commit("u1", Placement(tuple(one), (0, 0, 0, 0), False, ()), range(9, 10))
            seen.append(ledger.prices(9))
    worker_prices = [w for w, _ in seen]
    assert all(b > a for a, b in pairwise(worker_prices))
    assert worker_prices[0] == 0.0 and worker_prices[-1] == pytest.approx(15.0, abs=APPROX)


def test_a_job_that_does_not_fit_the_round_is_carried() -> None:
    ledger = Ledger(example_cluster())
    big = example_job("j22", "u2", 30, fixed=False)
    assert best_schedule(ledger, big, own_turn(range(9, 13))) is None
    result = astraea_round(ledger, [big], 2, 1, LAMBDA)
    assert result.schedules == () and result.carried == ("j22",)
