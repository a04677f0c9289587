"""Dominant resource fairness (Ghodsi et al., NSDI'11) with the GPUs of each type as the
resources, as the OASiS evaluation runs it (Bao et al., INFOCOM'18: "admit all; recompute the
number of workers for max-min fairness over dominant resources on every arrival and
completion"). A node placement policy; every call recomputes the shares from scratch:

- Share: a job's GPUs of a type over the type's free GPUs (`Problem.capacity`, the nodes'
  free GPUs); a job's GPUs are all of one type, so its dominant share is its GPU count over
  that type's, divided by its weight (weighted DRF; weight 1 is plain DRF). Heterogeneity-
  unaware: a V100 counts as one GPU of its type, whatever the job does on it.
- Progressive filling: the job with the smallest dominant share (ties: arrival, then row) gets
  one more gang step, until no job can take one. A job's first step is its `num_gpus`; then an
  elastic job (`allowed_gpus`) grows to its next allowed count, on the type it holds. A step
  that does not fit ends the job's filling (it keeps what it has); a first step that does not
  fit leaves the job waiting, with the reason. Every job is admitted: none is refused for its
  utility, and since all start at share 0, first steps go in arrival order before any growth.
- Where (heterogeneity-aware only here): the first step goes on the type where the job runs
  fastest among those with room for it, an unconsolidated (spread) rate where it needs
  several nodes; on a type, one node if one has room (the fullest such node), else spread
  over the nodes with the most free GPUs. A growth step prefers the nodes the job is on.
- Running jobs (`Problem.running`) are recomputed like the others, but their own GPUs come
  first: a running job's first step stays on its type and GPUs if they hold it, each step
  takes its own GPUs before others, and other jobs take a running job's GPUs only when no
  other GPUs of the type fit them. A job whose share comes out unchanged keeps its exact
  placement (no restart); one that shrinks or grows is moved.

The objective reported is the smallest weighted dominant share (0 while a job waits). The
placement helpers (`gang`, `fastest`, `Speeds`) are shared with risk_reward.py. No I/O.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable, Mapping
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, Placement, Problem
from slurm_hetsched.core.policies.configurations import placement_allocation
from slurm_hetsched.core.policies.options import NO_OPTIONS, PolicyOption
from slurm_hetsched.core.policies.yarn_cs import (
    Slices,
    can_stay,
    free_table,
    placement_of,
    require_nodes,
    slices_of,
)


class Speeds:
    """Steps/s of the problem's jobs at any GPU count on one type, on one node or spread over
    several (`Problem.rates_at`, computed once per count; spread: the job's own count loses
    what `throughput_spread` says, as hadar_alloc.job_view reads it)."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        base = problem.throughput
        spread = (
            base
            if problem.throughput_spread is None
            else np.minimum(base, problem.throughput_spread)
        )
        self.loss = np.divide(spread, base, out=np.ones_like(base), where=base > 0)
        self._at: dict[int, np.ndarray] = {}

    def rate(self, m: int, t: int, gpus: int, spread: bool) -> float:
        """Job row `m` on `gpus` GPUs of type column `t`; 0 = cannot run there."""
        if gpus == int(self.problem.num_gpus[m]):
            rate = float(self.problem.throughput[m, t])
        else:
            if gpus not in self._at:
                self._at[gpus] = self.problem.rates_at(gpus)
            rate = float(self._at[gpus][m, t])
        return rate * float(self.loss[m, t]) if spread else rate


def gang(
    left: np.ndarray, held: np.ndarray, t: int, need: int, prefer: Iterable[int] = ()
) -> Slices | None:
    """`need` GPUs of type column `t` out of `left` (n_nodes, n_types), sparing `held` (GPUs
    of running jobs not served yet) where it can: one node with room among the unheld GPUs
    (the nodes in `prefer` first, then the one with the fewest such GPUs, then node order),
    else one node with room counting held GPUs, else spread, unheld GPUs first, over the nodes
    in `prefer` and then those with the most room. None if the type has fewer than `need`."""
    column = left[:, t]
    if column.sum() < need:
        return None
    liked = set(prefer)
    idle = np.maximum(column - np.minimum(held[:, t], column), 0)
    for avail in (idle, column):
        fit = np.flatnonzero(avail >= need).tolist()
        if fit:
            node = min(fit, key=lambda n: (n not in liked, avail[n], n))
            return ((int(node), t, need),)
    taken = np.zeros_like(column)
    rest = need
    for avail in (idle, column):
        room = avail - taken
        for n in sorted(
            np.flatnonzero(room > 0).tolist(), key=lambda n: (n not in liked, -room[n], n)
        ):
            count = min(rest, int(room[n]))
            taken[n] += count
            rest -= count
            if rest == 0:
                return tuple((int(n), t, int(taken[n])) for n in np.flatnonzero(taken))
    return None  # not reached: the column holds `need`


def fastest(
    speeds: Speeds, m: int, gpus: int, left: np.ndarray, held: np.ndarray
) -> tuple[int, Slices, float] | None:
    """(type column, slices, steps/s) of job row `m` on `gpus` GPUs of the type where it runs
    fastest among those with room (`gang` on each; a spread gang at its spread rate; ties:
    one node, then column order), or None if no type it can run on has room."""
    best: tuple[tuple[float, bool, int], int, Slices, float] | None = None
    for t in np.flatnonzero(speeds.problem.throughput[m] > 0).tolist():
        slices = gang(left, held, t, gpus)
        if slices is None:
            continue
        rate = speeds.rate(m, t, gpus, spread=len(slices) > 1)
        key = (rate, len(slices) == 1, -t)
        if rate > 0 and (best is None or key > best[0]):
            best = (key, t, slices, rate)
    return None if best is None else best[1:]


