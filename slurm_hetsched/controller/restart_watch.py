"""Timing a job's restarts: from the checkpoint signal of a move to the job training again.

A move is found in the action journal (controller/enact.py) of the round that made it: its
`signal` (done) opens it and the `release` (done) after it ends the controller's part; the
run it released is the same Slurm job one restart later, or the re-submitted job's first run.
From then on each round's observation is watched for that run's progress report. When it
first shows it training, one sample is taken (docs/admin.md, "Restart cost"):

    sample = clamp(resumed, lo, hi) - signal

- `signal`: when the controller journaled the checkpoint signal (its own clock);
- `resumed`: when the report says the run began training: its `updated_at` less the steps it
  made since the acked checkpoint at its `steps_per_s` (`updated_at` itself while it made
  none); user-written, so only believed between
- `lo`: the later of the release (journal) and Slurm's start time of the run: it cannot have
  trained before; and
- `hi`: the observation that shows the report (the controller's clock): it had by then.

The sample is then held to [0, max_s]. A move whose job acked no checkpoint (it resumed from
an older periodic one, whose step the controller does not know) gives no sample; nor does
one whose run ended, or was requeued again, before it reported. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurm_hetsched.controller.enact import acked_step
from slurm_hetsched.controller.jobview import ManagedJob, Progress
from slurm_hetsched.controller.restart_cost import clamp_sample
from slurm_hetsched.store.sqlite import Action


@dataclass(frozen=True, slots=True)
class WatchedMove:
    """A move whose restart is not measured yet.

    Attributes:
        round: the round that made it.
        job_id: the Slurm job id of the run it released ...
        restart_count: ... and that run's restart count.
        signal_s: when the checkpoint signal was journaled (the controller's clock).
        release_s: when the release was done (the controller's clock).
        ack_step: the step of the checkpoint the job acked; None without an ack.
    """

    round: int
    job_id: str
    restart_count: int
    signal_s: float
    release_s: float
    ack_step: int | None


@dataclass(frozen=True, slots=True)
class Seen:
    """What one observation tells about a watched move.

    Attributes:
        settled: the move is done with (measured, or it never will be): forget it.
        seconds: the restart measured, if it was.
        why: why it was settled without a sample.
    """

    settled: bool
    seconds: float | None = None
    why: str = ""


WAIT = Seen(False)


def move_from_journal(round_: int, actions: Sequence[Action]) -> WatchedMove | None:
    """The move one job's actions of one round record, or None (no signal done, or no
    release done after it: the job was stopped, not moved, or the move failed)."""
    signal = _last(actions, "signal")
    if signal is None:
        return None
    restart = signal.detail.get("restart_count")
    if not isinstance(restart, int) or isinstance(restart, bool):
        return None
    release = _last([a for a in actions if a.id > signal.id], "release")
    if release is None or release.finished_at is None:
        return None
    ack = _last([a for a in actions if a.id > signal.id], "ack")
    same_job = release.slurm_job_id == signal.slurm_job_id
    return WatchedMove(
        round=round_,
        job_id=release.slurm_job_id,
        # A requeue counts one restart; a re-submission starts a new job at 0.
        restart_count=restart + 1 if same_job else 0,
        signal_s=float(signal.created_at),
        release_s=float(release.finished_at),
        ack_step=acked_step(ack.outcome) if ack is not None else None,
    )


def watch(
    move: WatchedMove,
    job: ManagedJob | None,
    report: Progress | None,
    *,
    now_s: float,
    max_s: float,
) -> Seen:
    """What the observation at `now_s` (the job, its trusted report) says about `move`."""
    if job is None:
        return Seen(True, why="the job left before its new run reported")
    if (job.slurm_id, job.leader.restart_count) != (move.job_id, move.restart_count):
        return Seen(True, why="the run the move started ended before it reported")
    if not job.running or report is None or report.updated_at is None:
        return WAIT
    if (
        report.job_id != move.job_id
        or report.restart_count != move.restart_count
        or report.status != "running"
    ):
        return WAIT  # the report is still the old run's (the new one is starting)
    if move.ack_step is None:
        return Seen(True, why="no ack: it resumed from a checkpoint of unknown step")
    resumed = resumed_at(report, move.ack_step)
    if resumed is None:
        return WAIT  # training, but no rate yet to tell since when
    lo = move.release_s
    if job.leader.start_time is not None:
        lo = max(lo, float(job.leader.start_time))
    hi = max(now_s, move.release_s)
    lo = min(lo, hi)  # Slurm's clock may run ahead of the controller's
    at = min(max(resumed, lo), hi)
    return Seen(True, seconds=clamp_sample(at - move.signal_s, max_s))


def resumed_at(report: Progress, ack_step: int) -> float | None:
    """When the report says its run began training from the checkpoint of `ack_step`, or
    None when it cannot say (steps made, no rate)."""
    assert report.updated_at is not None
    trained = report.step - ack_step
    if trained == 0:
        return report.updated_at
    rate = report.steps_per_s
    if rate is None or rate <= 0:
        return None
    return report.updated_at - trained / rate  # +-inf for absurd figures: clamped after


def _last(actions: Sequence[Action], kind: str) -> Action | None:
    done = [a for a in actions if a.kind == kind and a.status == "done"]
    return max(done, key=lambda a: a.id) if done else None
