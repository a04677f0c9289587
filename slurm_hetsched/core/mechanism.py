"""The round mechanism (Gavel, OSDI'20, section 5): one round's placement from an allocation.

A policy says which fraction of time each job should spend on each GPU type (`Allocation.x`).
Rounds of fixed length realise it: each round, every (job, GPU type) entry gets the priority
allocation / share of the type's time received so far, jobs are chosen greedily in priority
order (one GPU type per job per round, capacity never exceeded), and the chosen jobs are placed
on nodes: the GPUs a job already holds are kept (lease extension), then the largest jobs first,
all GPUs on one node when one node can hold them, else spread over nodes of the one type.

`plan_round` decides a round; `record_round` adds the seconds each placed job actually ran. The
simulator and the controller both call exactly these two, so they keep identical state.
`RoundOptions` holds the choices Gavel's code makes one way and a site may make another: one
queue per GPU type (fastest type first) or one global queue, and whether GPUs left idle are
filled with jobs allocated nothing there (work conservation).

Pure: no I/O, no clock (the time is the snapshot's `now_s`); the only randomness (the
agnostic policies' shuffled type order) is drawn from the options' seed and the round number,
so the same inputs give the same plan. docs/mechanism.md describes the rules and the caller's
duties.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from slurm_hetsched.core.amortize import MoveCase, hold_reason, move_rates, restart_cost_s
from slurm_hetsched.core.model import (
    Allocation,
    ClusterSnapshot,
    GpuSlice,
    InvalidProblemError,
    Job,
    Node,
    Placement,
    RoundPlan,
    RoundState,
)
from slurm_hetsched.core.throughput import ThroughputTable, UnknownJobClassError

# Gavel's `minimum_time_between_allocation_resets` (scheduler.py): a new allocation resets the
# received time at most this often, so the shares keep a long enough history to steer by.
GAVEL_MIN_RESET_INTERVAL_S = 1920.0

QUEUES = ("per_type", "global")
# "amortized": a running job is moved or stopped only when the move pays for its restart
# (docs/mechanism.md, "Moves that pay for themselves"); "plain": Gavel's mechanism as it is.
MOVES = ("amortized", "plain")
# The restart cost of a job that reports none (`Job.restart_s` is None): the dev cluster's
# signal-to-training-again is ~8 s, published checkpoint-restores of real models 25-250 s.
DEFAULT_RESTART_S = 30.0
# The largest share of a job's time on GPUs that restarts may take under "amortized".
DEFAULT_RESTART_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class RoundOptions:
    """How `plan_round` walks the (job, GPU type) entries (docs/mechanism.md).

    Attributes:
        queue: "per_type" (Gavel's code): the types one after the other, each type's entries
            in priority order, so a type's GPUs go to the jobs with the highest priority on
            that type; "global": one queue over every type by priority (the paper's wording).
        type_order: per-type walk order, first type first. Types not listed follow, fastest
            first by the throughput table when `plan_round` gets one, else by name. () (the
            default) lets the table decide: Gavel's v100, p100, k80 for its table.
        shuffle: walk the types in a random order each round instead (Gavel does this for its
            heterogeneity-agnostic policies, which must not prefer a type); drawn from `seed`
            and the round number, so plans stay reproducible.
        seed: seed of the shuffled order.
        work_conserving: after a type's entries with an allocation, hand its GPUs still free to
            jobs that can run there (by the throughput table) but were allocated 0 on it,
            highest deficit first, as Gavel's code does for every policy but FIFO. Needs the
            table (`plan_round(table=...)`): without it the mechanism cannot tell "allocated 0"
            from "cannot run" and fills nothing.
        moves: "amortized" (the default): a job that runs is moved or stopped only once its
            restart cost is paid for (docs/mechanism.md); "plain": every round as Gavel does.
        restart_s: the restart cost of a job whose `Job.restart_s` is None, in seconds.
        restart_share: under "amortized", the largest share of a job's time on GPUs that its
            restarts may take (0 < share <= 1).
    """

    queue: str = "per_type"
    type_order: tuple[str, ...] = ()
    shuffle: bool = False
    seed: int = 0
    work_conserving: bool = True
    moves: str = "amortized"
    restart_s: float = DEFAULT_RESTART_S
    restart_share: float = DEFAULT_RESTART_SHARE

    def __post_init__(self) -> None:
        if self.queue not in QUEUES:
            raise InvalidProblemError(
                f"round options: queue {self.queue!r}; expected one of {list(QUEUES)}"
            )
        if self.moves not in MOVES:
            raise InvalidProblemError(
                f"round options: moves {self.moves!r}; expected one of {list(MOVES)}"
            )
        if not (math.isfinite(self.restart_s) and self.restart_s >= 0):
            raise InvalidProblemError(
                f"round options: restart_s {self.restart_s}; expected seconds >= 0"
            )
        if not 0 < self.restart_share <= 1:
            raise InvalidProblemError(
                f"round options: restart_share {self.restart_share}; expected 0 < share <= 1"
            )
        object.__setattr__(self, "type_order", tuple(self.type_order))
        if len(set(self.type_order)) != len(self.type_order):
            raise InvalidProblemError(
                f"round options: type_order {list(self.type_order)} names a type twice"
            )


def compute_priorities(x: np.ndarray, received_s: np.ndarray, round_s: float) -> np.ndarray:
    """Gavel's priorities: allocated fraction / share of the type's time received.

    The share of job m on type j is (received_s[m, j] + p) / (sum over jobs of received_s[:, j]
    + n_jobs * p) with p = round_s / 2: like Gavel, every job starts each reset period with half
    a round on every type, so a job that has received nothing yet has a small but non-zero
    share (high, finite priority, scaled by its allocation) instead of a division by zero.

    Args:
        x: (n_jobs, n_types) allocated time fractions.
        received_s: (n_jobs, n_types) seconds received since the last reset.
        round_s: the round length in seconds, > 0.

    Returns:
        (n_jobs, n_types) priorities; 0 where the allocation is 0 (never scheduled there).
    """
    n_jobs = x.shape[0]
    if n_jobs == 0:
        return np.zeros(x.shape)
    prior_s = round_s / 2.0
    share = (received_s + prior_s) / (received_s.sum(axis=0) + n_jobs * prior_s)
    return np.where(x > 0, x / share, 0.0)


def plan_round(
    allocation: Allocation,
    state: RoundState,
    snapshot: ClusterSnapshot,
    round_s: float,
    *,
    min_reset_interval_s: float = GAVEL_MIN_RESET_INTERVAL_S,
    options: RoundOptions = RoundOptions(),
    table: ThroughputTable | None = None,
) -> tuple[RoundPlan, RoundState]:
    """Decide the next round: which jobs run, on which GPUs of which nodes.

    Args:
        allocation: the allocation to realise; its jobs must all be in `snapshot.jobs` (their
            `num_gpus` is read there). Space sharing (`pair_x` > 0) is not supported. An
            allocation with `placements` (ANDREAS, the exclusive baselines) is taken as it is:
            exactly those jobs run, on exactly those GPUs (checked against the free GPUs).
        state: the state `plan_round`/`record_round` returned last (or `RoundState.initial`).
        snapshot: the cluster now: `now_s`, the nodes (free GPUs = GPUs - `gpus_in_use` on
            available nodes; GPUs held by our own jobs must not count as in use) and the jobs.
        round_s: the round length in seconds, > 0.
        min_reset_interval_s: a changed allocation resets the received time only if at least
            this long has passed since the last reset (else the reset waits); 0 resets at
            every change.
        options: queue, type order, work conservation (`RoundOptions`).
        table: the throughput table: where each job can run (work conservation) and which
            types are fastest (the default per-type order). None: no filling, types by name.

    Returns:
        The plan (keep / move / start / stop) and the next state: round + 1, this allocation,
        the new placements, received time re-indexed to the allocation's jobs and types (and
        reset if due). Nothing is added for the round itself: call `record_round` after it.

    Raises:
        InvalidProblemError: on a non-positive round length, a negative interval, duplicate
            node names, an allocated job missing from the snapshot, or an allocation that
            shares GPUs between pairs of jobs.
    """
    _check_inputs(allocation, snapshot, round_s, min_reset_interval_s)
    last_placements = state.placements
    state, reset = _advance(allocation, state, snapshot.now_s, min_reset_interval_s)
    jobs = {job.key: job for job in snapshot.jobs}
    num_gpus = np.array([jobs[j].num_gpus for j in allocation.job_ids], dtype=np.int64)
    priority = compute_priorities(allocation.x, state.received_s, round_s)
    free = _free_gpus(snapshot.nodes, allocation.gpu_types)
    held: dict[str, str] = {}
    if allocation.placements is not None:  # the policy placed the jobs itself (ANDREAS)
        placed = _policy_placements(allocation, free)
    else:
        order = _type_order(allocation.gpu_types, options, table, state.round + 1)
        fill = None
        if options.work_conserving and table is not None:
            fill = _runnable(allocation, jobs, table) & (allocation.x <= 0)
        arrival = np.array([jobs[j].arrival_s for j in allocation.job_ids], dtype=float)
        walk = _Walk(allocation, priority, state.deficit_s, num_gpus, order, fill, arrival)
        placed = _place(walk.select(free), allocation, num_gpus, free, state.placements)
        if options.moves == "amortized":
            placed, held = _amortize(placed, walk, state, snapshot, free, round_s, options, table)

    keep: dict[str, Placement] = {}
    move: dict[str, Placement] = {}
    start: dict[str, Placement] = {}
    for job_id in sorted(placed):
        previous = state.placements.get(job_id)
        if previous is None:
            start[job_id] = placed[job_id]
        elif _same_gpus(previous, placed[job_id]):
            keep[job_id] = previous
        else:
            move[job_id] = placed[job_id]
    stop = tuple(j for j in sorted(last_placements) if j not in placed and j in jobs)
    rows = {job_id: m for m, job_id in enumerate(allocation.job_ids)}
    chosen_priority = {
        j: float(priority[rows[j], allocation.gpu_types.index(p.gpu_types[0])])
        for j, p in placed.items()
    }
    plan = RoundPlan(
        round=state.round + 1,
        keep=keep,
        move=move,
        start=start,
        stop=stop,
        priority={
            job_id: chosen_priority.get(job_id, float(priority[m].max(initial=0.0)))
            for m, job_id in enumerate(allocation.job_ids)
        },
        reset=reset,
        held=held,
    )
    placements = {**keep, **move, **start}
    placed_at_s = {
        **{j: _placed_at(state, j, snapshot.now_s, round_s) for j in keep},
        **dict.fromkeys([*move, *start], snapshot.now_s),
    }
    next_state = dataclasses.replace(
        state, round=plan.round, placements=placements, placed_at_s=placed_at_s
    )
    return plan, next_state


def record_round(state: RoundState, ran_s: Mapping[str, float]) -> RoundState:
    """Add the seconds each placed job ran in the round `state` planned.

    Args:
        state: the state `plan_round` returned for the round that just ran.
        ran_s: job id -> wall-clock seconds it ran (not GPU-seconds; less than the round if it
            finished or failed early). A placed job left out ran 0 s.

    Returns:
        The state with each job's seconds added on the GPU type it was placed on.

    Raises:
        InvalidProblemError: for a job not placed in that round, or a negative or non-finite
            number of seconds.
    """
    received = np.array(state.received_s, copy=True)
    rows = {job_id: m for m, job_id in enumerate(state.job_ids)}
    for job_id, seconds in ran_s.items():
        placement = state.placements.get(job_id)
        if placement is None:
            raise InvalidProblemError(
                f"job {job_id!r} reported {seconds} s in round {state.round} but was not placed "
                f"in it; placed: {sorted(state.placements)}"
            )
        if not (math.isfinite(seconds) and seconds >= 0):
            raise InvalidProblemError(
                f"job {job_id!r}: ran {seconds} s in round {state.round}; expected a finite "
                "number of seconds >= 0"
            )
        column = state.gpu_types.index(placement.gpu_types[0])
        received[rows[job_id], column] += seconds
    return dataclasses.replace(state, received_s=received)


# ----------------------------------------------------------------------------------------------
# Steps of plan_round


def _check_inputs(
    allocation: Allocation, snapshot: ClusterSnapshot, round_s: float, min_reset_interval_s: float
) -> None:
    if not (math.isfinite(round_s) and round_s > 0):
        raise InvalidProblemError(f"round_s {round_s}: expected a round length > 0 seconds")
    if not min_reset_interval_s >= 0:
        raise InvalidProblemError(
            f"min_reset_interval_s {min_reset_interval_s}: expected >= 0 seconds"
        )
    names = [node.name for node in snapshot.nodes]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise InvalidProblemError(f"snapshot: node names appear twice: {twice}")
    if allocation.pair_x is not None and (allocation.pair_x > 0).any():
        raise InvalidProblemError(
            f"allocation of {allocation.policy!r} shares GPUs between pairs of jobs; the round "
            "mechanism places each job alone and cannot realise it; use a policy without "
            "space sharing (not `*_packed`)"
        )
    keys = {job.key for job in snapshot.jobs}
    missing = [j for j in allocation.job_ids if j not in keys]
    if missing:
        raise InvalidProblemError(
            f"allocation has jobs that are not in the snapshot: {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''}; recompute the allocation from this snapshot"
        )


def _advance(
    allocation: Allocation, state: RoundState, now_s: float, min_reset_interval_s: float
) -> tuple[RoundState, bool]:
    """Apply the reset rule, then re-index the state to the allocation's jobs and types.

    A reset happens when the allocation differs from the state's (or one is still pending)
    and the last reset is at least `min_reset_interval_s` old (or there was none). It first adds
    each job's deficit for the period (allocated share of the elapsed time minus the time
    received), then zeroes the received time.
    """
    changed = state.allocation is None or not _same_allocation(state.allocation, allocation)
    pending = state.reset_pending or changed
    due = state.last_reset_s is None or now_s - state.last_reset_s >= min_reset_interval_s
    reset = pending and due
    received, deficit = state.received_s, state.deficit_s
    last_reset_s = state.last_reset_s
    if reset:
        if state.allocation is not None and state.last_reset_s is not None:
            elapsed_s = max(0.0, now_s - state.last_reset_s)
            old = state.allocation
            x_old = _align(old.x, old.job_ids, old.gpu_types, state.job_ids, state.gpu_types)
            deficit = deficit + x_old * elapsed_s - received
        received = np.zeros_like(received)
        last_reset_s = now_s
    new_rows, new_cols = allocation.job_ids, allocation.gpu_types
    still_allocated = set(new_rows)
    advanced = dataclasses.replace(
        state,
        job_ids=new_rows,
        gpu_types=new_cols,
        received_s=_align(received, state.job_ids, state.gpu_types, new_rows, new_cols),
        deficit_s=_align(deficit, state.job_ids, state.gpu_types, new_rows, new_cols),
        allocation=allocation,
        placements={j: p for j, p in state.placements.items() if j in still_allocated},
        last_reset_s=last_reset_s,
        reset_pending=pending and not reset,
    )
    return advanced, reset


@dataclass(frozen=True, slots=True)
class _Walk:
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
    job_rank = _ranks(allocation.job_ids)
    type_rank = _ranks(allocation.gpu_types)
    walk = np.zeros(len(allocation.gpu_types), dtype=np.int64)
    if order is not None:
        walk[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    by_order = np.lexsort(
        (
            type_rank[cols],
            job_rank[rows],
            -num_gpus[rows],
            arrival_s[rows],
            -x[rows, cols],
            -deficit_s[rows, cols],
            -priority[rows, cols],
            walk[cols],
        )
    )
    left = capacity.copy()
    smallest = int(num_gpus.min())
    taken = np.zeros(len(allocation.job_ids), dtype=bool)
    chosen: list[tuple[int, int]] = []
    for e in by_order:
        m, t = int(rows[e]), int(cols[e])
        if taken[m] or num_gpus[m] > left[t]:
            continue
        taken[m] = True
        left[t] -= num_gpus[m]
        chosen.append((m, t))
        if (left < smallest).all():
            break
    return chosen


def _type_order(
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


def _runnable(
    allocation: Allocation, jobs: Mapping[str, Job], table: ThroughputTable
) -> np.ndarray:
    """(n_jobs, n_types) bool: the table has steps/s > 0 for the job's class at its GPU count
    on the type (consolidated). Types or classes the table lacks: False (never filled)."""
    memo = _memo(table).runnable
    types = allocation.gpu_types
    columns = [table.gpu_types.index(t) if t in table.gpu_types else -1 for t in types]
    out = np.zeros((len(allocation.job_ids), len(types)), dtype=bool)
    for m, job_id in enumerate(allocation.job_ids):
        job = jobs[job_id]
        key = (job.job_class, job.num_gpus)
        row = memo.get(key)
        if row is None:
            try:
                rates = table.matrix([key], table.gpu_types)[0]
            except UnknownJobClassError:
                rates = np.zeros(len(table.gpu_types))
            row = memo[key] = rates > 0
        out[m] = [c >= 0 and bool(row[c]) for c in columns]
    return out


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


def _place(
    chosen: Sequence[tuple[int, int]],
    allocation: Allocation,
    num_gpus: np.ndarray,
    free: Mapping[str, Mapping[str, int]],
    previous: Mapping[str, Placement],
) -> dict[str, Placement]:
    """GPUs on nodes for the chosen jobs; never more than a node's free GPUs of a type.

    1. Lease extension: a job chosen on the type it ran on, with the same GPU count, keeps its
       GPUs if they are all still free (largest jobs first).
    2. The others, largest first (then in selection order): on one node if one has enough free
       GPUs of the type (the fullest such node: best fit, keeping big holes for big jobs), else
       spread over the type's nodes with the most free GPUs first (fewest nodes).
    Selection never takes more than a type's free GPUs, and step 2 may spread, so every chosen
    job gets its GPUs.
    """
    left = {t: dict(per_node) for t, per_node in free.items()}
    position = {m: i for i, (m, _) in enumerate(chosen)}
    by_size = sorted(chosen, key=lambda e: (-int(num_gpus[e[0]]), position[e[0]]))
    placed: dict[str, Placement] = {}
    for m, t in by_size:
        job_id, gpu_type, count = allocation.job_ids[m], allocation.gpu_types[t], num_gpus[m]
        held = previous.get(job_id)
        if held is None or held.gpu_types != (gpu_type,) or held.num_gpus != count:
            continue
        need: dict[str, int] = {}
        for piece in held.slices:
            need[piece.node] = need.get(piece.node, 0) + piece.count
        if all(left[gpu_type].get(node, 0) >= n for node, n in need.items()):
            for node, n in need.items():
                _take(left[gpu_type], node, n)
            placed[job_id] = held
    for m, t in by_size:
        job_id, gpu_type, count = allocation.job_ids[m], allocation.gpu_types[t], int(num_gpus[m])
        if job_id in placed:
            continue
        nodes = left[gpu_type]
        fits = [(free_n, node) for node, free_n in nodes.items() if free_n >= count]
        if fits:
            node = min(fits)[1]
            slices: tuple[GpuSlice, ...] = (GpuSlice(node, gpu_type, count),)
        else:
            pieces: list[GpuSlice] = []
            still = count
            for node in sorted(nodes, key=lambda n: (-nodes[n], n)):
                if still == 0 or nodes[node] == 0:
                    break
                take = min(still, nodes[node])
                pieces.append(GpuSlice(node, gpu_type, take))
                still -= take
            assert still == 0, f"selection over-committed {gpu_type}"  # _select guarantees it
            slices = tuple(pieces)
        for piece in slices:
            _take(nodes, piece.node, piece.count)
        placed[job_id] = Placement(job_id, slices)
    return placed


def _policy_placements(
    allocation: Allocation, free: Mapping[str, Mapping[str, int]]
) -> dict[str, Placement]:
    """The placements a placement policy chose, checked against the free GPUs of the nodes."""
    assert allocation.placements is not None
    left = {t: dict(per_node) for t, per_node in free.items()}
    placed: dict[str, Placement] = {}
    for job_id in sorted(allocation.placements):
        placement = allocation.placements[job_id]
        if job_id not in allocation.job_ids or len(placement.gpu_types) != 1:
            raise InvalidProblemError(
                f"policy {allocation.policy!r} placed job {job_id!r} on "
                f"{placement.gpu_types}; expected a job of the allocation on one GPU type"
            )
        for piece in placement.slices:
            if left.get(piece.gpu_type, {}).get(piece.node, 0) < piece.count:
                raise InvalidProblemError(
                    f"policy {allocation.policy!r} placed job {job_id!r} on {piece.count} "
                    f"{piece.gpu_type} GPUs of node {piece.node!r}, more than are free there"
                )
            _take(left[piece.gpu_type], piece.node, piece.count)
        placed[job_id] = placement
    return placed


def _amortize(
    placed: dict[str, Placement],
    walk: _Walk,
    state: RoundState,
    snapshot: ClusterSnapshot,
    free: Mapping[str, Mapping[str, int]],
    round_s: float,
    options: RoundOptions,
    table: ThroughputTable | None,
) -> tuple[dict[str, Placement], dict[str, str]]:
    """Amortized moves (core/amortize.py): the running jobs the plain plan `placed` would move
    or stop stay on their GPUs when a rule says so; the rest of the round is chosen again, by
    the same walk, on the GPUs left. Only the plain plan's moves and stops are undone and every
    job it kept stays, so a round never interrupts more running jobs than the plain plan.

    Returns the placements and job -> why it was held.
    """
    allocation = walk.allocation
    jobs = {job.key: job for job in snapshot.jobs}
    rows = {job_id: m for m, job_id in enumerate(allocation.job_ids)}
    kept = {
        j: p
        for j, p in placed.items()
        if j in state.placements and _same_gpus(state.placements[j], p)
    }
    left = _without(free, kept.values())
    held: dict[str, str] = {}
    for job_id, current in sorted(state.placements.items()):
        if job_id in kept or not _may_stay(walk, rows[job_id], current, jobs[job_id], left):
            continue
        job = jobs[job_id]
        rate_now, rate_next = move_rates(job, current, placed.get(job_id), table)
        case = MoveCase(
            stayed_s=snapshot.now_s - _placed_at(state, job_id, snapshot.now_s, round_s),
            restart_s=restart_cost_s(job, options.restart_s),
            rate_now=rate_now,
            rate_next=rate_next,
            steps_remaining=job.steps_remaining,
            round_s=round_s,
        )
        reason = hold_reason(case, options.restart_share)
        if reason is not None:
            held[job_id] = reason
            left = _without(left, [current])
    if not held:
        return placed, {}
    pinned = {**kept, **{j: state.placements[j] for j in held}}
    again = walk.select(left, frozenset(rows[j] for j in pinned))
    return {**pinned, **_place(again, allocation, walk.num_gpus, left, state.placements)}, held


def _may_stay(
    walk: _Walk, row: int, current: Placement, job: Job, left: Mapping[str, Mapping[str, int]]
) -> bool:
    """A running job can be held on its GPUs: they are all still free, it uses as many GPUs as
    then, and the allocation gives it time on that type (or lets it fill idle GPUs there)."""
    gpu_type = current.gpu_types[0]
    column = (
        walk.allocation.gpu_types.index(gpu_type) if gpu_type in walk.allocation.gpu_types else -1
    )
    if column < 0 or current.num_gpus != job.num_gpus or len(current.gpu_types) != 1:
        return False
    wanted = walk.allocation.x[row, column] > 0 or (
        walk.fill is not None and bool(walk.fill[row, column])
    )
    need: dict[str, int] = {}
    for piece in current.slices:
        need[piece.node] = need.get(piece.node, 0) + piece.count
    return wanted and all(left.get(gpu_type, {}).get(n, 0) >= c for n, c in need.items())


def _placed_at(state: RoundState, job_id: str, now_s: float, round_s: float) -> float:
    """When the job's current placement began; a state that does not know (recorded before
    amortized moves) counts it from the last round, the shortest stay it can have had."""
    return state.placed_at_s.get(job_id, now_s - round_s)


def _without(
    free: Mapping[str, Mapping[str, int]], placements: Iterable[Placement]
) -> dict[str, dict[str, int]]:
    """The free GPUs once `placements` (which fit in them) have taken theirs."""
    left = {t: dict(per_node) for t, per_node in free.items()}
    for placement in placements:
        for piece in placement.slices:
            _take(left[piece.gpu_type], piece.node, piece.count)
    return left


# ----------------------------------------------------------------------------------------------
# Helpers


def _take(free: dict[str, int], node: str, count: int) -> None:
    """Use `count` GPUs of `node`; a node with none left is dropped (shorter scans)."""
    free[node] -= count
    if free[node] == 0:
        del free[node]


def _free_gpus(nodes: Sequence[Node], gpu_types: Sequence[str]) -> dict[str, dict[str, int]]:
    """GPU type -> node -> GPUs we may use (0 on unavailable nodes, minus outside use)."""
    return {
        t: {node.name: node.free_gpus(t) for node in nodes if node.free_gpus(t) > 0}
        for t in gpu_types
    }


def _same_allocation(a: Allocation, b: Allocation) -> bool:
    """The same fractions for the same jobs and types, in whatever row and column order."""
    if set(a.job_ids) != set(b.job_ids) or set(a.gpu_types) != set(b.gpu_types):
        return False
    a_x = _align(a.x, a.job_ids, a.gpu_types, b.job_ids, b.gpu_types)
    return bool(np.allclose(a_x, b.x, rtol=0.0, atol=1e-9))


def _same_gpus(a: Placement, b: Placement) -> bool:
    def key(p: Placement) -> list[tuple[str, str, int]]:
        return sorted((s.node, s.gpu_type, s.count) for s in p.slices)

    return key(a) == key(b)


def _align(
    values: np.ndarray,
    rows: Sequence[str],
    cols: Sequence[str],
    new_rows: Sequence[str],
    new_cols: Sequence[str],
) -> np.ndarray:
    """`values` re-indexed by name to (new_rows, new_cols); zeros where a name is new."""
    out = np.zeros((len(new_rows), len(new_cols)))
    row_at = {r: i for i, r in enumerate(rows)}
    col_at = {c: j for j, c in enumerate(cols)}
    src_r = [row_at[r] for r in new_rows if r in row_at]
    dst_r = [i for i, r in enumerate(new_rows) if r in row_at]
    src_c = [col_at[c] for c in new_cols if c in col_at]
    dst_c = [j for j, c in enumerate(new_cols) if c in col_at]
    if src_r and src_c:
        out[np.ix_(dst_r, dst_c)] = values[np.ix_(src_r, src_c)]
    return out


def _ranks(names: Sequence[str]) -> np.ndarray:
    """Rank of each name in sorted order (ties cannot occur: names are unique)."""
    ranks = np.empty(len(names), dtype=np.int64)
    ranks[np.argsort(np.array(names, dtype=object), kind="stable")] = np.arange(len(names))
    return ranks
