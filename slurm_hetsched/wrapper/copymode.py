"""A forked copy's rounds (HadarE, docs/job-side.md "Forked copies (HadarE)").

The controller forks a job into copies that train at once on different nodes and merges them
after every round. It tells each copy what to do in its placement.json, with a `fork` object
(forkfiles.ForkRound): the round, the consolidated checkpoint to start from, the global step
to start at, how far to advance the data, and the steps to train. A JobSession whose
placement names a fork round it has not done yet, at start or when a pause ends:
1. loads `from` (the merged checkpoint, checked like every checkpoint: under the key folder,
   no symlink, the job's uid, committed) or nothing if it is null;
2. sets its step to `start_step` and hands the round to `on_round` (TorchTrainer advances
   its data position by `data_offset` batches and restarts its loader there);
3. trains until step == start_step + budget, then checkpoints into its own folder, acks with
   `fork_round` and pauses as after a checkpoint signal. A checkpoint signal stops the round
   early as it would any job (the ack names the round too).
When the pause ends (resume_request.json, or the lease) the copy reads placement.json again:
a newer round starts; the same round trains on to its end if the copy had stopped early, or
pauses again if it was done, so a copy never trains past its budget. The 'finish'
instruction (start_step >= total_steps) loads `from` and lets the loop end, so the program's
own final code runs on the consolidated model. Without a `fork` nothing changes.

The round a checkpoint belongs to is in its manifest's meta (`fork_round`, `fork_end`), so a
copy restarted in the middle of a round goes on from its own checkpoint to the same end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from slurm_hetsched.wrapper.checkpoint import CheckpointReader, CheckpointStore
from slurm_hetsched.wrapper.collective import Collective
from slurm_hetsched.wrapper.env import JobEnvironment
from slurm_hetsched.wrapper.forkfiles import (
    ForkError,
    ForkRound,
    open_checkpoint,
    parse_fork,
    read_fork,
)
from slurm_hetsched.wrapper.handshake import Handshake
from slurm_hetsched.wrapper.progress import ProgressReporter
from slurm_hetsched.wrapper.state_errors import CorruptStateError

# Its log lines are the session's.
logger = logging.getLogger("slurm_hetsched.wrapper.session")


class _Session(Protocol):
    """What copy mode uses of its JobSession (session.py imports this module, not back)."""

    env: JobEnvironment
    collective: Collective
    step: int
    total_steps: int | None
    store: CheckpointStore
    handshake: Handshake
    resumed_from: Path | None
    last_checkpoint: Path | None
    _load: Callable[[CheckpointReader], None] | None
    _progress: ProgressReporter | None

    @property
    def is_rank_zero(self) -> bool: ...

    def checkpoint(self) -> Path | None: ...

    def _pause(self) -> None: ...


class CopyMode:
    """The fork rounds of one JobSession (all ranks hold the same state).

    Attributes:
        round: the fork round being trained or last trained; None: not a forked copy.
        end_step: the step this round pauses at.
        finishing: the round is the controller's 'finish' instruction.
        on_round: called on every rank when a round starts, after its checkpoint is loaded
            and the step set (TorchTrainer: advance the data, restart the loader).
    """

    def __init__(self, session: _Session) -> None:
        self.session = session
        self.round: int | None = None
        self.end_step = 0
        self.finishing = False
        self.on_round: Callable[[ForkRound], None] | None = None

    def meta(self) -> dict[str, Any]:
        """What a checkpoint's manifest records of the round (nothing when not forked)."""
        if self.round is None:
            return {}
        return {"fork_round": self.round, "fork_end": self.end_step}

    # ----------------------------------------------------------------- start
    def begin(self) -> None:
        """At start (after resuming the copy's own checkpoint): take up placement.json's fork.

        Raises:
            ForkError: the fork or its checkpoint cannot be used (the message says why).
        """
        fork = self._read()
        if fork is None:
            return
        own = self._resumed_round()
        if own is None or fork.round > own[0]:
            self._start_round(fork)
        else:
            self.round, self.end_step = own
            self.session.handshake.fork_round = self.round
            if fork.round < own[0]:
                logger.warning(
                    "placement.json names fork round %d, older than round %d of the copy's "
                    "own checkpoint: going on with round %d",
                    fork.round,
                    own[0],
                    own[0],
                )
            logger.info(
                "fork round %d: resumed at step %d, training to step %d",
                self.round,
                self.session.step,
                self.end_step,
            )
        if self.round_done():
            self.end_round()

    def _resumed_round(self) -> tuple[int, int] | None:
        """(round, end) from the meta of the checkpoint the session resumed from."""
        session = self.session
        found: tuple[int, int] | None = None
        if session.is_rank_zero and session.resumed_from is not None:
            try:
                info = session.store.checkpoints()
                match = next(i for i in info if i.path == session.resumed_from)
                meta = session.store.open(match).meta
                r, end = meta.get("fork_round"), meta.get("fork_end")
                if isinstance(r, int) and isinstance(end, int):
                    found = (r, end)
            except (StopIteration, CorruptStateError, OSError) as exc:
                logger.warning("cannot read the fork round of %s: %s", session.resumed_from, exc)
        gathered = session.collective.all_gather(found)[0]
        return None if gathered is None else (int(gathered[0]), int(gathered[1]))

    # ----------------------------------------------------------------- rounds
    def round_done(self) -> bool:
        """Whether the copy has trained its round's budget (checked at every step boundary)."""
        return self.round is not None and not self.finishing and self.session.step >= self.end_step

    def end_round(self) -> None:
        """Checkpoint, ack with the round, and pause (every rank)."""
        self._close_round()
        self.session._pause()

    def after_pause(self) -> bool:
        """When a pause ends: start a newer round if placement.json names one.

        Returns:
            True when training goes on (a new round, the rest of an unfinished round, or a
            job that is not forked: today's behaviour); False when the copy must pause again
            (its round is done, or a new round of 0 steps was checkpointed and acked).
        """
        fork = self._read()
        if fork is not None and (self.round is None or fork.round > self.round):
            self._start_round(fork)
            if self.round_done():
                self._close_round()
                return False
            return True
        if not self.round_done():
            return True
        logger.info(
            "fork round %d is done and placement.json names no newer round: pausing again",
            self.round,
        )
        return False

    def _close_round(self) -> None:
        session = self.session
        path = session.checkpoint()
        if path is None:
            logger.error(
                "fork round %d: the checkpoint at step %d failed; no ack (the controller "
                "counts the round as lost for this copy)",
                self.round,
                session.step,
            )
            return
        logger.info("fork round %d done at step %d: acknowledging", self.round, session.step)
        session.handshake.acknowledge(session.step, path)

    def _start_round(self, fork: ForkRound) -> None:
        session = self.session
        if fork.copy != session.env.copy:
            raise ForkError(
                f"placement.json's fork is for copy {fork.copy}, this is copy {session.env.copy}"
            )
        if fork.total_steps != session.total_steps:
            raise ForkError(
                f"placement.json's fork counts {fork.total_steps} steps in all, the program "
                f"{session.total_steps}: the job's spec and its program disagree"
            )
        if fork.source is None and session.resumed_from is not None and self.round is None:
            logger.warning(
                "fork round %d starts from the program's initial model (`from` is null), but "
                "this copy resumed its own %s: it goes on from that model",
                fork.round,
                session.resumed_from.name,
            )
        if fork.source is not None:
            if session._load is None:
                raise ForkError("a fork round needs a load function: this session has none")
            try:
                reader = open_checkpoint(session.env.key_dir, fork.source)
                session._load(reader)
            except Exception as exc:
                logger.error("fork round %d: refusing %s: %s", fork.round, fork.source, exc)
                raise
            if reader.step != fork.start_step:
                logger.warning(
                    "%s is of step %d, the fork starts at step %d",
                    fork.source,
                    reader.step,
                    fork.start_step,
                )
        session.step = fork.start_step
        session.last_checkpoint = None
        self.round, self.end_step, self.finishing = fork.round, fork.end_step, fork.finish
        session.handshake.fork_round = fork.round
        if fork.start_step + fork.budget > fork.total_steps and not fork.finish:
            logger.warning("fork round %d: budget capped at the job's total", fork.round)
        if self.on_round is not None:
            self.on_round(fork)
        elif fork.data_offset:
            logger.warning("fork round %d: data_offset ignored (not a TorchTrainer)", fork.round)
        if session._progress is not None:
            session._progress.update(session.step, force=True)
        logger.info(
            "fork round %d, copy %d: %s from %s at step %d%s",
            fork.round,
            fork.copy,
            "finishing" if fork.finish else f"training to step {fork.end_step}",
            fork.source or "the program's initial model",
            fork.start_step,
            f", data advanced by {fork.data_offset} batches" if fork.data_offset else "",
        )

    def _read(self) -> ForkRound | None:
        """placement.json's fork as rank 0 reads it, on every rank (errors on every rank too)."""
        session = self.session
        payload: tuple[str, Any] = ("none", None)
        if session.is_rank_zero:
            try:
                fork = read_fork(session.env.state_dir)
                payload = ("fork", fork.to_dict()) if fork is not None else ("none", None)
            except ForkError as exc:
                payload = ("error", str(exc))
        kind, value = session.collective.all_gather(payload)[0]
        if kind == "error":
            raise ForkError(value)
        if kind == "none":
            return None
        return parse_fork(value)
