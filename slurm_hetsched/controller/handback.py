"""`hetsched handback`: give every managed job back to Slurm as a plain job (docs/handback.md).

For when the controller is stopped or removed: template jobs are submitted held for it, so
without it they would wait forever. A job is handed back when its comment carries a
`hetsched:` spec, it is active and in the controller's scope (controller/scope.py), and the
controller has not already handed it back as refused (`hetsched not-managed`). Per job:

1. its target is removed (Features and ReqNodeList cleared, per component) if the controller
   set one (admin comment `hetsched r=...`) and the job is pending: Slurm 22.05 refuses to
   change either on a running job, so a running job keeps them until it ends;
2. its hold is lifted if the hold is the controller's (controller/live.py `hold_is_ours`);
   a hold set after an earlier hand-back is the user's and stays;
3. a running job asked to checkpoint gets `resume_request.json`, so a wrapper paused for a
   move that will not come trains on at once rather than after its lease;
4. its admin comment says `hetsched handed-back: <reason>`, written last and only when the
   steps before succeeded, so a rerun recognises (and retries) a job it did not finish.

Each job's failure is reported and the others go on; nothing is ever held or cancelled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path
from typing import Any, Protocol

from slurm_hetsched.controller.admin_comment import PREFIX
from slurm_hetsched.controller.jobview import job_groups, job_identity
from slurm_hetsched.controller.round_report import hold_is_ours
from slurm_hetsched.controller.scope import Scope
from slurm_hetsched.controller.statefiles import JobFolder, write_resume_request
from slurm_hetsched.core.jobspec import JobSpecError, is_managed, parse_job_spec
from slurm_hetsched.errors import UnknownJobError
from slurm_hetsched.slurm.records import HELD_REASONS, JobState, JobUpdate, SlurmJob
from slurm_hetsched.statefolder import REQUEST_FILE, RESUME_FILE

logger = logging.getLogger(__name__)

HANDED_BACK = f"{PREFIX} handed-back"
NOT_MANAGED = f"{PREFIX} not-managed"
TARGET_KEPT = " [target kept while running]"
DEFAULT_REASON = "an admin ran hetsched handback"
_MAX_COMMENT = 250  # as admin_comment.py: squeue shows it whole
_RUNNING = (JobState.RUNNING, JobState.SUSPENDED)


class HandbackSlurm(Protocol):
    """The Slurm calls a hand-back makes (slurm/backend.py CliSlurmBackend)."""

    def list_jobs(self, job_ids: Sequence[str] | None = None) -> list[SlurmJob]: ...

    def update(self, job_id: str, update: JobUpdate) -> None: ...

    def release(self, job_id: str) -> None: ...


class HandbackJournal(Protocol):
    """Where each job's hand-back is recorded (store/sqlite.py)."""

    def begin_action(
        self, round_: int, job_key: str, slurm_job_id: str, kind: str, detail: dict[str, Any]
    ) -> int: ...

    def finish_action(self, action_id: int, ok: bool, outcome: str = "") -> None: ...


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a running job's wrapper looks for `resume_request.json`, and which run it is."""

    uid: int
    gid: int | None
    key: str
    restart_count: int


@dataclass(frozen=True, slots=True)
class HandbackItem:
    """What handing one job back takes.

    Attributes:
        job_id: the id that addresses the whole job (a heterogeneous job's leader).
        identity: its key (`key#copy` for a copy) as rounds and the journal name it, or the
            job id when its spec does not parse.
        user: its user.
        state: its state.
        untarget: job ids of the components whose Features and ReqNodeList to clear.
        keep_nodes: those of them whose ReqNodeList Slurm will not clear (Features only).
        release: lift the hold (it is the controller's).
        comment: the admin comment to write; None when it already says so.
        resume: where to call off a pause, for a running job; None otherwise.
        notes: what is left as it is, and why.
    """

    job_id: str
    identity: str
    user: str
    state: JobState
    untarget: tuple[str, ...] = ()
    keep_nodes: tuple[str, ...] = ()
    release: bool = False
    comment: str | None = None
    resume: Resume | None = None
    notes: tuple[str, ...] = ()

    @property
    def has_work(self) -> bool:
        return bool(self.untarget or self.release or self.comment is not None or self.resume)


