"""The job's half of the checkpoint handshake (docs/interfaces.md, step 2): after the checkpoint
a signal (or a request file) asked for, write ack.json, then pause until the requeue.

Paused, the job neither exits nor trains, so it stays RUNNING and keeps its Slurm record until
the controller requeues it (SIGTERM ends the pause at once). It trains on when the lease runs
out or when the controller calls the move off (resume_request.json); a checkpoint signal while
paused is answered with a fresh ack. Every rank calls these methods together: rank 0 reads and
writes the files, and the ranks agree through the collective.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path

from slurm_hetsched.wrapper.collective import Collective
from slurm_hetsched.wrapper.env import JobEnvironment
from slurm_hetsched.wrapper.files import read_json
from slurm_hetsched.wrapper.progress import (
    RESUME_FILE,
    Ack,
    ProgressReporter,
    checkpoint_requested,
    resume_requested,
    write_ack,
)
from slurm_hetsched.wrapper.signals import SignalFlags

# Split out of session.py: its log lines keep the session's logger.
logger = logging.getLogger("slurm_hetsched.wrapper.session")

# How far the controller's clock may be behind this node's when it calls a move off.
_CLOCK_SKEW_S = 60.0


class Handshake:
    """Answer a checkpoint request: acknowledge the checkpoint, then pause.

    Args:
        env: the job's environment (state folder, job id, restart count).
        collective: how the ranks agree.
        flags: the signal flags (a repeated checkpoint signal, SIGTERM).
        clock / wall / sleep: monotonic seconds, Unix seconds, sleep.

    Attributes:
        acks: acks so far (every rank counts them; rank 0 writes them).
        fork_round: the round of placement.json's `fork` a forked copy trains (copymode.py);
            its acks name it. None for a job that is not a forked copy.
    """

    def __init__(
        self,
        env: JobEnvironment,
        collective: Collective,
        flags: SignalFlags,
        *,
        clock: Callable[[], float],
        wall: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.env = env
        self.collective = collective
        self.flags = flags
        self.acks = 0
        self.fork_round: int | None = None
        # The resume request that last ended a pause: a later pause obeys only a newer one.
        self._resumed_at: float | None = None
        self._clock = clock
        self._wall = wall
        self._sleep = sleep

    @property
    def is_rank_zero(self) -> bool:
        return self.collective.rank == 0

    def request_waiting(self) -> bool:
        """Whether checkpoint_request.json asks this very run to checkpoint (a signal that
        came before the handlers were installed); every rank gets rank 0's answer."""
        pending = self.is_rank_zero and checkpoint_requested(
            self.env.state_dir, self.env.job_id, self.env.restart_count
        )
        (pending,) = self.collective.any([pending])
        return pending

    def acknowledge(self, step: int, checkpoint: Path) -> None:
        """Write ack.json for `checkpoint` (rank 0); a failed write is logged, not raised."""
        if self.is_rank_zero:
            ack = Ack(
                job_id=self.env.job_id,
                restart_count=self.env.restart_count,
                step=step,
                checkpoint=checkpoint.name,
                written_at=self._wall(),
                fork_round=self.fork_round,
            )
            try:
                write_ack(self.env.state_dir, ack)
            except OSError as exc:
                logger.error("cannot write ack.json: %s; the controller will time out", exc)
        self.acks += 1

    def pause(
        self,
        step: int,
        checkpoint: Path | None,
        *,
        lease_timeout_s: float,
        poll_s: float,
        progress: ProgressReporter | None,
    ) -> bool:
        """Hold still after the ack of `checkpoint` until SIGTERM (requeue), a resume request
        or the lease timeout; every rank loops here.

        Returns:
            True when training goes on here; False on SIGTERM (the caller stops the job).
        """
        logger.info(
            "checkpoint %s acknowledged; paused until requeued (lease %.0f s)",
            checkpoint.name if checkpoint else "?",
            lease_timeout_s,
        )
        if progress is not None:
            progress.update(step, status="paused", force=True)
        deadline = self._clock() + lease_timeout_s
        # Requests are timed by the controller's clock, acks by this node's: allow some skew.
        # The controller removes an old request before every signal, so none can linger.
        acked_at = self._wall() - _CLOCK_SKEW_S
        if self._resumed_at is not None:
            acked_at = max(acked_at, math.nextafter(self._resumed_at, math.inf))
        while True:
            expired = self.is_rank_zero and self._clock() >= deadline
            resume = self.is_rank_zero and resume_requested(
                self.env.state_dir, self.env.job_id, self.env.restart_count, acked_at
            )
            flags = [self.flags.take_checkpoint_request(), self.flags.terminate_requested]
            again, terminate, expired, resume = self.collective.any([*flags, expired, resume])
            if terminate:
                return False
            if again:
                # A controller that restarted may signal again: its ack must be newer.
                if checkpoint is None:  # a forked copy whose round-end checkpoint failed
                    logger.error("checkpoint signal while paused, but no checkpoint to ack")
                    continue
                self.acknowledge(step, checkpoint)
                deadline = self._clock() + lease_timeout_s
                logger.info("checkpoint signal while paused: acknowledged again")
                continue
            if resume:
                logger.info(
                    "resume request at step %d: training on (a called-off move, or a forked "
                    "copy's next round)",
                    step,
                )
                self._resumed_at = self._request_time()
                break
            if expired:
                logger.warning(
                    "no requeue within the lease of %.0f s after the ack at step %d: resuming "
                    "training here (the controller gave up on or has not finished the move)",
                    lease_timeout_s,
                    step,
                )
                break
            self._sleep(poll_s)
        if progress is not None:
            progress.reset_window()
            progress.update(step, force=True)
        return True

    def _request_time(self) -> float | None:
        """When the resume request just obeyed was written (every rank gets rank 0's), so
        that a later pause does not take the same request again (a forked copy pauses after
        every round, sooner than the clock skew allowance)."""
        at = None
        if self.is_rank_zero:
            payload = read_json(self.env.state_dir / RESUME_FILE)
            value = payload.get("requested_at") if payload else None
            at = float(value) if isinstance(value, int | float) else None
        return self.collective.all_gather(at)[0]  # type: ignore[no-any-return]
