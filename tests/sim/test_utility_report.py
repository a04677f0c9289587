"""`hetsched simulate` reports the jobs' total utility: each trace job's own utility, else
its due date and tardiness weight read as one (core/utility.py), summed at the jobs'
completions."""

from __future__ import annotations

import dataclasses

import pytest

from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.core.utility import DEFAULT_MAX_UTILITY, Utility
from slurm_hetsched.data_files import shipped_gpu_types, shipped_site_energy, shipped_throughputs
from slurm_hetsched.sim.generate import generate_trace
from slurm_hetsched.sim.layout import nodes_from_counts
from slurm_hetsched.sim.run import simulate


def test_total_utility_is_what_each_job_kept_of_its_maximum() -> None:
    table = shipped_throughputs()
    trace = generate_trace(10, seed=5, table=table, rate_per_hour=20.0, mix="single")
    # Due dates an hour after arrival and a weight that a day late costs everything.
    tw = DEFAULT_MAX_UTILITY / 86_400.0
    trace = [
        dataclasses.replace(job, due_s=job.arrival_s + 3600.0, tardiness_weight=tw) for job in trace
    ]
    site = SiteData(table, shipped_gpu_types(), shipped_site_energy())
    nodes = nodes_from_counts({"v100": 1, "p100": 1, "k80": 1})
    result = simulate(trace, nodes, get_policy("max_min_fairness_perf"), site)
    kept = [max(0.0, DEFAULT_MAX_UTILITY - tw * job.tardiness_s) for job in result.jobs]
    assert result.total_utility == pytest.approx(sum(kept))
    assert any(job.tardiness_s > 0 for job in result.jobs)  # some were late: less than all
    assert result.total_utility < DEFAULT_MAX_UTILITY * len(trace)
    assert result.to_json()["total_utility"] == pytest.approx(result.total_utility, abs=1e-3)


def test_a_jobs_own_utility_is_what_its_completion_is_worth() -> None:
    table = shipped_throughputs()
    trace = generate_trace(10, seed=5, table=table, rate_per_hour=20.0, mix="single")
    # Each job its own sigmoid, half worth at two hours from arrival; and a due date whose
    # tardiness (the default utility's) no longer counts.
    sigmoids = [Utility("sigmoid", 10.0 + i, 7200.0, 2.0) for i in range(len(trace))]
    trace = [
        dataclasses.replace(job, due_s=job.arrival_s, tardiness_weight=1.0, utility=utility)
        for job, utility in zip(trace, sigmoids, strict=True)
    ]
    site = SiteData(table, shipped_gpu_types(), shipped_site_energy())
    nodes = nodes_from_counts({"v100": 1, "p100": 1, "k80": 1})
    result = simulate(trace, nodes, get_policy("max_min_fairness_perf"), site)
    ends = {job.job_id: job.end_s for job in result.jobs}
    assert all(end is not None for end in ends.values())
    expected = [
        utility.value(ends[job.job_id], job.arrival_s)  # type: ignore[arg-type]
        for job, utility in zip(trace, sigmoids, strict=True)
    ]
    assert result.total_utility == pytest.approx(sum(expected))
    # Neither the maxima (some finished late) nor the tardiness utility's figure.
    assert 0 < result.total_utility < sum(u.max_utility for u in sigmoids)
    late = [max(0.0, DEFAULT_MAX_UTILITY - job.tardiness_s) for job in result.jobs]
    assert result.total_utility != pytest.approx(sum(late))
