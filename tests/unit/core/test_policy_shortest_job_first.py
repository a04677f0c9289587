"""Shortest job first: the shortest job gets its fastest type, the others follow in order of
duration, finished jobs get nothing, and the two backends agree."""

from __future__ import annotations

import numpy as np
import pytest
from extended_problems import random_full_problem, with_fields
from problem_builders import make_job, make_problem

from slurm_hetsched.core.model import InvalidProblemError
from slurm_hetsched.core.policies.shortest_job_first import ShortestJobFirstPerf

BACKENDS = ["highs", "cvxpy"]


def three_jobs() -> tuple[list[str], np.ndarray]:
    return ["long", "short", "mid"], np.array([8000.0, 300.0, 2000.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_shortest_job_gets_its_fastest_type(backend: str) -> None:
    # "short" (300 steps) is fastest on the P100 (3 steps/s: 100 s there, 150 s on the V100);
    # the others are fastest on the V100. One GPU of each type.
    problem = make_problem(
        [
            make_job("long").tput(v100=4.0, p100=1.0),
            make_job("short").tput(v100=2.0, p100=3.0),
            make_job("mid").tput(v100=4.0, p100=2.0),
        ],
        v100=1,
        p100=1,
    )
    problem = with_fields(problem, steps=three_jobs()[1])
    alloc = ShortestJobFirstPerf(backend=backend).allocate(problem)
    assert alloc.share("short") == pytest.approx({"v100": 0.0, "p100": 1.0}, abs=1e-6)
    # Next by duration on its fastest type: "mid" (500 s on the V100), then "long" (none left).
    assert alloc.share("mid") == pytest.approx({"v100": 1.0, "p100": 0.0}, abs=1e-6)
    assert alloc.share("long") == pytest.approx({"v100": 0.0, "p100": 0.0}, abs=1e-6)
    assert alloc.objective == pytest.approx(100.0, rel=1e-6)  # the shortest job's duration


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_shortest_job_gets_its_fastest_type_even_if_it_arrived_last(backend: str) -> None:
    jobs = [make_job(f"j{i}").arrives(i).tput(v100=5.0, k80=1.0) for i in range(4)]
    problem = with_fields(
        make_problem(jobs, v100=1, k80=3), steps=np.array([900.0, 800.0, 700.0, 10.0])
    )
    alloc = ShortestJobFirstPerf(backend=backend).allocate(problem)
    assert alloc.share("j3") == pytest.approx({"v100": 1.0, "k80": 0.0}, abs=1e-6)


def test_finished_jobs_get_no_time() -> None:
    jobs = [make_job(f"j{i}").tput(v100=1.0) for i in range(3)]
    problem = with_fields(make_problem(jobs, v100=3), steps=np.array([0.0, 50.0, 0.0]))
    alloc = ShortestJobFirstPerf().allocate(problem)
    np.testing.assert_allclose(alloc.x[:, 0], [0.0, 1.0, 0.0], atol=1e-9)
    everything_done = with_fields(problem, steps=np.zeros(3))
    alloc = ShortestJobFirstPerf().allocate(everything_done)
    assert alloc.objective == 0.0 and not alloc.x.any() and alloc.solves == 0


def test_steps_are_required() -> None:
    problem = make_problem([make_job("a").tput(v100=1.0)], v100=1)
    with pytest.raises(InvalidProblemError, match=r"shortest_job_first_perf.*`steps`"):
        ShortestJobFirstPerf().allocate(problem)


@pytest.mark.parametrize("seed", range(12))
def test_backends_agree(seed: int) -> None:
    problem = random_full_problem(seed)
    highs = ShortestJobFirstPerf().allocate(problem)
    reference = ShortestJobFirstPerf(backend="cvxpy").allocate(problem)
    # The shortest job's time is forced (all of it on its fastest type), so its duration
    # is unique even though the rest of the allocation is not.
    assert highs.objective == pytest.approx(reference.objective, rel=1e-6)
