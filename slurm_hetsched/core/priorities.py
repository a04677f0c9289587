"""Gavel's priorities and the reset rule: how much each job is owed on each GPU type.

`compute_priorities` is the formula (allocated fraction / share of the type's time received);
`advance` applies the reset rule when a new allocation comes (the deficit of the period is
kept, the received time zeroed, at most once per minimum interval) and re-indexes the round
state to the allocation's jobs and types. docs/mechanism.md, "Priorities" and "Resetting the
received time".

Pure: the time is an argument.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from slurm_hetsched.core.model import Allocation, RoundState


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


def advance(
    allocation: Allocation, state: RoundState, now_s: float, min_reset_interval_s: float
) -> tuple[RoundState, bool]:
    """Apply the reset rule, then re-index the state to the allocation's jobs and types.

    A reset happens when the allocation differs from the state's (or one is still pending)
    and the last reset is at least `min_reset_interval_s` old (or there was none). It first adds
    each job's deficit for the period (allocated share of the elapsed time minus the time
    received), then zeroes the received time.
    """
    changed = state.allocation is None or not same_allocation(state.allocation, allocation)
    pending = state.reset_pending or changed
    due = state.last_reset_s is None or now_s - state.last_reset_s >= min_reset_interval_s
    reset = pending and due
    received, deficit = state.received_s, state.deficit_s
    last_reset_s = state.last_reset_s
    if reset:
        if state.allocation is not None and state.last_reset_s is not None:
            elapsed_s = max(0.0, now_s - state.last_reset_s)
            old = state.allocation
            x_old = align(old.x, old.job_ids, old.gpu_types, state.job_ids, state.gpu_types)
            deficit = deficit + x_old * elapsed_s - received
        received = np.zeros_like(received)
        last_reset_s = now_s
    if not reset and state.allocation is allocation:
        # The usual round: the state already realises this very allocation (it was indexed
        # by it, and only its jobs were placed since), so there is nothing to re-index.
        return state, False
    new_rows, new_cols = allocation.job_ids, allocation.gpu_types
    still_allocated = set(new_rows)
    advanced = dataclasses.replace(
        state,
        job_ids=new_rows,
        gpu_types=new_cols,
        received_s=align(received, state.job_ids, state.gpu_types, new_rows, new_cols),
        deficit_s=align(deficit, state.job_ids, state.gpu_types, new_rows, new_cols),
        allocation=allocation,
        placements={j: p for j, p in state.placements.items() if j in still_allocated},
        last_reset_s=last_reset_s,
        reset_pending=pending and not reset,
    )
    return advanced, reset


def same_allocation(a: Allocation, b: Allocation) -> bool:
    """The same fractions for the same jobs and types, in whatever row and column order."""
    if a is b:  # the usual case: the allocation was not recomputed this round
        return True
    if set(a.job_ids) != set(b.job_ids) or set(a.gpu_types) != set(b.gpu_types):
        return False
    a_x = align(a.x, a.job_ids, a.gpu_types, b.job_ids, b.gpu_types)
    return bool(np.allclose(a_x, b.x, rtol=0.0, atol=1e-9))


def align(
    values: np.ndarray,
    rows: Sequence[str],
    cols: Sequence[str],
    new_rows: Sequence[str],
    new_cols: Sequence[str],
) -> np.ndarray:
    """`values` re-indexed by name to (new_rows, new_cols); zeros where a name is new
    (`values` itself where nothing moves: callers never write into it)."""
    if tuple(rows) == tuple(new_rows) and tuple(cols) == tuple(new_cols):
        return values
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
