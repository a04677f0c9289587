"""Gandiva_fair (Chaudhary, Ramjee, Sivathanu, Kwatra, Viswanatha, "Balancing efficiency and
fairness in heterogeneous GPU clusters for deep learning", EuroSys'20), simplified, as a
baseline of the Astraea evaluation (notes astraea-oasis.md sections 8.2 and 16): each tenant
(Slurm account) holds tickets, and gets a share of every GPU type in proportion to them. A node
placement policy, recomputed from scratch on every call:

1. Tickets: an account's quota size, its GPUs over all types (`Account.quota`); an account
   without quota has none. When no account of the problem has any quota, every account gets
   one ticket (plain fairness among accounts).
2. Shares: each GPU type's GPUs we may use (the nodes' free GPUs, running jobs' own counted)
   are split among the accounts that have jobs (demand), in proportion to their tickets, in
   whole GPUs (floors, then the largest remainders, up to the type's GPUs).
3. Inside the shares (an account's jobs, running ones first, then by arrival, ties by row):
   first every running job stays where it is if its type's share still holds it; then each
   other job (waiting, or running where its type's share no longer holds it) goes on the
   fastest type, among those where its account's share has room for all its GPUs, that the
   nodes have room on (one node if one has room, else spread; `drf.fastest`).
4. Redistribution of unused shares: the GPUs still free go to the jobs still unplaced by
   progressive filling over the accounts: the account with the fewest GPUs per ticket (those
   without tickets last, by fewest GPUs) places its next job that fits (running ones first,
   on their own GPUs if free, else on the fastest type with room), until none fits.
5. Trading, our stand-in: faster GPUs still idle go to the placed jobs that gain most from
   them, a job moving when it runs at least `gain` (default 1.5) times faster there.

A job placed on other GPUs than it holds is moved (the simulator charges the restart): as
shares change with accounts coming and going, jobs over their account's new share lose their
GPUs to the accounts under theirs. A job that cannot be checkpointed (`Problem.preemptible`)
keeps its GPUs while it runs (counted in its account's share) and waits for room in step 3.

Left out (docs/policies.md, "gandiva_fair"): the paper's time slicing inside a share (split
stride scheduling: here the jobs that do not fit the share wait, in arrival order), its
migrations for packing, and its trading of shares between users at a price between their
speedups (here step 5 only hands idle faster GPUs to the jobs with the largest speedups).
`Tenants` and `Board` are shared with hived.py. No I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, Placement, Problem
from slurm_hetsched.core.policies.configurations import placement_allocation
from slurm_hetsched.core.policies.drf import Speeds, fastest, with_waiting
from slurm_hetsched.core.policies.options import PolicyOption, checked, parse_non_negative
from slurm_hetsched.core.policies.yarn_cs import (
    Slices,
    can_stay,
    fits,
    free_table,
    placement_of,
    require_nodes,
    slices_of,
    take,
)

# A job moves to idle faster GPUs (step 5) when it runs at least this many times faster there.
DEFAULT_GAIN = 1.5


@dataclass(frozen=True, slots=True)
class Tenants:
    """The accounts of a problem and their quotas in its columns.

    Attributes:
        names: the accounts listed in the problem and those of its jobs, sorted.
        of_job: (n_jobs,) each job's index into `names`.
        quota: (n_accounts, n_types) GPUs each account owns of each problem column.
    """

    names: tuple[str, ...]
    of_job: np.ndarray
    quota: np.ndarray

    @classmethod
    def of(cls, problem: Problem) -> Tenants:
        names = tuple(sorted(set(problem.accounts) | set(problem.job_accounts)))
        index = {name: i for i, name in enumerate(names)}
        quota = np.array(
            [[problem.account(n).quota.get(t, 0) for t in problem.gpu_types] for n in names],
            dtype=np.int64,
        ).reshape(len(names), problem.n_types)
        of_job = np.array([index[a] for a in problem.job_accounts], dtype=np.int64)
        return cls(names, of_job, quota)

    def jobs_of(self, problem: Problem, u: int, running_first: bool = True) -> list[int]:
        """Job rows of account `u`: running ones first (if asked), then by arrival, then row."""
        rows = np.flatnonzero(self.of_job == u).tolist()
        return sorted(
            rows,
            key=lambda m: (
                running_first and problem.job_ids[m] not in problem.running,
                float(problem.arrival_s[m]),
                m,
            ),
        )


def preemptible(problem: Problem, m: int) -> bool:
    """Whether job row `m` may be checkpointed and moved (`Problem.preemptible`)."""
    flags = getattr(problem, "preemptible", None)
    return True if flags is None else bool(flags[m])


class Board:
    """The GPUs left on the nodes while one call decides, and the decisions so far. A running
    job's own GPUs are `held` until it is decided (kept, moved or stopped), so that other
    jobs take them only when nothing else fits."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.speeds = Speeds(problem)
        self.left = free_table(problem)
        self.held = np.zeros_like(self.left)
        self.own: dict[int, Slices] = {}
        for m, job in enumerate(problem.job_ids):
            current = problem.running.get(job)
            if current is not None and can_stay(problem, m, current):
                self.own[m] = slices_of(problem, current)
                for n, t, count in self.own[m]:
                    self.held[n, t] += count
        self.held = np.minimum(self.held, self.left)
        self.released: set[int] = set()
        self.type = np.full(problem.n_jobs, -1)
        self.slices: dict[int, Slices] = {}
        self.placements: dict[str, Placement] = {}

    def current_type(self, m: int) -> int:
        """The type column job row `m` runs on now (one type), or -1."""
        types = {t for _n, t, _c in self.own.get(m, ())}
        return types.pop() if len(types) == 1 else -1

    def keep(self, m: int) -> bool:
        """Keep running job row `m` on its own GPUs if they are all still left."""
        slices = self.own.get(m)
        if slices is None:
            return False
        self._release(m)
        if not fits(self.left, slices):
            return False
        self._take(m, slices, self.problem.running[self.problem.job_ids[m]])
        return True

    def place(self, m: int, allowed: Iterable[int] | None = None) -> bool:
        """Job row `m` on the fastest type (among `allowed` columns, default all) with room
        for its GPUs, sparing other running jobs' GPUs where it can."""
        self._release(m)
        mask = np.zeros(self.problem.n_types, dtype=bool)
        mask[list(range(self.problem.n_types)) if allowed is None else list(allowed)] = True
        left = np.where(mask[None, :], self.left, 0)
        found = fastest(self.speeds, m, int(self.problem.num_gpus[m]), left, self.held)
        if found is None:
            return False
        _t, slices, _rate = found
        own = self.own.get(m)
        if own is not None and sorted(own) == sorted(slices):
            self._take(m, slices, self.problem.running[self.problem.job_ids[m]])
        else:
            self._take(m, slices, placement_of(self.problem, self.problem.job_ids[m], slices))
        return True

    def placed(self, m: int) -> bool:
        return self.problem.job_ids[m] in self.placements

    def allocation(self, waiting: Mapping[str, str], objective: float, policy: str) -> Allocation:
        return with_waiting(self.problem, self.placements, waiting, objective, policy)

    def _release(self, m: int) -> None:
        """Job row `m`'s own GPUs are no longer held for it (it is being decided)."""
        if m in self.released:
            return
        self.released.add(m)
        for n, t, count in self.own.get(m, ()):
            self.held[n, t] = max(0, self.held[n, t] - count)

    def rate(self, m: int) -> float:
        """Steps/s of placed job row `m` where it is placed."""
        slices = self.slices[m]
        return self.speeds.rate(m, slices[0][1], int(self.problem.num_gpus[m]), len(slices) > 1)

    def upgrade(self, m: int, gain: float) -> bool:
        """Move placed job row `m` to the fastest other type with room if it runs at least
        `gain` times faster there."""
        slices = self.slices[m]
        mask = np.ones(self.problem.n_types, dtype=bool)
        mask[slices[0][1]] = False
        left = np.where(mask[None, :], self.left, 0)
        found = fastest(self.speeds, m, int(self.problem.num_gpus[m]), left, self.held)
        if found is None or found[2] < gain * self.rate(m):
            return False
        for n, t, count in slices:  # its GPUs are free again
            self.left[n, t] += count
        job = self.problem.job_ids[m]
        self._take(m, found[1], placement_of(self.problem, job, found[1]))
        return True

    def _take(self, m: int, slices: Slices, placement: Placement) -> None:
        take(self.left, slices)
        self.held = np.minimum(self.held, self.left)
        self.type[m] = slices[0][1]
        self.slices[m] = slices
        self.placements[self.problem.job_ids[m]] = placement


