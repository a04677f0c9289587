"""The job side of the checkpoint-before-move protocol, for any training loop (no PyTorch).

A `JobSession` wraps a loop of steps. At start it creates the state folder, installs the
signal handlers, finds the GPU type and resumes from the newest usable checkpoint. After each
step (`step_done`) it updates progress.json and, at this step boundary:
- on SIGTERM: stops (raises `Terminated`, exit status 143), without a checkpoint;
- on the checkpoint signal: writes a checkpoint, writes ack.json, then PAUSES: it neither
  exits nor trains, so the job stays RUNNING until the controller requeues it (SIGTERM ends
  the pause at once). If no requeue comes within the lease timeout, or the controller calls
  the move off (resume_request.json), it trains on and logs why.
  A checkpoint signal while paused is answered with a fresh ack;
- when a periodic checkpoint is due (every N steps or T seconds): writes it.

In a distributed job only rank 0 writes files; all ranks take the same branch (flags are
OR-ed over ranks), wait at a barrier after each checkpoint, and load the same checkpoint.

Errors of the wrapper's own machinery (a failed checkpoint write, progress, Slurm lookups) are
logged and training goes on: a scheduler-side problem never kills training. The ack and the
pause are handshake.py's, a forked copy's rounds (HadarE) copymode.py's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from slurm_hetsched.statefolder import checkpoint_name
from slurm_hetsched.wrapper.checkpoint import (
    CheckpointReader,
    CheckpointStore,
    CheckpointWriter,
)
from slurm_hetsched.wrapper.collective import Collective, LocalCollective
from slurm_hetsched.wrapper.copymode import CopyMode
from slurm_hetsched.wrapper.emulation import StepStretch, build_step_stretch
from slurm_hetsched.wrapper.env import JobEnvironment
from slurm_hetsched.wrapper.files import ensure_state_dir
from slurm_hetsched.wrapper.handshake import Handshake
from slurm_hetsched.wrapper.placement import NodeGpuLookup, resolve_gpu_type, slurm_node_gpus
from slurm_hetsched.wrapper.progress import ProgressReporter
from slurm_hetsched.wrapper.signals import SignalFlags

logger = logging.getLogger(__name__)

TERMINATED_EXIT_STATUS = 143  # 128 + SIGTERM, what a shell reports for a SIGTERM death
SaveFn = Callable[[CheckpointWriter], None]
LoadFn = Callable[[CheckpointReader], None]


class Terminated(SystemExit):
    """Raised at a step boundary (or in a pause) after SIGTERM: Slurm requeues or cancels.

    A SystemExit, so `except Exception` in user code does not swallow it and the process
    exits with status 143 unless caught.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(TERMINATED_EXIT_STATUS)
        self.reason = reason


