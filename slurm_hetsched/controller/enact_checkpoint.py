"""Steps 1 to 3 of a move (docs/interfaces.md, the checkpoint-before-move protocol), for every
job to move or stop at once: signal, wait for the acks, requeue-hold.

1. write `checkpoint_request.json` and signal the training process (`scancel -b -s USR2`);
2. wait for each job's ack (checkpoint committed; `ack_timeout_s`; without an ack the job
   resumes from its last periodic checkpoint and the round records it); a job that ends
   instead is left alone;
3. `scontrol requeuehold` each job still running, and wait until Slurm shows it held.
A job signalled but not requeued (Slurm refused, or did not answer) is called off: a resume
request tells it to train on where it runs rather than wait, paused, for its lease to end.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from functools import partial

from slurm_hetsched.controller.enact_steps import EnactOutcome, JournaledSteps
from slurm_hetsched.controller.jobview import ManagedJob
from slurm_hetsched.controller.statefiles import (
    CheckedAck,
    read_ack,
    write_checkpoint_request,
    write_resume_request,
)
from slurm_hetsched.slurm.records import JobState, SlurmJob

# Split out of enact.py: its log lines keep the enactor's logger.
logger = logging.getLogger("slurm_hetsched.controller.enact")

# How often the ack wait looks at Slurm for jobs that ended instead of acking.
_STATE_LOOK_S = 1.0


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


class CheckpointPhase(JournaledSteps):
    """Checkpoint and requeue-hold the jobs a round moves or stops (steps 1 to 3)."""

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

    def _look(self, job_ids: list[str]) -> dict[str, SlurmJob] | None:
        """`_current`, asked again until Slurm answers or `requeue_timeout_s` passed."""
        deadline = self.clock() + self.settings.requeue_timeout_s
        while True:
            current = self._current(job_ids)
            if current is not None or self.clock() >= deadline:
                return current
            self.sleep(max(self.settings.poll_s, _STATE_LOOK_S))

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
