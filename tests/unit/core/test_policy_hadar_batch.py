"""hadar's additions for long batches (core/policies/hadar_batch.py, hadar_prices.type_values):
the types' values from the fluid makespan LP, idle GPUs to the jobs that prefer their type, and
critical jobs first. Cases worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_hetsched.core.model import Node
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.hadar import Hadar
from slurm_hetsched.core.policies.hadar_alloc import Offer, Units, job_view
from slurm_hetsched.core.policies.hadar_batch import critical_jobs, on_preferred_types
from slurm_hetsched.core.policies.hadar_prices import PriceBounds, type_values
from slurm_hetsched.errors import ConfigError
from tests.unit.core.test_policy_hadar import problem_on

FAST_AND_SLOW = (Node("fast", {"v100": 1}), Node("slow", {"k80": 1}))


def test_a_type_is_worth_what_it_adds_to_the_queue() -> None:
    # Two equal jobs, 3x faster on the V100 than on the K80, share both GPUs in the fluid
    # optimum: a V100 second does 3 steps, a K80 second 1, so the K80 is worth a third.
    problem = problem_on(FAST_AND_SLOW, [[1, 0, 3], [1, 0, 3]], [1, 1], [3000, 3000])
    values = type_values(problem, problem.steps)
    assert values[0] == pytest.approx(1 / 3) and values[2] == pytest.approx(1.0)


def test_types_are_alike_when_none_is_scarce() -> None:
    # One job on a node of 2 V100 + 2 K80: the batch ends with its own run, whatever the types.
    problem = problem_on((Node("a", {"v100": 2, "k80": 2}),), [[1, 0, 3]], [1], [3000])
    assert type_values(problem, problem.steps).tolist() == [1.0, 1.0, 1.0]
    nothing_left = type_values(problem, np.zeros(1))
    assert nothing_left.tolist() == [1.0, 1.0, 1.0]


def test_the_fast_gpu_goes_to_the_job_it_speeds_up_most() -> None:
    # j0 runs 4x faster on the V100, j1 1.25x, j2 2x. In payoff order j1 (shortest) comes
    # first; with all types priced alike it takes the V100 and j0 the K80. Weighed by the
    # types' values, j0 takes the V100 and j1 the K80.
    problem = problem_on(
        FAST_AND_SLOW, [[1, 0, 4], [1, 0, 1.25], [1, 0, 2]], [1, 1, 1], [4000, 1000, 4000]
    )
    valued = Hadar(restart_s=0.0, critical=0, exact_jobs=0).allocate(problem)
    alike = Hadar(restart_s=0.0, critical=0, exact_jobs=0, type_values="none").allocate(problem)
    assert valued.placements is not None and alike.placements is not None
    assert {k: p.gpu_types for k, p in valued.placements.items()} == {
        "j0": ("v100",),
        "j1": ("k80",),
    }
    assert {k: p.gpu_types for k, p in alike.placements.items()} == {
        "j0": ("k80",),
        "j1": ("v100",),
    }


def test_an_offer_is_on_preferred_types_when_no_type_is_cheaper_per_step() -> None:
    problem = problem_on(FAST_AND_SLOW, [[1, 0, 4], [1, 0, 1.25]], [1, 1], [4000, 1000])
    units = Units(("fast", "slow"), (2, 0), (1, 1), (1, 1))
    on_v100, on_k80 = Offer(((0, 1),), 4.0, 1.0, 1.0, 0.0), Offer(((1, 1),), 1.0, 1.0, 1.0, 0.0)
    bounds = PriceBounds(np.ones(3), np.ones(3), values=np.array([0.5, 1.0, 1.0]))
    restart = np.zeros(2)
    loves_v100 = job_view(problem, 0, problem.steps, restart)  # 1/4 per step there, 1/2 on k80
    indifferent = job_view(problem, 1, problem.steps, restart)  # 1/1.25 there, 1/2 on k80
    assert on_preferred_types(loves_v100, on_v100, units, bounds)
    assert not on_preferred_types(loves_v100, on_k80, units, bounds)
    assert on_preferred_types(indifferent, on_k80, units, bounds)
    assert not on_preferred_types(indifferent, on_v100, units, bounds)
    # Without values every offer is preferred (the paper's prices).
    assert on_preferred_types(indifferent, on_v100, units, PriceBounds(np.ones(3), np.ones(3)))


def test_a_job_nearly_as_long_as_the_batch_starts_first() -> None:
    # On 2 V100s, j0's run (100,000 s) is the whole batch's horizon; four short jobs would take
    # both GPUs first in payoff order.
    problem = problem_on(
        (Node("n", {"v100": 2}),), [[0, 0, 1]] * 5, [1] * 5, [100_000, 100, 100, 100, 100]
    )
    plain = Hadar(restart_s=0.0, critical=0).allocate(problem)
    assert plain.placements is not None and "j0" not in plain.placements
    first = Hadar(restart_s=0.0).allocate(problem)
    assert first.placements is not None and "j0" in first.placements
    assert len(first.placements) == 2


def test_critical_jobs_are_the_longest_runs_against_the_horizon() -> None:
    problem = problem_on((Node("n", {"v100": 2}),), [[0, 0, 1]] * 4, [1] * 4, [1000, 900, 500, 100])
    views = {m: job_view(problem, m, problem.steps, np.zeros(4)) for m in range(4)}
    # Horizon: max(2500 / 2 GPUs, 1000) = 1250 s.
    assert critical_jobs(views, [0, 1, 2, 3], 2, 0.7) == [0, 1]
    assert critical_jobs(views, [3, 1, 2], 2, 0.7) == [1]  # only the waiting ones
    assert critical_jobs(views, [0, 1, 2, 3], 2, 0.0) == []
    assert critical_jobs(views, [0, 1, 2, 3], 2, 0.4) == [0, 1, 2]


@pytest.mark.parametrize(
    "options", [{"type_values": "cheap"}, {"critical": "1.5"}, {"critical": "-0.1"}]
)
def test_bad_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        get_policy("hadar", options)
