"""hadar with elastic jobs (`Problem.allowed_gpus`): FIND_ALLOC weighs every gang size a job may
take, and a running job grows when GPUs free up and the larger gang pays for its restart.
Cases worked out by hand on one node of 4 K80s."""

from __future__ import annotations

import dataclasses

import numpy as np

from slurm_hetsched.core.model import GpuSlice, Node, Placement
from slurm_hetsched.core.policies.hadar import Hadar
from slurm_hetsched.core.policies.hadar_alloc import elastic_rates, job_view
from slurm_hetsched.core.utility import Utility
from tests.unit.core.test_policy_hadar import problem_on

# Worth 100 at once and nothing after 10 hours: every second sooner is worth the same.
SOON = Utility("linear", 100.0, target_s=36_000.0)


def elastic(busy: int, *, utility: Utility = SOON, running: int | None = None) -> object:
    """One job of 2 GPUs that may take 3 (1 step/s on 2 K80s, 1.5 on 3), 3600 steps left,
    on a node of 4 K80s of which `busy` are taken by others; `running`: it runs on that many."""
    node = Node("n3", {"k80": 4}, {"k80": busy})  # a running managed job's GPUs are not "in use"
    placed = {"j0": Placement("j0", (GpuSlice("n3", "k80", running),))} if running else None
    problem = problem_on((node,), [[1.0, 0, 0]], [2], [3600], utilities=(utility,), running=placed)
    throughput_at = np.full((1, 3, 3), np.nan)
    throughput_at[0, 0, 2] = 1.5
    return dataclasses.replace(problem, allowed_gpus=((2, 3),), throughput_at=throughput_at)


def test_an_elastic_job_sees_the_rate_of_each_gang_size() -> None:
    problem = elastic(0)
    view = job_view(problem, 0, problem.steps, np.zeros(1), rates_by_size=elastic_rates(problem))
    assert [(n, rate[0]) for n, rate in view.sizes()] == [(2, 1.0), (3, 1.5)]


def test_an_elastic_job_takes_the_larger_gang_when_it_pays_else_the_smaller() -> None:
    policy = Hadar(restart_s=0.0, critical=0)
    free_three = policy.allocate(elastic(1))
    assert free_three.placements["j0"].num_gpus == 3  # done in 40 min instead of an hour
    free_two = policy.allocate(elastic(2))
    assert free_two.placements["j0"].num_gpus == 2


def test_a_job_worth_the_same_whenever_it_ends_keeps_to_its_smallest_gang() -> None:
    # Finishing sooner is worth nothing more, and 3 GPUs for 2400 s cost more than 2 for 3600
    # s once prices rise with use: the payoff is larger on 2.
    flat = Utility("flat", 100.0)
    allocation = Hadar(restart_s=0.0, critical=0).allocate(elastic(0, utility=flat))
    assert allocation.placements["j0"].num_gpus == 2


def test_a_running_elastic_job_grows_when_gpus_free_up() -> None:
    # It runs on 2 K80s and the other 2 are free: the third pays for a 60 s restart.
    grown = Hadar(restart_s=60.0, critical=0).allocate(elastic(0, running=2))
    assert grown.placements["j0"].num_gpus == 3
    # With the node full it stays as it is.
    kept = Hadar(restart_s=60.0, critical=0).allocate(elastic(2, running=2))
    assert kept.placements["j0"].num_gpus == 2


def test_a_job_that_is_not_elastic_never_takes_more_than_its_gang() -> None:
    problem = dataclasses.replace(elastic(0), allowed_gpus=None, throughput_at=None)
    assert Hadar(restart_s=0.0, critical=0).allocate(problem).placements["j0"].num_gpus == 2
