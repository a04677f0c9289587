"""Seeded random problems with the optional fields the steps, cost, SLO and packing policies
read (steps, arrival and now, SLOs, prices, packed pairs), for comparing backends."""

from __future__ import annotations

import dataclasses

import numpy as np
from random_problems import random_problem

from slurm_hetsched.core.model import PackedPairs, Problem


def with_fields(problem: Problem, **fields: object) -> Problem:
    """The problem with some fields replaced (re-validated)."""
    return dataclasses.replace(problem, **fields)  # type: ignore[arg-type]


def random_full_problem(seed: int, max_jobs: int = 8, max_types: int = 3) -> Problem:
    """random_problem plus: steps (~15% finished), arrivals up to an hour ago (half just now),
    SLOs for about half the jobs, prices, and random pairs of equal GPU counts."""
    rng = np.random.default_rng(seed)
    base = random_problem(
        rng, int(rng.integers(1, max_jobs + 1)), int(rng.integers(1, max_types + 1))
    )
    n, k = base.n_jobs, base.n_types
    steps = rng.uniform(100, 10_000, n) * (rng.random(n) > 0.15)
    arrival = -rng.uniform(0, 3600, n) * (rng.random(n) < 0.5)
    slo = np.where(rng.random(n) < 0.5, rng.uniform(200, 20_000, n), np.inf)
    pairs = [
        (a, b)
        for a in range(n)
        for b in range(a + 1, n)
        if base.num_gpus[a] == base.num_gpus[b] and rng.random() < 0.4
    ]
    packed = None
    if pairs:
        tput = rng.uniform(0.2, 3.0, size=(len(pairs), k, 2))
        tput *= rng.random((len(pairs), k, 1)) > 0.2
        packed = PackedPairs(pairs=np.array(pairs), throughput=tput)
    return with_fields(
        base,
        steps=steps,
        arrival_s=arrival,
        now_s=0.0,
        slo_s=slo,
        price_per_hour=rng.uniform(0.1, 3.0, k),
        packed=packed,
    )
