"""Symmetry reduction: jobs a policy cannot tell apart are solved as one group.

Two jobs with the same normalized rate row, GPU count, weight and (for hierarchical
policies) account and FIFO position are interchangeable in the max-min LPs. The LPs are convex
and invariant under swapping such jobs, so averaging any optimal solution over the swaps gives
an optimal solution in which they all get the same row; solving for one row per group (with
the group's size multiplying its capacity use) therefore finds the same optimum with far fewer
variables. Jobs drawn from a profile table share a handful of rows: 2048 jobs of Gavel's table
form at most ~80 groups per weight and account. Per-job online rescaling keeps jobs of a class
together, because a normalized row does not change when the whole throughput row is scaled.

No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Rows equal to this many significant bits are treated as equal (about 12 decimal digits),
# so floating-point noise from per-job rescaling does not split a group.
_MANTISSA_BITS = 40


@dataclass(frozen=True, slots=True)
class JobGroups:
    """A partition of the jobs into interchangeable groups.

    Attributes:
        of_job: (n_jobs,) group index of each job.
        representative: (n_groups,) one member job (the first in problem order) per group.
        size: (n_groups,) members per group.
    """

    of_job: np.ndarray  # (n_jobs,) int
    representative: np.ndarray  # (n_groups,) int
    size: np.ndarray  # (n_groups,) int

    @property
    def n_groups(self) -> int:
        return len(self.size)

    def expand(self, per_group: np.ndarray) -> np.ndarray:
        """Per-group values (n_groups, ...) -> per-job values (n_jobs, ...)."""
        return np.asarray(per_group[self.of_job])


def group_jobs(features: np.ndarray) -> JobGroups:
    """Group jobs whose feature rows are equal (to ~12 significant digits).

    Args:
        features: (n_jobs, n_features) everything the policy's LP sees of a job.

    Returns:
        The grouping; groups are numbered by first appearance, so it is deterministic.
    """
    n = features.shape[0]
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return JobGroups(of_job=empty, representative=empty, size=empty)
    mantissa, exponent = np.frexp(features)
    key = np.ldexp(np.round(np.ldexp(mantissa, _MANTISSA_BITS)), exponent).reshape(n, -1)
    # Equal rows end up next to each other in lexicographic order (a stable sort, so each
    # run starts with its first job); a few times faster than np.unique(axis=0) on small
    # problems, which the simulator solves thousands of times.
    order = np.lexsort(key.T[::-1])
    ranked = key[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = (ranked[1:] != ranked[:-1]).any(axis=1)
    first = order[starts]  # first job of each group, groups in sorted order
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(starts) - 1
    # Renumber groups in order of first appearance.
    by_first = np.argsort(first, kind="stable")
    renumber = np.empty_like(by_first)
    renumber[by_first] = np.arange(len(by_first))
    of_job = renumber[inverse]
    return JobGroups(
        of_job=of_job,
        representative=np.sort(first),
        size=np.bincount(of_job, minlength=len(first)),
    )
