"""OASiS's Theorem 4 in the paper's own setting: with exact U and L, demand far below
capacity, no restart cost and no limit on changes, every job decided once at its arrival and
scheduled to complete by the horizon's end T, the total utility of the jobs admitted is at
least 1/(2 alpha) of the offline optimum's (sim/offline_optimum.py, an integer programme
solved by HiGHS), alpha = max(1, ln(U/L)) computed here from the instance."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from slurm_hetsched.core.model import Node, Problem, Reservation
from slurm_hetsched.core.policies.hadar_alloc import job_view
from slurm_hetsched.core.policies.oasis import Oasis, worth
from slurm_hetsched.core.policies.oasis_prices import estimate_bounds
from slurm_hetsched.core.utility import Utility
from slurm_hetsched.sim.offline_optimum import OptimumInstance, OptimumJob, offline_optimum

TYPES = ("k80", "v100")
SLOT_S = 100.0
CAPACITY = 8  # GPUs of a node: jobs of 1 or 2 GPUs are far below it


@st.composite
def instances(draw: st.DrawFn) -> tuple[tuple[Node, ...], list[OptimumJob], int]:
    slots = draw(st.integers(3, 5))
    nodes = (Node("a", {"k80": CAPACITY}), Node("b", {"v100": CAPACITY}))
    jobs = []
    for i in range(draw(st.integers(2, 5))):
        v100 = draw(st.sampled_from([1.0, 2.0, 3.0]))
        k80 = draw(st.sampled_from([0.0, 0.5, 1.0])) * v100
        slots_needed = draw(st.sampled_from([0.5, 1.0, 1.5, 2.0]))
        kind = draw(st.sampled_from(["sigmoid", "linear", "flat"]))
        umax = draw(st.floats(1.0, 100.0))
        target = draw(st.floats(0.5, 4.0)) * SLOT_S
        utility = (
            Utility("sigmoid", umax, target, draw(st.floats(0.0, 60.0)))
            if kind == "sigmoid"
            else Utility("linear", umax, target * 2)
            if kind == "linear"
            else Utility("flat", umax)
        )
        jobs.append(
            OptimumJob(
                arrival_s=draw(st.integers(0, slots - 2)) * SLOT_S,
                steps=slots_needed * SLOT_S * v100,
                num_gpus=draw(st.sampled_from([1, 1, 2])),
                rates={"k80": k80, "v100": v100},
                utility=utility,
                job_id=f"j{i}",
            )
        )
    jobs.sort(key=lambda j: j.arrival_s)
    return nodes, jobs, slots


def _problem(nodes: tuple[Node, ...], jobs: list[OptimumJob], now_s: float,
             reservations: dict[str, Reservation]) -> Problem:  # fmt: skip
    return Problem(
        job_ids=tuple(j.job_id for j in jobs),
        gpu_types=TYPES,
        throughput=np.array([[j.rates[t] for t in TYPES] for j in jobs]),
        capacity=np.array([CAPACITY, CAPACITY], float),
        num_gpus=np.array([j.num_gpus for j in jobs]),
        steps=np.array([j.steps for j in jobs]),
        utilities=tuple(j.utility for j in jobs),
        arrival_s=np.array([j.arrival_s for j in jobs]),
        nodes=nodes,
        now_s=now_s,
        reservations=reservations,
    )


# Found by the search: a flat job paused for a slot a little dearer, into a slot past T.
PAUSED_PAST_T = (
    (Node("a", {"k80": CAPACITY}), Node("b", {"v100": CAPACITY})),
    [
        OptimumJob(
            200.0, 150.0, 1, {"k80": 0.0, "v100": 1.0}, Utility("sigmoid", 1.0, 100.0, 0.0), "j1"
        ),
        OptimumJob(300.0, 150.0, 1, {"k80": 0.0, "v100": 1.0}, Utility("flat", 21.0), "j0"),
    ],
    5,
)


@settings(max_examples=40, deadline=None)
@given(instances())
@example(PAUSED_PAST_T)
def test_total_utility_is_at_least_the_optimum_over_two_alpha(
    instance: tuple[tuple[Node, ...], list[OptimumJob], int],
) -> None:
    nodes, jobs, slots = instance
    horizon_s = slots * SLOT_S
    # Exact U and L: from every job of the instance, as the theorem assumes them known.
    everyone = _problem(nodes, jobs, 0.0, {})
    views = [job_view(everyone, m, everyone.steps, np.zeros(len(jobs))) for m in range(len(jobs))]
    bounds = estimate_bounds(
        [worth(v, SLOT_S, v.arrival_s, horizon_s) for v in views],
        len(TYPES),
        slots,
        2 * CAPACITY,
    )
    admitted: dict[str, Reservation] = {}
    for job in jobs:  # each decided once, at its arrival
        # Its schedule within [arrival, T], as the paper's (T ends every schedule).
        policy = Oasis(
            slot_s=SLOT_S, horizon=slots - int(job.arrival_s // SLOT_S), granularity=64,
            max_changes=2 * slots, restart_s=0.0, fixed_bounds=bounds, within_horizon=True,
        )  # fmt: skip
        present = [j for j in jobs if j.job_id in admitted and
                   admitted[j.job_id].last_slot >= job.arrival_s // SLOT_S]  # fmt: skip
        kept = {j.job_id: admitted[j.job_id] for j in present}
        allocation = policy.allocate(_problem(nodes, [*present, job], job.arrival_s, kept))
        reservations = allocation.reservations or {}
        assert set(kept) <= set(reservations)  # an admitted schedule is never dropped
        if job.job_id in reservations:
            admitted[job.job_id] = reservations[job.job_id]
    online = sum(r.utility for r in admitted.values() if r.completion_s <= horizon_s + 1e-6)
    optimum = offline_optimum(
        OptimumInstance({n.name: dict(n.gpus) for n in nodes}, tuple(jobs), SLOT_S, slots)
    ).total_utility
    assert online >= optimum / (2 * bounds.alpha) - 1e-9, (online, optimum, bounds.alpha)
    assert bounds.alpha >= 1 and math.isfinite(bounds.alpha)
