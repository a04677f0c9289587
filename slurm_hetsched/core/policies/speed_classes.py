"""Rate demands of many jobs decided over few speed classes (used by finish-time fairness).

Jobs of one class run at the same relative speeds on every GPU type (the online update scales
a job's whole row by one factor), so they differ only in how much rate they need. Take a group
of such jobs with equal num_gpus: speeds s_j relative to their fastest type (max 1), demands
r_m in units of each job's own fastest rate, and X_j the group's total time on type j. Time
fractions x_mj >= 0 with

    sum_j x_mj <= 1,   sum_m x_mj <= X_j,   sum_j s_j x_mj >= r_m

exist if and only if, for every theta in {0} and the group's speeds,

    sum_j (s_j - theta)^+ X_j  >=  sum_m (r_m - theta)^+.                            (*)

Necessity: a job's time is at most 1, so sum_j (s_j - theta)^+ x_mj >= r_m - theta, and
the left side is >= 0; sum over the jobs. Sufficiency is the weak-majorization condition of
preemptive scheduling on uniform machines (Horvath, Lam and Sethi 1977); tests check it
against the per-job LP, and `split` verifies it on every use (it returns None, and the caller
falls back to the per-job LP, should the split fail).

So whether demands can be met is decided by an LP over n_groups x n_types aggregate times with
n_groups x (n_types + 1) rows (*) plus the capacity rows, however many jobs there are; jobs
drawn from a profile table form a few dozen groups. One more LP splits the groups' times
among their jobs; its blocks (groups) are independent.

No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from slurm_hetsched.core.policies.lp import (
    INF,
    LpSolution,
    RowBlock,
    SparseLP,
    solve_highs,
    stack_rows,
)
from slurm_hetsched.core.policies.symmetry import JobGroups, group_jobs
from slurm_hetsched.errors import SolverError

# The LP's t is capped here: only whether t >= 1 matters, and a cap keeps it bounded when
# every demand is 0.
T_MAX = 4.0


@dataclass(frozen=True, slots=True)
class SpeedClasses:
    """The jobs grouped by relative speeds and num_gpus, and the aggregate LP's layout.

    Attributes:
        groups: the partition (symmetry.group_jobs on speeds and num_gpus).
        best: (n_jobs,) each job's fastest rate (steps/s); demands are divided by it.
        speed: (n_groups, n_types) relative speeds, max 1 per row; 0 = cannot run there.
        theta: (n_groups, n_types + 1) the thresholds of (*): 0, then the group's speeds.
        cols: (group, type) of each aggregate-time column (where the speed is > 0).
        theta_rows: (n_groups * (n_types + 1), n_cols) the left sides of (*).
        usage: (n_types, n_cols) GPUs per unit of aggregate time.
    """

    groups: JobGroups
    best: np.ndarray
    speed: np.ndarray
    theta: np.ndarray
    cols: tuple[np.ndarray, np.ndarray]
    theta_rows: sp.csr_matrix
    usage: sp.csr_matrix

    @classmethod
    def of(cls, throughput: np.ndarray, num_gpus: np.ndarray) -> SpeedClasses:
        """Args: throughput (n_jobs, n_types) steps/s, 0 where a job cannot run (every job
        can run somewhere); num_gpus (n_jobs,)."""
        best = throughput.max(axis=1)
        relative = throughput / best[:, None]
        groups = group_jobs(np.column_stack([relative, num_gpus]))
        speed = relative[groups.representative]
        n_groups, n_types = speed.shape
        theta = np.concatenate([np.zeros((n_groups, 1)), speed], axis=1)
        gr, gc = np.nonzero(speed > 0)
        coef = np.maximum(speed[gr, gc][:, None] - theta[gr], 0.0)  # (n_cols, n_types + 1)
        col, a = np.nonzero(coef > 0)
        theta_rows = sp.csr_matrix(
            (coef[col, a], (gr[col] * (n_types + 1) + a, col)),
            shape=(n_groups * (n_types + 1), len(gr)),
        )
        gpus = num_gpus[groups.representative].astype(float)
        usage = sp.csr_matrix((gpus[gr], (gc, np.arange(len(gr)))), shape=(n_types, len(gr)))
        return cls(groups, best, speed, theta, (gr, gc), theta_rows, usage)

    def need(self, demand: np.ndarray) -> np.ndarray:
        """(n_groups * (n_types + 1),) the right sides of (*) for demands (n_jobs,) steps/s."""
        relative = demand / self.best
        of_job = self.groups.of_job
        need = np.zeros(self.theta.shape)
        np.add.at(need, of_job, np.maximum(relative[:, None] - self.theta[of_job], 0.0))
        return need.reshape(-1)

    def scaling_lp(self, need: np.ndarray, capacity: np.ndarray) -> SparseLP:
        """maximize t <= T_MAX s.t. (*) with right sides t * need, capacity rows: the demands
        can be met iff t >= 1 (for t != 1 this is not a scaling of the demands themselves)."""
        n_cols = self.theta_rows.shape[1]
        rows = stack_rows(
            [
                RowBlock(
                    sp.hstack([self.theta_rows, sp.csr_matrix(-need.reshape(-1, 1))], format="csr"),
                    np.zeros(len(need)),
                    np.full(len(need), INF),
                ),
                RowBlock(
                    sp.hstack([self.usage, sp.csr_matrix((self.usage.shape[0], 1))], format="csr"),
                    np.full(self.usage.shape[0], -INF),
                    capacity,
                ),
            ]
        )
        return SparseLP(
            cost=np.r_[np.zeros(n_cols), 1.0],
            col_lower=np.zeros(n_cols + 1),
            col_upper=np.r_[np.full(n_cols, INF), T_MAX],
            rows=rows,
            maximize=True,
        )

    def aggregate(self, solution: LpSolution) -> np.ndarray:
        """(n_groups, n_types) the groups' total times from a scaling_lp solution."""
        total = np.zeros(self.speed.shape)
        total[self.cols] = solution.columns[:-1]
        return total

    def split(
        self, total: np.ndarray, demand: np.ndarray, policy: str, n_types: int
    ) -> tuple[np.ndarray, float] | None:
        """Per-job time fractions (n_jobs, n_types) meeting `demand` from the groups' totals,
        and HiGHS's seconds; None if the LP finds none (see the module docstring).

        One LP: per (group, type) sum of its jobs' times <= total; per job time <= 1 and rate
        >= demand.
        """
        n_jobs = len(demand)
        of_job = self.groups.of_job
        jr, jc = np.nonzero(total[of_job] > 0)
        n_cols = len(jr)
        entry = np.arange(n_cols)
        supply = sp.csr_matrix(
            (np.ones(n_cols), (of_job[jr] * n_types + jc, entry)),
            shape=(total.size, n_cols),
        )
        time_rows = sp.csr_matrix((np.ones(n_cols), (jr, entry)), shape=(n_jobs, n_cols))
        rate_rows = sp.csr_matrix((self.speed[of_job[jr], jc], (jr, entry)), shape=(n_jobs, n_cols))
        lp = SparseLP(
            cost=np.zeros(n_cols),
            col_lower=np.zeros(n_cols),
            col_upper=np.ones(n_cols),
            rows=stack_rows(
                [
                    RowBlock(supply, np.full(total.size, -INF), total.reshape(-1)),
                    RowBlock(time_rows, np.full(n_jobs, -INF), np.ones(n_jobs)),
                    RowBlock(rate_rows, demand / self.best, np.full(n_jobs, INF)),
                ]
            ),
            maximize=True,
        )
        try:
            solution = solve_highs(lp, policy=policy, n_jobs=n_jobs, n_types=n_types)
        except SolverError:
            return None
        x = np.zeros((n_jobs, n_types))
        x[jr, jc] = solution.columns
        return x, solution.solve_s
