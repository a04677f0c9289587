"""After a crash: finish or settle what the last controller left under way.

Every action is journaled as pending before it is taken (store/sqlite.py), so the actions still
pending at start are exactly those a crash interrupted. Most need nothing here, because the
next round enacts from Slurm's state (controller/enact.py): a job left requeue-held or
retargeted is simply placed or kept held by the new round, never requeued a second time. These
are finished here:

- a move stopped between the signal and the requeue (its `checkpoint` action still open, or
  `signal`, `ack` or `requeue_hold` interrupted, the job still running the same run): the
  signal may never have been sent, so it is sent again (a paused job answers a second signal
  with a fresh ack), the ack is awaited, and only then is the job requeue-held; the next round
  places it. Requeueing without the ack would kill the job and repeat the steps since its last
  periodic checkpoint;
- a call-off (`call_off`): the resume request is written again, so a paused job trains on;
- a re-submission (`resubmit` still open): if the new job exists, the old one (same key) is
  cancelled (the next round places the new one); if not, the old job is left as it is.

Each pending action is then marked failed with what was done about it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from slurm_hetsched.controller.enact import EnactOutcome, SlurmEnactor
from slurm_hetsched.controller.jobview import ManagedJob
from slurm_hetsched.errors import SlurmError
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.records import JobState, SlurmJob
from slurm_hetsched.store.sqlite import Action, SqliteStore

logger = logging.getLogger(__name__)

_INTERRUPTED = "interrupted by a controller stop"
# Steps of a move after which the job has (maybe) been asked to checkpoint but not requeued
# (`checkpoint` is open from the signal until the requeue-hold or the call-off).
_MOVE_UNDER_WAY = ("checkpoint", "signal", "ack", "requeue_hold")
_RESUBMISSION = ("resubmit", "submit", "cancel")


@dataclass(slots=True)
class Reconciliation:
    """What the start-up reconciliation did."""

    interrupted: list[Action] = field(default_factory=list)
    requeue_held: list[str] = field(default_factory=list)
    called_off: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    outcome: EnactOutcome = field(default_factory=EnactOutcome)


def reconcile(
    store: SqliteStore,
    slurm: CliSlurmBackend,
    enactor: SlurmEnactor,
    managed: Callable[[], Mapping[str, ManagedJob]],
) -> Reconciliation:
    """Settle the actions a crashed controller left pending.

    Args:
        managed: the managed jobs now, by key (read only when a move must be finished).

    Raises:
        SlurmError: Slurm does not answer; raised before anything is changed: call it again.
    """
    result = Reconciliation(interrupted=store.pending_actions())
    if not result.interrupted:
        return result
    jobs = slurm.list_jobs()
    by_id = {j.job_id: j for j in jobs if j.het_job_offset in (None, 0)}
    settled: dict[int, str] = {}
    to_move: dict[str, ManagedJob] = {}
    to_call_off: dict[str, ManagedJob] = {}
    live: Mapping[str, ManagedJob] | None = None
    resubmissions: dict[str, str] = {}
    for action in result.interrupted:
        what = _INTERRUPTED
        job = by_id.get(action.slurm_job_id)
        if action.kind in (*_MOVE_UNDER_WAY, "call_off") and _still_running(job, action):
            live = managed() if live is None else live
            current = live.get(action.job_key)
            if current is None or current.slurm_id != action.slurm_job_id:
                what += "; the job is no longer managed, left as it is"
            elif action.kind == "call_off":
                to_call_off[action.job_key] = current
                what += "; called off again"
            else:
                to_move[action.job_key] = current
                what += "; signalled again, requeue-held after its ack"
        elif action.kind in _RESUBMISSION and job is not None and job.state.is_active:
            # One re-submission journals several actions: settled once, told on each.
            if job.job_id not in resubmissions:
                resubmissions[job.job_id] = _settle_resubmission(slurm, jobs, job, action, result)
            what += resubmissions[job.job_id]
        settled[action.id] = what
    round_ = max(a.round for a in result.interrupted)
    if to_move:
        held = enactor.checkpoint_and_hold(round_, to_move, result.outcome)
        result.requeue_held = sorted(job.job_id for job in held.values())
    for key, paused in to_call_off.items():
        if key in to_move:
            continue  # finished as a move instead (a move that cannot end is called off there)
        enactor.call_off(round_, paused, result.outcome)
        result.called_off.append(paused.slurm_id)
    for action in result.interrupted:
        store.finish_action(action.id, False, settled[action.id])
        logger.warning(
            "action %s on job %s (%s) of round %d was %s",
            action.kind,
            action.job_key,
            action.slurm_job_id,
            action.round,
            settled[action.id],
        )
    return result


def _settle_resubmission(
    slurm: CliSlurmBackend,
    jobs: list[SlurmJob],
    old: SlurmJob,
    action: Action,
    result: Reconciliation,
) -> str:
    replacement = _replacement(jobs, action)
    if replacement is None:
        return "; no replacement was submitted, old job kept"
    try:
        slurm.cancel(old.job_id)
    except SlurmError as exc:
        logger.warning("reconciling action %d on job %s: %s", action.id, action.job_key, exc)
        return f"; could not cancel the old job: {exc}"
    result.cancelled.append(old.job_id)
    return f"; job {old.job_id} replaced by job {replacement.job_id}, old job cancelled"


def _still_running(job: SlurmJob | None, action: Action) -> bool:
    """The job runs the very run that was signalled (not a later one)."""
    if job is None or job.state is not JobState.RUNNING:
        return False
    expected = action.detail.get("restart_count")
    return expected is None or job.restart_count == expected


def _replacement(jobs: list[SlurmJob], action: Action) -> SlurmJob | None:
    """An active job, other than the old one, whose comment carries the same key. The old
    job's other components carry it too: they are the old job, not its replacement."""
    marker = f"key={action.job_key}"
    for job in jobs:
        pairs = [p.strip() for p in job.comment.partition(":")[2].split(";")]
        whole_job = job.het_job_id or job.job_id
        if whole_job != action.slurm_job_id and job.state.is_active and marker in pairs:
            return job
    return None
