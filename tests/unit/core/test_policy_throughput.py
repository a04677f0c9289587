"""Maximum total throughput: jobs go where their normalized rates are highest, every GPU that
can be used is, and the two backends agree."""

from __future__ import annotations

import numpy as np
import pytest
from extended_problems import random_full_problem
from problem_builders import make_job, make_problem

from slurm_hetsched.core.policies.base import normalized_rates
from slurm_hetsched.core.policies.throughput import MaxSumThroughputPerf

BACKENDS = ["highs", "cvxpy"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_job_goes_where_it_gains_most(backend: str) -> None:
    # r gains 10x from the V100, a only 2x: r on the V100, a on the K80.
    problem = make_problem(
        [make_job("r").tput(v100=10.0, k80=1.0), make_job("a").tput(v100=2.0, k80=1.0)],
        v100=1,
        k80=1,
    )
    alloc = MaxSumThroughputPerf(backend=backend).allocate(problem)
    np.testing.assert_allclose(alloc.x, [[1, 0], [0, 1]], atol=1e-6)
    assert alloc.objective == pytest.approx(normalized_rates(problem, alloc.x).sum(), rel=1e-9)
    assert alloc.objective == pytest.approx(10 / 5.5 + 1 / 1.5, rel=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_gpu_idles_while_a_job_could_use_it(backend: str) -> None:
    jobs = [make_job(f"j{i}").gpus(g).tput(v100=float(i + 1)) for i, g in enumerate([1, 2, 1])]
    alloc = MaxSumThroughputPerf(backend=backend).allocate(make_problem(jobs, v100=3))
    assert (alloc.x[:, 0] * [1, 2, 1]).sum() == pytest.approx(3.0, abs=1e-6)


@pytest.mark.parametrize("seed", range(12))
def test_backends_agree(seed: int) -> None:
    problem = random_full_problem(seed)
    highs = MaxSumThroughputPerf().allocate(problem)
    reference = MaxSumThroughputPerf(backend="cvxpy").allocate(problem)
    assert highs.objective == pytest.approx(reference.objective, rel=1e-6, abs=1e-7)
