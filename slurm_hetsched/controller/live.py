"""The live cluster behind the round tick: Slurm as a `ClusterBackend` (core/ports.py).

`observe` reads the queue and the nodes (plus each managed job's trusted progress report) and
returns the snapshot the tick decides on; `enact` carries the plan out (controller/enact.py),
hands jobs with a bad spec back to Slurm, and updates the admin comments that make the rounds
visible in `squeue`. The tick itself is the simulator's, unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path

from slurm_hetsched.controller.admin_comment import (
    PREFIX,
    format_admin_comment,
    format_rejected_comment,
    needs_update,
)
from slurm_hetsched.controller.enact import EnactOutcome, Journal, SlurmEnactor
from slurm_hetsched.controller.jobview import ManagedJob, Progress, SlurmView, build_view
from slurm_hetsched.controller.statefiles import job_folder, read_progress
from slurm_hetsched.core.model import RoundPlan
from slurm_hetsched.core.ports import EnactReport, Observation, RoundRecord
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.errors import HetschedError, InvalidRequestError, SlurmError
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.records import JobState, JobUpdate, SlurmJob

logger = logging.getLogger(__name__)


class SlurmUnavailableError(SlurmError):
    """slurmctld did not answer (after retries): the round is skipped, nothing was changed."""


@dataclass(frozen=True, slots=True)
class ObserveSettings:
    """What to observe and how far to trust it.

    Attributes:
        state_root: the folder holding one state folder per job key.
        local_tz: the time zone of a `due=` without an offset (None: the host's).
        partition: manage only this partition's jobs (None: all).
        progress_max_age_s: a progress report older than this is ignored.
        release_rejected: hand held jobs with a bad spec back to Slurm.
    """

    state_root: Path
    local_tz: tzinfo | None = None
    partition: str | None = None
    progress_max_age_s: float = 600.0
    release_rejected: bool = True


@dataclass(slots=True)
class LastRound:
    """What the last `enact` did, for logs and metrics."""

    outcome: EnactOutcome = field(default_factory=EnactOutcome)
    comments_written: int = 0
    rejected_released: list[str] = field(default_factory=list)


class SlurmCluster:
    """Slurm as the tick's cluster backend."""

    def __init__(
        self,
        slurm: CliSlurmBackend,
        enactor: SlurmEnactor,
        journal: Journal,
        last_record: Callable[[], RoundRecord | None],
        table: ThroughputTable,
        settings: ObserveSettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.slurm = slurm
        self.enactor = enactor
        self.journal = journal
        self.last_record = last_record
        self.table = table
        self.settings = settings
        self.clock = clock
        self.view: SlurmView | None = None
        self.last = LastRound()
        self._unprofiled: tuple[str, ...] = ()

    # -- observe -------------------------------------------------------------------------------

    def read_view(self, last: RoundRecord | None) -> SlurmView:
        """Slurm now, in the controller's terms, remembering from `last` (the last round)
        arrivals and measured rates (raises SlurmUnavailableError)."""
        try:
            jobs = self.slurm.list_jobs()
            nodes = self.slurm.list_nodes()
        except SlurmError as exc:
            raise SlurmUnavailableError(f"cannot read Slurm's queue and nodes: {exc}") from exc
        now_s = self.clock()
        arrivals: dict[str, float] = {}
        measured: dict[str, Mapping[str, float]] = {}
        if last is not None and last.snapshot is not None:
            arrivals = {job.key: job.arrival_s for job in last.snapshot.jobs}
            measured = {job.key: job.measured_steps_per_s for job in last.snapshot.jobs}
        tz = self.settings.local_tz or _local_tz()
        return build_view(
            jobs,
            nodes,
            now_s=now_s,
            table=self.table,
            local_tz=tz,
            partition=self.settings.partition,
            progress=lambda job: self._progress(job, now_s),
            arrivals=arrivals,
            measured=measured,
        )

    def observe(self) -> Observation:
        last = self.last_record()
        view = self.read_view(last)
        self.view = view
        if view.unprofiled_gpu_types != self._unprofiled:
            self._unprofiled = view.unprofiled_gpu_types
            if view.unprofiled_gpu_types:
                logger.warning(
                    "GPU types %s are not in the throughput table: their GPUs are left to "
                    "Slurm; add them to the site's throughput file to schedule on them",
                    ", ".join(view.unprofiled_gpu_types),
                )
        ran_s: dict[str, float] = {}
        finished: tuple[str, ...] = ()
        if last is not None:
            for key in last.state.placements:
                job = view.managed.get(key)
                if job is not None and job.running and job.leader.start_time is not None:
                    ran_s[key] = max(0.0, view.now_s - max(last.now_s, job.leader.start_time))
            finished = tuple(sorted(set(last.allocation.job_ids) - set(view.managed)))
        return Observation(snapshot=view.snapshot, ran_s=ran_s, finished=finished)

    def _progress(self, job: ManagedJob, now_s: float) -> Progress | None:
        try:
            folder = job_folder(self.settings.state_root, job.key)
        except ValueError:
            return None
        payload = read_progress(
            folder,
            owner_uid=job.leader.user_id,
            job_ids={job.slurm_id, job.key},
            now_s=now_s,
            max_age_s=self.settings.progress_max_age_s,
        )
        if payload is None:
            return None
        rate = payload.get("steps_per_s")
        gpu_type = payload.get("gpu_type")
        restart = payload.get("restart_count")
        status = payload.get("status")
        return Progress(
            step=int(payload["step"]),
            total_steps=payload.get("total_steps"),
            steps_per_s=float(rate) if rate is not None else None,
            gpu_type=gpu_type if isinstance(gpu_type, str) else None,
            restart_count=restart if isinstance(restart, int) else None,
            status=status if isinstance(status, str) else "running",
        )

    # -- enact ---------------------------------------------------------------------------------

    def enact(self, plan: RoundPlan) -> EnactReport:
        if self.view is None:
            raise HetschedError("enact before observe")
        report, outcome = self.enactor.enact(self.view, plan)
        self.last = LastRound(outcome=outcome)
        self._release_rejected(plan.round)
        self._write_admin_comments(plan, outcome)
        return report

    def _release_rejected(self, round_: int) -> None:
        """Jobs with a bad spec: reported in their admin comment and released to Slurm."""
        assert self.view is not None
        for rejected in self.view.rejected:
            job = rejected.job
            text = format_rejected_comment(rejected.reason)
            try:
                if needs_update(job.admin_comment, text):
                    self.slurm.update(job.job_id, JobUpdate(admin_comment=text))
                    self.last.comments_written += 1
                    logger.warning(
                        "job %s of %s is not managed: %s", job.job_id, job.user, rejected.reason
                    )
                if self.settings.release_rejected and job.held and _hold_is_ours(job):
                    self._hand_back(round_, job, rejected.reason)
            except SlurmError as exc:
                logger.warning("job %s: cannot report or release it: %s", job.job_id, exc)

    def _hand_back(self, round_: int, job: SlurmJob, reason: str) -> None:
        """Release a refused job to Slurm, without the target an earlier round gave it."""
        managed_before = job.admin_comment.startswith(f"{PREFIX} r=")
        action = self.journal.begin_action(
            round_, job.job_id, job.job_id, "release_rejected", {"untarget": managed_before}
        )
        try:
            if managed_before:
                self.slurm.update(job.job_id, JobUpdate(features="", required_nodes=""))
            self.slurm.release(job.job_id)
        except SlurmError as exc:
            self.journal.finish_action(action, False, str(exc))
            raise
        self.journal.finish_action(action, True, reason)
        self.last.rejected_released.append(job.job_id)

    def _write_admin_comments(self, plan: RoundPlan, outcome: EnactOutcome) -> None:
        assert self.view is not None
        record = self.last_record()
        allocation = record.allocation if record is not None else None
        placements = plan.placements
        for key, job in sorted(self.view.managed.items()):
            if key in outcome.resubmitted:
                job_id = outcome.resubmitted[key]
            elif job.state is not JobState.PENDING and job.state is not JobState.RUNNING:
                continue
            else:
                job_id = job.slurm_id
            share = (
                allocation.share(key)
                if allocation is not None and key in allocation.job_ids
                else {}
            )
            text = format_admin_comment(
                round_=plan.round,
                placement=placements.get(key),
                share=share,
                priority=plan.priority.get(key),
                reason=_reason(key, outcome, placements, job),
            )
            current = "" if key in outcome.resubmitted else job.leader.admin_comment
            if not needs_update(current, text):
                continue
            try:
                self.slurm.update(job_id, JobUpdate(admin_comment=text))
                self.last.comments_written += 1
            except InvalidRequestError as exc:
                # It finished while the round ran: nothing left to show.
                logger.debug("job %s (%s): no admin comment: %s", key, job_id, exc)
            except SlurmError as exc:
                logger.warning("job %s (%s): cannot write its admin comment: %s", key, job_id, exc)


def _reason(key: str, outcome: EnactOutcome, placements: dict, job: ManagedJob) -> str:  # type: ignore[type-arg]
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
    if key in outcome.kept:
        return "kept"
    return "queued"


def _hold_is_ours(job: SlurmJob) -> bool:
    """Whether a refused job waits on a hold the controller may lift: the template's
    submission hold the first time the job is seen, or any hold of a job it managed before
    (its own requeue-holds and holds). A hold the user sets after the job was handed back is
    theirs."""
    if job.admin_comment.startswith(f"{PREFIX} not-managed"):
        return False
    return job.reason == "JobHeldUser" or job.admin_comment.startswith(f"{PREFIX} r=")


def _local_tz() -> tzinfo:
    from datetime import datetime

    tz = datetime.now().astimezone().tzinfo
    assert tz is not None
    return tz
