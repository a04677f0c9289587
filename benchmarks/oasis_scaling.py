"""The `oasis` policy's decision time at scale (the OASiS issue's targets: under 0.1 s per
arriving job, under 2 s per round at 1000 held jobs on 100 nodes). Prints a table; asserts
nothing.

    .venv/bin/python benchmarks/oasis_scaling.py
    .venv/bin/python benchmarks/oasis_scaling.py --held 1000 --nodes 100 --repeat 3

The cluster: `--nodes` nodes of 4 GPUs cycling v100, p100, k80. First `4 x nodes` long jobs
(10-20 h on a V100, worth 50-100, time-insensitive) are admitted and reserve every GPU for the
whole horizon; then `--held` time-critical jobs (1-4 h, worth 1-100, target 1-2 h) arrive,
which cannot pay for GPUs that are taken until after their targets: they are held. Measured:

- one arriving job: a round with the reservations and one new job that can pay (a node of
  its own added), and no held jobs: the whole round, so an upper bound on the job's own
  evaluation (the bound and the dynamic programme);
- a round at `--held` held jobs: every held job evaluated again (the bound, and the dynamic
  programme for those the bound does not settle), with the reservations kept;
- the same round with the held jobs' utilities high enough that the bound never settles one:
  the dynamic programme for every held job (the worst case).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

import numpy as np

from slurm_hetsched.core.model import Allocation, Node, Problem
from slurm_hetsched.core.policies.oasis import Oasis
from slurm_hetsched.core.utility import Utility

TYPES = ("k80", "p100", "v100")
SPEED = np.array([1.0, 2.0, 3.0])  # per GPU type, times a job's own factor
HOUR = 3600.0


def _jobs(rng: np.random.Generator, n: int, hours: tuple[float, float], worth: tuple[float, float],
          critical: bool, prefix: str) -> dict[str, tuple[np.ndarray, float, Utility]]:  # fmt: skip
    jobs = {}
    for i in range(n):
        factor = rng.uniform(0.5, 2.0)
        rates = SPEED * factor
        steps = rng.uniform(*hours) * HOUR * rates[2]
        umax = float(rng.uniform(*worth))
        utility = (
            Utility("sigmoid", umax, float(rng.uniform(1, 2)) * HOUR, float(rng.uniform(4, 6)))
            if critical
            else Utility("sigmoid", umax, 100 * HOUR, 0.0)
        )
        jobs[f"{prefix}{i}"] = (rates, steps, utility)
    return jobs


def _problem(nodes: tuple[Node, ...], jobs: dict[str, tuple[np.ndarray, float, Utility]],
             now_s: float, last: Allocation | None) -> Problem:  # fmt: skip
    ids = tuple(jobs)
    capacity = [sum(n.gpus.get(t, 0) for n in nodes) for t in TYPES]
    placed = {} if last is None else dict(last.placements or {})
    running = {j: p for j, p in placed.items() if j in jobs}
    return Problem(
        job_ids=ids,
        gpu_types=TYPES,
        throughput=np.array([jobs[j][0] for j in ids]),
        capacity=np.array(capacity, float),
        steps=np.array([jobs[j][1] for j in ids]),
        utilities=tuple(jobs[j][2] for j in ids),
        arrival_s=np.zeros(len(ids)),
        nodes=nodes,
        now_s=now_s,
        running=running,
        reservations={} if last is None else dict(last.reservations or {}),
    )


def _timed(policy: Oasis, problem: Problem, repeat: int) -> tuple[float, Allocation]:
    times, allocation = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        allocation = policy.allocate(problem)
        times.append(time.perf_counter() - started)
    assert allocation is not None
    return statistics.median(times), allocation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100, help="nodes of 4 GPUs (default 100)")
    parser.add_argument("--held", type=int, default=1000, help="held jobs (default 1000)")
    parser.add_argument("--repeat", type=int, default=3, help="timings per case, median (3)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    nodes = tuple(Node(f"n{i:03d}", {TYPES[i % 3]: 4}) for i in range(args.nodes))
    policy = Oasis()
    long_jobs = _jobs(rng, 4 * args.nodes, (10, 20), (50, 100), False, "long")
    fill_s, first = _timed(policy, _problem(nodes, long_jobs, 0.0, None), 1)
    held_jobs = _jobs(rng, args.held, (1, 4), (1, 100), True, "held")
    jobs = {**long_jobs, **held_jobs}
    round_s, second = _timed(policy, _problem(nodes, jobs, 360.0, first), args.repeat)
    held = sum(1 for j in held_jobs if j not in (second.reservations or {}))
    # The worst case: no held job is settled by the bound (worth far more than any price).
    rich = {
        j: (r, s, dataclasses.replace(u, max_utility=1e5)) for j, (r, s, u) in held_jobs.items()
    }
    worst_policy = Oasis(max_utility=1e5)
    worst_s, worst = _timed(worst_policy, _problem(nodes, {**long_jobs, **rich}, 360.0, first), 1)
    # One arriving job that can pay: a free node of its own.
    spare = (*nodes, Node("spare", {"v100": 4}))
    newcomer = _jobs(rng, 1, (1, 2), (50, 100), True, "new")
    arrive_s, third = _timed(policy, _problem(spare, {**long_jobs, **newcomer}, 720.0, second),
                             args.repeat)  # fmt: skip
    print(f"oasis decision time, {args.nodes} nodes x 4 GPUs, horizon {policy.horizon} slots of "
          f"{policy.slot_s:g} s, granularity {policy.granularity}")  # fmt: skip
    print(f"{'case':<58} {'seconds':>10}")
    print("-" * 69)
    print(f"{f'admit {len(long_jobs)} long jobs at once (first round)':<58} {fill_s:>10.2f}")
    print(f"{f'a round at {held} held jobs':<58} {round_s:>10.3f}")
    admitted = len(worst.reservations or {}) - len(long_jobs)
    print(f"{f'the same, every held job through the programme ({admitted} admitted)':<58} "
          f"{worst_s:>10.2f}")  # fmt: skip
    print(f"{'   per held job':<58} {worst_s / max(args.held, 1):>10.4f}")
    tried = sum(1 for j in {**long_jobs, **newcomer} if j not in (second.reservations or {}))
    print(f"{f'a round with one arriving job ({tried} jobs without a schedule)':<58} "
          f"{arrive_s:>10.4f}")  # fmt: skip
    print(f"{'   per job without a schedule':<58} {arrive_s / max(tried, 1):>10.4f}")
    print(f"{'   it was admitted':<58} {'new0' in (third.reservations or {})!s:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
