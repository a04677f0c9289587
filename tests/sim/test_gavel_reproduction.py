"""Gavel's shipped 96-job trace on 8 V100 + 16 P100 + 24 K80, 360 s rounds, against the average
job completion times Gavel's own simulator reports (docs/simulation.md, "Reproduction against
Gavel"): 14622.8 s with `max_min_fairness_perf`, 19989.3 s with `max_min_fairness`.

The settings are the reproduction's: no restart overhead and one node per GPU type (Gavel's
simulator charges no restart and runs every job at its consolidated throughput); everything
else is the defaults the live controller uses too.
"""

from __future__ import annotations

import dataclasses

import pytest

from slurm_hetsched.core.mechanism import RoundOptions
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy, shipped_throughputs
from slurm_hetsched.sim.faithful.catalog import faithful_form
from slurm_hetsched.sim.faithful.loop import faithful_result
from slurm_hetsched.sim.layout import nodes_from_counts
from slurm_hetsched.sim.results import SimResult
from slurm_hetsched.sim.run import SimSettings, simulate
from slurm_hetsched.sim.traces import read_shipped_trace

GAVEL_AVG_JCT_S = {"max_min_fairness_perf": 14622.820, "max_min_fairness": 19989.255}
REPRODUCTION = SimSettings(round_s=360.0, restart_overhead_s=0.0)


def run(policy: str, settings: SimSettings = REPRODUCTION) -> SimResult:
    table = shipped_throughputs()
    site = SiteData(table, shipped_gpu_types(), shipped_site_energy())
    nodes = nodes_from_counts({"v100": 8, "p100": 16, "k80": 24}, gpus_per_server=24)
    return simulate(
        read_shipped_trace("max_min_fairness"), nodes, get_policy(policy), site, settings
    )


@pytest.fixture(scope="module")
def results() -> dict[str, SimResult]:
    return {policy: run(policy) for policy in GAVEL_AVG_JCT_S}


@pytest.mark.parametrize("policy", sorted(GAVEL_AVG_JCT_S))
def test_average_jct_within_5_percent_of_gavels(results: dict[str, SimResult], policy: str) -> None:
    result = results[policy]
    assert result.completed == 96  # Gavel completes all 96 on this trace too
    assert result.avg_jct_s == pytest.approx(GAVEL_AVG_JCT_S[policy], rel=0.05)


def test_heterogeneity_aware_to_agnostic_ratio_within_5_percent(
    results: dict[str, SimResult],
) -> None:
    ours = results["max_min_fairness_perf"].avg_jct_s / results["max_min_fairness"].avg_jct_s
    gavel = GAVEL_AVG_JCT_S["max_min_fairness_perf"] / GAVEL_AVG_JCT_S["max_min_fairness"]
    assert ours == pytest.approx(gavel, rel=0.05)  # 0.73


def test_the_old_mechanism_is_far_off_which_is_what_the_defaults_fixed(
    results: dict[str, SimResult],
) -> None:
    # One global queue and no work conservation (the mechanism before the reproduction): the
    # agnostic baseline leaves GPUs idle and lands more than 25% above Gavel's figure.
    old = dataclasses.replace(
        REPRODUCTION, round_options=RoundOptions(queue="global", work_conserving=False)
    )
    result = run("max_min_fairness", old)
    assert result.avg_jct_s > 1.25 * GAVEL_AVG_JCT_S["max_min_fairness"]
    assert result.utilization < results["max_min_fairness"].utilization


@pytest.mark.parametrize("policy", sorted(GAVEL_AVG_JCT_S))
def test_gavel_faithful_mode_within_2_percent_of_gavels(policy: str) -> None:
    """The faithful mode with Clarabel: +0.1% and -1.1% (with ECOS, Gavel's solver, it gives
    Gavel's figures exactly; docs/simulation.md, "Gavel-faithful mode")."""
    table = shipped_throughputs()
    site = SiteData(table, shipped_gpu_types(), shipped_site_energy())
    result = faithful_result(
        read_shipped_trace("max_min_fairness"),
        {"v100": 8, "p100": 16, "k80": 24},
        faithful_form(policy, "CLARABEL"),
        site,
        SimSettings(),
    )
    assert result.completed == 96
    assert result.avg_jct_s == pytest.approx(GAVEL_AVG_JCT_S[policy], rel=0.02)
