"""Gavel's FIFO policies for the Gavel-faithful simulation: a greedy assignment of one GPU
type per job, not a program (ours is the arrival-weighted LP of core/policies/fifo.py).

Written from the behaviour of Gavel's `policies/fifo.py` at c4fa400, quirk included: its
agnostic version gives a job the alphabetically last open type whatever type it drew
(docs/simulation.md, "Gavel-faithful mode").

Pure: the only randomness is the run's seeded generator.
"""

from __future__ import annotations

import random

import numpy as np

from slurm_hetsched.sim.faithful.forms import Demand, Form


class FifoPerf(Form):
    """Gavel's FIFO: jobs in arrival order take a type with room for them (fraction 1),
    until one finds none (the queue stops there: strict FIFO). Heterogeneity-aware: the
    fastest type with room, decided afresh at every call (Gavel's "perf" mode forgets)."""

    name = "fifo_perf"
    is_fifo = True
    remembers = False

    def __init__(self, solver: str = "CLARABEL", seed: int = 0) -> None:
        super().__init__(solver, seed)
        self._given: dict[str, str] = {}  # job -> its type, kept between calls
        self._seen: dict[str, int] = {}  # job -> arrival rank (Gavel walks its jobs by id)
        self._rng = random.Random(seed)

    def forget(self) -> None:
        self._given.clear()

    def _allocate(self, demand: Demand) -> np.ndarray:
        if not self.remembers:
            self._given.clear()
        rows = {job_id: m for m, job_id in enumerate(demand.job_ids)}
        free = dict(zip(demand.gpu_types, demand.capacity.tolist(), strict=True))
        for job_id in demand.job_ids:
            self._seen.setdefault(job_id, len(self._seen))
        queue = [j for j in demand.job_ids if j not in self._given]
        for job_id in sorted(self._given, key=self._seen.__getitem__):
            gpu_type = self._given[job_id]
            if job_id in rows:
                free[gpu_type] -= demand.num_gpus[rows[job_id]]
                continue
            # A job left: the first waiting job may take its type.
            if queue:
                head = queue[0]
                m = rows[head]
                if demand.num_gpus[m] <= free[gpu_type] and self._rate(demand, m, gpu_type) > 0:
                    queue.pop(0)
                    self._given[head] = gpu_type
                    free[gpu_type] -= demand.num_gpus[m]
            del self._given[job_id]
        self._assign_queue(demand, rows, free, queue)
        x = np.zeros(demand.throughput.shape)
        for job_id, gpu_type in self._given.items():
            x[rows[job_id], demand.gpu_types.index(gpu_type)] = 1.0
        return x

    def _assign_queue(
        self, demand: Demand, rows: dict[str, int], free: dict[str, float], queue: list[str]
    ) -> None:
        open_types = sorted(t for t in free if free[t] > 0)
        while queue and open_types:
            job_id = queue.pop(0)
            m = rows[job_id]
            fitting = [t for t in open_types if free[t] >= demand.num_gpus[m]]
            if not fitting:
                break
            gpu_type, pop_index = self._choose(demand, m, fitting, open_types)
            if self._rate(demand, m, gpu_type) > 0:
                self._given[job_id] = gpu_type
                free[gpu_type] -= demand.num_gpus[m]
                if free[gpu_type] == 0:
                    open_types.pop(pop_index)

    def _choose(
        self, demand: Demand, m: int, fitting: list[str], open_types: list[str]
    ) -> tuple[str, int]:
        """The type for job row m, and the index in `open_types` to close if it fills up."""
        best = max(fitting, key=lambda t: (self._rate(demand, m, t), -fitting.index(t)))
        return best, open_types.index(best)

    @staticmethod
    def _rate(demand: Demand, m: int, gpu_type: str) -> float:
        return float(demand.throughput[m, demand.gpu_types.index(gpu_type)])


class Fifo(FifoPerf):
    """Gavel's agnostic FIFO, as its code behaves: each job keeps the type it was given
    until it leaves, and the first waiting job takes the type of a job that left if it fits
    there (counting only the GPUs of the jobs before it in arrival order). For the others
    it draws a random type among those with
    room (seeded with the run's seed) but then gives the job the last open type in
    alphabetical order (its loop variable), and when that type fills up exactly it closes
    the drawn type instead; a type overfilled this way never closes, and jobs keep piling
    onto it while any other type has room."""

    name = "fifo"
    agnostic = True
    remembers = True

    def _choose(
        self, demand: Demand, m: int, fitting: list[str], open_types: list[str]
    ) -> tuple[str, int]:
        drawn = self._rng.randrange(len(fitting))
        return open_types[-1], open_types.index(fitting[drawn])
