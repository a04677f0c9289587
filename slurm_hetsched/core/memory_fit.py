"""Memory fit: a job never goes where it cannot fit.

A job's need (`Job.mem_gib`: the larger of its spec's `mem=` and the peak its own progress
reports measured) rules out every GPU type whose memory (`GpuType.mem_gib` of the site's
catalog) is smaller. A type without a known memory size is never ruled out, and neither is
any type for a job without a known need: with nothing to go by, the job may try.

The problem zeroes the job's throughput on the types ruled out (core/problem.py), so no policy
gives it time there; the round mechanism never fills them with it (core/mechanism.py) and the
tick lets it wait while only such types have room (rounds/tick.py). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from slurm_hetsched.core.model import Allocation, GpuType, Job


def too_small(
    need_gib: float | None, gpu_types: Sequence[str], catalog: Mapping[str, GpuType]
) -> np.ndarray:
    """(len(gpu_types),) bool: the type's memory is known and below `need_gib` (None: no
    need known, nothing ruled out)."""
    if need_gib is None:
        return np.zeros(len(gpu_types), dtype=bool)
    return _sizes(gpu_types, catalog) < need_gib  # NaN (unknown size) compares False


def misfits(
    jobs: Sequence[Job], gpu_types: Sequence[str], catalog: Mapping[str, GpuType]
) -> np.ndarray:
    """(len(jobs), len(gpu_types)) bool: `too_small` for each job's `mem_gib`, row by row."""
    needs = np.array([math.nan if job.mem_gib is None else job.mem_gib for job in jobs])
    sizes = _sizes(gpu_types, catalog)
    return np.asarray(needs.reshape(-1, 1) > sizes.reshape(1, -1))  # NaN compares False


def gives_time_where_too_small(
    allocation: Allocation, jobs: Sequence[Job], catalog: Mapping[str, GpuType]
) -> bool:
    """Whether `allocation` gives some job of `jobs` (by key) time on a type now too small
    for it: its need grew since (a new peak, an edited `mem=`), so the allocation is stale."""
    with_need = {job.key: job for job in jobs if job.mem_gib is not None}
    rows = [m for m, key in enumerate(allocation.job_ids) if key in with_need]
    if not rows:
        return False
    small = misfits([with_need[allocation.job_ids[m]] for m in rows], allocation.gpu_types, catalog)
    return bool((allocation.x[rows] > 0)[small].any())


def _sizes(gpu_types: Sequence[str], catalog: Mapping[str, GpuType]) -> np.ndarray:
    """GiB per type in `gpu_types` order; NaN where the catalog gives none."""
    sizes = [getattr(catalog.get(t), "mem_gib", None) for t in gpu_types]
    return np.array([math.nan if s is None else s for s in sizes], dtype=float)
