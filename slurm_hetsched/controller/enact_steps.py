"""Journaled actions: every action of an enactment is recorded before it is taken and its
outcome after, so a controller killed at any point can finish or undo it (controller/
reconcile.py); with the enactment's settings, its outcome, and the crash tests' failpoints.

`JournaledSteps` is the base of the enactor's phases (enact_checkpoint.py, enact.py): one
job's failed action is recorded and reported for that job, never raised to the round.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from slurm_hetsched.controller.jobview import ManagedJob
from slurm_hetsched.controller.statefiles import JobFolder, StateFolderError
from slurm_hetsched.errors import HetschedError, SlurmError
from slurm_hetsched.rounds.clocks import SYSTEM_CLOCK, SYSTEM_SLEEP
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.records import SlurmJob

# Split out of enact.py: its log lines keep the enactor's logger.
logger = logging.getLogger("slurm_hetsched.controller.enact")

# Every kind of action the enactor journals. `checkpoint` and `resubmit` stay pending from
# the signal until the job is requeue-held or called off, and from before the submission
# until the old job is cancelled: a crash anywhere in between leaves them for reconcile.
ACTION_KINDS = (
    "checkpoint",
    "signal",
    "ack",
    "requeue_hold",
    "call_off",
    "hold",
    "update",
    "placement",
    "release",
    "start_now",
    "resubmit",
    "submit",
    "cancel",
)


class Journal(Protocol):
    """Where actions are recorded before they are taken (store/sqlite.py)."""

    def begin_action(
        self, round_: int, job_key: str, slurm_job_id: str, kind: str, detail: dict[str, Any]
    ) -> int: ...

    def finish_action(self, action_id: int, ok: bool, outcome: str = "") -> None: ...


@dataclass(frozen=True, slots=True)
class EnactSettings:
    """How the enactment waits and where the jobs' state lives.

    Attributes:
        state_root: the folder holding one state folder per job key.
        ack_timeout_s: how long to wait for a job's checkpoint ack after the signal.
        checkpoint_signal: the signal asking for a checkpoint (name without SIG).
        requeue_timeout_s: how long a requeued job may take to show as pending and held.
        poll_s: the interval between looks at acks and job states.
        resubmit_environment: variables a re-submitted job gets besides HETSCHED_JOB_KEY,
            HETSCHED_STATE_ROOT, HOME, USER and PATH (its template sets up the rest).
        failpoint: fault injection for crash tests: `before:<kind>` or `after:<kind>` makes
            the controller SIGKILL itself when the first action of that kind is journaled
            (before it is taken) or recorded done; "" (the default) never.
    """

    state_root: Path
    ack_timeout_s: float = 120.0
    checkpoint_signal: str = "USR2"
    requeue_timeout_s: float = 120.0
    poll_s: float = 0.25
    resubmit_environment: Mapping[str, str] = field(default_factory=dict)
    failpoint: str = ""

    def __post_init__(self) -> None:
        when, _, kind = self.failpoint.partition(":")
        if self.failpoint and (when not in ("before", "after") or kind not in ACTION_KINDS):
            raise HetschedError(
                f"failpoint {self.failpoint!r}: expected before:<action> or after:<action>, "
                f"an action one of {', '.join(ACTION_KINDS)}"
            )


@dataclass(slots=True)
class EnactOutcome:
    """What one enactment did, for the log line, the metrics and the admin comments."""

    kept: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    resubmitted: dict[str, str] = field(default_factory=dict)  # key -> new job id
    no_ack: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)  # ended while the round ran
    failed: dict[str, str] = field(default_factory=dict)
    previous_type: dict[str, str] = field(default_factory=dict)


class JournaledSteps:
    """Takes one job's actions on Slurm and in its state folder, journaling each first."""

    def __init__(
        self,
        slurm: CliSlurmBackend,
        journal: Journal,
        settings: EnactSettings,
        *,
        clock: Callable[[], float] = SYSTEM_CLOCK.now,
        sleep: Callable[[float], None] = SYSTEM_SLEEP,
    ) -> None:
        self.slurm = slurm
        self.journal = journal
        self.settings = settings
        self.clock = clock
        self.sleep = sleep

    def _step(
        self,
        round_: int,
        job: ManagedJob,
        kind: str,
        detail: dict[str, Any],
        action: Callable[[], object],
        out: EnactOutcome,
        *,
        quiet: bool = False,
        benign: tuple[type[Exception], ...] = (),
    ) -> bool:
        """Record, take and record the outcome of one action; False if it failed, and
        reported as the job's failure unless `quiet` or the error is one of `benign`."""
        action_id = self._begin(round_, job, kind, detail)
        try:
            action()
        except Exception as exc:  # this job's failure, recorded; never the round's
            self._finish(action_id, False, str(exc), kind)
            quiet = quiet or isinstance(exc, benign)
            if not quiet:
                out.failed.setdefault(job.key, f"{kind} failed: {exc}")
            log = logger.debug if quiet else logger.warning
            log("round %d: job %s (%s): %s failed: %s", round_, job.key, job.slurm_id, kind, exc)
            if not isinstance(exc, HetschedError | OSError | ValueError):
                logger.exception("round %d: unexpected error in %s of %s", round_, kind, job.key)
            return False
        self._finish(action_id, True, "", kind)
        return True

    def _begin(
        self,
        round_: int,
        job: ManagedJob,
        kind: str,
        detail: dict[str, Any],
        *,
        slurm_id: str | None = None,
    ) -> int:
        """Journal an action as pending, before it is taken."""
        action_id = self.journal.begin_action(
            round_, job.key, slurm_id or job.slurm_id, kind, detail
        )
        self._failpoint("before", kind)
        return action_id

    def _finish(self, action_id: int, ok: bool, outcome: str, kind: str) -> None:
        self.journal.finish_action(action_id, ok, outcome)
        self._failpoint("after", kind)

    def _failpoint(self, when: str, kind: str) -> None:
        if self.settings.failpoint == f"{when}:{kind}":
            logger.error("failpoint %s:%s reached; killing the controller", when, kind)
            os.kill(os.getpid(), signal.SIGKILL)

    def _current(self, job_ids: list[str]) -> dict[str, SlurmJob] | None:
        """The jobs' records now, by id (jobs Slurm no longer lists are absent); None when
        Slurm did not answer, which says nothing about the jobs."""
        try:
            jobs = self.slurm.list_jobs()
        except SlurmError as exc:
            logger.warning("cannot list jobs: %s", exc)
            return None
        wanted = set(job_ids)
        return {j.job_id: j for j in jobs if j.job_id in wanted and j.het_job_offset in (None, 0)}

    def _folder(self, job: ManagedJob) -> JobFolder:
        """The job's state folder (`<root>/<uid>/<key>`; copies share their key's)."""
        uid = job.leader.user_id
        if uid is None:
            raise StateFolderError(f"job {job.slurm_id}: Slurm reports no user id")
        return JobFolder(
            self.settings.state_root, uid, job.job_key, job.leader.group_id, copy=job.copy
        )
