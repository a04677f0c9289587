"""hadar through the simulator's tick (the live controller's round loop): a batch of the Hadar
scenario finishes, gangs across GPU types happen, and every job's work is done exactly.
(Comparisons with the baselines are benchmarks/hadar.py's, over 480 jobs and ten seeds.)"""

from __future__ import annotations

import pytest

from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy
from slurm_hetsched.sim.run import simulate
from slurm_hetsched.sim.scenario_hadar import generate_hadar_scenario


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
