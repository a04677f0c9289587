"""Gavel's round bookkeeping, as its simulator keeps it: time received, deficits, resets,
priorities and the per-type walk that picks a round's jobs.

Our round mechanism (core/mechanism.py) follows the same rules with choices of its own
(docs/simulation.md, "Gavel-faithful mode"); this is Gavel's side of each, for the faithful
simulation only:

- A new allocation is computed only together with a reset of the time received, and a reset
  only when something changed and the last one is at least the minimum interval old (or was
  at time 0). Until then a new job is in no allocation and is never placed.
- Every job starts each period with half a round on every type; a type's total counts the
  jobs that were there at the reset and every second run since, including jobs that left
  (a job that arrives later adds its half round to its own time only).
- Priority = allocation / share of the type's time received; 0 for a job the allocation does
  not have; the allocation's noise counts (a fraction of 1e-9 is a priority above 0).
- Each type's queue is every job, sorted by (priority, deficit, allocation), highest first,
  ties in arrival order; the types are walked one after another. A picked job that is not in
  the allocation takes its GPUs from the walk but is not placed.

Pure: the time is an argument; the allocation comes from a callable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from slurm_hetsched.sim.faithful.choices import GAVEL, FaithfulChoices


class GavelRounds:
    """The round state of Gavel's simulator for one run.

    Args:
        gpu_types: the cluster's GPU types (any order).
        round_s: the round length (each job starts a period with half of it on every type).
        min_reset_interval_s: the minimum time between resets (Gavel: 1920 s).
        choices: which of Gavel's behaviours to keep (recompute, shares, walk); the others
            are ours (sim/faithful/choices.py).
    """

    def __init__(
        self,
        gpu_types: Sequence[str],
        round_s: float,
        min_reset_interval_s: float,
        choices: FaithfulChoices = GAVEL,
    ) -> None:
        self.gpu_types = tuple(gpu_types)
        self.half_round_s = round_s / 2.0
        self.min_reset_interval_s = min_reset_interval_s
        self.choices = choices
        self.reset_pending = False  # ours: a new allocation waits for its reset
        self.job_time: dict[str, dict[str, float]] = {}  # active jobs, in arrival order
        self.type_time = dict.fromkeys(self.gpu_types, 0.0)
        self.deficit: dict[str, dict[str, float]] = {t: {} for t in self.gpu_types}
        self.allocation: dict[str, dict[str, float]] = {}
        self.last_reset_s = 0.0
        self.need_allocation = False
        self.resets = 0

    # -- jobs coming and going ----------------------------------------------------------------

    def add_job(self, job_id: str) -> None:
        self.job_time[job_id] = dict.fromkeys(self.gpu_types, self.half_round_s)
        for gpu_type in self.gpu_types:
            self.deficit[gpu_type][job_id] = 0.0
        self.need_allocation = True

    def remove_job(self, job_id: str) -> None:
        del self.job_time[job_id]
        for gpu_type in self.gpu_types:
            del self.deficit[gpu_type][job_id]
        self.need_allocation = True

    def record(self, job_id: str, gpu_type: str, seconds: float) -> None:
        """A job's round on `gpu_type` took `seconds` (counted from the round's start)."""
        self.job_time[job_id][gpu_type] += seconds
        self.type_time[gpu_type] += seconds

    # -- the allocation and its resets -------------------------------------------------------

    def maybe_reallocate(
        self, now_s: float, compute: Callable[[], Mapping[str, Mapping[str, float]]]
    ) -> bool:
        """Reset and compute a new allocation if one is needed and a reset is due (ours: a
        new allocation at once, its reset when due); True if an allocation was computed."""
        due = now_s - self.last_reset_s >= self.min_reset_interval_s or self.last_reset_s == 0
        if due and (self.need_allocation or self.reset_pending):
            self._reset(now_s)
            self.reset_pending = False
        elif self.need_allocation and not self.choices.recompute:
            self.reset_pending = True
        else:
            return False
        if not self.need_allocation:
            return False
        self.allocation = {job: dict(row) for job, row in compute().items()}
        self.need_allocation = False
        return True

    def force_reset_due(self) -> None:
        """Nothing runs and nothing is left to arrive: the next reset may happen at once."""
        self.last_reset_s = 0.0

    def _reset(self, now_s: float) -> None:
        elapsed_s = now_s - self.last_reset_s
        for gpu_type in self.gpu_types:
            self.type_time[gpu_type] = 0.0
            for job_id, times in self.job_time.items():
                received = times[gpu_type] - self.half_round_s
                owed = (
                    self.allocation[job_id][gpu_type] * elapsed_s
                    if job_id in self.allocation
                    else 0.0
                )
                self.deficit[gpu_type][job_id] += owed - received
                times[gpu_type] = self.half_round_s
                self.type_time[gpu_type] += self.half_round_s
        self.last_reset_s = now_s
        self.resets += 1

    # -- choosing a round's jobs --------------------------------------------------------------

    def priorities(self, runs_on: Callable[[str, str], bool]) -> dict[str, dict[str, float]]:
        """Per type, job -> allocation / share of the type's time received."""
        out: dict[str, dict[str, float]] = {}
        for gpu_type in self.gpu_types:
            total = self.type_time[gpu_type]
            if not self.choices.shares:  # ours: only the jobs still here
                total = sum(times[gpu_type] for times in self.job_time.values())
            per_job = {}
            for job_id, times in self.job_time.items():
                row = self.allocation.get(job_id)
                if row is None or row[gpu_type] == 0.0 or not runs_on(job_id, gpu_type):
                    per_job[job_id] = 0.0
                    continue
                share = times[gpu_type] / total if total != 0.0 else 0.0
                per_job[job_id] = row[gpu_type] / share if share > 0.0 else row[gpu_type] * 1e9
            out[gpu_type] = per_job
        return out

    def pick(
        self,
        order: Sequence[str],
        capacity: Mapping[str, int],
        num_gpus: Mapping[str, int],
        runs_on: Callable[[str, str], bool],
        fifo: bool,
    ) -> list[tuple[str, str]]:
        """The round's (job, GPU type) pairs: each type's queue walked in `order`.

        A job picked that is not in the allocation (it arrived after the last one) holds its
        GPUs in the walk but is left out of the result, as Gavel's placement skips it.
        """
        priority = self.priorities(runs_on)
        left = {t: capacity[t] for t in order}
        queue: list[tuple[str, str]] = []
        for gpu_type in order:
            ranked = [
                (self._rank(p, job_id, gpu_type), job_id)
                for job_id, p in priority[gpu_type].items()
            ]
            # A stable sort, also with reverse=True: ties stay in arrival order.
            ranked.sort(key=lambda entry: entry[0], reverse=True)
            queue.extend((job_id, gpu_type) for _, job_id in ranked)
        chosen: set[str] = set()
        picks = []
        for job_id, gpu_type in queue:
            if left[gpu_type] == 0 or job_id in chosen or not runs_on(job_id, gpu_type):
                continue
            if fifo and priority[gpu_type][job_id] <= 0.0:
                continue
            if num_gpus[job_id] > left[gpu_type]:
                continue
            if job_id not in self.allocation and not self.choices.walk:
                continue
            left[gpu_type] -= num_gpus[job_id]
            chosen.add(job_id)
            if job_id in self.allocation:
                picks.append((job_id, gpu_type))
        return picks

    def _rank(self, priority: float, job_id: str, gpu_type: str) -> tuple[float, float, float]:
        """Gavel's queue key: priority, then deficit, then allocation."""
        row = self.allocation.get(job_id)
        return priority, self.deficit[gpu_type][job_id], row[gpu_type] if row else 0.0


def allocation_rows(
    job_ids: Sequence[str], gpu_types: Sequence[str], x: np.ndarray
) -> dict[str, dict[str, float]]:
    """Time fractions as job -> type -> fraction."""
    return {
        job_id: dict(zip(gpu_types, x[m].tolist(), strict=True)) for m, job_id in enumerate(job_ids)
    }
