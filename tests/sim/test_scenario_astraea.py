"""Astraea's evaluation workload (sim/scenario_astraea.py) and the tenants' ledger of a run
(sim/tenants.py): determinism per seed, the quotas, request sizes, hourly bursty arrivals,
the linear utilities, the 16-GPU rows, and small simulations of the tenant baselines (and of
a policy that pays) whose ledgers must add up."""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import ClassVar

import numpy as np
import pytest

from slurm_hetsched.core.model import POOL_OWNER, SUBLINEAR_EXPONENT, Allocation, Payment, Problem
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.hived import HiveD
from slurm_hetsched.core.policies.options import NO_OPTIONS, PolicyOption
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.sim.layout import gpu_counts
from slurm_hetsched.sim.results import SimResult
from slurm_hetsched.sim.run import simulate
from slurm_hetsched.sim.scenario_astraea import (
    GAIN_RANGE,
    GPU_MIX,
    N_TENANTS,
    SLOPE_RANGE,
    AstraeaScenario,
    generate_astraea_scenario,
    largest_job,
    quota_shares,
    split_whole,
    tenant_quotas,
)
from slurm_hetsched.sim.tenants import TenantRecord

SMALL_NODES = {"v100": 3, "p100": 3, "k80": 3}  # 36 GPUs


@pytest.fixture(scope="module")
def big() -> AstraeaScenario:
    return generate_astraea_scenario(2, 3000, 72.0)


def test_same_seed_same_scenario_other_seed_other_trace() -> None:
    a, b, c = (generate_astraea_scenario(s, 200) for s in (7, 7, 8))
    assert (a.trace, a.nodes, a.accounts) == (b.trace, b.nodes, b.accounts)
    assert a.trace != c.trace
    # Each quantity has its own stream: another rate moves jobs, not their utilities.
    d = generate_astraea_scenario(7, 200, 30.0)
    assert [j.arrival_s for j in d.trace] != [j.arrival_s for j in a.trace]
    assert [j.utility for j in d.trace] == [j.utility for j in a.trace]


def test_cluster_is_100_nodes_of_four_gpus_of_one_type() -> None:
    s = generate_astraea_scenario(0, 5)
    assert len(s.nodes) == 100
    assert all(len(n.gpus) == 1 and sum(n.gpus.values()) == 4 for n in s.nodes)
    assert gpu_counts(s.nodes) == {"v100": 136, "p100": 132, "k80": 132}
    settings = s.settings()
    assert (settings.round_s, settings.restart_overhead_s, settings.seed) == (360.0, 30.0, 0)
    assert s.site().accounts == s.accounts


def test_quotas_cover_the_cluster_zipf_like_and_the_pool_is_documented() -> None:
    s = generate_astraea_scenario(0, 5)
    assert list(s.accounts) == [f"vc{i:02d}" for i in range(1, N_TENANTS + 1)]
    capacity = gpu_counts(s.nodes)
    for t, total in capacity.items():  # every GPU in some quota: no pool by default
        column = [a.quota[t] for a in s.accounts.values()]
        assert sum(column) == total and min(column) >= 1
        assert column == sorted(column, reverse=True)
    sizes = [sum(a.quota.values()) for a in s.accounts.values()]
    assert sizes[0] / sizes[-1] > 10
    shares = s.quota_shares()
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["vc01"] == pytest.approx(sum(s.accounts["vc01"].quota.values()) / 400, rel=0.02)
    pooled = tenant_quotas(capacity, pool_share=0.1)
    for t, total in capacity.items():
        assert sum(a.quota[t] for a in pooled.values()) == total - round(0.1 * total)
    assert quota_shares({}) == {} and split_whole(3, np.array([0.5, 0.5])) == [2, 1]
    assert split_whole(5, np.array([0.9, 0.05, 0.05])) == [3, 1, 1]  # at least 1 each


def test_request_sizes_are_philly_like_and_fit_the_tenant(big: AstraeaScenario) -> None:
    counts = Counter(j.num_gpus for j in big.trace)
    assert set(counts) == set(GPU_MIX)
    assert counts[1] / len(big.trace) > 0.5
    assert counts[1] > counts[2] > counts[8] > counts[16] > 0
    for job in big.trace:
        account = big.accounts[job.account]
        assert job.num_gpus <= largest_job(account, list(GPU_MIX))
        assert job.num_gpus <= max(account.quota.values())


def test_arrivals_are_hourly_bursty_batches_of_one_tenant(big: AstraeaScenario) -> None:
    hours = [j.arrival_s / 3600.0 for j in big.trace]
    assert hours == sorted(hours) and hours[0] == 0.0
    assert all(h == int(h) for h in hours)
    per_hour = np.bincount(np.array(hours, dtype=int))
    assert per_hour.mean() == pytest.approx(72.0, rel=0.1)
    assert per_hour.var() / per_hour.mean() > 3  # Poisson arrivals would give about 1
    # A batch is one tenant's: an hour holds far fewer tenants than jobs.
    tenants_per_hour: dict[float, set[str]] = defaultdict(set)
    for job in big.trace:
        tenants_per_hour[job.arrival_s].add(job.account)
    assert np.mean([len(t) for t in tenants_per_hour.values()]) < per_hour.mean() / 3
    # Bigger tenants submit more.
    jobs = Counter(j.account for j in big.trace)
    assert jobs["vc01"] > jobs["vc14"] * 4


