"""Choosing the round's jobs: Gavel's greedy walk over (job, GPU type) entries by priority.

`Walk` holds what the walk goes by for one round (priorities, deficits, GPU counts, the type
order, the entries work conservation may fill, arrivals); `Walk.select` takes entries in
order while the type has room, one type per job. `walk_order` is the per-type queue's order
of the types (listed first, then fastest first by the throughput table, or shuffled for the
agnostic policies), `type_speeds` the speed score it sorts by, and `runnable` where the table
lets a job run (the entries work conservation may fill). docs/mechanism.md, "Choosing the
jobs".

Pure; what is derived from a throughput table is memoized by the table's identity (a table
never changes once built), which changes no result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from slurm_hetsched.core.model import Allocation, Job
from slurm_hetsched.core.round_options import RoundOptions
from slurm_hetsched.core.throughput import ThroughputTable, UnknownJobClassError


@dataclass(frozen=True, slots=True)
class Walk:
    """What the greedy choice walks by, fixed for the round; `select` runs it on free GPUs."""

    allocation: Allocation
    priority: np.ndarray
    deficit_s: np.ndarray
    num_gpus: np.ndarray
    order: Sequence[int] | None
    fill: np.ndarray | None
    arrival_s: np.ndarray

    def select(
        self, free: Mapping[str, Mapping[str, int]], skip: frozenset[int] = frozenset()
    ) -> list[tuple[int, int]]:
        return _select(
            self.allocation,
            self.priority,
            self.deficit_s,
            self.num_gpus,
            free,
            self.order,
            self.fill,
            self.arrival_s,
            skip,
        )


def _select(
    allocation: Allocation,
    priority: np.ndarray,
    deficit_s: np.ndarray,
    num_gpus: np.ndarray,
    free: Mapping[str, Mapping[str, int]],
    order: Sequence[int] | None,
    fill: np.ndarray | None,
    arrival_s: np.ndarray,
    skip: frozenset[int] = frozenset(),
) -> list[tuple[int, int]]:
    """Greedy choice of (job row, type column) pairs in priority order (Gavel's Algorithm 1).

    The entries are every (job, type) with an allocation > 0, plus, with `fill` (work
    conservation), the (job, type) entries it marks (priority 0). With `order` (a per-type
    queue) the types come one after the other in that order, each with its entries sorted;
    without it (global queue) all entries are sorted together. The sort: priority, then
    Gavel's tie-breakers deficit and allocation, then earlier arrival (Gavel's queue order),
    then larger jobs first, then job id and type name (so the result does not depend on row or
    node order). An entry is taken if the job is not chosen yet and its type still has
    `num_gpus` free GPUs in all; otherwise the walk goes on with the next entry. Rows in
    `skip` (jobs already placed) are passed over.
    """
    x = allocation.x
    capacity = np.array([sum(free[t].values()) for t in allocation.gpu_types], dtype=np.int64)
    eligible = x > 0
    if fill is not None:
        eligible = eligible | fill
    eligible &= num_gpus[:, None] <= capacity[None, :]
    if skip:
        eligible[sorted(skip)] = False
    rows, cols = np.nonzero(eligible)
    if rows.size == 0:
        return []
    row_rank = _row_rank(allocation, num_gpus, arrival_s)
    type_rank = _derived(allocation, "type_rank", lambda: _ranks(allocation.gpu_types))
    walk = np.zeros(len(allocation.gpu_types), dtype=np.int64)
    if order is not None:
        walk[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    by_order = np.lexsort(
        (
            type_rank[cols],
            row_rank[rows],
            -x[rows, cols],
            -deficit_s[rows, cols],
            -priority[rows, cols],
            walk[cols],
        )
    )
    # The walk itself in plain Python lists: it visits entries one by one.
    left = capacity.tolist()
    gpus = num_gpus.tolist()
    smallest = min(gpus)
    open_types = sum(1 for room in left if room >= smallest)  # types that can take a job
    taken = [False] * len(gpus)
    chosen: list[tuple[int, int]] = []
    for m, t in zip(rows[by_order].tolist(), cols[by_order].tolist(), strict=True):
        if taken[m] or gpus[m] > left[t]:
            continue
        taken[m] = True
        before = left[t]
        left[t] -= gpus[m]
        chosen.append((m, t))
        if before >= smallest > left[t]:
            open_types -= 1
            if open_types == 0:
                break
    return chosen


def walk_order(
    gpu_types: Sequence[str], options: RoundOptions, table: ThroughputTable | None, round_: int
) -> list[int] | None:
    """Column indices in the order a per-type queue walks them; None for the global queue."""
    if options.queue == "global":
        return None
    listed = [t for t in options.type_order if t in gpu_types]
    rest = sorted(t for t in gpu_types if t not in listed)
    if table is not None:
        speed = type_speeds(table, rest)
        rest = sorted(rest, key=lambda t: (-speed.get(t, 0.0), t))
    names = listed + rest
    if options.shuffle:
        rng = np.random.default_rng([options.seed, round_])
        names = [names[i] for i in rng.permutation(len(names))]
    return [list(gpu_types).index(t) for t in names]


def type_speeds(table: ThroughputTable, gpu_types: Sequence[str]) -> dict[str, float]:
    """A speed score per GPU type: over every (class, GPU count) of the table that runs on
    at least one of `gpu_types`, the mean of its steps/s there divided by its best steps/s
    among them (1 = always the fastest; types the table lacks score 0).

    Sorting by it, highest first, gives Gavel's hard-coded v100, p100, k80 for Gavel's table.
    """
    memo = _memo(table).speed
    key = tuple(gpu_types)
    if key not in memo:
        memo[key] = _speed_scores(table, key)
    return dict(memo[key])


def _speed_scores(table: ThroughputTable, gpu_types: tuple[str, ...]) -> dict[str, float]:
    known = [t for t in gpu_types if t in table.gpu_types]
    if not known or not table.rows:
        return dict.fromkeys(gpu_types, 0.0)
    columns = [table.gpu_types.index(t) for t in known]
    rates = np.array([row[columns] for row in table.rows.values()])  # (n_rows, n_known)
    best = rates.max(axis=1)
    useful = best > 0
    if not useful.any():
        return dict.fromkeys(gpu_types, 0.0)
    relative = rates[useful] / best[useful, None]
    score = dict(zip(known, relative.mean(axis=0).tolist(), strict=True))
    return {t: float(score.get(t, 0.0)) for t in gpu_types}


def runnable(allocation: Allocation, jobs: Mapping[str, Job], table: ThroughputTable) -> np.ndarray:
    """(n_jobs, n_types) bool: the table has steps/s > 0 for the job's class at its GPU count
    on the type (consolidated). Types or classes the table lacks: False (never filled)."""
    held, mask = _derived(
        allocation, "runnable", lambda: (table, _runnable(allocation, jobs, table))
    )
    return mask if held is table else _runnable(allocation, jobs, table)


def _runnable(
    allocation: Allocation, jobs: Mapping[str, Job], table: ThroughputTable
) -> np.ndarray:
    memo = _memo(table).runnable
    types = allocation.gpu_types
    columns = np.array([table.gpu_types.index(t) if t in table.gpu_types else -1 for t in types])
    keys = [(jobs[job_id].job_class, jobs[job_id].num_gpus) for job_id in allocation.job_ids]
    distinct = list(dict.fromkeys(keys))
    rows = np.zeros((len(distinct), len(table.gpu_types) + 1), dtype=bool)  # last: "no column"
    for i, key in enumerate(distinct):
        row = memo.get(key)
        if row is None:
            try:
                rates = table.matrix([key], table.gpu_types)[0]
            except UnknownJobClassError:
                rates = np.zeros(len(table.gpu_types))
            row = memo[key] = rates > 0
        rows[i, :-1] = row
    index = {key: i for i, key in enumerate(distinct)}
    which = np.fromiter((index[key] for key in keys), dtype=np.int64, count=len(keys))
    return np.asarray(rows[which][:, columns])  # column -1 is the all-False "no column"


@dataclass(slots=True)
class _TableMemo:
    """What the mechanism derives from one (immutable) throughput table, kept across rounds."""

    table: ThroughputTable
    speed: dict[tuple[str, ...], dict[str, float]]
    runnable: dict[tuple[str, int], np.ndarray]


_MEMOS: list[_TableMemo] = []  # the few tables seen last, most recent last


def _memo(table: ThroughputTable) -> _TableMemo:
    """The memo of `table` (by identity: a table never changes once built)."""
    for memo in _MEMOS:
        if memo.table is table:
            return memo
    memo = _TableMemo(table, {}, {})
    _MEMOS.append(memo)
    del _MEMOS[:-4]
    return memo


# What the rounds derive from one allocation, kept while it stays in force (most rounds
# reuse the last allocation): the last few allocations, by identity, most recent last. Each
# holds its allocation, so an id is never reused while cached.
_BY_ALLOCATION: list[tuple[Allocation, dict[str, Any]]] = []


def _derived(allocation: Allocation, what: str, compute: Callable[[], Any]) -> Any:
    """`compute()`, once per allocation (and per `what`); the result must depend only on the
    allocation and on what never changes for its jobs (class, GPU count, the table)."""
    found = [values for held, values in _BY_ALLOCATION if held is allocation]
    if found:
        values = found[0]
    else:
        values = {}
        _BY_ALLOCATION.append((allocation, values))
        del _BY_ALLOCATION[:-2]
    if what not in values:
        value = compute()
        for array in value if isinstance(value, tuple) else (value,):
            if isinstance(array, np.ndarray):
                array.flags.writeable = False  # shared by the rounds that follow
        values[what] = value
    return values[what]


def gpus_and_arrivals(
    allocation: Allocation, jobs: Mapping[str, Job]
) -> tuple[np.ndarray, np.ndarray]:
    """Each allocated job's GPU count (int64) and arrival time, in row order (derived once per
    allocation: neither ever changes for a job; read-only)."""
    found: tuple[np.ndarray, np.ndarray] = _derived(
        allocation,
        "gpus_and_arrivals",
        lambda: (
            np.array([jobs[j].num_gpus for j in allocation.job_ids], dtype=np.int64),
            np.array([jobs[j].arrival_s for j in allocation.job_ids], dtype=float),
        ),
    )
    return found


def _row_rank(allocation: Allocation, num_gpus: np.ndarray, arrival_s: np.ndarray) -> np.ndarray:
    """The tie-breakers of a job's own (earlier arrival, more GPUs, then job id) as one rank
    per row: one sort key instead of three. Kept per allocation while the jobs' arrivals and
    GPU counts are the same (they never change for a job)."""
    held = _derived(allocation, "row_rank", lambda: [None, None, None])
    if not (np.array_equal(held[0], arrival_s) and np.array_equal(held[1], num_gpus)):
        order = np.lexsort((_ranks(allocation.job_ids), -num_gpus, arrival_s))
        held[:] = [arrival_s.copy(), num_gpus.copy(), _ranks_of(order)]
    rank: np.ndarray = held[2]
    return rank


def _ranks(names: Sequence[str]) -> np.ndarray:
    """Rank of each name in sorted order (ties cannot occur: names are unique)."""
    return _ranks_of(np.argsort(np.array(names, dtype=object), kind="stable"))


def _ranks_of(order: np.ndarray) -> np.ndarray:
    """Rank of each index in `order`, a permutation."""
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.arange(len(order))
    return ranks
