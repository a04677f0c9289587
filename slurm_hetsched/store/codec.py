"""Exact JSON for the round's value types, so a stored round reads back equal to what was
saved (floats are kept at full precision: a restarted controller must plan what the one that
crashed would have planned)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from slurm_hetsched.core.model import (
    Allocation,
    ClusterSnapshot,
    GpuSlice,
    Job,
    Node,
    Payment,
    Placement,
    Reservation,
    RoundPlan,
    RoundState,
    Stretch,
)
from slurm_hetsched.core.ports import EnactReport, RoundRecord
from slurm_hetsched.core.utility import Utility


def placement_to_json(p: Placement) -> list[list[Any]]:
    return [[s.node, s.gpu_type, s.count] for s in p.slices]


def placement_from_json(job_id: str, data: list[list[Any]]) -> Placement:
    return Placement(job_id, tuple(GpuSlice(str(n), str(t), int(c)) for n, t, c in data))


def _placements_to_json(ps: Mapping[str, Placement]) -> dict[str, Any]:
    return {j: placement_to_json(p) for j, p in sorted(ps.items())}


def _placements_from_json(data: Mapping[str, Any]) -> dict[str, Placement]:
    return {j: placement_from_json(j, v) for j, v in data.items()}


def _reservations_to_json(rs: Mapping[str, Reservation]) -> dict[str, Any]:
    return {
        j: {
            "slot_s": r.slot_s,
            "utility": r.utility,
            "price": r.price,
            "stretches": [
                [s.first_slot, s.last_slot, None if s.placement is None
                 else placement_to_json(s.placement)]
                for s in r.stretches
            ],
        }
        for j, r in sorted(rs.items())
    }  # fmt: skip


def _reservations_from_json(data: Mapping[str, Any]) -> dict[str, Reservation]:
    return {
        str(j): Reservation(
            job_id=str(j),
            slot_s=float(r["slot_s"]),
            stretches=tuple(
                Stretch(int(first), int(last), None if p is None else placement_from_json(j, p))
                for first, last, p in r["stretches"]
            ),
            utility=float(r["utility"]),
            price=float(r["price"]),
        )
        for j, r in data.items()
    }


def _payments_to_json(ps: Mapping[str, Payment]) -> dict[str, Any]:
    return {
        j: {
            "payer": p.payer,
            "amount": p.amount,
            "period_s": p.period_s,
            "borrowed": dict(p.borrowed),
            "shares": dict(p.shares),
            "lent": dict(p.lent),
        }
        for j, p in sorted(ps.items())
    }


def _payments_from_json(data: Mapping[str, Any]) -> dict[str, Payment]:
    return {
        str(j): Payment(
            payer=str(p["payer"]),
            amount=float(p["amount"]),
            period_s=float(p["period_s"]),
            borrowed={str(t): int(n) for t, n in p["borrowed"].items()},
            shares={str(o): float(v) for o, v in p["shares"].items()},
            lent={str(o): float(v) for o, v in p.get("lent", {}).items()},
        )
        for j, p in data.items()
    }


def allocation_to_json(a: Allocation) -> dict[str, Any]:
    return {
        "job_ids": list(a.job_ids),
        "gpu_types": list(a.gpu_types),
        "x": a.x.tolist(),
        "objective": a.objective,
        "solve_s": a.solve_s,
        "policy": a.policy,
        "status": a.status,
        "solves": a.solves,
        "unmet_slos": None if a.unmet_slos is None else list(a.unmet_slos),
        "placements": None if a.placements is None else _placements_to_json(a.placements),
        "waiting": dict(a.waiting),
        "reservations": (None if a.reservations is None else _reservations_to_json(a.reservations)),
        "payments": None if a.payments is None else _payments_to_json(a.payments),
    }


def allocation_from_json(d: Mapping[str, Any]) -> Allocation:
    k = len(d["gpu_types"])
    return Allocation(
        job_ids=tuple(d["job_ids"]),
        gpu_types=tuple(d["gpu_types"]),
        x=np.array(d["x"], dtype=float).reshape(len(d["job_ids"]), k),
        objective=float(d["objective"]),
        solve_s=float(d["solve_s"]),
        policy=str(d["policy"]),
        status=str(d["status"]),
        solves=int(d["solves"]),
        unmet_slos=None if d["unmet_slos"] is None else tuple(d["unmet_slos"]),
        placements=None if d["placements"] is None else _placements_from_json(d["placements"]),
        waiting={str(k): str(v) for k, v in (d.get("waiting") or {}).items()},
        # Absent in rounds recorded before reservation policies.
        reservations=(
            None if d.get("reservations") is None else _reservations_from_json(d["reservations"])
        ),
        # Absent in rounds recorded before tenant policies.
        payments=None if d.get("payments") is None else _payments_from_json(d["payments"]),
    )


def state_to_json(s: RoundState) -> dict[str, Any]:
    return {
        "round": s.round,
        "job_ids": list(s.job_ids),
        "gpu_types": list(s.gpu_types),
        "received_s": s.received_s.tolist(),
        "deficit_s": s.deficit_s.tolist(),
        "allocation": None if s.allocation is None else allocation_to_json(s.allocation),
        "placements": _placements_to_json(s.placements),
        "last_reset_s": s.last_reset_s,
        "reset_pending": s.reset_pending,
        "placed_at_s": dict(s.placed_at_s),
    }


def state_from_json(d: Mapping[str, Any]) -> RoundState:
    shape = (len(d["job_ids"]), len(d["gpu_types"]))
    return RoundState(
        round=int(d["round"]),
        job_ids=tuple(d["job_ids"]),
        gpu_types=tuple(d["gpu_types"]),
        received_s=np.array(d["received_s"], dtype=float).reshape(shape),
        deficit_s=np.array(d["deficit_s"], dtype=float).reshape(shape),
        allocation=None if d["allocation"] is None else allocation_from_json(d["allocation"]),
        placements=_placements_from_json(d["placements"]),
        last_reset_s=d["last_reset_s"],
        reset_pending=bool(d["reset_pending"]),
        # Absent in rounds recorded before moves were amortized: their placements count as
        # begun at the last round's start, the shortest residence they can have had.
        placed_at_s={str(j): float(t) for j, t in (d.get("placed_at_s") or {}).items()},
    )


def plan_to_json(p: RoundPlan) -> dict[str, Any]:
    out = {
        "round": p.round,
        "keep": _placements_to_json(p.keep),
        "move": _placements_to_json(p.move),
        "start": _placements_to_json(p.start),
        "stop": list(p.stop),
        "priority": dict(p.priority),
        "reset": p.reset,
        "set_aside": dict(p.set_aside),
        "held": dict(p.held),
    }
    if p.exploring:  # only while a class in no table explores: older plans stay as they were
        out["exploring"] = dict(p.exploring)
    return out


def plan_from_json(d: Mapping[str, Any]) -> RoundPlan:
    return RoundPlan(
        round=int(d["round"]),
        keep=_placements_from_json(d["keep"]),
        move=_placements_from_json(d["move"]),
        start=_placements_from_json(d["start"]),
        stop=tuple(d["stop"]),
        priority={k: float(v) for k, v in d["priority"].items()},
        reset=bool(d["reset"]),
        set_aside={str(k): str(v) for k, v in (d.get("set_aside") or {}).items()},
        held={str(k): str(v) for k, v in (d.get("held") or {}).items()},
        exploring={str(k): str(v) for k, v in (d.get("exploring") or {}).items()},
    )


def record_to_json(r: RoundRecord) -> dict[str, Any]:
    return {
        "round": r.round,
        "now_s": r.now_s,
        "allocation": allocation_to_json(r.allocation),
        "recomputed": r.recomputed,
        "capacity": dict(r.capacity),
        "plan": plan_to_json(r.plan),
        "state": state_to_json(r.state),
        "report": None if r.report is None else {"failed": dict(r.report.failed)},
        "snapshot": None if r.snapshot is None else snapshot_to_json(r.snapshot),
        "ran_s": dict(r.ran_s),
        "not_running": list(r.not_running),
    }


def record_from_json(d: Mapping[str, Any]) -> RoundRecord:
    return RoundRecord(
        round=int(d["round"]),
        now_s=float(d["now_s"]),
        allocation=allocation_from_json(d["allocation"]),
        recomputed=bool(d["recomputed"]),
        capacity={k: float(v) for k, v in d["capacity"].items()},
        plan=plan_from_json(d["plan"]),
        state=state_from_json(d["state"]),
        report=None if d["report"] is None else EnactReport(failed=dict(d["report"]["failed"])),
        snapshot=None if d.get("snapshot") is None else snapshot_from_json(d["snapshot"]),
        ran_s={str(k): float(v) for k, v in (d.get("ran_s") or {}).items()},
        not_running=tuple(str(k) for k in d.get("not_running") or ()),
    )


def snapshot_to_json(s: ClusterSnapshot) -> dict[str, Any]:
    """A snapshot, for the journal that lets the simulator's tick replay a live round."""
    return {
        "now_s": s.now_s,
        "nodes": [
            {
                "name": n.name,
                "gpus": dict(n.gpus),
                "gpus_in_use": dict(n.gpus_in_use),
                "features": list(n.features),
                "available": n.available,
            }
            for n in s.nodes
        ],
        "jobs": [
            {
                "key": j.key,
                "job_class": j.job_class,
                "num_gpus": j.num_gpus,
                "steps_remaining": j.steps_remaining,
                "total_steps": j.total_steps,
                "weight": j.weight,
                "account": j.account,
                "user": j.user,
                "arrival_s": j.arrival_s,
                "due_s": j.due_s,
                "tardiness_weight": j.tardiness_weight,
                "slo_s": j.slo_s,
                "slurm_job_ids": list(j.slurm_job_ids),
                "allowed_gpus": list(j.allowed_gpus),
                "measured_steps_per_s": dict(j.measured_steps_per_s),
                "restart_s": j.restart_s,
                "mem_gib": j.mem_gib,  # absent in older stores: None
                "utility": None if j.utility is None else utility_to_json(j.utility),
                "attained_gpu_s": j.attained_gpu_s,
            }
            for j in s.jobs
        ],
    }


