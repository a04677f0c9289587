"""FIFO: arrival order on the fastest types, the agnostic baseline, multi-GPU jobs at the head
of the queue, ties, and the two backends."""

from __future__ import annotations

import numpy as np
import pytest
from extended_problems import random_full_problem
from problem_builders import make_job, make_problem

from slurm_hetsched.core.policies.fifo import Fifo, FifoPerf

BACKENDS = ["highs", "cvxpy"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_jobs_in_arrival_order_get_their_fastest_types(backend: str) -> None:
    # Listed out of order: arrival_s decides. 4 GPUs for 5 jobs.
    problem = make_problem(
        [
            make_job("e").arrives(4).tput(v100=4, p100=2, k80=1),
            make_job("c").arrives(2).tput(v100=2, p100=3, k80=1),  # fastest on p100
            make_job("a").arrives(0).tput(v100=4, p100=2, k80=1),
            make_job("d").arrives(3).tput(v100=5, p100=2, k80=1),
            make_job("b").arrives(1).tput(v100=3, p100=2, k80=1),
        ],
        v100=2,
        p100=1,
        k80=1,
    )
    alloc = FifoPerf(backend=backend).allocate(problem)
    assert alloc.share("a") == pytest.approx({"v100": 1.0, "p100": 0.0, "k80": 0.0}, abs=1e-6)
    assert alloc.share("b") == pytest.approx({"v100": 1.0, "p100": 0.0, "k80": 0.0}, abs=1e-6)
    assert alloc.share("c") == pytest.approx({"v100": 0.0, "p100": 1.0, "k80": 0.0}, abs=1e-6)
    # d's fastest type is full with earlier jobs: it gets what is left, and e nothing.
    assert alloc.share("d") == pytest.approx({"v100": 0.0, "p100": 0.0, "k80": 1.0}, abs=1e-6)
    assert alloc.share("e") == pytest.approx({"v100": 0.0, "p100": 0.0, "k80": 0.0}, abs=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_agnostic_fifo_serves_in_arrival_order_on_any_type(backend: str) -> None:
    jobs = [make_job(f"j{i}").arrives(10 - i).tput(v100=4, k80=1) for i in range(5)]
    alloc = Fifo(backend=backend).allocate(make_problem(jobs, v100=1, k80=2))
    # Arrival order is j4, j3, j2, j1, j0: the first three fill the 3 GPUs.
    np.testing.assert_allclose(alloc.x.sum(axis=1), [0, 0, 1, 1, 1], atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_multi_gpu_job_at_the_head_is_not_passed_by_later_small_jobs(backend: str) -> None:
    # Gavel's objective without the num_gpus factor would run the four 1-GPU jobs instead
    # (4 x (M - 1..4) > M): the factor keeps the queue's order.
    jobs = [make_job("big").gpus(4).arrives(0).tput(v100=10.0)]
    jobs += [make_job(f"small{i}").arrives(1 + i).tput(v100=1.0) for i in range(4)]
    alloc = FifoPerf(backend=backend).allocate(make_problem(jobs, v100=4))
    np.testing.assert_allclose(alloc.x[:, 0], [1, 0, 0, 0, 0], atol=1e-6)


def test_equal_arrivals_go_by_job_id() -> None:
    jobs = [make_job(name).tput(v100=1.0) for name in ("b", "c", "a")]
    alloc = FifoPerf().allocate(make_problem(jobs, v100=2))
    assert [alloc.share(j)["v100"] for j in ("a", "b", "c")] == pytest.approx([1, 1, 0], abs=1e-6)


def test_objective_is_the_arrival_weighted_speed() -> None:
    problem = make_problem(
        [make_job("a").tput(v100=4, k80=1), make_job("b").arrives(1).tput(v100=4, k80=2)],
        v100=1,
        k80=1,
    )
    alloc = FifoPerf().allocate(problem)
    # a on the V100 (weight 2, speed 1), b on the K80 (weight 1, half its best speed).
    assert alloc.objective == pytest.approx(2 * 1.0 + 1 * 0.5, abs=1e-6)


@pytest.mark.parametrize("seed", range(12))
def test_backends_agree(seed: int) -> None:
    problem = random_full_problem(seed)
    for cls in (FifoPerf, Fifo):
        highs = cls().allocate(problem)
        reference = cls(backend="cvxpy").allocate(problem)
        assert highs.objective == pytest.approx(reference.objective, rel=1e-6, abs=1e-7)