@dataclass(slots=True)
class HandbackResult:
    """What was done to one job, what failed, and what could not be done but needs not be."""

    item: HandbackItem
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # not done, and no failure either

    @property
    def ok(self) -> bool:
        return not self.failed


def format_handback_comment(reason: str, *, target_kept: bool = False) -> str:
    """`hetsched handed-back: <reason>`, on one line, printable characters only; with
    `target_kept`, marked as still carrying the controller's target (a running job), so a
    later hand-back clears it once the job is pending again (requeued)."""
    text = "".join(c for c in " ".join(reason.split()) if c.isprintable())
    suffix = TARGET_KEPT if target_kept else ""
    return f"{HANDED_BACK}: {text}"[: _MAX_COMMENT - len(suffix)] + suffix


def plan_handback(
    jobs: Iterable[SlurmJob], scope: Scope, reason: str, *, now_s: float, local_tz: tzinfo
) -> list[HandbackItem]:
    """Which jobs to hand back and what each takes, from every job Slurm lists (pure).

    Args:
        jobs: `squeue --json --states=all` records (heterogeneous components included).
        scope: the controller's partitions and QOS.
        reason: why, for the admin comments.
        now_s: now (Unix seconds), to read `due=` in specs.
        local_tz: the time zone of a `due=` without an offset.
    """
    items = []
    for group in job_groups(jobs):
        leader = group[0]
        if not is_managed(leader.comment) or not leader.state.is_active:
            continue
        if not scope.manages_job(leader) or leader.admin_comment.startswith(NOT_MANAGED):
            continue
        items.append(_plan_one(group, reason, now_s=now_s, local_tz=local_tz))
    return items


def _plan_one(
    group: Sequence[SlurmJob], reason: str, *, now_s: float, local_tz: tzinfo
) -> HandbackItem:
    leader = group[0]
    key, identity = leader.job_id, leader.job_id
    try:
        spec = parse_job_spec(leader.comment, local_tz=local_tz, now_s=now_s)
        key = spec.key or leader.job_id
        identity = job_identity(key, spec.copy)
    except JobSpecError:
        pass  # handed back all the same, under its job id
    notes: list[str] = []
    if leader.state is JobState.COMPLETING:
        return HandbackItem(leader.job_id, identity, leader.user, leader.state, notes=("ending",))
    # The target is the controller's while its round comment is on the job, or the mark an
    # earlier hand-back left on a job it could not untarget (admin comments are root's).
    ours = leader.admin_comment.startswith(f"{PREFIX} r=") or (
        leader.admin_comment.startswith(HANDED_BACK) and leader.admin_comment.endswith(TARGET_KEPT)
    )
    targeted = [c for c in group if c.features or c.required_nodes] if ours else []
    untarget: list[str] = []
    keep_nodes: list[str] = []
    for component in (c for c in targeted if c.state is JobState.PENDING):
        if component.het_job_id is None or component.het_job_offset != 0:
            untarget.append(component.job_id)
            continue
        # A heterogeneous job's leader: Slurm 22.05 refuses ReqNodeList on its id ("Job
        # resizing not supported") and has no other id for it; Features it takes.
        if component.features:
            untarget.append(component.job_id)
            keep_nodes.append(component.job_id)
        if component.required_nodes:
            notes.append(f"its first component keeps ReqNodeList={component.required_nodes}")
    kept = any(c.state is not JobState.PENDING for c in targeted)
    if kept:
        notes.append("keeps Features/ReqNodeList while it runs (Slurm refuses the change)")
    comment = format_handback_comment(reason, target_kept=kept)
    held = leader.reason in HELD_REASONS
    release = held and hold_is_ours(leader)
    if held and not release:
        notes.append(f"left held: the hold ({leader.reason}) is not the controller's")
    resume = None
    if leader.state in _RUNNING and leader.user_id is not None:
        resume = Resume(leader.user_id, leader.group_id, key, leader.restart_count)
    return HandbackItem(
        job_id=leader.job_id,
        identity=identity,
        user=leader.user,
        state=leader.state,
        untarget=tuple(untarget),
        keep_nodes=tuple(keep_nodes),
        release=release,
        comment=None if leader.admin_comment == comment else comment,
        resume=resume,
        notes=tuple(notes),
    )


