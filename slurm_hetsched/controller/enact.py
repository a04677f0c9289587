"""Carrying a round plan out on Slurm: the checkpoint-before-move protocol (docs/interfaces.md).

`SlurmEnactor` runs a round in order: what each job needs (enact_work.py); steps 1 to 3 for
every job to move or stop, at once (enact_checkpoint.py); then step 4 here, for each job to
move or start, and the holds. Each action is journaled before it is taken (enact_steps.py).

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
import pwd
from collections.abc import Callable
from functools import partial
from typing import Any

from slurm_hetsched.controller.enact_checkpoint import CheckpointPhase, ack_outcome, acked_step
from slurm_hetsched.controller.enact_steps import (
    ACTION_KINDS,
    EnactOutcome,
    EnactSettings,
    Journal,
)
from slurm_hetsched.controller.enact_work import Work, classify, runs_on, starting_on
from slurm_hetsched.controller.jobview import ManagedJob, SlurmView
from slurm_hetsched.controller.resubmit_options import resubmission_options
from slurm_hetsched.controller.statefiles import write_placement
from slurm_hetsched.core.model import Placement, RoundPlan
from slurm_hetsched.core.ports import EnactReport
from slurm_hetsched.errors import InvalidRequestError, SlurmError
from slurm_hetsched.slurm.records import JobUpdate, SlurmJob

__all__ = [
    "ACTION_KINDS",
    "EnactOutcome",
    "EnactSettings",
    "Journal",
    "SlurmEnactor",
    "Work",
    "ack_outcome",
    "acked_step",
    "classify",
    "runs_on",
    "starting_on",
]

logger = logging.getLogger(__name__)


class SlurmEnactor(CheckpointPhase):
    """Carries out round plans on Slurm, journaling every action before it is taken.

    `fork_sections`, set by the job tracker of forked jobs (controller/fork_tracker.py), gives
    a copy's `fork` work for its placement.json."""

    fork_sections: Callable[[ManagedJob], dict[str, Any] | None] | None = None

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
        if not held and not self._hold_pending(round_, job, out):
            return False
        # Several slices make a heterogeneous job; a heterogeneous job going back to one slice
        # becomes a plain job again; an elastic job (`gpus=N-M`) changing its count needs one
        # task per GPU. Each needs a new job: Slurm cannot add or drop components, or tasks
        # of a batch job.
        elastic = bool(job.spec.elastic_gpus) and target.num_gpus != job.num_gpus
        if len(target.slices) > 1 or len(job.components) > 1 or elastic:
            return self._resubmit(round_, job, target, out)
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
        """Re-submit the job with one component per GPU slice (one slice: a plain job), then
        cancel the old one. Until the new job is accepted the old one stays held and intact,
        and the next round tries again: never both jobs running, never neither."""
        options = resubmission_options(job, target, self._resubmit_environment(job), self.clock())
        try:
            script = self.slurm.write_batch_script(job.slurm_id)
        except SlurmError as exc:
            out.failed[job.key] = f"cannot read the batch script: {exc}"
            return False
        if not self._step(
            round_,
            job,
            "placement",
            {"gpu_types": list(target.gpu_types), "nodes": list(target.nodes)},
            lambda: self._write_placement(round_, job, target),
            out,
        ):
            return False
        slices = {"slices": [[s.node, s.gpu_type, s.count] for s in target.slices]}
        # Open until the old job is cancelled: a crash in between leaves it to reconcile.
        opened = self._begin(round_, job, "resubmit", slices)
        action = self._begin(round_, job, "submit", slices)
        try:
            leader = job.leader
            new_id = self.slurm.submit(script, options, uid=leader.user_id, gid=leader.group_id)
        except Exception as exc:
            self._finish(action, False, str(exc), "submit")
            out.failed[job.key] = f"re-submission failed: {exc}"
            self._finish(
                opened, False, f"re-submission failed, old job kept held: {exc}", "resubmit"
            )
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
        self._finish(opened, cancelled, f"job {job.slurm_id} replaced by job {new_id}", "resubmit")
        return True

    def _release_quietly(self, round_: int, job: ManagedJob, out: EnactOutcome) -> None:
        """Hand a job whose placement failed back to Slurm rather than leave it held (when
        Slurm does not say, the release is tried: a job not held refuses it harmlessly)."""
        current = self._current([job.slurm_id])
        record = current.get(job.slurm_id) if current is not None else None
        if current is None or (record is not None and record.held):
            release = partial(self.slurm.release, job.slurm_id)
            self._step(round_, job, "release", {}, release, out, benign=(InvalidRequestError,))

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
        if self.fork_sections is not None:
            fork = self.fork_sections(job)
            if fork is not None:
                payload["fork"] = fork
        write_placement(self._folder(job), payload)

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
