"""A simplified Risk-Reward Heuristic (Irwin, Grit, Chase, "Balancing risk and reward in a
market-based task service", HPDC'04), as the OASiS evaluation (Bao et al., INFOCOM'18) runs it
against OASiS: a job is admitted when its utility minus the delay cost its admission causes
exceeds a threshold; on every arrival and completion each unfinished job continues on the
same GPUs or pauses; worker numbers are fixed, as under FIFO. A node placement policy; each
call (our simplification of Irwin's value and cost terms):

1. Running jobs (`Problem.running`) keep their GPUs (continue) unless the utility left to them,
   U(now + steps / rate where they are), is 0 (a missed deadline, a linear utility past its
   target): they pause, waiting "preempted:utility=0", and their GPUs go to others. A running
   job whose GPUs are no longer all free (a drained node) or that can no longer run there
   waits with the others.
2. Each waiting job is valued on its best free placement now (`drf.fastest`: exactly
   `num_gpus` GPUs of the one type where it runs fastest, one node if possible; elastic
   `allowed_gpus` are ignored): duration d = restart + steps / rate, utility u = U(now + d).
   A job with no room waits ("no-room:<g>-GPUs").
3. Delay cost of starting job j (our estimate of Irwin's opportunity cost): the jobs that
   would take j's GPUs if it waited each lose U_k(c_k) - U_k(c_k + d_j), c_k = now + d_k
   their own best completion, by waiting d_j for them. Counted, in queue order until j's
   GPUs are used up: each job k that runs on j's type with at most j's GPU count (so it
   could start on j's GPUs) and has no room on any type it runs on once j takes them.
4. Order (Irwin's FirstReward): by (u - delay cost to all other waiting jobs, these taken in
   order of u per GPU-second) per GPU-second of the job's run, largest first; ties by arrival,
   then row order.
5. Admission, in that order: j starts when u - (delay cost to the jobs still waiting behind
   it) > `threshold` (default 0), on its best placement at the GPUs left; else it waits and
   the reason says why. Jobs behind it are valued again on what is left.

The objective reported is the utility the running jobs (kept and started) expect. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from slurm_hetsched.core.model import Allocation, Placement, Problem
from slurm_hetsched.core.policies.configurations import placement_allocation
from slurm_hetsched.core.policies.drf import Speeds, fastest, with_waiting
from slurm_hetsched.core.policies.hadar_alloc import restart_seconds
from slurm_hetsched.core.policies.options import PolicyOption, checked, parse_non_negative
from slurm_hetsched.core.policies.yarn_cs import (
    Slices,
    arrival_order,
    can_stay,
    fits,
    free_table,
    placement_of,
    require_nodes,
    slices_of,
    take,
)
from slurm_hetsched.core.round_options import DEFAULT_RESTART_S
from slurm_hetsched.core.utility import Utility

DEFAULT_THRESHOLD = 0.0


@dataclass(frozen=True, slots=True)
class _Offer:
    """A waiting job on its best free placement now."""

    t: int  # type column
    slices: Slices
    duration_s: float  # restart + steps / rate
    utility: float  # U(now + duration)


class RiskReward:
    """Risk-Reward Heuristic: admit by utility minus the delay cost to the queue, running jobs
    continue unless worth nothing (module docstring)."""

    name: ClassVar[str] = "risk_reward"
    description: ClassVar[str] = (
        "OASiS baseline Risk-Reward Heuristic (Irwin et al.): a job starts when its utility "
        "minus the delay it costs waiting jobs exceeds a threshold; running jobs continue "
        "unless worth nothing (needs nodes, steps)"
    )
    options: ClassVar[Mapping[str, PolicyOption]] = MappingProxyType(
        {
            "threshold": PolicyOption(
                "utility minus delay cost a job must exceed to start (default 0)",
                DEFAULT_THRESHOLD,
                parse_non_negative,
            ),
            "restart_s": PolicyOption(
                f"seconds a start costs a job whose own estimate is unknown "
                f"(default {DEFAULT_RESTART_S:g})",
                DEFAULT_RESTART_S,
                parse_non_negative,
            ),
        }
    )
    needs_nodes: ClassVar[bool] = True  # a `nodes` problem only (generic tests skip it)

    def __init__(
        self, threshold: float = DEFAULT_THRESHOLD, restart_s: float = DEFAULT_RESTART_S
    ) -> None:
        """Raises: ConfigError: a negative or non-finite threshold or restart_s."""
        self.threshold = checked(self.name, self.options, "threshold", threshold)
        self.restart_s = checked(self.name, self.options, "restart_s", restart_s)

    def allocate(self, problem: Problem) -> Allocation:
        """Running jobs continue or pause, then waiting jobs are admitted in order (module
        docstring).

        Raises:
            InvalidProblemError: the problem has jobs but no `nodes`, or no `steps`.
        """
        if problem.n_jobs == 0:
            return placement_allocation(problem, {}, 0.0, self.name, 0)
        require_nodes(problem, self.name)
        return _Round(problem, self.restart_s).run(self.threshold, self.name)


class _Round:
    """One call's state: the GPUs left, the decisions so far and the job data read once."""

    def __init__(self, problem: Problem, restart_s: float) -> None:
        self.problem = problem
        self.steps = problem.require("steps", RiskReward.name)
        self.restart = restart_seconds(problem, restart_s)
        self.utilities: list[Utility] = [problem.utility(m) for m in range(problem.n_jobs)]
        self.speeds = Speeds(problem)
        self.left = free_table(problem)
        self.none_held = np.zeros_like(self.left)
        self.usable = problem.throughput > 0
        self.placements: dict[str, Placement] = {}
        self.waiting: dict[str, str] = {}
        self.expected = 0.0  # utility the running jobs expect

    def run(self, threshold: float, policy: str) -> Allocation:
        queue = self._continue_or_pause()
        offers: dict[int, _Offer] = {}
        for m in queue:
            offer = self._offer(m)
            if offer is None:
                self.waiting[self.problem.job_ids[m]] = self._no_room(m)
            else:
                offers[m] = offer
        best_s = {m: offer.duration_s for m, offer in offers.items()}  # c_k - now
        rank = np.array(self._rank(offers, best_s), dtype=np.int64)
        for position, m in enumerate(rank.tolist()):
            job = self.problem.job_ids[m]
            offer = self._offer(m)
            if offer is None:
                self.waiting[job] = self._no_room(m)
                continue
            cost = self._delay_cost(offer, rank[position + 1 :], best_s)
            if offer.utility - cost > threshold:
                take(self.left, offer.slices)
                self.placements[job] = placement_of(self.problem, job, offer.slices)
                self.expected += offer.utility
            elif offer.utility <= 0:
                self.waiting[job] = "utility=0"
            else:
                self.waiting[job] = (
                    f"utility={offer.utility:.3g},delay-cost={cost:.3g},threshold={threshold:g}"
                )
        return with_waiting(self.problem, self.placements, self.waiting, self.expected, policy)

    def _continue_or_pause(self) -> list[int]:
        """Keep the running jobs still worth something; the rows left to admit, by arrival."""
        problem = self.problem
        queue: list[int] = []
        for m in (int(r) for r in arrival_order(problem)):
            job = problem.job_ids[m]
            current = problem.running.get(job)
            if current is None:
                queue.append(m)
                continue
            slices = slices_of(problem, current)
            spread = len(current.nodes) > 1
            rate = min(
                self.speeds.rate(m, problem.gpu_types.index(t), current.num_gpus, spread)
                for t in current.gpu_types
            )
            if rate <= 0 or not can_stay(problem, m, current) or not fits(self.left, slices):
                queue.append(m)  # its GPUs are gone, or it cannot run there: it waits
                continue
            done = problem.now_s + float(self.steps[m]) / rate
            value = self.utilities[m].value(done, float(problem.arrival_s[m]))
            if value <= 0:
                self.waiting[job] = "preempted:utility=0"
                continue
            take(self.left, slices)
            self.placements[job] = current
            self.expected += value
        return queue

    def _offer(self, m: int) -> _Offer | None:
        problem = self.problem
        found = fastest(self.speeds, m, int(problem.num_gpus[m]), self.left, self.none_held)
        if found is None:
            return None
        t, slices, rate = found
        duration = float(self.restart[m]) + float(self.steps[m]) / rate
        value = self.utilities[m].value(problem.now_s + duration, float(problem.arrival_s[m]))
        return _Offer(t, slices, duration, value)

    def _gpu_s(self, m: int, offer: _Offer) -> float:
        return max(int(self.problem.num_gpus[m]) * offer.duration_s, 1e-9)

    def _rank(self, offers: Mapping[int, _Offer], best_s: Mapping[int, float]) -> list[int]:
        """The rows with an offer in admission order (step 4 of the module docstring)."""
        problem = self.problem
        rows = list(offers)

        def tie(m: int) -> tuple[float, int]:
            return float(problem.arrival_s[m]), m

        gross = sorted(rows, key=lambda m: (-offers[m].utility / self._gpu_s(m, offers[m]), tie(m)))
        queue = np.array(gross, dtype=np.int64)
        net = {
            m: (offers[m].utility - self._delay_cost(offers[m], queue[queue != m], best_s))
            / self._gpu_s(m, offers[m])
            for m in rows
        }
        return sorted(rows, key=lambda m: (-net[m], tie(m)))

    def _delay_cost(self, offer: _Offer, behind: np.ndarray, best_s: Mapping[int, float]) -> float:
        """What the jobs `behind` (rows, in order) that would take the offer's GPUs lose by
        waiting its duration for them (step 3 of the module docstring)."""
        problem = self.problem
        pool = sum(count for _n, _t, count in offer.slices)
        rows = behind[self.usable[behind, offer.t] & (problem.num_gpus[behind] <= pool)]
        if rows.size == 0:
            return 0.0
        after = self.left.sum(axis=0)
        for _n, t, count in offer.slices:
            after[t] -= count
        need = problem.num_gpus[rows]
        room_after = (self.usable[rows] & (after[None, :] >= need[:, None])).any(axis=1)
        candidates = rows[~room_after]
        if candidates.size == 0:
            return 0.0
        smallest = int(problem.num_gpus[candidates].min())
        cost = 0.0
        for k in (int(r) for r in candidates):
            gpus = int(problem.num_gpus[k])
            if gpus > pool:
                continue
            done = problem.now_s + best_s[k]
            arrival = float(problem.arrival_s[k])
            utility = self.utilities[k]
            cost += max(
                0.0, utility.value(done, arrival) - utility.value(done + offer.duration_s, arrival)
            )
            pool -= gpus
            if pool < smallest:
                break
        return cost

    def _no_room(self, m: int) -> str:
        return f"no-room:{int(self.problem.num_gpus[m])}-GPUs"
