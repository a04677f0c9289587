"""hadar through the simulator's tick (the live controller's round loop): a batch of the Hadar
scenario finishes, gangs across GPU types happen, and every job's work is done exactly.
(Comparisons with the baselines are benchmarks/hadar.py's, over 480 jobs and ten seeds.)"""

from __future__ import annotations

import pytest

from slurm_hetsched.core.model import Node
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.hadar import Hadar
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.core.utility import Utility
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy
from slurm_hetsched.sim.run import SimSettings, simulate
from slurm_hetsched.sim.scenario_hadar import generate_hadar_scenario
from slurm_hetsched.sim.traces import TraceJob


@pytest.fixture(scope="module")
def batch():  # type: ignore[no-untyped-def]
    scenario = generate_hadar_scenario(1, 60)
    site = SiteData(scenario.table, shipped_gpu_types(), shipped_site_energy())
    results = {
        name: simulate(scenario.trace, scenario.nodes, get_policy(name), site, scenario.settings())
        for name in ("hadar", "yarn_cs")
    }
    return scenario, results


def test_every_job_of_the_batch_finishes_with_all_its_steps(batch) -> None:  # type: ignore[no-untyped-def]
    scenario, results = batch
    jobs = results["hadar"].jobs
    assert len(jobs) == len(scenario.trace)
    assert all(job.end_s is not None and job.steps_done == job.total_steps for job in jobs)


def test_hadar_runs_gangs_across_types_where_yarn_never_does(batch) -> None:  # type: ignore[no-untyped-def]
    _, results = batch

    # A job that never moved but held GPUs of several types ran as a gang across them.
    def mixed(name: str) -> int:
        return sum(1 for j in results[name].jobs if j.moves == 0 and len(j.gpu_s) > 1)

    assert mixed("hadar") > 0
    assert mixed("yarn_cs") == 0


def test_hadar_grows_an_elastic_job_in_the_simulator() -> None:
    """One job of 1 GPU that may take 2, worth nothing after 3 hours, on a node of 2 V100s
    where a 1-GPU job holds the other V100 for the first 1000 s: it starts on 1 GPU and takes
    the second once it is free (hadar's upgrade, 60 s restart): at 1020 s, staying ends it at
    3600 s (utility 66.7), growing at ~2513 s (76.7), for about 3.5 more in price."""
    table = ThroughputTable.from_dict(
        {
            "format": "hetsched-throughputs/1",
            "throughputs": {"c": {"1": {"v100": 1.0}, "2": {"v100": 1.8}}},
        }
    )
    site = SiteData(table, shipped_gpu_types(), shipped_site_energy())
    soon = Utility("linear", 100.0, target_s=10_800.0)
    elastic = TraceJob("e", 0.0, "c", 1, 3600, allowed_gpus=(1, 2), utility=soon, restart_s=60.0)
    other = TraceJob("o", 0.0, "c", 1, 1000, utility=soon)
    settings = SimSettings(round_s=60.0, idle_nodes_on=False)
    policy = Hadar(critical=0)
    result = simulate((elastic, other), (Node("a", {"v100": 2}),), policy, site, settings)
    ends = {job.job_id: job.end_s for job in result.jobs}
    assert ends["o"] == pytest.approx(1000.0, abs=60.0)
    # 1000 steps alone, then the rest (2600) at 1.8 steps/s after a 60 s restart: ~2505 s;
    # on 1 GPU throughout it would end at 3600 s.
    assert ends["e"] < 2700.0