class JobSession:
    """Checkpoint, acknowledge, pause and report progress around a loop of steps.

    Args:
        total_steps: the steps the job will do (None: open-ended).
        save: writes the state into a checkpoint (called on rank 0 only). Without it the job
            cannot checkpoint: signals are logged and ignored.
        load: restores the state from a checkpoint (called on every rank).
        rank_state: returns this rank's own part of the state (e.g. its RNG states); called
            on every rank before a save, the list over ranks is `writer.rank_states`.
        env: the job's environment (default: read from os.environ).
        collective: how ranks agree (default: a single process).
        checkpoint_every_steps / checkpoint_every_s: periodic checkpoints; None = from env,
            0 = off.
        keep: committed checkpoints kept; None = from env.
        lease_timeout_s: how long to pause after an ack; None = from env.
        progress_every_s: progress.json cadence; None = from env.
        poll_s: how often a paused job looks at its flags.
        gpu_lookup: node -> GPUs per type (tests inject one; default asks Slurm).
        clock / wall / sleep: monotonic seconds, Unix seconds, sleep; injected by tests.
    """

    def __init__(
        self,
        *,
        total_steps: int | None,
        save: SaveFn | None = None,
        load: LoadFn | None = None,
        rank_state: Callable[[], Any] | None = None,
        env: JobEnvironment | None = None,
        collective: Collective | None = None,
        checkpoint_every_steps: int | None = None,
        checkpoint_every_s: float | None = None,
        keep: int | None = None,
        lease_timeout_s: float | None = None,
        progress_every_s: float | None = None,
        poll_s: float = 0.2,
        gpu_lookup: NodeGpuLookup = slurm_node_gpus,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.env = env if env is not None else JobEnvironment.from_environ()
        self.collective: Collective = collective or LocalCollective()
        self.total_steps = total_steps
        self.step = 0
        self._save = save
        self._load = load
        self._rank_state = rank_state
        self.every_steps = _pick(checkpoint_every_steps, self.env.checkpoint_every_steps)
        self.every_s = _pick(checkpoint_every_s, self.env.checkpoint_every_s)
        self.lease_timeout_s = _pick(lease_timeout_s, self.env.lease_timeout_s) or 0.0
        self.progress_every_s = _pick(progress_every_s, self.env.progress_every_s) or 0.0
        self.poll_s = poll_s
        self.store = CheckpointStore(
            self.env.state_dir,
            keep=keep if keep is not None else self.env.keep_checkpoints,
            stall_s=self.env.test_checkpoint_stall_s,
            wall=wall,
        )
        self.flags = SignalFlags(self.env.checkpoint_signal)
        self.gpu_type = "unknown"
        self.resumed_from: Path | None = None
        self.last_checkpoint: Path | None = None
        self.handshake = Handshake(
            self.env, self.collective, self.flags, clock=clock, wall=wall, sleep=sleep
        )
        self._gpu_lookup = gpu_lookup
        self._clock = clock
        self._wall = wall
        self._sleep = sleep
        self._progress: ProgressReporter | None = None
        self._stretch: StepStretch | None = None
        self._last_checkpoint_at = clock()
        self._step_started = clock()
        self._started = False
        self.copy_mode = CopyMode(self)

    # ----------------------------------------------------------------- life cycle
    @property
    def is_rank_zero(self) -> bool:
        return self.collective.rank == 0

    @property
    def finished(self) -> bool:
        return self.total_steps is not None and self.step >= self.total_steps

    @property
    def acks(self) -> int:
        """Checkpoints acknowledged so far."""
        return self.handshake.acks

    def start(self) -> JobSession:
        """Prepare the state folder, install the handlers, resume; returns self.

        Raises:
            SystemExit: (0) this process is rank k > 0 of an srun step whose program joins no
                process group: rank 0 trains alone (a one-process program in a job the
                controller placed across GPU types runs once, not once per GPU).
        """
        if self.env.world_size > 1 and self.collective.world_size == 1:
            if self.env.rank > 0:
                logger.warning(
                    "rank %d of %d: the program joins no torch.distributed process group, so "
                    "rank 0 trains alone and this rank exits",
                    self.env.rank,
                    self.env.world_size,
                )
                raise SystemExit(0)
            logger.warning(
                "%d ranks, but the program joins no torch.distributed process group: rank 0 "
                'trains alone (docs/job-side.md, "Multi-rank jobs")',
                self.env.world_size,
            )
        if self.is_rank_zero:
            for folder in dict.fromkeys((self.env.key_dir, self.env.state_dir)):  # copy-<i>/
                ensure_state_dir(folder)
            self.store.prune()  # temporary folders of a writer killed in the previous run
        self.collective.barrier()
        self.flags.install()
        gpu_type, placement = ("unknown", None)
        if self.is_rank_zero:
            gpu_type, placement = resolve_gpu_type(
                self.env.state_dir,
                self.env.node,
                in_slurm=self.env.in_slurm,
                lookup=self._gpu_lookup,
            )
        self.gpu_type = str(self.collective.all_gather(gpu_type)[0])
        num_gpus = self.env.num_gpus or (placement.num_gpus if placement else None) or 0
        if self._load is not None:
            self._resume()
        if self.env.emulate_gpu_speed:
            self._stretch = build_step_stretch(self.env, self.gpu_type, num_gpus)
        if self.is_rank_zero:
            self._progress = ProgressReporter(
                self.env,
                total_steps=self.total_steps,
                gpu_type=self.gpu_type,
                num_gpus=num_gpus,
                every_s=self.progress_every_s,
                clock=self._clock,
                wall=self._wall,
            )
            self._progress.update(self.step, force=True)
        logger.info(
            "job %s (key %s, restart %d) on %s (%s): step %d of %s; state in %s",
            self.env.job_id,
            self.env.job_key,
            self.env.restart_count,
            self.env.node,
            self.gpu_type,
            self.step,
            self.total_steps,
            self.env.state_dir,
        )
        self._last_checkpoint_at = self._clock()
        self._step_started = self._clock()
        self._started = True
        try:
            self.copy_mode.begin()  # a forked copy takes up its round (copymode.py)
        except Exception:
            self.close("failed")
            raise
        self._answer_early_request()
        return self

    def _answer_early_request(self) -> None:
        """Answer a checkpoint signal that came before the handlers were installed.

        The template ignores the signal until then, so the controller also leaves a request
        file before signalling; found here, it is answered as the signal would have been:
        checkpoint (the one just resumed from, if no step ran), ack, pause.
        """
        pending = self.handshake.request_waiting()
        if pending and self.env.checkpoint_signal is not None:
            logger.info("a checkpoint was requested while the job was starting: answering it")
            self.flags.checkpoint_requested = True
            self._boundary()

    def close(self, status: str | None = None) -> None:
        """Write the final progress and put the previous signal handlers back."""
        if not self._started:
            return
        self._started = False
        self.flags.uninstall()
        if self._progress is not None:
            final = status or ("done" if self.finished else "stopped")
            self._progress.update(self.step, status=final, force=True)

    def __enter__(self) -> JobSession:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.close("stopped" if isinstance(exc, Terminated) else "failed")

    # ----------------------------------------------------------------- the loop
    def step_done(self, steps: int = 1) -> None:
        """Call after each training step: counts it and handles this step boundary.

        Raises:
            Terminated: SIGTERM arrived (Slurm requeues or cancels the job).
        """
        if self._stretch is not None:
            self._stretch.after_step(self._clock() - self._step_started)
        self.step += steps
        if self._progress is not None:
            self._progress.update(self.step)
        self._boundary()
        self._step_started = self._clock()

    def _boundary(self) -> None:
        due = self.is_rank_zero and self._periodic_due()
        requested, terminate, due = self.collective.any(
            [self.flags.take_checkpoint_request(), self.flags.terminate_requested, due]
        )
        if terminate:
            self._terminate("SIGTERM during training (the job is being requeued or cancelled)")
        if self.copy_mode.round_done():
            self.copy_mode.end_round()
            return
        if self.finished:
            if requested:
                logger.info("checkpoint signal at the last step: finishing instead of pausing")
            return
        if requested:
            path = self.checkpoint()
            if path is None:
                logger.error("checkpoint for the signal failed: no ack, training goes on")
                return
            self.handshake.acknowledge(self.step, path)
            self._pause()
        elif due:
            self.checkpoint()

    def _periodic_due(self) -> bool:
        if self.every_steps and self.step % self.every_steps == 0:
            return True
        return bool(self.every_s) and self._clock() - self._last_checkpoint_at >= self.every_s

    # ----------------------------------------------------------------- checkpoints
    def checkpoint(self) -> Path | None:
        """Write a checkpoint of the current step now (every rank must call it).

        Returns:
            the committed folder (on every rank), or None if the job cannot checkpoint or the
            write failed (logged with its cause; older checkpoints stay usable).
        """
        if self._save is None:
            logger.warning("no save function: cannot checkpoint step %d", self.step)
            return None
        save = self._save
        rank_states = (
            self.collective.all_gather(self._rank_state()) if self._rank_state is not None else []
        )
        ok = 1
        if self.is_rank_zero:
            try:
                self.store.save(
                    self.step,
                    save,
                    meta={
                        "job_id": self.env.job_id,
                        "restart_count": self.env.restart_count,
                        "job_key": self.env.job_key,
                        "gpu_type": self.gpu_type,
                        **self.copy_mode.meta(),
                    },
                    rank_states=rank_states,
                )
            except Exception:
                logger.exception("checkpoint of step %d failed", self.step)
                ok = 0
        ok = self.collective.broadcast_int(ok)
        self.collective.barrier()
        self._last_checkpoint_at = self._clock()
        if not ok:
            return None
        self.last_checkpoint = self.store.folder / checkpoint_name(self.step)
        return self.last_checkpoint

    def _resume(self) -> None:
        assert self._load is not None
        load = self._load
        chosen = -1
        if self.is_rank_zero:
            found = self.store.load_latest(load)
            chosen = found[0].step if found else -1
        chosen = self.collective.broadcast_int(chosen)
        if chosen >= 0 and not self.is_rank_zero:
            self.store.load_latest(load, step=chosen)
        if chosen < 0:
            logger.info("no checkpoint in %s: starting at step 0", self.env.state_dir)
            return
        self.step = chosen
        self.resumed_from = self.last_checkpoint = self.store.folder / checkpoint_name(chosen)
        logger.info("resumed from %s at step %d", self.resumed_from.name, chosen)

    # ----------------------------------------------------------------- pause
    def _pause(self) -> None:
        """Hold still after the ack until SIGTERM (requeue) or the lease ends (handshake.py); a
        forked copy whose round is done pauses again until placement.json names a new one."""
        while True:
            goes_on = self.handshake.pause(
                self.step,
                self.last_checkpoint,
                lease_timeout_s=self.lease_timeout_s,
                poll_s=self.poll_s,
                progress=self._progress,
            )
            if not goes_on:
                self._terminate("SIGTERM while paused (requeued, as the protocol expects)")
            if self.copy_mode.after_pause():
                return

    def _terminate(self, reason: str) -> None:
        logger.warning("stopping at step %d: %s", self.step, reason)
        self.close("stopped")
        raise Terminated(reason)


def _pick(explicit: float | None, from_env: float | None) -> Any:
    """An explicit argument wins; 0 turns a periodic setting off."""
    value = from_env if explicit is None else explicit
    return value or None
