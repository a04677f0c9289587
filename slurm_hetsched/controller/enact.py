"""Carrying a round plan out on Slurm: the checkpoint-before-move protocol (docs/interfaces.md).

What each managed job needs is read from Slurm, not only from the plan, so enacting is
idempotent and a controller restarted after a crash converges: a placed job already running on
its target GPUs is left alone; one running elsewhere is moved; one pending is started; a job
not placed that runs is checkpointed and requeue-held; one pending and released is held.

A move, in order, each step written to the journal before it is taken:
1. signal the training process (`scancel -b -s USR2`), for every job to move or stop at once;
2. wait for their acks (checkpoint committed; `ack_timeout_s`; without an ack the job resumes
   from its last periodic checkpoint and the round records it);
3. `scontrol requeuehold` each, and wait until Slurm shows it pending and held;
4. retarget (Features = type, untyped count, ReqNodeList), write `placement.json`, release,
   StartTime=now. A placement spanning GPU types or nodes re-submits the job as a
   heterogeneous job under the same key (`sbatch --uid`), then cancels the old one.

A failed step is recorded and reported for that job only, and the other jobs' actions go on:
a job whose placement failed after it was held is released unchanged, so a failed round never
leaves a job held; a job that was signalled but cannot be requeued gets a resume request, so
it trains on at once instead of waiting, paused, for its lease to run out.
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from slurm_hetsched.controller.jobview import ManagedJob, SlurmView
from slurm_hetsched.controller.statefiles import (
    CheckedAck,
    JobFolder,
    StateFolderError,
    read_ack,
    write_checkpoint_request,
    write_placement,
    write_resume_request,
)
from slurm_hetsched.core.model import Placement, RoundPlan
from slurm_hetsched.core.ports import EnactReport
from slurm_hetsched.errors import HetschedError, InvalidRequestError, SlurmError
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.records import GpuRequest, JobOptions, JobState, JobUpdate, SlurmJob

logger = logging.getLogger(__name__)

# How often the ack wait looks at Slurm for jobs that ended instead of acking.
_STATE_LOOK_S = 1.0

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


def ack_outcome(ack: CheckedAck) -> str:
    """The journal's outcome of an accepted ack: 'step 8200 in ckpt-8200'."""
    return f"step {ack.step} in {ack.checkpoint}"


# The step is the controller's own text and comes first; the checkpoint name after it is the
# job's (bounded by read_ack), so only the prefix is read back.
_ACKED_STEP = re.compile(r"step ([0-9]{1,13}) in ")


def acked_step(outcome: str) -> int | None:
    """The step of an ack from its journal outcome (`ack_outcome`), or None."""
    match = _ACKED_STEP.match(outcome)
    return int(match.group(1)) if match else None


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


@dataclass(frozen=True, slots=True)
class Work:
    """The jobs of one round by what they need."""

    keep: dict[str, ManagedJob]
    move: dict[str, tuple[ManagedJob, Placement]]
    start: dict[str, tuple[ManagedJob, Placement]]
    stop: dict[str, ManagedJob]
    hold: dict[str, ManagedJob]


def classify(view: SlurmView, plan: RoundPlan) -> Work:
    """Each managed job's need, from its Slurm state and its placement this round."""
    placed = plan.placements
    work = Work({}, {}, {}, {}, {})
    for key, job in sorted(view.managed.items()):
        if key in view.busy or key in plan.set_aside:
            continue
        target = placed.get(key)
        if target is not None:
            if job.running and runs_on(job, target):
                work.keep[key] = job
            elif job.running:
                work.move[key] = (job, target)
            elif job.state is JobState.PENDING and starting_on(job, target):
                work.keep[key] = job  # released onto this target already; Slurm starts it
            elif job.state is JobState.PENDING:
                work.start[key] = (job, target)
        elif job.running:
            work.stop[key] = job
        elif job.state is JobState.PENDING and not job.leader.held:
            work.hold[key] = job
    return work


def starting_on(job: ManagedJob, placement: Placement) -> bool:
    """Whether a pending job was released onto exactly `placement` (a plain job on one node):
    Slurm is about to start it there, so re-placing it would only race with the start."""
    leader = job.leader
    if leader.held or len(job.components) > 1 or len(placement.slices) != 1:
        return False
    (part,) = placement.slices
    count = leader.gpus_per_node.count if leader.gpus_per_node else 0
    return (leader.features, leader.required_nodes, count) == (
        part.gpu_type,
        part.node,
        part.count,
    )


