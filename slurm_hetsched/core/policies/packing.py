"""Space sharing (Gavel section 3.1, "_packed"): two jobs may share one set of GPUs.

The candidate pairs and their throughputs come with the problem (`Problem.packed`: from a
what-if file's `packed` keys, or from the throughput table's packed entries via
`packed_pairs_from_table`). A pair shares num_gpus GPUs of one type (both jobs have that many;
the problem rejects pairs with different counts), and each job of the pair runs at its pair
throughput there. The allocation has one time fraction per job alone (x, n_jobs x n_types) and
one per pair (pair_x, n_pairs x n_types), and the base constraints become (Gavel's, with the
scale factor of the pair, not of one job):

    x, pair_x >= 0;  x = 0 where the job cannot run, pair_x = 0 where either pair throughput
    is 0 or the type has fewer than num_gpus GPUs;
    sum_j x[m, j] + sum over pairs k holding m of sum_j pair_x[k, j] <= 1     (every job m)
    num_gpus @ x + pair_num_gpus @ pair_x <= capacity                       (every type)

A job's rate is sum_j T[m, j] x[m, j] + sum_{k holding m} sum_j T^pair[k, j, m] pair_x[k, j].

- `max_min_fairness_perf_packed` (Gavel: `max_min_fairness_packed`): max-min fairness over
  these rates, normalized as without sharing (a job's pair throughput divided by its own
  equal-share rate, times num_gpus; rates.normalized_rate_matrix). Objective: the smallest
  weighted normalized rate.
- `min_total_duration_perf_packed` (Gavel: `min_total_duration_packed`): the makespan LP
  (makespan.py) over these rates; needs `steps`. Objective: the makespan x and pair_x imply.

A pair only helps when its combined normalized rate beats time slicing the two jobs; the LP
uses it exactly then, so sharing never makes the objective worse (Gavel section 4.4) and
leaves it unchanged when no pair is worth it. Without `packed` these are the policies without
sharing. The output reports pair shares in `Allocation.pairs` / `pair_x` (JSON: "packed").
The LP's columns, its solution check and its solvers are in sharing.py (their names are
importable from here too).

Backends: "highs" (default: the LP over the sparse (job or pair, type) columns solved by
HiGHS directly) and "cvxpy", which tests check agree. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, PackedPairs, Problem
from slurm_hetsched.core.policies.base import SolverPolicy
from slurm_hetsched.core.policies.makespan import makespan_s
from slurm_hetsched.core.policies.rates import effective_throughput, equal_share_rate
from slurm_hetsched.core.policies.sharing import (
    SharingLayout,
    clean_shared,
    pair_throughput,
    solve_shared_rate_cvxpy,
    solve_shared_rate_lp,
)
from slurm_hetsched.core.throughput import ThroughputTable

__all__ = [
    "MaxMinFairnessPacked",
    "MaxMinFairnessPerfPacked",
    "MinTotalDurationPacked",
    "MinTotalDurationPerfPacked",
    "SharingLayout",
    "clean_shared",
    "packed_pairs_from_table",
    "pair_throughput",
    "solve_shared_rate_cvxpy",
    "solve_shared_rate_lp",
]


def packed_pairs_from_table(
    table: ThroughputTable,
    job_classes: Sequence[str],
    num_gpus: np.ndarray,
    gpu_types: Sequence[str],
) -> PackedPairs | None:
    """Every pair of jobs (a < b) with equal num_gpus whose classes the table lists together.

    Args:
        job_classes: (n_jobs,) each job's class in the table.
        num_gpus: (n_jobs,) GPUs per job.
        gpu_types: the problem's columns; a type the table lacks counts as "cannot share".

    Returns:
        The pairs and their (n_pairs, n_types, 2) throughputs, or None if there are none.
        Quadratic in the number of jobs: meant for what-if problems and benchmarks.
    """
    pairs, tput = [], []
    known = [t for t in gpu_types if t in table.gpu_types]
    for a in range(len(job_classes)):
        for b in range(a + 1, len(job_classes)):
            if num_gpus[a] != num_gpus[b]:
                continue
            found = table.packed_pair(job_classes[a], job_classes[b], int(num_gpus[a]), known)
            if found is None:
                continue
            row = np.zeros((len(gpu_types), 2))
            for i, t in enumerate(known):
                row[list(gpu_types).index(t)] = found[i]
            pairs.append((a, b))
            tput.append(row)
    if not pairs:
        return None
    return PackedPairs(pairs=np.array(pairs), throughput=np.array(tput))


class _Packed(SolverPolicy):
    """Shared by the packed policies: both backends, the Allocation.

    Constructor (base.SolverPolicy): backend "highs" (fast) or "cvxpy"; solver: the cvxpy
    solver name (default CLARABEL).
    """

    def _solve(
        self,
        problem: Problem,
        layout: SharingLayout,
        solo_rate: np.ndarray,
        pair_rate: np.ndarray,
        weight: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, float]:
        if self.backend == "cvxpy":
            x, pair_x, solve_s = solve_shared_rate_cvxpy(
                problem, layout, solo_rate, pair_rate, weight, self.name, self.solver
            )
        else:
            rate = layout.rate_rows(solo_rate, pair_rate)
            x, pair_x, solve_s = solve_shared_rate_lp(problem, layout, rate, weight, self.name)
        x, pair_x = clean_shared(problem, layout, x, pair_x, self.name)
        return x, pair_x, solve_s

    def _allocation(
        self,
        problem: Problem,
        layout: SharingLayout,
        x: np.ndarray,
        pair_x: np.ndarray,
        objective: float,
        solve_s: float,
        solves: int = 1,
    ) -> Allocation:
        return Allocation(
            job_ids=problem.job_ids,
            gpu_types=problem.gpu_types,
            x=x,
            objective=objective,
            solve_s=solve_s,
            policy=self.name,
            solves=solves,
            pairs=tuple((problem.job_ids[a], problem.job_ids[b]) for a, b in layout.pairs),
            pair_x=pair_x,
        )


class MaxMinFairnessPerfPacked(_Packed):
    """Heterogeneity-aware max-min fairness with space sharing (pairs of jobs on one GPU)."""

    name: ClassVar[str] = "max_min_fairness_perf_packed"
    description: ClassVar[str] = (
        "max-min fairness on throughputs with space sharing: pairs of jobs may share GPUs, at "
        "their pair throughputs (Problem.packed)"
    )

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring. Raises SolverError if the solve is not optimal."""
        if (empty := self._prologue(problem)) is not None:
            return empty
        layout = SharingLayout.of(problem)
        throughput = effective_throughput(problem, agnostic=False)
        scale = problem.num_gpus / equal_share_rate(problem, throughput)  # (n_jobs,)
        solo = scale[:, None] * throughput
        pair = pair_throughput(problem, layout) * scale[layout.pairs][:, None, :]
        x, pair_x, solve_s = self._solve(problem, layout, solo, pair, problem.weight)
        level = layout.job_rates(x, pair_x, solo, pair) / problem.weight
        return self._allocation(problem, layout, x, pair_x, float(level.min()), solve_s)