def utility_to_json(u: Utility) -> dict[str, Any]:
    return dataclasses.asdict(u)


def utility_from_json(d: Mapping[str, Any] | None) -> Utility | None:
    """A stored utility (absent in older stores: None, the default from the due date)."""
    if d is None:
        return None
    return Utility(
        kind=str(d["kind"]),
        max_utility=float(d["max_utility"]),
        target_s=None if d.get("target_s") is None else float(d["target_s"]),
        sharpness_per_h=float(d.get("sharpness_per_h", 1.0)),
        due_s=None if d.get("due_s") is None else float(d["due_s"]),
        tardiness_weight=float(d.get("tardiness_weight", 0.0)),
    )


def snapshot_from_json(d: Mapping[str, Any]) -> ClusterSnapshot:
    return ClusterSnapshot(
        now_s=float(d["now_s"]),
        nodes=tuple(
            Node(
                n["name"],
                n["gpus"],
                gpus_in_use=n["gpus_in_use"],
                features=tuple(n["features"]),
                available=bool(n["available"]),
            )
            for n in d["nodes"]
        ),
        jobs=tuple(
            Job(
                **{
                    **j,
                    "slurm_job_ids": tuple(j["slurm_job_ids"]),
                    "allowed_gpus": tuple(j["allowed_gpus"]),
                    "measured_steps_per_s": {
                        str(t): float(v) for t, v in (j.get("measured_steps_per_s") or {}).items()
                    },
                    "utility": utility_from_json(j.get("utility")),
                    "attained_gpu_s": float(j.get("attained_gpu_s") or 0.0),
                }
            )
            for j in d["jobs"]
        ),
    )
