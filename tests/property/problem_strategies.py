"""Hypothesis strategies for random allocation problems."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from slurm_hetsched.core.model import Account, AccountPolicy, Problem

_RATE = st.floats(0.1, 10.0, allow_nan=False, allow_infinity=False)


@st.composite
def problems(
    draw: st.DrawFn,
    max_jobs: int = 8,
    max_types: int = 4,
    accounts: bool = True,
    homogeneous: bool = False,
) -> Problem:
    """A valid problem: every job can run somewhere.

    Args:
        accounts: draw accounts (weights, fair or FIFO) and arrival times too.
        homogeneous: every job runs equally fast on every type (one "kind" of GPU).
    """
    n_types = draw(st.integers(1, max_types))
    capacity = draw(st.lists(st.integers(0, 6), min_size=n_types, max_size=n_types))
    if max(capacity) == 0:
        capacity[draw(st.integers(0, n_types - 1))] = draw(st.integers(1, 6))
    n_jobs = draw(st.integers(1, max_jobs))
    sizes = [g for g in (1, 2, 4) if g <= max(capacity)]
    rows, num_gpus = [], []
    for _ in range(n_jobs):
        g = draw(st.sampled_from(sizes))
        if homogeneous:
            row = [draw(_RATE)] * n_types
        else:
            row = draw(st.lists(st.one_of(st.just(0.0), _RATE), min_size=n_types, max_size=n_types))
        if not any(r > 0 and c >= g for r, c in zip(row, capacity, strict=True)):
            row[int(np.argmax(capacity))] = draw(_RATE)
        rows.append(row)
        num_gpus.append(g)
    weight = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=n_jobs, max_size=n_jobs))
    names: tuple[str, ...] = ("",) * n_jobs
    table: dict[str, Account] = {}
    arrival = [0.0] * n_jobs
    if accounts:
        names = tuple(
            draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=n_jobs, max_size=n_jobs))
        )
        for name in sorted(set(names)):
            policy = draw(st.sampled_from(list(AccountPolicy)))
            table[name] = Account(name, draw(st.sampled_from([1.0, 2.0, 5.0])), policy)
        arrival = draw(st.lists(st.integers(0, 3).map(float), min_size=n_jobs, max_size=n_jobs))
    return Problem(
        job_ids=tuple(f"j{m}" for m in range(n_jobs)),
        gpu_types=tuple(f"t{j}" for j in range(n_types)),
        throughput=np.array(rows),
        capacity=np.array(capacity, dtype=float),
        num_gpus=np.array(num_gpus),
        weight=np.array(weight),
        job_accounts=names,
        accounts=table,
        arrival_s=np.array(arrival),
    )


def permuted(problem: Problem, jobs: np.ndarray, types: np.ndarray) -> Problem:
    """The same problem with rows reordered by `jobs` and columns by `types`."""
    return Problem(
        job_ids=tuple(problem.job_ids[i] for i in jobs),
        gpu_types=tuple(problem.gpu_types[j] for j in types),
        throughput=problem.throughput[np.ix_(jobs, types)],
        capacity=problem.capacity[types],
        num_gpus=problem.num_gpus[jobs],
        weight=problem.weight[jobs],
        job_accounts=tuple(problem.job_accounts[i] for i in jobs),
        accounts=problem.accounts,
        arrival_s=problem.arrival_s[jobs],
    )
