"""Timing a restart (controller/restart_watch.py): a move read from the journal, and the sample
its new run's report gives, worked out by hand; every figure a user writes only moves the
sample between the bounds the controller's own journal, clock and Slurm set."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from controller_builders import managed, running, slurm_job

from slurm_hetsched.controller.enact import ack_outcome, acked_step
from slurm_hetsched.controller.jobview import ManagedJob, Progress
from slurm_hetsched.controller.restart_watch import (
    WAIT,
    Seen,
    WatchedMove,
    move_from_journal,
    watch,
)
from slurm_hetsched.controller.statefiles import CheckedAck
from slurm_hetsched.store.sqlite import Action

MAX_S = 900.0
# A move in round 7, by the controller's clock: signal at 1000, acked at step 120, released
# at 1012; the run it released is job 101 one restart later.
MOVE = WatchedMove(
    round=7, job_id="101", restart_count=1, signal_s=1000.0, release_s=1012.0, ack_step=120
)


def action(id_: int, kind: str, at: float, *, status: str = "done", **more: Any) -> Action:
    """A journaled action of job 101 in round 7, begun at `at` and finished 0.5 s later."""
    fields: dict[str, Any] = {
        "id": id_,
        "round": 7,
        "job_key": "101",
        "slurm_job_id": "101",
        "kind": kind,
        "detail": {},
        "status": status,
        "outcome": "",
        "created_at": at,
        "finished_at": at + 0.5,
    } | more
    return Action(**fields)


def journal_of_a_move(*, ack: bool = True, released_as: str = "101") -> list[Action]:
    """What the enactor journals for a move of job 101 (restart 0): signal at 1000, ack at
    1003, requeue-held by 1006, retargeted, released at 1011.5 (done at 1012)."""
    actions = [
        action(1, "checkpoint", 999.9, detail={"signal": "USR2", "restart_count": 0}),
        action(2, "signal", 1000.0, detail={"signal": "USR2", "restart_count": 0}),
    ]
    if ack:
        actions.append(action(3, "ack", 1000.1, outcome="step 120 in ckpt-120"))
    else:
        actions.append(action(3, "ack", 1000.1, status="failed", outcome="no ack within 10 s"))
    actions += [
        action(4, "requeue_hold", 1003.0, detail={"restart_count": 0}),
        action(5, "update", 1010.0),
        action(6, "placement", 1011.0),
        action(7, "release", 1011.5, slurm_job_id=released_as),
        action(8, "start_now", 1012.0, slurm_job_id=released_as),
    ]
    return actions


def new_run(*, start_time: int | None = 1013, restart_count: int = 1) -> ManagedJob:
    """Job 101 running on v100 after the move, started by Slurm at `start_time`."""
    record = running("101", "n1", "v100", restart_count=restart_count)
    return managed(dataclasses.replace(record, start_time=start_time))


def report(**fields: Any) -> Progress:
    """The new run's report: 40 steps past the acked 120 at 4 steps/s, written at 1040; so it
    says it began training at 1040 - 40 / 4 = 1030."""
    values: dict[str, Any] = {
        "step": 160,
        "steps_per_s": 4.0,
        "job_id": "101",
        "restart_count": 1,
        "status": "running",
        "updated_at": 1040.0,
    } | fields
    return Progress(**values)


def seen(
    job: ManagedJob | None = None, progress: Progress | None = None, now_s: float = 1060.0
) -> Seen:
    return watch(MOVE, job, progress, now_s=now_s, max_s=MAX_S)


# -- the move, from the journal ----------------------------------------------------------------


def test_a_move_is_read_from_its_rounds_journal() -> None:
    assert move_from_journal(7, journal_of_a_move()) == MOVE


def test_a_resubmitted_move_watches_the_new_jobs_first_run() -> None:
    move = move_from_journal(7, journal_of_a_move(released_as="205"))
    assert move is not None and (move.job_id, move.restart_count) == ("205", 0)


def test_a_move_without_an_ack_has_no_acked_step() -> None:
    move = move_from_journal(7, journal_of_a_move(ack=False))
    assert move is not None and move.ack_step is None


@pytest.mark.parametrize(
    "journal",
    [
        # A stop: signalled, acked and requeue-held, but released only in a later round.
        [a for a in journal_of_a_move() if a.kind not in ("update", "placement", "release")],
        # The signal failed: nothing was asked of the job (the release is the failed step's).
        [
            dataclasses.replace(a, status="failed") if a.kind == "signal" else a
            for a in journal_of_a_move()
        ],
        # A release before the signal is another job's business, not this move's end.
        [dataclasses.replace(a, id=0) if a.kind == "release" else a for a in journal_of_a_move()],
        # A journal without the restart count it signalled cannot name the next run.
        [
            dataclasses.replace(a, detail={"signal": "USR2"}) if a.kind == "signal" else a
            for a in journal_of_a_move()
        ],
    ],
    ids=["stop", "signal-failed", "release-before-signal", "no-restart-count"],
)
def test_only_a_signal_followed_by_a_release_is_a_move(journal: list[Action]) -> None:
    assert move_from_journal(7, journal) is None


def test_the_acked_step_is_read_back_from_the_controllers_own_text() -> None:
    ack = CheckedAck("101", 0, 120, "step 999 in ckpt-999", written_at=1003.0)
    assert ack_outcome(ack) == "step 120 in step 999 in ckpt-999"
    assert acked_step(ack_outcome(ack)) == 120, "the job's checkpoint name is not read"
    assert acked_step("no ack within 10 s") is None
    assert acked_step("step 99999999999999 in x") is None  # more digits than steps can have


# -- the sample, worked out by hand ------------------------------------------------------------


def test_the_sample_is_from_the_signal_to_when_the_report_says_training_began() -> None:
    # signal 1000 -> began training 1030 (1040 - 40 steps / 4 steps/s), inside [1013, 1060].
    assert seen(new_run(), report()) == Seen(True, seconds=30.0)


def test_a_first_report_is_taken_at_its_word_when_no_step_was_made_yet() -> None:
    assert seen(new_run(), report(step=120, steps_per_s=None, updated_at=1020.0)) == Seen(
        True, seconds=20.0
    )


@pytest.mark.parametrize(
    ("claims", "seconds"),
    [
        # Training before the controller even released the job: held to Slurm's start, 1013.
        ({"step": 120, "updated_at": 900.0}, 13.0),
        # An absurdly slow rate puts the start before the epoch: the same lower bound.
        ({"step": 10**12, "steps_per_s": 1e-300}, 13.0),
        # Written "in the future" (read_progress allows 60 s of skew): held to the observation.
        ({"step": 120, "updated_at": 1119.0}, 60.0),
        # Fewer steps than the acked checkpoint: a start after its own report, held likewise.
        ({"step": 0, "steps_per_s": 1e-9}, 60.0),
    ],
    ids=["before-release", "tiny-rate", "future", "steps-backwards"],
)
def test_a_reports_claims_are_held_between_the_controllers_bounds(
    claims: dict[str, Any], seconds: float
) -> None:
    assert seen(new_run(), report(**claims)) == Seen(True, seconds=seconds)


def test_without_a_slurm_start_time_the_release_is_the_lower_bound() -> None:
    assert seen(new_run(start_time=None), report(step=120, updated_at=900.0)).seconds == 12.0


def test_a_slurm_clock_ahead_of_the_controllers_never_inverts_the_bounds() -> None:
    assert seen(new_run(start_time=5000), report()).seconds == 60.0


def test_a_run_seen_only_long_after_is_capped() -> None:
    late = report(step=120, updated_at=50_000.0)
    assert seen(new_run(), late, now_s=50_000.0) == Seen(True, seconds=MAX_S)


@pytest.mark.parametrize(
    ("job", "progress"),
    [
        (managed(slurm_job("101", restart_count=1)), None),  # released, not started yet
        (new_run(), None),  # started, no report yet
        (new_run(), report(restart_count=0, step=120)),  # the old run's last report
        (new_run(), report(job_id="99")),  # a report of another job under the key
        (new_run(), report(status="paused")),  # not training
        (new_run(), report(steps_per_s=None)),  # steps made, no rate yet to tell since when
    ],
    ids=["pending", "no-report", "old-run", "other-job", "paused", "no-rate"],
)
def test_the_move_waits_until_its_run_reports_training(
    job: ManagedJob, progress: Progress | None
) -> None:
    assert seen(job, progress) == WAIT


def test_moves_that_will_never_be_timed_are_settled_without_a_sample() -> None:
    gone = seen(None, None)
    requeued_again = seen(new_run(restart_count=2), report(restart_count=2))
    no_ack = watch(
        dataclasses.replace(MOVE, ack_step=None), new_run(), report(), now_s=1060.0, max_s=MAX_S
    )
    for outcome in (gone, requeued_again, no_ack):
        assert outcome.settled and outcome.seconds is None and outcome.why