def with_waiting(
    problem: Problem,
    placements: Mapping[str, Placement],
    waiting: Mapping[str, str],
    objective: float,
    policy: str,
) -> Allocation:
    """The allocation of `placements` (x 1 on each placed job's type) with `waiting`."""
    allocation = placement_allocation(problem, placements, objective, policy, 0)
    return dataclasses.replace(allocation, waiting=dict(waiting))


class DominantResourceFairness:
    """DRF over the GPU types: progressive filling by dominant share (module docstring)."""

    name: ClassVar[str] = "drf"
    description: ClassVar[str] = (
        "OASiS baseline DRF: every job admitted, gang steps (elastic jobs grow) by smallest "
        "dominant share over the GPU types, each on its fastest type with room (needs nodes)"
    )
    options: ClassVar[Mapping[str, PolicyOption]] = NO_OPTIONS
    needs_nodes: ClassVar[bool] = True  # a `nodes` problem only (generic tests skip it)

    def allocate(self, problem: Problem) -> Allocation:
        """Progressive filling from scratch, running jobs on their own GPUs first.

        Raises:
            InvalidProblemError: the problem has jobs but no `nodes`.
        """
        if problem.n_jobs == 0:
            return placement_allocation(problem, {}, 0.0, self.name, 0)
        require_nodes(problem, self.name)
        return _Filling(problem).run(self.name)


class _Filling:
    """One progressive filling: the GPUs left, the running jobs' own GPUs not yet claimed
    (`own`, and `held`, their sum) and each job's type and GPUs so far."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.speeds = Speeds(problem)
        self.left = free_table(problem)
        self.capacity = self.left.sum(axis=0)
        self.held = np.zeros_like(self.left)
        self.own: dict[int, np.ndarray] = {}
        for m, job in enumerate(problem.job_ids):
            current = problem.running.get(job)
            if current is None or not can_stay(problem, m, current):
                continue
            mine = np.zeros_like(self.left)
            for n, t, count in slices_of(problem, current):
                mine[n, t] += count
            self.own[m] = np.minimum(mine, self.left)  # GPUs now gone are no longer its own
            self.held += self.own[m]
        self.type = np.full(problem.n_jobs, -1)
        self.got: list[dict[int, int]] = [{} for _ in range(problem.n_jobs)]  # node -> GPUs

    def run(self, policy: str) -> Allocation:
        problem = self.problem
        size = np.zeros(problem.n_jobs, dtype=np.int64)
        share = np.zeros(problem.n_jobs)
        heap = [(0.0, float(problem.arrival_s[m]), m) for m in range(problem.n_jobs)]
        heapq.heapify(heap)
        while heap:
            _, arrival, m = heapq.heappop(heap)
            options = [g for g in problem.gpu_options(m) if g > size[m]]
            if not self._step(m, options[0] - int(size[m])):
                continue  # this job's filling ends here
            size[m] = options[0]
            t = int(self.type[m])
            share[m] = size[m] / self.capacity[t] / problem.weight[m]
            if len(options) > 1:
                heapq.heappush(heap, (float(share[m]), arrival, m))
        placements: dict[str, Placement] = {}
        waiting: dict[str, str] = {}
        for m, job in enumerate(problem.job_ids):
            if size[m] == 0:
                waiting[job] = f"no-room:{int(problem.num_gpus[m])}-GPUs"
                continue
            t = int(self.type[m])
            slices = tuple((n, t, c) for n, c in sorted(self.got[m].items()))
            current = problem.running.get(job)
            if current is not None and sorted(slices_of(problem, current)) == list(slices):
                placements[job] = current  # unchanged: it stays exactly where it is
            else:
                placements[job] = placement_of(problem, job, slices)
        objective = 0.0 if waiting else float(share.min())
        return with_waiting(problem, placements, waiting, objective, policy)

    def _step(self, m: int, add: int) -> bool:
        """Give job row `m` `add` more GPUs (its first step chooses the type); False if they
        do not fit."""
        t = int(self.type[m])
        mine = self.own.get(m)
        others = self.held if mine is None else self.held - mine
        if t < 0:
            t = self._own_type(m, add)
            if t < 0:
                found = fastest(self.speeds, m, add, self.left, others)
                if found is None:
                    return False
                t = found[0]
        elif self.left[:, t].sum() < add:
            return False
        self.type[m] = t
        rest = add
        if mine is not None:  # its own GPUs first, the node with the most of them first
            for n in sorted(
                np.flatnonzero(mine[:, t] > 0).tolist(), key=lambda n: (-mine[n, t], n)
            ):
                count = min(rest, int(mine[n, t]), int(self.left[n, t]))
                self._take(m, n, t, count)
                rest -= count
        if rest > 0:
            slices = gang(self.left, others, t, rest, prefer=self.got[m])
            assert slices is not None  # the type holds `add` GPUs, its own ones among them
            for n, _t, count in slices:
                self._take(m, n, t, count)
        return True

    def _own_type(self, m: int, gpus: int) -> int:
        """The type column of a running job's GPUs if they are of one type and still hold
        `gpus`, else -1 (not running, too few left, or a gang across types)."""
        mine = self.own.get(m)
        if mine is None:
            return -1
        still = np.minimum(mine, self.left).sum(axis=0)
        types = np.flatnonzero(mine.sum(axis=0) > 0)
        return int(types[0]) if len(types) == 1 and still[types[0]] >= gpus else -1

    def _take(self, m: int, n: int, t: int, count: int) -> None:
        if count <= 0:
            return
        self.left[n, t] -= count
        mine = self.own.get(m)
        if mine is not None:
            claimed = min(count, int(mine[n, t]))
            mine[n, t] -= claimed
            self.held[n, t] -= claimed
        self.got[m][n] = self.got[m].get(n, 0) + count