def type_shares(capacity: np.ndarray, tickets: np.ndarray, active: np.ndarray) -> np.ndarray:
    """(n_accounts, n_types) whole GPUs: each type's `capacity` split among the `active`
    accounts in proportion to their `tickets` (floors, then the largest remainders, ties to
    the first account, never above the type's capacity)."""
    weights = np.where(active, tickets, 0).astype(float)
    shares = np.zeros((len(tickets), len(capacity)), dtype=np.int64)
    if weights.sum() <= 0:
        return shares
    exact = np.outer(weights / weights.sum(), capacity.astype(float))
    shares = np.floor(exact + 1e-9).astype(np.int64)
    for t, total in enumerate(capacity.astype(np.int64)):
        rest = exact[:, t] - shares[:, t]
        extra = int(total - shares[:, t].sum())
        for u in sorted(np.flatnonzero(weights > 0).tolist(), key=lambda u: (-rest[u], u))[
            : max(extra, 0)
        ]:
            shares[u, t] += 1
    return shares


def tickets_of(tenants: Tenants) -> np.ndarray:
    """(n_accounts,) each account's quota size; all 1 when no account has a quota."""
    tickets = tenants.quota.sum(axis=1).astype(float)
    return tickets if tickets.sum() > 0 else np.ones(len(tenants.names))


