"""After a crash: finish or settle what the last controller left under way.

Every action is journaled as pending before it is taken (store/sqlite.py), so the actions still
pending at start are exactly those a crash interrupted. Most need nothing here, because the
next round enacts from Slurm's state (controller/enact.py): a job left requeue-held or
retargeted is simply placed or kept held by the new round, never requeued a second time. Two
cases are finished here:

- a job signalled (or acked) but not requeued: its wrapper has checkpointed and pauses,
  waiting for the requeue; it is requeue-held now, so its GPUs are not idle until the lease
  timeout and the next round places it;
- a re-submission: if the new job exists, the old one (same key) is cancelled; if not, the old
  job is left as it is for the next round.

Each pending action is then marked failed with what was done about it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from slurm_hetsched.errors import SlurmError
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.records import JobState, SlurmJob
from slurm_hetsched.store.sqlite import Action, SqliteStore

logger = logging.getLogger(__name__)

_INTERRUPTED = "interrupted by a controller stop"


@dataclass(slots=True)
class Reconciliation:
    """What the start-up reconciliation did."""

    interrupted: list[Action] = field(default_factory=list)
    requeue_held: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)


def reconcile(store: SqliteStore, slurm: CliSlurmBackend) -> Reconciliation:
    """Settle the actions a crashed controller left pending (raises SlurmError if Slurm is down,
    before changing anything: call it again later)."""
    result = Reconciliation(interrupted=store.pending_actions())
    if not result.interrupted:
        return result
    jobs = slurm.list_jobs()
    by_id = {j.job_id: j for j in jobs if j.het_job_offset in (None, 0)}
    last_by_job: dict[str, Action] = {}
    for action in result.interrupted:
        last_by_job[action.slurm_job_id] = action
    for action in result.interrupted:
        what = _INTERRUPTED
        job = by_id.get(action.slurm_job_id)
        try:
            if action.kind in ("signal", "ack") and _still_running(job, action):
                assert job is not None
                slurm.requeue_hold(job.job_id)
                result.requeue_held.append(job.job_id)
                what += "; requeue-held to finish the move"
            elif action.kind in ("submit", "cancel") and job is not None and job.state.is_active:
                replacement = _replacement(jobs, action)
                if replacement is not None:
                    slurm.cancel(job.job_id)
                    result.cancelled.append(job.job_id)
                    what += f"; replaced by job {replacement.job_id}, old job cancelled"
                else:
                    what += "; no replacement was submitted, old job kept"
        except SlurmError as exc:
            what += f"; could not settle it: {exc}"
            logger.warning("reconciling action %d on job %s: %s", action.id, action.job_key, exc)
        store.finish_action(action.id, False, what)
        logger.warning(
            "action %s on job %s (%s) of round %d was %s",
            action.kind,
            action.job_key,
            action.slurm_job_id,
            action.round,
            what,
        )
    return result


def _still_running(job: SlurmJob | None, action: Action) -> bool:
    """The job runs the very run that was signalled (not a later one)."""
    if job is None or job.state is not JobState.RUNNING:
        return False
    expected = action.detail.get("restart_count")
    return expected is None or job.restart_count == expected


def _replacement(jobs: list[SlurmJob], action: Action) -> SlurmJob | None:
    """An active job, other than the old one, whose comment carries the same key."""
    marker = f"key={action.job_key}"
    for job in jobs:
        pairs = [p.strip() for p in job.comment.partition(":")[2].split(";")]
        if job.job_id != action.slurm_job_id and job.state.is_active and marker in pairs:
            return job
    return None