def runs_on(job: ManagedJob, placement: Placement) -> bool:
    """Whether a running job holds exactly the GPUs of `placement` (type by node feature)."""
    want: dict[str, int] = {}
    for part in placement.slices:
        want[part.node] = want.get(part.node, 0) + part.count
    if job.gpus_by_node() != want:
        return False
    wanted_types = {s.node: s.gpu_type for s in placement.slices}
    # The type a component runs on is the feature it was retargeted to.
    return all(
        (c.features or "") in ("", wanted_types.get(c.batch_host or "", c.features))
        for c in job.components
    )


class SlurmEnactor:
    """Carries out round plans on Slurm, journaling every action before it is taken."""

    def __init__(
        self,
        slurm: CliSlurmBackend,
        journal: Journal,
        settings: EnactSettings,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.slurm = slurm
        self.journal = journal
        self.settings = settings
        self.clock = clock
        self.sleep = sleep

    def enact(self, view: SlurmView, plan: RoundPlan) -> tuple[EnactReport, EnactOutcome]:
        work = classify(view, plan)
        out = EnactOutcome(kept=sorted(work.keep))
        round_ = plan.round
        to_checkpoint = {k: j for k, (j, _) in work.move.items()} | work.stop
        requeued = self.checkpoint_and_hold(round_, to_checkpoint, out)
        for key in work.stop:
            if key in requeued:
                out.stopped.append(key)
        for key, (job, target) in work.move.items():
            if key in requeued:
                out.previous_type[key] = job.leader.features
                place = partial(self._place, round_, requeued[key], job, target, out, held=True)
                if self._guarded(round_, job, out, place):
                    out.moved.append(key)
        for key, (job, target) in work.start.items():
            held = job.leader.held
            place = partial(self._place, round_, job.leader, job, target, out, held=held)
            if self._guarded(round_, job, out, place):
                out.started.append(key)
        for key, job in work.hold.items():
            if self._guarded(round_, job, out, partial(self._hold_pending, round_, job, out)):
                out.held.append(key)
        return EnactReport(failed=dict(out.failed)), out

    def checkpoint_and_hold(
        self, round_: int, jobs: Mapping[str, ManagedJob], out: EnactOutcome
    ) -> dict[str, SlurmJob]:
        """Steps 1 to 3 of a move for every job of `jobs` at once: signal, wait for the acks,
        requeue-hold. A job signalled but not requeued (Slurm refused or did not answer) is
        called off, so it trains on where it runs. Returns key -> its held Slurm record."""
        opened: dict[str, int] = {}
        signalled = self._signal_all(round_, jobs, out, opened)
        self._await_acks(round_, jobs, signalled, out)
        requeued, asked = self._requeue_hold_all(round_, jobs, signalled, out)
        for key in signalled:
            if key not in asked and key not in out.finished:
                self.call_off(round_, jobs[key], out)
        for key, action_id in opened.items():
            if key in requeued:
                self._finish(action_id, True, "requeue-held", "checkpoint")
            elif key in out.finished:
                self._finish(action_id, True, "the job ended instead", "checkpoint")
            else:
                why = out.failed.get(key, "not requeued")
                self._finish(action_id, False, why, "checkpoint")
        return requeued

    def _guarded(
        self, round_: int, job: ManagedJob, out: EnactOutcome, action: Callable[[], bool]
    ) -> bool:
        """Run one job's part of the round; an error is that job's failure, never the round's:
        it is recorded, the job released if it was left held, and the other jobs go on."""
        try:
            return action()
        except Exception as exc:
            logger.exception(
                "round %d: job %s (%s): enacting its action failed", round_, job.key, job.slurm_id
            )
            out.failed.setdefault(job.key, f"internal error: {type(exc).__name__}: {exc}")
            try:
                self._release_quietly(round_, job, out)
            except Exception:
                logger.exception("round %d: job %s: cannot release it", round_, job.key)
            return False

    def call_off(self, round_: int, job: ManagedJob, out: EnactOutcome) -> None:
        """The job was asked to checkpoint and pause but will not be moved: tell it to train
        on now rather than wait, paused, for its lease to end."""

        def resume() -> None:
            write_resume_request(
                self._folder(job),
                job_id=job.slurm_id,
                restart_count=job.leader.restart_count,
                at=self.clock(),
            )

        detail = {"restart_count": job.leader.restart_count}
        self._step(round_, job, "call_off", detail, resume, out, quiet=True)

    # -- phases --------------------------------------------------------------------------------

    def _signal_all(
        self,
        round_: int,
        jobs: Mapping[str, ManagedJob],
        out: EnactOutcome,
        opened: dict[str, int],
    ) -> dict[str, float]:
        """Ask every job to move or stop for a checkpoint at once; key -> when it was asked.
        Each job's `checkpoint` action is opened (pending) in `opened` first."""
        signalled: dict[str, float] = {}
        name = self.settings.checkpoint_signal
        for key, job in jobs.items():
            at = self.clock()
            detail = {"signal": name, "restart_count": job.leader.restart_count}
            opened[key] = self._begin(round_, job, "checkpoint", detail)
            # The request file first: a job still starting ignores the signal and finds the
            # file once its handler is in place (wrapper/session.py).
            self._write_request(round_, job, at)
            if self._step(
                round_,
                job,
                "signal",
                detail,
                partial(self.slurm.signal, job.slurm_id, name, target="batch"),
                out,
            ):
                signalled[key] = at
        return signalled

    def _await_acks(
        self,
        round_: int,
        jobs: Mapping[str, ManagedJob],
        signalled: Mapping[str, float],
        out: EnactOutcome,
    ) -> None:
        """Wait until every signalled job acked its checkpoint, or the timeout passed."""
        waiting = dict(signalled)
        deadline = self.clock() + self.settings.ack_timeout_s
        actions = {
            key: self._begin(
                round_,
                jobs[key],
                "ack",
                {
                    "timeout_s": self.settings.ack_timeout_s,
                    "restart_count": jobs[key].leader.restart_count,
                },
            )
            for key in waiting
        }
        next_look = self.clock() + _STATE_LOOK_S
        while waiting:
            if self.clock() >= next_look:
                # A job at its last step finishes instead of acking: stop waiting for it.
                next_look = self.clock() + _STATE_LOOK_S
                current = self._current([jobs[k].slurm_id for k in waiting])
                for key in list(waiting) if current is not None else ():
                    now = current.get(jobs[key].slurm_id) if current is not None else None
                    if now is None or now.state is not JobState.RUNNING:
                        del waiting[key]
                        state = "gone" if now is None else now.state.value
                        self._finish(actions[key], False, f"job {state}, no ack", "ack")
            for key in list(waiting):
                # signalled_at - 1: whole-second clocks on some filesystems
                ack = self._read_ack(round_, jobs[key], waiting[key] - 1.0)
                if ack is not None:
                    del waiting[key]
                    self._finish(actions[key], True, ack_outcome(ack), "ack")
            if not waiting or self.clock() >= deadline:
                break
            self.sleep(self.settings.poll_s)
        for key in waiting:
            out.no_ack.append(key)
            self._finish(
                actions[key],
                False,
                f"no ack within {self.settings.ack_timeout_s:g} s: the job resumes from its "
                "last periodic checkpoint",
                "ack",
            )
            logger.warning(
                "round %d: job %s (%s) did not ack its checkpoint within %g s; moving it anyway",
                round_,
                key,
                jobs[key].slurm_id,
                self.settings.ack_timeout_s,
            )

    def _requeue_hold_all(
        self,
        round_: int,
        jobs: Mapping[str, ManagedJob],
        signalled: Mapping[str, float],
        out: EnactOutcome,
    ) -> tuple[dict[str, SlurmJob], set[str]]:
        """Requeue-hold the signalled jobs still running; key -> its held Slurm record, and
        the keys Slurm accepted the requeue of."""
        if not signalled:
            return {}, set()
        current = self._look([jobs[k].slurm_id for k in signalled])
        if current is None:
            # Not knowing whether a job still runs, requeueing could run a finished one again:
            # every job is left where it runs, reported, and called off.
            for key in signalled:
                out.failed[key] = (
                    "Slurm did not answer before the requeue: the job was left running where it "
                    "was and trains on"
                )
                logger.warning(
                    "round %d: job %s (%s): Slurm does not answer; not requeued, trains on",
                    round_,
                    key,
                    jobs[key].slurm_id,
                )
            return {}, set()
        asked: dict[str, ManagedJob] = {}
        for key in signalled:
            job = jobs[key]
            now = current.get(job.slurm_id)
            if now is None or now.state is not JobState.RUNNING:
                # It finished (or vanished) meanwhile: requeueing would run it again.
                state = "gone" if now is None else now.state.value
                out.finished.append(key)
                logger.info(
                    "round %d: job %s (%s) is %s; not requeued", round_, key, job.slurm_id, state
                )
                continue
            if self._step(
                round_,
                job,
                "requeue_hold",
                {"restart_count": job.leader.restart_count},
                partial(self.slurm.requeue_hold, job.slurm_id),
                out,
            ):
                asked[key] = job
        return self._wait_held(asked, out), set(asked)

    def _wait_held(self, jobs: Mapping[str, ManagedJob], out: EnactOutcome) -> dict[str, SlurmJob]:
        held: dict[str, SlurmJob] = {}
        waiting = dict(jobs)
        deadline = self.clock() + self.settings.requeue_timeout_s
        while waiting:
            current = self._current([j.slurm_id for j in waiting.values()]) or {}
            for key in list(waiting):
                now = current.get(waiting[key].slurm_id)
                if now is not None and now.held:
                    held[key] = now
                    del waiting[key]
            if not waiting or self.clock() >= deadline:
                break
            self.sleep(self.settings.poll_s)
        for key, job in waiting.items():
            out.failed[key] = (
                f"job {job.slurm_id} was not requeued and held within "
                f"{self.settings.requeue_timeout_s:g} s"
            )
        return held

    def _place(
        self,
        round_: int,
        record: SlurmJob,
        job: ManagedJob,
        target: Placement,
        out: EnactOutcome,
        *,
        held: bool,
    ) -> bool:
        """Point a pending job at its target and let it run there."""
        if len(target.gpu_types) > 1 or len(target.nodes) > 1:
            return self._resubmit(round_, job, target, out)
        if not held and not self._hold_pending(round_, job, out):
            return False
        gpu_type = target.gpu_types[0]
        node = target.nodes[0]
        update = {"features": gpu_type, "gpus_per_node": target.num_gpus, "nodes": node}
        ok = self._step(
            round_,
            job,
            "update",
            update,
            lambda: self.slurm.retarget(job.slurm_id, gpu_type, target.num_gpus, node),
            out,
        ) and self._step(
            round_,
            job,
            "placement",
            {"gpu_type": gpu_type, "nodes": [node]},
            lambda: self._write_placement(round_, job, target),
            out,
        )
        # Released either way: a job whose retargeting failed goes back to Slurm unchanged
        # rather than staying held by a failed round.
        released = self._step(
            round_, job, "release", {}, lambda: self.slurm.release(job.slurm_id), out
        )
        if released:
            self._step(
                round_,
                job,
                "start_now",
                {},
                lambda: self.slurm.update(job.slurm_id, JobUpdate(start_now=True)),
                out,
                quiet=True,
            )
        return ok and released

    def _hold_pending(self, round_: int, job: ManagedJob, out: EnactOutcome) -> bool:
        """Hold a released pending job before retargeting it. Slurm may start it in between
        (it was released onto an older target): then it runs, a later round moves it, and the
        refusal is no failure."""
        hold = partial(self.slurm.hold, job.slurm_id)
        return self._step(round_, job, "hold", {}, hold, out, benign=(InvalidRequestError,))

    def _resubmit(self, round_: int, job: ManagedJob, target: Placement, out: EnactOutcome) -> bool:
        """Re-submit the job as a heterogeneous job with one component per GPU slice."""
        leader = job.leader
        comment = (
            leader.comment if job.spec.key else leader.comment.rstrip("; ") + f";key={job.job_key}"
        )
        environment = self._resubmit_environment(job)
        components = [
            JobOptions(
                job_name=leader.name,
                gpus=GpuRequest(part.count),
                constraint=part.gpu_type,
                nodelist=part.node,
                nodes=1,
                partition=leader.partition or None,
                account=leader.account or None,
                comment=comment,
                output=leader.standard_output or None,
                chdir=leader.work_dir or None,
                requeue=True,
                open_mode_append=True,
                export=environment,
                export_all=False,
            )
            for part in target.slices
        ]
        try:
            script = self.slurm.write_batch_script(job.slurm_id)
        except SlurmError as exc:
            out.failed[job.key] = f"cannot read the batch script: {exc}"
            self._release_quietly(round_, job, out)
            return False
        if not self._step(
            round_,
            job,
            "placement",
            {"gpu_types": list(target.gpu_types), "nodes": list(target.nodes)},
            lambda: self._write_placement(round_, job, target),
            out,
        ):
            self._release_quietly(round_, job, out)
            return False
        slices = {"slices": [[s.node, s.gpu_type, s.count] for s in target.slices]}
        # Open until the old job is cancelled: a crash in between leaves it to reconcile.
        opened = self._begin(round_, job, "resubmit", slices)
        action = self._begin(round_, job, "submit", slices)
        try:
            new_id = self.slurm.submit(script, components, uid=leader.user_id, gid=leader.group_id)
        except Exception as exc:
            self._finish(action, False, str(exc), "submit")
            out.failed[job.key] = f"re-submission failed: {exc}"
            self._release_quietly(round_, job, out)
            self._finish(opened, False, f"re-submission failed: {exc}", "resubmit")
            return False
        self._finish(action, True, f"new job {new_id}", "submit")
        out.resubmitted[job.key] = new_id
        # The template's own `#SBATCH --hold` came along with the script: release the copy.
        action = self._begin(round_, job, "release", {}, slurm_id=new_id)
        try:
            self.slurm.release(new_id)
        except SlurmError as exc:
            self._finish(action, False, str(exc), "release")
            out.failed[job.key] = f"release of the re-submitted job {new_id} failed: {exc}"
        else:
            self._finish(action, True, "", "release")
        cancelled = self._step(
            round_,
            job,
            "cancel",
            {"replaced_by": new_id},
            lambda: self.slurm.cancel(job.slurm_id),
            out,
        )
        self._finish(opened, cancelled, f"replaced by job {new_id}", "resubmit")
        return True

    # -- helpers -------------------------------------------------------------------------------

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

    def _release_quietly(self, round_: int, job: ManagedJob, out: EnactOutcome) -> None:
        """Hand a job whose placement failed back to Slurm rather than leave it held (when
        Slurm does not say, the release is tried: a job not held refuses it harmlessly)."""
        current = self._current([job.slurm_id])
        record = current.get(job.slurm_id) if current is not None else None
        if current is None or (record is not None and record.held):
            release = partial(self.slurm.release, job.slurm_id)
            self._step(round_, job, "release", {}, release, out, benign=(InvalidRequestError,))

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

    def _look(self, job_ids: list[str]) -> dict[str, SlurmJob] | None:
        """`_current`, asked again until Slurm answers or `requeue_timeout_s` passed."""
        deadline = self.clock() + self.settings.requeue_timeout_s
        while True:
            current = self._current(job_ids)
            if current is not None or self.clock() >= deadline:
                return current
            self.sleep(max(self.settings.poll_s, _STATE_LOOK_S))

    def _write_placement(self, round_: int, job: ManagedJob, target: Placement) -> None:
        payload = {
            "round": round_,
            "gpu_type": target.slices[0].gpu_type,
            "num_gpus": target.num_gpus,
            "nodes": list(target.nodes),
            "slices": [
                {"node": s.node, "gpu_type": s.gpu_type, "count": s.count} for s in target.slices
            ],
        }
        write_placement(self._folder(job), payload)

    def _write_request(self, round_: int, job: ManagedJob, at: float) -> None:
        try:
            write_checkpoint_request(
                self._folder(job),
                job_id=job.slurm_id,
                restart_count=job.leader.restart_count,
                at=at,
            )
        except Exception as exc:
            # The signal still goes out; only a job that is still starting would miss it.
            logger.warning(
                "round %d: job %s: cannot write its checkpoint request: %s", round_, job.key, exc
            )

    def _folder(self, job: ManagedJob) -> JobFolder:
        """The job's state folder (`<root>/<uid>/<key>`; copies share their key's)."""
        uid = job.leader.user_id
        if uid is None:
            raise StateFolderError(f"job {job.slurm_id}: Slurm reports no user id")
        return JobFolder(self.settings.state_root, uid, job.job_key, job.leader.group_id)

    def _read_ack(self, round_: int, job: ManagedJob, signalled_at: float) -> CheckedAck | None:
        try:
            return read_ack(
                self._folder(job),
                job_id=job.slurm_id,
                restart_count=job.leader.restart_count,
                signalled_at=signalled_at,
            )
        except Exception as exc:  # no ack: the job is moved at the timeout like any other
            logger.warning("round %d: job %s: cannot read its ack: %s", round_, job.key, exc)
            return None

    def _resubmit_environment(self, job: ManagedJob) -> dict[str, str]:
        """What a re-submitted job is given: its key, the state root and a login-like base."""
        environment = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
        uid = job.leader.user_id
        if uid is not None:
            try:
                account = pwd.getpwuid(uid)
                environment |= {"HOME": account.pw_dir, "USER": account.pw_name}
            except KeyError:
                pass
        environment |= dict(self.settings.resubmit_environment)
        environment |= {
            "HETSCHED_JOB_KEY": job.job_key,
            "HETSCHED_STATE_ROOT": str(self.settings.state_root),
        }
        return environment