class MaxMinFairnessPacked(MaxMinFairnessPerfPacked):
    """Gavel's name for max_min_fairness_perf_packed."""

    name: ClassVar[str] = "max_min_fairness_packed"
    description: ClassVar[str] = "Gavel's name for max_min_fairness_perf_packed (same policy)"


class MinTotalDurationPerfPacked(_Packed):
    """Heterogeneity-aware minimum makespan with space sharing."""

    name: ClassVar[str] = "min_total_duration_perf_packed"
    description: ClassVar[str] = (
        "minimum makespan on throughputs with space sharing: pairs of jobs may share GPUs, at "
        "their pair throughputs (needs steps)"
    )

    def allocate(self, problem: Problem) -> Allocation:
        """See the module docstring.

        Raises:
            InvalidProblemError: the problem has no `steps`.
            SolverError: the solve did not end optimal.
        """
        if (empty := self._prologue(problem)) is not None:
            return empty
        steps = problem.require("steps", self.name)
        layout = SharingLayout.of(problem)
        solo = effective_throughput(problem, agnostic=False)
        pair = pair_throughput(problem, layout)
        if not np.any(steps > 0):
            x = np.zeros((problem.n_jobs, problem.n_types))
            pair_x = np.zeros((len(layout.pairs), problem.n_types))
            return self._allocation(problem, layout, x, pair_x, 0.0, 0.0, solves=0)
        x, pair_x, solve_s = self._solve(problem, layout, solo, pair, steps / steps.max())
        objective = makespan_s(steps, layout.job_rates(x, pair_x, solo, pair))
        return self._allocation(problem, layout, x, pair_x, objective, solve_s)


class MinTotalDurationPacked(MinTotalDurationPerfPacked):
    """Gavel's name for min_total_duration_perf_packed."""

    name: ClassVar[str] = "min_total_duration_packed"
    description: ClassVar[str] = "Gavel's name for min_total_duration_perf_packed (same policy)"