class GandivaFair:
    """Gandiva_fair, simplified: GPU shares per type in proportion to tickets (quota sizes),
    unused shares redistributed (module docstring)."""

    name: ClassVar[str] = "gandiva_fair"
    description: ClassVar[str] = (
        "Astraea baseline Gandiva_fair (simplified): each account's share of every GPU type in "
        "proportion to its quota (tickets), jobs on their fastest type inside it, unused "
        "shares redistributed to accounts with demand (needs nodes)"
    )
    options: ClassVar[Mapping[str, PolicyOption]] = MappingProxyType(
        {
            "gain": PolicyOption(
                f"speedup a job needs to move to idle faster GPUs (default {DEFAULT_GAIN:g}; "
                "0 = never move for speed)",
                DEFAULT_GAIN,
                parse_non_negative,
            )
        }
    )
    needs_nodes: ClassVar[bool] = True  # a `nodes` problem only (generic tests skip it)

    def __init__(self, gain: float = DEFAULT_GAIN) -> None:
        """Raises: ConfigError: a negative or non-finite gain."""
        self.gain = checked(self.name, self.options, "gain", gain)

    def allocate(self, problem: Problem) -> Allocation:
        """Shares, jobs inside them, redistribution, then trading (module docstring).

        Raises:
            InvalidProblemError: the problem has jobs but no `nodes`.
        """
        if problem.n_jobs == 0:
            return placement_allocation(problem, {}, 0.0, self.name, 0)
        require_nodes(problem, self.name)
        tenants = Tenants.of(problem)
        board = Board(problem)
        tickets = tickets_of(tenants)
        active = np.bincount(tenants.of_job, minlength=len(tenants.names)) > 0
        shares = type_shares(board.left.sum(axis=0), tickets, active)
        used = np.zeros_like(shares)
        order = {u: tenants.jobs_of(problem, u) for u in np.flatnonzero(active).tolist()}
        for u, rows in order.items():  # jobs that cannot be moved keep their GPUs first
            for m in rows:
                if not preemptible(problem, m) and board.keep(m):
                    used[u, board.type[m]] += problem.num_gpus[m]
        for u, rows in order.items():  # 3. inside the shares: running jobs stay first,
            for m in rows:
                t = board.current_type(m)
                g = int(problem.num_gpus[m])
                if t >= 0 and not board.placed(m) and shares[u, t] - used[u, t] >= g:
                    if board.keep(m):
                        used[u, t] += g
        for u, rows in order.items():  # then the others on the fastest type with room
            for m in rows:
                g = int(problem.num_gpus[m])
                room = np.flatnonzero(shares[u] - used[u] >= g).tolist()
                if not board.placed(m) and board.place(m, room):
                    used[u, board.type[m]] += g
        _redistribute(problem, board, tenants, tickets, used, order)
        if self.gain > 0 and _trade(problem, board, self.gain):  # GPUs freed by moves:
            _redistribute(problem, board, tenants, tickets, used, order)  # fill them again
        waiting = {
            job: f"over-share:{problem.job_accounts[m] or '-'}"
            for m, job in enumerate(problem.job_ids)
            if not board.placed(m)
        }
        return board.allocation(waiting, float(used.sum()), self.name)


def _redistribute(
    problem: Problem,
    board: Board,
    tenants: Tenants,
    tickets: np.ndarray,
    used: np.ndarray,
    order: Mapping[int, list[int]],
) -> None:
    """4. Progressive filling of the GPUs left over the accounts with jobs left, the account
    with the fewest GPUs per ticket first (module docstring); updates `used`."""

    def key(u: int) -> tuple[int, float, int]:
        total = float(used[u].sum())
        return (0, total / tickets[u], u) if tickets[u] > 0 else (1, total, u)

    heap = [key(u) for u in order]
    heapq.heapify(heap)
    pending = {u: [m for m in rows if not board.placed(m)] for u, rows in order.items()}
    while heap:
        u = heapq.heappop(heap)[2]
        rows = pending[u]
        while rows:  # a job that does not fit now never will: GPUs are only taken
            m = rows.pop(0)
            if board.keep(m) or (preemptible(problem, m) and board.place(m)):
                used[u, board.type[m]] += problem.num_gpus[m]
                heapq.heappush(heap, key(u))
                break


def _trade(problem: Problem, board: Board, gain: float) -> bool:
    """5. Faster GPUs left idle go to the placed jobs that gain most from them (our stand-in
    for the paper's trading of shares between users): in order of the speedup the fastest
    type with room for them would give (largest first, ties by row), a job that can be moved
    moves there when it runs at least `gain` times faster (`Board.upgrade`). Whether any
    job moved."""
    speedup: dict[int, float] = {}
    for m in sorted(board.slices):
        g = int(problem.num_gpus[m])
        room = np.flatnonzero(board.left.sum(axis=0) >= g).tolist()
        now = board.rate(m)
        if not room or now <= 0 or not preemptible(problem, m):
            continue
        best = max(board.speeds.rate(m, t, g, spread=False) for t in room)
        if best >= gain * now:
            speedup[m] = best / now
    moved = [board.upgrade(m, gain) for m in sorted(speedup, key=lambda m: (-speedup[m], m))]
    return any(moved)
