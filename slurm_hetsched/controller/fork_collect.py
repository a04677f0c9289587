"""Collecting one round of a forked job's copies (controller/fork_tracker.py): the steps each
copy made, by its ack of the round, and the average of their checkpoints.

A copy that finished its budget has acked the round and paused; one still training is asked to
stop now (checkpoint request and signal, as for a move) and waited for up to the ack timeout.
A copy that is gone, runs as another job, or does not ack loses its round: only the others are
averaged. Averaging runs as the job's user (controller/fork_merge.py); when it fails the
round's steps are not counted and the copies start the next round from the last consolidated
checkpoint.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from slurm_hetsched.controller.enact import SlurmEnactor
from slurm_hetsched.controller.fork_merge import CopyCheckpoint, MergeError
from slurm_hetsched.controller.jobview import ManagedJob
from slurm_hetsched.controller.statefiles import write_checkpoint_request
from slurm_hetsched.core.fork_plan import ForkState, steps_done
from slurm_hetsched.slurm.records import JobState
from slurm_hetsched.statefolder import (
    ACK_FILE,
    MERGED_DIR,
    checkpoint_name,
    copy_folder_name,
    state_folder,
)

MERGE_STALL_VARIABLE = "HETSCHED_TEST_MERGE_STALL_S"  # wrapper/merge.py's STALL_VARIABLE

logger = logging.getLogger("slurm_hetsched.controller.fork_tracker")


class RoundCollector:
    """Adds up and averages the round a forked job's copies just trained."""

    def __init__(
        self, enactor: SlurmEnactor, merge: Callable[..., Any], merge_timeout_s: float
    ) -> None:
        self.enactor = enactor
        self._merge = merge
        self.merge_timeout_s = merge_timeout_s

    def collect_all(
        self, round_: int, jobs: Sequence[tuple[ForkState, Mapping[int, ManagedJob]]]
    ) -> dict[str, ForkState]:
        """Collect the round that ends of every forked job in `jobs` (state, copies by
        index): the copies still training are all asked to stop at once and waited for
        together (one ack timeout for the whole round, as the enactor's moves), then each
        job is averaged. Returns key -> the job's state after its merge (unchanged when
        nothing was merged). One job's failure is logged and leaves its state as it was."""
        acks: dict[str, dict[int, int | None]] = {}
        laggards: dict[tuple[str, int], tuple[ForkState, ManagedJob]] = {}
        for state, copies in jobs:
            acks[state.key] = {}
            for copy, work in state.work.items():
                job = copies.get(copy)
                if job is None or job.slurm_id != work.job_id:
                    acks[state.key][copy] = None  # gone, or a new run: its round is lost
                    continue
                acks[state.key][copy] = self._fork_ack(state, job)
                if acks[state.key][copy] is None and job.leader.state is JobState.RUNNING:
                    laggards[(state.key, copy)] = (state, job)
        for (key, copy), step in self._stop(round_, laggards).items():
            acks[key][copy] = step
        out: dict[str, ForkState] = {}
        for state, copies in jobs:
            try:
                out[state.key] = self._merged(round_, state, copies, acks[state.key])
            except Exception:
                logger.exception("round %d: forked job %s: collecting failed", round_, state.key)
                out[state.key] = state
        return out

    def _merged(
        self,
        round_: int,
        state: ForkState,
        copies: Mapping[int, ManagedJob],
        acked: Mapping[int, int | None],
    ) -> ForkState:
        """The job's state after averaging what its copies made in its round."""
        done = {copy: steps_done(state.work[copy], step) for copy, step in acked.items()}
        made = sum(done.values())
        if made == 0:
            logger.warning(
                "round %d: forked job %s: no copy made a step in its round %d",
                round_,
                state.key,
                state.round,
            )
            return state
        key_dir = state_folder(self.enactor.settings.state_root, state.uid, state.key)
        parts = [
            CopyCheckpoint(
                folder=_copy_dir(key_dir, copy) / checkpoint_name(state.work[copy].start_step + n),
                steps=n,
                data_end=state.work[copy].data_offset + n,
            )
            for copy, n in sorted(done.items())
            if n > 0
        ]
        out_step = state.merged_step + made
        journaled = copies.get(0) or next(iter(copies.values()))
        detail = {"fork_round": state.round, "steps": {str(c): n for c, n in done.items()}}
        action = self.enactor._begin(round_, journaled, "merge", detail | {"out_step": out_step})
        try:
            result = self._merge(
                key_dir,
                out_step,
                parts,
                uid=state.uid,
                gid=state.gid,
                timeout_s=self.merge_timeout_s,
                environment=_test_hooks(),
            )
        except MergeError as exc:
            self.enactor._finish(action, False, str(exc), "merge")
            logger.error(
                "round %d: forked job %s: averaging its round %d failed, its %d steps are not "
                "counted: %s",
                round_,
                state.key,
                state.round,
                made,
                exc,
            )
            return state
        merged = f"{MERGED_DIR}/{checkpoint_name(out_step)}"
        seconds = float(getattr(result, "seconds", 0.0))
        self.enactor._finish(action, True, f"{made} steps, {merged} in {seconds:.2f} s", "merge")
        logger.info(
            "round %d: forked job %s: round %d merged, steps %s -> %s in %.1f s",
            round_,
            state.key,
            state.round,
            done,
            merged,
            seconds,
        )
        return replace(state, merged_step=out_step, merged=merged)

    def _fork_ack(self, state: ForkState, job: ManagedJob) -> int | None:
        """The step of the copy's ack of the tracker's current round, or None."""
        payload = self.enactor._folder(job).read_json(ACK_FILE)
        if payload is None:
            return None
        step = payload.get("step")
        if (
            str(payload.get("job_id")) != job.slurm_id
            or payload.get("fork_round") != state.round
            or not isinstance(step, int)
            or isinstance(step, bool)
            or not 0 <= step <= state.total_steps
        ):
            return None
        return step

    def _stop(
        self, round_: int, laggards: Mapping[tuple[str, int], tuple[ForkState, ManagedJob]]
    ) -> dict[tuple[str, int], int | None]:
        """Ask every copy that did not finish its budget to stop now (checkpoint request,
        then the signal), then wait for all their acks at once; (key, copy) -> acked step."""
        enactor = self.enactor
        name = enactor.settings.checkpoint_signal
        for _, job in laggards.values():
            try:
                write_checkpoint_request(
                    enactor._folder(job),
                    job_id=job.slurm_id,
                    restart_count=job.leader.restart_count,
                    at=enactor.clock(),
                )
                enactor.slurm.signal(job.slurm_id, name, target="batch")
            except Exception as exc:
                logger.warning("round %d: copy %s: cannot signal it: %s", round_, job.key, exc)
        steps: dict[tuple[str, int], int | None] = dict.fromkeys(laggards)
        deadline = enactor.clock() + enactor.settings.ack_timeout_s
        waiting = dict(laggards)
        while waiting and enactor.clock() < deadline:
            for which, (state, job) in list(waiting.items()):
                steps[which] = self._fork_ack(state, job)
                if steps[which] is not None:
                    del waiting[which]
            if waiting:
                enactor.sleep(enactor.settings.poll_s)
        for _, job in waiting.values():
            logger.warning(
                "round %d: copy %s (%s) did not ack within %g s: its round is lost",
                round_,
                job.key,
                job.slurm_id,
                enactor.settings.ack_timeout_s,
            )
        return steps


def _test_hooks() -> dict[str, str]:
    """TEST HOOK: the merge helper's stall (HETSCHED_TEST_MERGE_STALL_S, wrapper/merge.py) is
    passed on from the controller's own environment, so a test can kill the averaging in the
    middle of its write. The helper gets nothing else of the controller's environment."""
    stall = os.environ.get(MERGE_STALL_VARIABLE)
    return {MERGE_STALL_VARIABLE: stall} if stall else {}


def _copy_dir(key_dir: Path, copy: int) -> Path:
    return key_dir / copy_folder_name(copy) if copy else key_dir
