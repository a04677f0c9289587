"""What a policy returns: an `Allocation`, the fraction of time each job spends on each GPU type
(plus shared pairs, unmet SLOs or node placements, by policy), and its what-if JSON form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slurm_hetsched.core.model.frozen import frozen_array, frozen_mapping, set_field
from slurm_hetsched.core.model.payment import Payment
from slurm_hetsched.core.model.placement import Placement
from slurm_hetsched.core.model.reservation import Reservation


@dataclass(frozen=True, slots=True)
class Allocation:
    """A policy's answer: the fraction of wall-clock time each job spends on each GPU type.

    Attributes:
        job_ids: row order, as in the problem.
        gpu_types: column order, as in the problem.
        x: (n_jobs, n_types) time fractions in [0, 1]; rows sum to <= 1; num_gpus-weighted
            columns sum to <= capacity.
        objective: the policy's objective value (for max-min fairness: the smallest
            weighted normalized throughput).
        solve_s: seconds the solver stack reported for building and solving (not wall time
            measured by the core, which reads no clock); 0.0 if not reported.
        policy: the registered name of the policy that produced it.
        status: the solver status; always "optimal" for an allocation a policy returns.
        solves: how many solver calls it took (LPs, for the max-min policies).
        pairs: space sharing (`*_packed` policies): the candidate pairs of job ids, in the
            order of the problem's `packed.pairs`; () for other policies.
        pair_x: (n_pairs, n_types) time fractions each pair spends sharing GPUs of each type
            (num_gpus GPUs for the two jobs together), or None for other policies. Then `x`
            is each job's time alone: job m's row sum plus the pair_x rows of its pairs is
            <= 1, and num_gpus @ x + pair num_gpus @ pair_x <= capacity.
        unmet_slos: policies with SLOs: the jobs whose SLO this allocation does not meet (it
            meets all the others); None for policies that do not consider SLOs.
        placements: policies that place jobs on nodes (ANDREAS, the exclusive baselines):
            job -> its GPUs now, with x 1 on that type (a gang across types: each type's
            share of its GPUs); a job absent is postponed. None for time-fraction policies.
        waiting: policies that admit jobs by price (hadar): job -> why it was not admitted,
            e.g. "price 3.1 > utility 2.4" (its admin comment says so); {} for the others.
        reservations: reservation policies (oasis): every admitted job's schedule from this
            round on (core/model/reservation.py), handed back in the next round's
            `Problem.reservations`; None for the others.
        payments: tenant policies (astraea): each job running this round on GPUs outside
            its account's quota -> what it pays and to whom (core/model/payment.py); None
            for the others.
    """

    job_ids: tuple[str, ...]
    gpu_types: tuple[str, ...]
    x: np.ndarray  # (n_jobs, n_types) time fractions
    objective: float
    solve_s: float
    policy: str
    status: str = "optimal"
    solves: int = 1
    pairs: tuple[tuple[str, str], ...] = ()
    pair_x: np.ndarray | None = None  # (n_pairs, n_types) time fractions of each pair
    unmet_slos: tuple[str, ...] | None = None
    placements: Mapping[str, Placement] | None = None
    waiting: Mapping[str, str] = field(default_factory=dict)
    reservations: Mapping[str, Reservation] | None = None
    payments: Mapping[str, Payment] | None = None

    def __post_init__(self) -> None:
        set_field(self, "waiting", frozen_mapping(self.waiting))
        if self.payments is not None:
            set_field(self, "payments", frozen_mapping(self.payments))
        if self.reservations is not None:
            set_field(self, "reservations", frozen_mapping(self.reservations))
        shape = (len(self.job_ids), len(self.gpu_types))
        set_field(self, "x", frozen_array(self.x, float, "allocation x", shape))
        if self.placements is not None:
            set_field(self, "placements", frozen_mapping(self.placements))
        set_field(self, "pairs", tuple((str(a), str(b)) for a, b in self.pairs))
        if self.pair_x is not None or self.pairs:
            pair_shape = (len(self.pairs), len(self.gpu_types))
            pair_x = np.zeros(pair_shape) if self.pair_x is None else self.pair_x
            set_field(self, "pair_x", frozen_array(pair_x, float, "allocation pair_x", pair_shape))
        if self.unmet_slos is not None:
            set_field(self, "unmet_slos", tuple(self.unmet_slos))

    def share(self, job_id: str) -> dict[str, float]:
        """Time fraction per GPU type of one job."""
        row = self.x[self.job_ids.index(job_id)]
        return {t: float(v) for t, v in zip(self.gpu_types, row, strict=True)}

    def to_json(self, digits: int = 3) -> dict[str, Any]:
        """The "What-if allocation" output of docs/interfaces.md, values rounded to `digits`.

        Space sharing adds "packed": [{"jobs": [a, b], "allocation": {type: fraction}}] for
        the pairs with a non-zero rounded share; policies with SLOs add "unmet_slos";
        placement policies add "placement": {job: [{"node", "type", "count"}]}; admission
        policies add "waiting": {job: why it was not admitted}; reservation policies add
        "schedules": {job: {"slot_s", "utility", "price", "slots": [{"first", "last",
        "placement"}]}} (slot k covers [k slot_s, (k + 1) slot_s); placement null: paused);
        tenant policies add "payments": {job: {"account", "amount", "per_hour", "borrowed",
        "paid_to"}}.
        """
        out: dict[str, Any] = {
            "policy": self.policy,
            "allocation": {
                job: {
                    t: round(float(v), digits) + 0.0
                    for t, v in zip(self.gpu_types, row, strict=True)
                }
                for job, row in zip(self.job_ids, self.x, strict=True)
            },
            "objective": round(float(self.objective), digits),
            "solve_s": round(float(self.solve_s), digits),
        }
        if self.pair_x is not None:
            out["packed"] = [
                {
                    "jobs": list(pair),
                    "allocation": {
                        t: round(float(v), digits) + 0.0
                        for t, v in zip(self.gpu_types, row, strict=True)
                    },
                }
                for pair, row in zip(self.pairs, self.pair_x, strict=True)
                if np.round(row, digits).any()
            ]
        if self.unmet_slos is not None:
            out["unmet_slos"] = list(self.unmet_slos)
        if self.placements is not None:  # placement policies: jobs left out are postponed
            out["placement"] = {
                job: [{"node": s.node, "type": s.gpu_type, "count": s.count} for s in p.slices]
                for job, p in sorted(self.placements.items())
            }
        if self.waiting:
            out["waiting"] = dict(sorted(self.waiting.items()))
        if self.payments:  # tenant policies: what each borrowing job pays this round
            out["payments"] = {
                job: {
                    "account": p.payer,
                    "amount": round(p.amount, digits),
                    "per_hour": round(p.per_hour, digits),
                    "borrowed": dict(sorted(p.borrowed.items())),
                    "paid_to": {o: round(p.shares[o], digits) for o in p.lenders()},
                }
                for job, p in sorted(self.payments.items())
            }
        if self.reservations:  # reservation policies: each admitted job's schedule
            out["schedules"] = {
                job: {
                    "slot_s": r.slot_s,
                    "utility": round(r.utility, digits),
                    "price": round(r.price, digits),
                    "slots": [
                        {
                            "first": s.first_slot,
                            "last": s.last_slot,
                            "placement": None
                            if s.placement is None
                            else [
                                {"node": g.node, "type": g.gpu_type, "count": g.count}
                                for g in s.placement.slices
                            ],
                        }
                        for s in r.stretches
                    ],
                }
                for job, r in sorted(self.reservations.items())
            }
        return out