class Handback:
    """Carries out planned hand-backs, one job at a time, journaling each.

    Args:
        slurm: the backend.
        journal: the store, or None when there is none (nothing is recorded then).
        state_root: the jobs' state folders (for resume requests).
        round_: the round the journal files the actions under (the last recorded one).
        clock: Unix seconds, for the resume requests.
    """

    def __init__(
        self,
        slurm: HandbackSlurm,
        journal: HandbackJournal | None,
        state_root: Path,
        *,
        round_: int = 0,
        clock: Callable[[], float],
    ) -> None:
        self.slurm = slurm
        self.journal = journal
        self.state_root = state_root
        self.round = round_
        self.clock = clock

    def run(self, items: Iterable[HandbackItem]) -> list[HandbackResult]:
        results = []
        for item in items:
            if not item.has_work:
                results.append(HandbackResult(item))
                continue
            try:
                results.append(self._one(item))
            except Exception as exc:  # one job's failure never stops the others'
                logger.exception("job %s: hand-back failed", item.job_id)
                results.append(HandbackResult(item, failed=[f"internal error: {exc}"]))
        return results

    def _one(self, item: HandbackItem) -> HandbackResult:
        result = HandbackResult(item)
        detail = {"untarget": list(item.untarget), "release": item.release, "comment": item.comment}
        # Journaled before any change; a resume request alone only once one is written, so a
        # watchdog run every few minutes does not fill the journal with no-ops.
        action = None
        if self.journal is not None and (item.untarget or item.release or item.comment):
            action = self.journal.begin_action(
                self.round, item.identity, item.job_id, "handback", detail
            )
        for component in item.untarget:
            nodes = None if component in item.keep_nodes else ""
            update = JobUpdate(features="", required_nodes=nodes)
            self._step(result, "untargeted", f"untarget {component}", component, update)
        # Released even when the untargeting failed: a job pointed at one node still runs
        # when that node is free, while a held one never does.
        if item.release:
            self._step(result, "released", "release", item.job_id, None)
        if item.resume is not None:
            self._resume(item, result)
        if item.comment is not None and result.ok:
            update = JobUpdate(admin_comment=item.comment)
            self._step(result, "commented", "admin comment", item.job_id, update)
        if self.journal is not None:
            if action is None and result.done:
                action = self.journal.begin_action(
                    self.round, item.identity, item.job_id, "handback", detail
                )
            if action is not None:
                self.journal.finish_action(
                    action, result.ok, "; ".join(result.done + result.failed)
                )
        return result

    def _step(
        self, result: HandbackResult, done: str, what: str, job_id: str, update: JobUpdate | None
    ) -> None:
        try:
            if update is None:
                self.slurm.release(job_id)
            else:
                self.slurm.update(job_id, update)
        except UnknownJobError:
            result.done.append(f"{what}: the job left Slurm meanwhile")
        except Exception as exc:
            logger.warning("job %s: %s failed: %s", result.item.job_id, what, exc)
            result.failed.append(f"{what} failed: {exc}")
        else:
            if done not in result.done:
                result.done.append(done)

    def _resume(self, item: HandbackItem, result: HandbackResult) -> None:
        """Write resume_request.json if the job was asked to checkpoint and not yet told to
        train on. Best effort: without it, the wrapper trains on after its lease anyway."""
        resume = item.resume
        assert resume is not None
        try:
            folder = JobFolder(self.state_root, resume.uid, resume.key, resume.gid)
            request = folder.read_json(REQUEST_FILE)
            if not _names_run(request, item.job_id, resume.restart_count):
                return
            told = folder.read_json(RESUME_FILE)
            asked_at = request.get("requested_at") if request else None
            if _names_run(told, item.job_id, resume.restart_count) and _not_before(told, asked_at):
                return
            write_resume_request(
                folder, job_id=item.job_id, restart_count=resume.restart_count, at=self.clock()
            )
            result.done.append("told to train on (resume_request.json)")
        except (OSError, ValueError) as exc:
            logger.warning("job %s: no resume request written: %s", item.job_id, exc)
            result.warnings.append(f"no resume request ({exc}): it trains on after its lease")


def _names_run(payload: dict[str, Any] | None, job_id: str, restart_count: int) -> bool:
    return (
        payload is not None
        and str(payload.get("job_id")) == job_id
        and payload.get("restart_count") == restart_count
    )


def _not_before(payload: dict[str, Any] | None, at: Any) -> bool:
    told = payload.get("requested_at") if payload else None
    number = (int, float)
    return isinstance(told, number) and isinstance(at, number) and told >= at
