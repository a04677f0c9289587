"""Seeded random small problems for comparing policies with their reference formulations."""

from __future__ import annotations

import numpy as np

from slurm_hetsched.core.model import Account, AccountPolicy, Problem


def random_problem(
    rng: np.random.Generator,
    n_jobs: int,
    n_types: int,
    accounts: bool = False,
    duplicates: bool = True,
) -> Problem:
    """Throughputs in [0.5, 5] with ~20% zeros, 1 or 2 GPUs per job, 0-4 GPUs per type; some
    jobs are exact copies of an earlier one (to exercise the grouping of identical jobs)."""
    capacity = rng.integers(0, 5, size=n_types).astype(float)
    capacity[rng.integers(n_types)] = max(capacity.max(), 2.0)
    throughput = rng.uniform(0.5, 5.0, size=(n_jobs, n_types))
    throughput[rng.random((n_jobs, n_types)) < 0.2] = 0.0
    num_gpus = rng.choice([1, 2], p=[0.7, 0.3], size=n_jobs)
    weight = rng.choice([0.5, 1.0, 2.0], size=n_jobs)
    names = rng.choice(["a", "b"], size=n_jobs) if accounts else np.array([""] * n_jobs)
    arrival = rng.integers(0, 5, size=n_jobs).astype(float)
    for m in range(n_jobs):
        if duplicates and m > 0 and rng.random() < 0.3:
            src = rng.integers(m)
            throughput[m], num_gpus[m], weight[m] = throughput[src], num_gpus[src], weight[src]
            names[m] = names[src]
        runnable = (throughput[m] > 0) & (capacity >= num_gpus[m])
        if not runnable.any():
            num_gpus[m] = 1
            j = int(np.argmax(capacity))
            throughput[m, j] = rng.uniform(0.5, 5.0)
    account_table = {}
    if accounts:
        for name in ("a", "b"):
            policy = AccountPolicy.FIFO if rng.random() < 0.4 else AccountPolicy.FAIR
            account_table[name] = Account(name, float(rng.choice([1.0, 2.0, 3.0])), policy)
    return Problem(
        job_ids=tuple(f"j{m}" for m in range(n_jobs)),
        gpu_types=tuple(f"t{j}" for j in range(n_types)),
        throughput=throughput,
        capacity=capacity,
        num_gpus=num_gpus,
        weight=weight,
        job_accounts=tuple(str(a) for a in names),
        accounts=account_table,
        arrival_s=arrival,
    )
