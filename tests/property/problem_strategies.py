"""Hypothesis strategies for random allocation problems."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from slurm_hetsched.core.model import Account, AccountPolicy, PackedPairs, Problem

_RATE = st.floats(0.1, 10.0, allow_nan=False, allow_infinity=False)


@st.composite
def problems(
    draw: st.DrawFn,
    max_jobs: int = 8,
    max_types: int = 4,
    accounts: bool = True,
    homogeneous: bool = False,
    extras: bool = True,
) -> Problem:
    """A valid problem: every job can run somewhere.

    Args:
        accounts: draw accounts (weights, fair or FIFO) and arrival times too.
        homogeneous: every job runs equally fast on every type (one "kind" of GPU).
        extras: draw the fields of the steps, cost and packing policies too: steps (some 0),
            elapsed times, SLOs (some none), prices, and candidate pairs with their
            throughputs.
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
    fields = draw(_extras(n_jobs, n_types, num_gpus)) if extras else {}
    return Problem(
        **fields,
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
        now_s=problem.now_s,
        steps=None if problem.steps is None else problem.steps[jobs],
        slo_s=None if problem.slo_s is None else problem.slo_s[jobs],
        price_per_hour=None if problem.price_per_hour is None else problem.price_per_hour[types],
        packed=_permuted_pairs(problem.packed, jobs, types),
    )


def _permuted_pairs(
    packed: PackedPairs | None, jobs: np.ndarray, types: np.ndarray
) -> PackedPairs | None:
    """The pairs with job indices renumbered for rows reordered by `jobs`, columns by `types`."""
    if packed is None:
        return None
    new_index = np.empty(len(jobs), dtype=np.int64)
    new_index[jobs] = np.arange(len(jobs))
    return PackedPairs(pairs=new_index[packed.pairs], throughput=packed.throughput[:, types, :])


@st.composite
def _extras(draw: st.DrawFn, n_jobs: int, n_types: int, num_gpus: list[int]) -> dict[str, Any]:
    """steps, now_s (arrivals are at 0 or later), slo_s, price_per_hour and packed."""
    steps = draw(
        st.lists(st.sampled_from([0.0, 50.0, 400.0, 3000.0]), min_size=n_jobs, max_size=n_jobs)
    )
    now_s = draw(st.sampled_from([0.0, 5.0, 500.0]))
    slo = draw(
        st.lists(st.sampled_from([np.inf, 10.0, 300.0, 5000.0]), min_size=n_jobs, max_size=n_jobs)
    )
    price = draw(st.lists(st.sampled_from([0.1, 0.5, 2.0]), min_size=n_types, max_size=n_types))
    candidates = [
        (a, b) for a in range(n_jobs) for b in range(a + 1, n_jobs) if num_gpus[a] == num_gpus[b]
    ]
    pairs = (
        draw(st.lists(st.sampled_from(candidates), unique=True, max_size=4)) if candidates else []
    )
    packed = None
    if pairs:
        share = st.sampled_from([0.0, 0.3, 0.6, 0.9])
        tput = [
            [[draw(share) * 4, draw(share) * 4] for _ in range(n_types)] for _ in range(len(pairs))
        ]
        packed = PackedPairs(pairs=np.array(pairs), throughput=np.array(tput))
    return {
        "steps": np.array(steps),
        "now_s": now_s,
        "slo_s": np.array(slo),
        "price_per_hour": np.array(price),
        "packed": packed,
    }
