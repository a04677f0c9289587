"""The `oasis` policy's decision time at scale (the OASiS issue's targets: under 0.1 s per
arriving job, under 2 s per round at 1000 held jobs on 100 nodes). Prints a table; asserts
nothing.

    .venv/bin/python benchmarks/oasis_scaling.py
    .venv/bin/python benchmarks/oasis_scaling.py --held 1000 --nodes 100 --repeat 3

The cluster: `--nodes` nodes of 4 GPUs cycling v100, p100, k80. First `4 x nodes` long jobs
(10-20 h on a V100, worth 50-100, time-insensitive) arrive at once: as many as the prices allow
are admitted and reserve their GPUs past the horizon; then `--held` time-critical jobs (1-4 h,
worth 1-100, target 1-2 h) arrive, most of which cannot pay for what is left: they are held.
Measured (with the dynamic programmes each decision ran; the other jobs the cheap bound settles):

- one arriving job: a round with the reservations and one new job that can pay (a node of
  its own added), and no held jobs: the whole round, so an upper bound on the job's own
  evaluation (the bound and the dynamic programme);
- a round at `--held` held jobs: every held job evaluated again (the bound, and the dynamic
  programme for those the bound does not settle), with the reservations kept;
- the same round with the held jobs worth 1e5 each: the bound settles only a job with no room
  at all, so the programme runs for every other one (the worst case per programme).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from typing import Any

import numpy as np

import slurm_hetsched.core.policies.oasis as oasis_module
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


def _timed(policy: Oasis, problem: Problem, repeat: int) -> tuple[float, Allocation, int]:
    """Median seconds of `repeat` decisions, the last allocation, and the dynamic programmes
    one decision ran (the rest of the jobs were settled by the cheap bound or kept)."""
    times, allocation, runs = [], None, [0]
    real = oasis_module.best_schedule

    def counted(*args: Any, **kwargs: Any) -> Any:
        runs[0] += 1
        return real(*args, **kwargs)

    oasis_module.best_schedule = counted  # type: ignore[assignment]
    try:
        for _ in range(repeat):
            started = time.perf_counter()
            allocation = policy.allocate(problem)
            times.append(time.perf_counter() - started)
    finally:
        oasis_module.best_schedule = real  # type: ignore[assignment]
    assert allocation is not None
    return statistics.median(times), allocation, runs[0] // repeat


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
    fill_s, first, fill_runs = _timed(policy, _problem(nodes, long_jobs, 0.0, None), 1)
    held_jobs = _jobs(rng, args.held, (1, 4), (1, 100), True, "held")
    jobs = {**long_jobs, **held_jobs}
    round_s, second, round_runs = _timed(policy, _problem(nodes, jobs, 360.0, first), args.repeat)
    held = sum(1 for j in held_jobs if j not in (second.reservations or {}))
    # Held jobs worth far more than any price: the bound settles only those with no room.
    rich = {
        j: (r, s, dataclasses.replace(u, max_utility=1e5)) for j, (r, s, u) in held_jobs.items()
    }
    worst_policy = Oasis(max_utility=1e5)
    worst_s, worst, worst_runs = _timed(
        worst_policy, _problem(nodes, {**long_jobs, **rich}, 360.0, first), 1
    )
    # One arriving job that can pay: a free node of its own.
    spare = (*nodes, Node("spare", {"v100": 4}))
    newcomer = _jobs(rng, 1, (1, 2), (50, 100), True, "new")
    arrive_s, third, arrive_runs = _timed(
        policy, _problem(spare, {**long_jobs, **newcomer}, 720.0, second), args.repeat
    )
    print(f"oasis decision time, {args.nodes} nodes x 4 GPUs, horizon {policy.horizon} slots of "
          f"{policy.slot_s:g} s, granularity {policy.granularity}")  # fmt: skip
    print(f"{'case':<58} {'programmes':>10} {'seconds':>10}")
    print("-" * 80)
    admitted_long = sum(1 for j in long_jobs if j in (first.reservations or {}))
    rows = [
        (f"{len(long_jobs)} long jobs arrive at once ({admitted_long} admitted)", fill_runs,
         f"{fill_s:.2f}"),
        ("   per arriving job", "", f"{fill_s / max(len(long_jobs), 1):.4f}"),
        (f"a round at {held} held jobs ({args.held - held} admitted)", round_runs,
         f"{round_s:.3f}"),
        (f"the same, held jobs worth 1e5 "
         f"({sum(1 for j in rich if j in (worst.reservations or {}))} admitted)", worst_runs,
         f"{worst_s:.2f}"),
        ("   per programme", "", f"{worst_s / max(worst_runs, 1):.4f}"),
    ]  # fmt: skip
    tried = sum(1 for j in {**long_jobs, **newcomer} if j not in (second.reservations or {}))
    rows += [
        (f"a round with one arriving job ({tried} jobs without a schedule)", arrive_runs,
         f"{arrive_s:.4f}"),
        ("   per job without a schedule", "", f"{arrive_s / max(tried, 1):.4f}"),
        ("   it was admitted", "", str("new0" in (third.reservations or {}))),
    ]  # fmt: skip
    for name, runs, value in rows:
        print(f"{name:<58} {runs!s:>10} {value:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
