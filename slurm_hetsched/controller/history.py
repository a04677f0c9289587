"""`hetsched rounds`: the recorded rounds as a table, or one job's rounds with its actions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from slurm_hetsched.controller.admin_comment import describe_share, describe_target
from slurm_hetsched.controller.restart_cost import describe_seconds
from slurm_hetsched.core.ports import RoundRecord
from slurm_hetsched.store.sqlite import Action


def format_rounds(
    records: Sequence[RoundRecord], actions: Sequence[Action], job: str | None = None
) -> str:
    """One line per round; with `job`, that job's target, share, priority, restart cost (as
    the round's snapshot gave it to the mechanism) and actions."""
    if not records:
        return "no rounds recorded yet"
    if job is None:
        header = (
            f"{'ROUND':>5}  {'TIME':<19}  {'POLICY':<24} {'SOLVED':<6} {'JOBS':>4} {'PLACED':>6} "
            f"{'KEPT':>4} {'MOVED':>5} {'STARTED':>7} {'STOPPED':>7} {'FAILED':>6}"
        )
        lines = [header]
        for r in records:
            plan = r.plan
            jobs = len(r.snapshot.jobs) if r.snapshot is not None else len(r.allocation.job_ids)
            failed = len(r.report.failed) if r.report is not None else 0
            status = "" if r.report is not None else "  (not enacted: interrupted)"
            lines.append(
                f"{r.round:>5}  {_when(r.now_s):<19}  {r.allocation.policy[:24]:<24} "
                f"{'yes' if r.recomputed else 'no':<6} {jobs:>4} {len(plan.placements):>6} "
                f"{len(plan.keep):>4} {len(plan.move):>5} {len(plan.start):>7} "
                f"{len(plan.stop):>7} {failed:>6}{status}"
            )
        return "\n".join(lines)
    by_round: dict[int, list[Action]] = {}
    for action in actions:
        if action.job_key == job:
            by_round.setdefault(action.round, []).append(action)
    lines = [
        f"{'ROUND':>5}  {'TIME':<19}  {'TARGET':<22} {'SHARE':<26} {'PRIO':>6} "
        f"{'RESTART':>8}  ACTIONS"
    ]
    seen = False
    for r in records:
        plan = r.plan
        in_round = job in r.allocation.job_ids or job in plan.stop
        if not in_round and r.round not in by_round:
            continue
        seen = True
        share = describe_share(r.allocation.share(job)) if job in r.allocation.job_ids else "-"
        prio = plan.priority.get(job)
        kind = (
            "keep"
            if job in plan.keep
            else "move"
            if job in plan.move
            else "start"
            if job in plan.start
            else "stop"
            if job in plan.stop
            else "queued"
        )
        done = ", ".join(
            f"{a.kind}:{a.status}" + (f" ({a.outcome})" if a.outcome else "")
            for a in by_round.get(r.round, [])
        )
        lines.append(
            f"{r.round:>5}  {_when(r.now_s):<19}  "
            f"{describe_target(plan.placements.get(job)):<22} {share:<26} "
            f"{'-' if prio is None else f'{prio:.3g}':>6} {_restart(r, job):>8}  {kind}"
            + (f": {done}" if done else "")
        )
    if not seen:
        return f"job {job!r} appears in none of these rounds"
    return "\n".join(lines)


def _restart(record: RoundRecord, job: str) -> str:
    """The job's restart cost in the round's snapshot: '8.1s', 'default' (None: the
    mechanism's default), or '-' when the snapshot does not hold the job."""
    jobs = record.snapshot.jobs if record.snapshot is not None else ()
    found = next((j for j in jobs if j.key == job), None)
    if found is None:
        return "-"
    return "default" if found.restart_s is None else describe_seconds(found.restart_s)


def _when(now_s: float) -> str:
    return datetime.fromtimestamp(now_s).isoformat(sep=" ", timespec="seconds")