def test_utilities_are_astraeas_linear_ones(big: AstraeaScenario) -> None:
    for job in big.trace:
        u = job.the_utility()
        assert u.kind == "linear" and GAIN_RANGE[0] <= u.max_utility <= GAIN_RANGE[1]
        assert u.target_s is not None
        slope = -u.max_utility / (u.target_s / 3600.0)  # utility per elapsed hour
        assert SLOPE_RANGE[0] - 1e-3 <= slope <= SLOPE_RANGE[1] + 1e-3
        assert u.value(job.arrival_s + 3600.0, job.arrival_s) == pytest.approx(
            u.max_utility + slope, abs=0.02
        )
    steep = generate_astraea_scenario(2, 50, 72.0, slope_scale=10.0)
    assert all(
        a.the_utility().target_s == pytest.approx(b.the_utility().target_s / 10, rel=1e-2)  # type: ignore[operator]
        for a, b in zip(steep.trace, big.trace[:50], strict=True)
    )
    with pytest.raises(ConfigError, match="slope_scale"):
        generate_astraea_scenario(0, 5, slope_scale=0)


def test_16_gpu_rows_are_extrapolated_from_8(big: AstraeaScenario) -> None:
    table = big.table
    assert "16-GPU rows extrapolated" in table.source
    for job_class in table.classes:
        counts = table.gpu_counts(job_class)
        if 8 in counts:
            assert 16 in counts
            np.testing.assert_allclose(
                table.rows[(job_class, 16)], table.rows[(job_class, 8)] * 2**SUBLINEAR_EXPONENT
            )
        else:
            assert counts == (1,)  # Gavel's 1-GPU-only classes stay so


def test_bad_arguments_are_config_errors() -> None:
    for kwargs in ({"n_jobs": 0}, {"rate_per_hour": -1.0}, {"n_tenants": 0}, {"pool_share": 1.0}):
        with pytest.raises(ConfigError):
            generate_astraea_scenario(0, **kwargs)  # type: ignore[arg-type]


def small(seed: int = 1, pool_share: float = 0.0) -> AstraeaScenario:
    return generate_astraea_scenario(
        seed, 40, 12.0, nodes_per_type=SMALL_NODES, n_tenants=4, pool_share=pool_share
    )


def check_ledger(s: AstraeaScenario, result: SimResult) -> Mapping[str, TenantRecord]:
    """Lent = borrowed, paid = received, utilities per account, revenues adding up to the
    total utility; the records."""
    records = result.tenants
    assert records is not None and set(s.accounts) <= set(records)
    borrowed = sum(r.borrowed_gpu_h for r in records.values())
    assert borrowed == pytest.approx(sum(r.lent_gpu_h for r in records.values()), abs=1e-9)
    paid = sum(r.paid for r in records.values())
    assert paid == pytest.approx(sum(r.received for r in records.values()))
    assert sum(r.revenue for r in records.values()) == pytest.approx(result.total_utility)
    for name, r in records.items():
        mine = [(j, rec) for j, rec in zip(s.trace, result.jobs, strict=True) if j.account == name]
        assert r.jobs == len(mine)
        assert r.completed == sum(1 for _j, rec in mine if rec.end_s is not None)
        assert r.utility == pytest.approx(
            sum(j.the_utility().value(rec.end_s, j.arrival_s) for j, rec in mine if rec.end_s)
        )
    return records


@pytest.mark.parametrize("name", ["gandiva_fair", "hived"])
def test_baselines_run_the_small_scenario_to_the_end(name: str) -> None:
    s = small()
    result = simulate(s.trace, s.nodes, get_policy(name), s.site(), s.settings())
    assert result.completed == len(s.trace)  # every job done (GPUs checked by the simulator)
    records = check_ledger(s, result)
    assert all(r.paid == r.received == 0 for r in records.values())  # no payments
    assert sum(r.borrowed_gpu_h for r in records.values()) > 0  # sharing happened
    out = result.to_json()["tenants"]
    assert set(out) == set(records) and "revenue" in out["vc01"]


def test_a_pool_lends_too() -> None:
    s = small(pool_share=0.25)
    result = simulate(s.trace, s.nodes, HiveD(), s.site(), s.settings())
    records = check_ledger(s, result)
    assert records[POOL_OWNER].quota == {"v100": 3, "p100": 3, "k80": 3}
    assert records[POOL_OWNER].lent_gpu_h > 0


class PayingHived:
    """hived, with every job beyond its account's quota paying 1 per GPU a round, split
    evenly between the pool and the first account."""

    name: ClassVar[str] = "paying_hived"
    description: ClassVar[str] = "test policy"
    options: ClassVar[Mapping[str, PolicyOption]] = NO_OPTIONS
    needs_nodes: ClassVar[bool] = True

    def allocate(self, problem: Problem) -> Allocation:
        alloc = HiveD().allocate(problem)
        payments = {}
        for job, placement in (alloc.placements or {}).items():
            account = problem.job_accounts[problem.job_ids.index(job)]
            if placement.num_gpus > 1:
                n = float(placement.num_gpus)
                shares = {POOL_OWNER: n / 2, "vc01": n / 2}
                payments[job] = Payment(account, n, 360.0, {"v100": int(n)}, shares)
        return dataclasses.replace(alloc, payments=payments)


def test_payments_are_added_up_per_round_and_revenues_sum_to_the_utility() -> None:
    s = small()
    result = simulate(s.trace, s.nodes, PayingHived(), s.site(), s.settings())
    records = check_ledger(s, result)
    pool = records[POOL_OWNER]
    assert pool.received > 0 and pool.quota == {} and pool.jobs == 0
    vc01 = records["vc01"]
    assert vc01.received == pytest.approx(pool.received)
    assert vc01.revenue == pytest.approx(vc01.utility + vc01.received - vc01.paid)


def test_no_ledger_without_quotas_or_payments() -> None:
    s = small()
    site = dataclasses.replace(s.site(), accounts={})
    result = simulate(s.trace, s.nodes, get_policy("hived"), site, s.settings())
    assert result.tenants is None and "tenants" not in result.to_json()
