"""Who grows how fast as the water rises (water_filling.py): the accounts and the ceiling path.

`Hierarchy` holds the two levels of sharing: Slurm accounts share the cluster in proportion
to their weights, and inside an account jobs share either fairly (by job weight) or FIFO (the
earliest job takes the whole account weight until it cannot grow, then the next one).
`Hierarchy.path` turns the current floors, the frozen jobs and every job's ceiling (all of
its time on its best type) into a `Path`: the piecewise-linear demands of the unfrozen jobs
as the water rises, if only ceilings stopped it. Arithmetic only, no solver; the LPs that
find where the cluster stops the water are in water_filling.py and water_levels.py.

No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from slurm_hetsched.core.model import AccountPolicy, Problem

# Path breakpoints closer than this (relative) are merged: a segment that short carries no
# information and would make its direction ill-conditioned.
TIME_TOL = 1e-12


@dataclass(frozen=True, slots=True)
class Path:
    """The demands of the unfrozen jobs as the water rises, if only ceilings stopped it.

    Demands are piecewise linear in the path parameter T (T = 0: the current floors); every
    breakpoint is a job reaching its ceiling. Per fair account, job m's demand is
    min(ceiling_m, floor_m + job_weight_m * phi_a(T)); per FIFO account, the job at the head
    grows at the account weight from its start until its ceiling.

    Attributes:
        times: (n_breakpoints,) sorted, from 0 to the last ceiling event.
    """

    times: np.ndarray
    floor: np.ndarray  # (n_jobs,)
    ceiling: np.ndarray  # (n_jobs,)
    # Per fair account: (member job indices, their job weights, T at its breakpoints, phi there).
    fair_curves: tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], ...]
    fifo_jobs: np.ndarray  # (n_fifo,) job indices
    fifo_start: np.ndarray  # (n_fifo,) T at which each becomes the head
    fifo_rate: np.ndarray  # (n_fifo,) its account's weight

    def demand(self, t: float) -> np.ndarray:
        """(n_jobs,) every job's demand at path parameter t (frozen jobs: their floor)."""
        demand = self.floor.copy()
        for members, job_weight, curve_t, curve_phi in self.fair_curves:
            phi = np.interp(t, curve_t, curve_phi)
            demand[members] = self.floor[members] + job_weight * phi
        grown = self.fifo_rate * np.maximum(t - self.fifo_start, 0.0)
        demand[self.fifo_jobs] = self.floor[self.fifo_jobs] + grown
        return np.asarray(np.minimum(demand, np.maximum(self.ceiling, self.floor)))

    def direction(self, start: int, end: int) -> np.ndarray:
        """(n_jobs,) growth rates on [times[start], times[end]], which must be one segment
        (demands are affine there)."""
        span = self.times[end] - self.times[start]
        return np.asarray((self.demand(self.times[end]) - self.demand(self.times[start])) / span)


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Accounts and their jobs: who grows how fast at each level.

    Attributes:
        account_weight: (n_accounts,) weight of each account.
        fifo: (n_accounts,) True where the account serves its jobs FIFO.
        members: per account, its job indices (FIFO accounts: in (arrival_s, job id) order).
        job_weight: (n_jobs,) the problem's job weights (used inside fair accounts).
        of_job: (n_jobs,) account index of each job.
        fifo_rank: (n_jobs,) position of each job in (arrival_s, job id) order.
    """

    account_weight: np.ndarray
    fifo: np.ndarray
    members: tuple[np.ndarray, ...]
    job_weight: np.ndarray
    of_job: np.ndarray
    fifo_rank: np.ndarray = field(repr=False)

    @classmethod
    def of(cls, problem: Problem) -> Hierarchy:
        names, of_job = np.unique(np.array(problem.job_accounts, dtype=str), return_inverse=True)
        of_job = of_job.reshape(-1)
        accounts = [problem.account(str(name)) for name in names]
        order = np.lexsort((np.array(problem.job_ids, dtype=str), problem.arrival_s))
        rank = np.empty(problem.n_jobs, dtype=np.int64)
        rank[order] = np.arange(problem.n_jobs)
        weights = np.array([a.weight for a in accounts])
        return cls(
            account_weight=weights / weights.sum(),  # only ratios matter; keeps duals O(1)
            fifo=np.array([a.policy is AccountPolicy.FIFO for a in accounts]),
            members=tuple(order[of_job[order] == a] for a in range(len(accounts))),
            job_weight=np.asarray(problem.weight, dtype=float),
            of_job=of_job,
            fifo_rank=rank,
        )

    def group_features(self) -> np.ndarray:
        """(n_jobs, 3) what sets jobs apart in the hierarchy (for symmetry.group_jobs)."""
        rank = np.where(self.fifo[self.of_job], self.fifo_rank, -1)
        return np.column_stack([self.of_job, self.job_weight, rank]).astype(float)

    def path(self, floor: np.ndarray, frozen: np.ndarray, ceiling: np.ndarray) -> Path:
        """The ceiling-event path from the current floors (see Path)."""
        fair_curves = []
        fifo_jobs, fifo_start, fifo_rate = [], [], []
        events = [np.zeros(1)]
        for account, members in enumerate(self.members):
            members = members[~frozen[members]]
            if members.size == 0:
                continue
            weight = self.account_weight[account]
            room = np.maximum(ceiling[members] - floor[members], 0.0)
            if self.fifo[account]:
                # The head grows at the account weight; the next starts when it saturates.
                ends = np.cumsum(room / weight)
                fifo_jobs.append(members)
                fifo_start.append(ends - room / weight)
                fifo_rate.append(np.full(members.size, weight))
                events.append(ends)
                continue
            # Fair: phi, the growth per unit job weight, rises at weight / (job weight still
            # growing); job m saturates when phi reaches room_m / job_weight_m.
            job_weight = self.job_weight[members]
            need = room / job_weight
            order = np.argsort(need, kind="stable")
            growing = np.cumsum(job_weight[order][::-1])[::-1]  # before each saturation
            curve_phi = np.r_[0.0, need[order]]
            curve_t = np.r_[0.0, np.cumsum(np.diff(curve_phi) * growing / weight)]
            fair_curves.append((members, job_weight, curve_t, curve_phi))
            events.append(curve_t[1:])
        times = np.unique(np.concatenate(events))
        keep = np.r_[True, np.diff(times) > TIME_TOL * max(float(times[-1]), 1.0)]
        return Path(
            times=times[keep],
            floor=floor,
            ceiling=ceiling,
            fair_curves=tuple(fair_curves),
            fifo_jobs=np.concatenate(fifo_jobs) if fifo_jobs else np.zeros(0, dtype=np.int64),
            fifo_start=np.concatenate(fifo_start) if fifo_start else np.zeros(0),
            fifo_rate=np.concatenate(fifo_rate) if fifo_rate else np.zeros(0),
        )
