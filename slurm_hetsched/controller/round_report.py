"""What a round shows in Slurm: each managed job's admin comment (docs/interfaces.md, "Round
visibility"), and each refused job's reason, with the job handed back to Slurm.

Only admins can set a job's admin comment, so `squeue -O JobID,Name,State,admin_comment:80`
shows what the controller decided for each job; a comment is rewritten only when its stable
part changed. A refused job (a bad spec, a key of another user, set aside) is reported there
and released when it waits on a hold the controller may lift. One job's failure here is
logged and never stops the others'.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_hetsched.controller.admin_comment import (
    PREFIX,
    describe_borrowing,
    format_admin_comment,
    format_rejected_comment,
    needs_update,
    replaced_job,
)
from slurm_hetsched.controller.enact import EnactOutcome, Journal
from slurm_hetsched.controller.jobview import ManagedJob, SlurmView
from slurm_hetsched.core.model import Allocation, Placement, RoundPlan
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.core.throughput.prior import estimated_entries
from slurm_hetsched.errors import InvalidRequestError, SlurmError
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.records import JobState, JobUpdate, SlurmJob

# Split out of live.py: its log lines keep the live cluster's logger.
logger = logging.getLogger("slurm_hetsched.controller.live")


@dataclass(slots=True)
class LastRound:
    """What the last `enact` did, for logs and metrics."""

    outcome: EnactOutcome = field(default_factory=EnactOutcome)
    comments_written: int = 0
    rejected_released: list[str] = field(default_factory=list)


def report_refused(
    slurm: CliSlurmBackend,
    journal: Journal,
    round_: int,
    refused: Sequence[tuple[SlurmJob, str]],
    last: LastRound,
    *,
    release: bool,
) -> None:
    """Jobs with a bad spec (or set aside), with the reason: reported in their admin comment
    and, with `release`, released to Slurm when the hold is ours (`hold_is_ours`); one job's
    failure here is logged and the others go on. Counted in `last`."""
    for job, reason in refused:
        # Reported and released separately: a comment Slurm will not take must not keep
        # the job held.
        text = format_rejected_comment(reason)
        try:
            if needs_update(job.admin_comment, text):
                logger.warning(
                    "round %d: job %s of %s is not managed: %s",
                    round_,
                    job.job_id,
                    job.user,
                    reason,
                )
                slurm.update(job.job_id, JobUpdate(admin_comment=text))
                last.comments_written += 1
        except Exception as exc:  # one job's failure never stops the others'
            logger.warning(
                "round %d: job %s: cannot write its admin comment: %s", round_, job.job_id, exc
            )
        try:
            if release and job.held and hold_is_ours(job):
                _hand_back(slurm, journal, round_, job, reason, last)
        except Exception as exc:
            logger.warning("round %d: job %s: cannot release it: %s", round_, job.job_id, exc)


def _hand_back(
    slurm: CliSlurmBackend,
    journal: Journal,
    round_: int,
    job: SlurmJob,
    reason: str,
    last: LastRound,
) -> None:
    """Release a refused job to Slurm, without the target an earlier round gave it."""
    managed_before = job.admin_comment.startswith(f"{PREFIX} r=")
    action = journal.begin_action(
        round_, job.job_id, job.job_id, "release_rejected", {"untarget": managed_before}
    )
    try:
        if managed_before:
            slurm.update(job.job_id, JobUpdate(features="", required_nodes=""))
        slurm.release(job.job_id)
    except SlurmError as exc:
        journal.finish_action(action, False, str(exc))
        raise
    journal.finish_action(action, True, reason)
    last.rejected_released.append(job.job_id)


def write_admin_comments(
    slurm: CliSlurmBackend,
    view: SlurmView,
    plan: RoundPlan,
    outcome: EnactOutcome,
    allocation: Allocation | None,
    last: LastRound,
    table: ThroughputTable | None = None,
) -> None:
    """Each managed job's admin comment after the round (`allocation`: the last recorded
    round's, for the shares; `table`: the decisions' table, to mark the shares that rest on
    an estimate); written only when its stable part changed. Counted in `last`."""
    placements = plan.placements
    measured = {j.key: j.measured_steps_per_s for j in view.snapshot.jobs}
    for key, job in sorted(view.managed.items()):
        if key in plan.set_aside:
            continue  # reported as not managed
        replaced = replaced_job(job.leader.admin_comment)
        if key in outcome.resubmitted:
            job_id, replaced = outcome.resubmitted[key], job.slurm_id
        elif job.state is not JobState.PENDING and job.state is not JobState.RUNNING:
            continue
        else:
            job_id = job.slurm_id
        share = (
            allocation.share(key) if allocation is not None and key in allocation.job_ids else {}
        )
        reason = admin_reason(
            key,
            outcome,
            placements,
            job,
            plan.held,
            allocation.waiting if allocation is not None else {},
        )
        payments = (allocation.payments if allocation is not None else None) or {}
        if key in placements and key in payments:
            reason += " " + describe_borrowing(payments[key])
        text = format_admin_comment(
            round_=plan.round,
            placement=placements.get(key),
            share=share,
            priority=plan.priority.get(key),
            reason=reason,
            estimated=unmeasured_estimates(table, job, measured.get(key, {}), list(share)),
            replaced=replaced,
            copy=job.copy,
        )
        current = "" if key in outcome.resubmitted else job.leader.admin_comment
        if not needs_update(current, text):
            continue
        try:
            slurm.update(job_id, JobUpdate(admin_comment=text))
            last.comments_written += 1
        except InvalidRequestError as exc:
            # It finished while the round ran: nothing left to show.
            logger.debug("round %d: job %s (%s): no comment: %s", plan.round, key, job_id, exc)
        except Exception as exc:  # one job's failure never stops the others'
            logger.warning(
                "round %d: job %s (%s): cannot write its admin comment: %s",
                plan.round,
                key,
                job_id,
                exc,
            )


def unmeasured_estimates(
    table: ThroughputTable | None,
    job: ManagedJob,
    measured: Mapping[str, float],
    gpu_types: Sequence[str],
) -> list[str]:
    """Of `gpu_types`, those the job's steps/s are still an estimate on: estimated by the
    table (core/throughput/prior.py) and not measured yet."""
    if table is None:
        return []
    estimated = estimated_entries(table, job.spec.job_class, gpu_types)
    return [t for t in estimated if t not in measured]


def admin_reason(
    key: str,
    outcome: EnactOutcome,
    placements: Mapping[str, Placement],
    job: ManagedJob,
    held: Mapping[str, str],
    waiting: Mapping[str, str] | None = None,
) -> str:
    """The last word of a managed job's admin comment: what the round did with it (a job a
    pricing policy did not admit: `waiting:` and why, e.g. `waiting:price=3.1>=utility=2.4`)."""
    if key in outcome.failed:
        return "failed:" + outcome.failed[key].split(":")[0].replace(" ", "-")[:40]
    if key in outcome.moved or key in outcome.resubmitted:
        before = outcome.previous_type.get(key) or "?"
        after = "+".join(placements[key].gpu_types) if key in placements else "?"
        return f"moved:{before}->{after}"
    if key in outcome.started:
        return "started"
    if key in outcome.stopped:
        return "stopped:queued"
    if key in outcome.kept and key in held:
        # Only the rule's name ("kept:residence"): its figures change every round, and the
        # comment is rewritten only when its stable part changes.
        return "kept:" + held[key].split(":")[0].replace(" ", "-")
    if key in outcome.kept:
        return "kept"
    if waiting and key in waiting:
        return "waiting:" + "".join(waiting[key].split())[:80]
    return "queued"


def hold_is_ours(job: SlurmJob) -> bool:
    """Whether a refused job waits on a hold the controller may lift: the template's
    submission hold the first time the job is seen, or any hold of a job it managed before
    (its own requeue-holds and holds). A hold the user sets after the job was handed back
    (refused, or by `hetsched handback`) is theirs."""
    if job.admin_comment.startswith((f"{PREFIX} not-managed", f"{PREFIX} handed-back")):
        return False
    return job.reason == "JobHeldUser" or job.admin_comment.startswith(f"{PREFIX} r=")
