"""`reconcile` (controller/reconcile.py) of each kind of action a crash interrupted, with the real
SqliteStore as the journal (an action begun and never finished is exactly what a crash leaves)
and Slurm as recorded (recorded_slurm.py behind the real `CliSlurmBackend`).
"""

from __future__ import annotations

import copy
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controller_builders import placement
from enact_rig import SQUEUE, Rig, make_rig
from recorded_slurm import SCRIPT, SPEC

from slurm_hetsched.controller.reconcile import reconcile
from slurm_hetsched.core.model import RoundPlan
from slurm_hetsched.errors import SlurmError, SlurmParseError
from slurm_hetsched.slurm.records import GpuRequest, JobOptions, JobState
from slurm_hetsched.store.sqlite import Action, SqliteStore

SIGNAL = ["scancel", "--verbose", "--batch", "--signal=USR2"]
INTERRUPTED = "interrupted by a controller stop"


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    rig = make_rig(tmp_path)
    yield rig
    assert not rig.slurm.surprises, "the fake was asked something it has no recording of"


@pytest.fixture
def store(tmp_path: Path, rig: Rig) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "hetsched.db", clock=rig.clock)
    yield store
    store.close()


def interrupted(store: SqliteStore, kind: str, job_id: str, **detail: Any) -> int:
    """An action begun in round 5 and never finished: what a crash leaves in the journal."""
    return store.begin_action(5, job_id, job_id, kind, detail)


def run_reconcile(rig: Rig, store: SqliteStore) -> Any:
    """Reconcile with the calls recorded afresh; whatever it settles, nothing stays pending."""
    rig.slurm.calls.clear()
    rig.slurm.times.clear()
    result = reconcile(store, rig.backend, rig.enactor(journal=store), rig.managed_now)
    assert store.pending_actions() == []
    return result


def outcome(store: SqliteStore, action_id: int) -> Action:
    return next(a for a in store.actions() if a.id == action_id)


# -- a move stopped between the signal and the requeue -----------------------------------------


@pytest.mark.parametrize("kind", ["checkpoint", "signal", "ack", "requeue_hold"])
def test_an_interrupted_move_is_signalled_again_and_requeue_held_after_the_ack(
    rig: Rig, store: SqliteStore, kind: str
) -> None:
    """The job still runs the signalled run: the signal is sent again (it may never have gone
    out), the ack awaited, and only then is the job requeue-held; all of it journaled under a
    `checkpoint` of its own, finished when the job is held."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.wrapper.delays["101"] = 2.0
    action = interrupted(store, kind, "101", restart_count=0)
    result = run_reconcile(rig, store)
    assert rig.commands() == [[*SIGNAL, "101"], ["scontrol", "requeuehold", "101"]]
    signalled = rig.time_of(*SIGNAL, "101")
    assert rig.time_of("scontrol", "requeuehold", "101") >= rig.wrapper.acked["101"] >= signalled
    assert result.requeue_held == ["101"] and result.outcome.no_ack == []
    held = rig.slurm.record("101")
    assert held.held and held.restart_count == 1
    assert store.pending_actions() == []
    settled = outcome(store, action)
    assert settled.status == "failed"
    assert settled.outcome == f"{INTERRUPTED}; signalled again, requeue-held after its ack"
    redone = [a for a in store.actions(job_key="101") if a.id != action]
    assert [(a.kind, a.status) for a in redone] == [
        ("checkpoint", "done"),
        ("signal", "done"),
        ("ack", "done"),
        ("requeue_hold", "done"),
    ]
    assert redone[0].outcome == "requeue-held" and {a.round for a in redone} == {5}


def test_an_interrupted_move_whose_job_never_acks_is_requeued_at_the_timeout(
    rig: Rig, store: SqliteStore
) -> None:
    """No ack to the second signal either: requeue-held once `ack_timeout_s` (10 s) passed."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.wrapper.delays["101"] = None
    interrupted(store, "ack", "101", restart_count=0)
    result = run_reconcile(rig, store)
    assert rig.commands() == [[*SIGNAL, "101"], ["scontrol", "requeuehold", "101"]]
    signalled = rig.time_of(*SIGNAL, "101")
    assert rig.time_of("scontrol", "requeuehold", "101") >= signalled + 10.0
    assert result.outcome.no_ack == ["101"] and result.requeue_held == ["101"]
    assert store.pending_actions() == []


def finished(rig: Rig) -> None:
    rig.slurm.add_running("101", "n2", "p100")
    rig.slurm.finish("101")


def runs_again(rig: Rig) -> None:
    rig.slurm.add_running("101", "n1", "v100", restart_cnt=1)  # requeued and started again


def gone(rig: Rig) -> None:
    """Past MinJobAge: Slurm no longer lists it."""


@pytest.mark.parametrize("situation", [finished, runs_again, gone])
@pytest.mark.parametrize("kind", ["checkpoint", "signal", "ack", "requeue_hold", "call_off"])
def test_an_interrupted_move_of_a_job_that_ended_or_runs_a_later_run_is_left_alone(
    rig: Rig, store: SqliteStore, kind: str, situation: Any
) -> None:
    """Only the signalled run is finished: a job that ended (requeueing would run it again) or
    runs a later run gets neither a signal, a requeue nor a resume request."""
    situation(rig)
    action = interrupted(store, kind, "101", restart_count=0)
    result = run_reconcile(rig, store)
    assert rig.commands() == []
    assert rig.read("101", "checkpoint_request.json") is None
    assert rig.read("101", "resume_request.json") is None
    assert result.requeue_held == [] and result.called_off == []
    assert (outcome(store, action).status, outcome(store, action).outcome) == (
        "failed",
        INTERRUPTED,
    )
    assert store.pending_actions() == []


def test_an_interrupted_move_of_a_job_no_longer_managed_is_left_alone(
    rig: Rig, store: SqliteStore
) -> None:
    """The same run, but the controller no longer manages the job: nothing is sent."""
    rig.slurm.add_running("101", "n2", "p100", comment="")
    action = interrupted(store, "signal", "101", restart_count=0)
    result = reconcile(store, rig.backend, rig.enactor(journal=store), dict)
    assert rig.commands() == [] and result.requeue_held == []
    assert outcome(store, action).outcome.endswith("the job is no longer managed, left as it is")
    assert store.pending_actions() == []


# -- a call-off ----------------------------------------------------------------------------------


def test_an_interrupted_call_off_writes_the_resume_request_again(
    rig: Rig, store: SqliteStore
) -> None:
    """The paused job is told again to train on, for its run; Slurm is not touched."""
    rig.slurm.add_running("101", "n2", "p100")
    action = interrupted(store, "call_off", "101", restart_count=0)
    result = run_reconcile(rig, store)
    assert rig.read("101", "resume_request.json") == {
        "job_id": "101",
        "restart_count": 0,
        "requested_at": rig.clock.now,
    }
    assert rig.commands() == [] and result.called_off == ["101"]
    assert outcome(store, action).outcome == f"{INTERRUPTED}; called off again"
    assert [a.status for a in store.actions(job_key="101") if a.id != action] == ["done"]
    assert store.pending_actions() == []


# -- a re-submission -----------------------------------------------------------------------------


def resubmitted(rig: Rig) -> str:
    """Job 102 requeue-held, and its heterogeneous replacement submitted under its key."""
    rig.slurm.add_pending("102", restart_cnt=1)
    comment = f"{SPEC};key=102"
    return rig.backend.submit(
        SCRIPT,
        [
            JobOptions(gpus=GpuRequest(1), constraint="v100", nodelist="n1", comment=comment),
            JobOptions(gpus=GpuRequest(1), constraint="p100", nodelist="n2", comment=comment),
        ],
    )


@pytest.mark.parametrize("kind", ["resubmit", "submit", "cancel"])
def test_an_interrupted_resubmission_cancels_the_old_job_once_the_new_one_exists(
    rig: Rig, store: SqliteStore, kind: str
) -> None:
    """The replacement carries the key: the old job is cancelled, the new one left to run."""
    new_id = resubmitted(rig)
    action = interrupted(store, kind, "102")
    result = run_reconcile(rig, store)
    assert rig.commands() == [["scancel", "--verbose", "102"]]
    assert rig.slurm.record("102").state is JobState.CANCELLED
    assert rig.slurm.record(new_id).state is JobState.PENDING
    assert result.cancelled == ["102"]
    assert outcome(store, action).outcome == (
        f"{INTERRUPTED}; job 102 replaced by job {new_id}, old job cancelled"
    )
    assert store.pending_actions() == []


def test_a_resubmission_left_pending_with_its_cancel_cancels_the_old_job_once(
    rig: Rig, store: SqliteStore
) -> None:
    """What a crash before the old job's cancel leaves: `resubmit` and `cancel` both pending for
    job 102. The old job is cancelled once, and both actions are closed saying so."""
    new_id = resubmitted(rig)
    actions = [interrupted(store, "resubmit", "102"), interrupted(store, "cancel", "102")]
    result = run_reconcile(rig, store)
    assert rig.commands() == [["scancel", "--verbose", "102"]]
    assert result.cancelled == ["102"]
    assert rig.slurm.record("102").state is JobState.CANCELLED
    assert rig.slurm.record(new_id).state is JobState.PENDING
    for action in actions:
        assert outcome(store, action).status == "failed"
        assert outcome(store, action).outcome.startswith(
            f"{INTERRUPTED}; job 102 replaced by job {new_id}"
        )


@pytest.mark.parametrize("kind", ["resubmit", "submit"])
def test_an_interrupted_submission_without_a_new_job_keeps_the_old_one(
    rig: Rig, store: SqliteStore, kind: str
) -> None:
    """sbatch never ran (or was refused): the old job stays for the next round."""
    rig.slurm.add_pending("102", restart_cnt=1)
    action = interrupted(store, kind, "102")
    result = run_reconcile(rig, store)
    assert rig.commands() == [] and result.cancelled == []
    assert rig.slurm.record("102").held
    assert outcome(store, action).outcome == (
        f"{INTERRUPTED}; no replacement was submitted, old job kept"
    )
    assert store.pending_actions() == []


def test_the_old_heterogeneous_jobs_own_components_are_not_its_replacement(
    rig: Rig, store: SqliteStore
) -> None:
    """Every component of a re-submitted job carries the key. When a heterogeneous job is
    re-submitted again and the crash came before sbatch answered, its second component is the
    old job itself: the old job is kept, never cancelled for a replacement that is not there."""
    old = resubmitted(rig)  # a heterogeneous job under key 102: components old and old+1
    rig.slurm.jobs["102"]["job_state"] = "CANCELLED"  # the first move is long done
    store.begin_action(5, "102", old, "resubmit", {})
    result = run_reconcile(rig, store)
    assert rig.commands() == [] and result.cancelled == []
    assert rig.slurm.record(old).state is JobState.PENDING
    (action,) = [a for a in store.actions() if a.kind == "resubmit"]
    assert action.outcome == f"{INTERRUPTED}; no replacement was submitted, old job kept"

    # With the replacement there, the old job (both components) is cancelled, once.
    new = rig.backend.submit(
        SCRIPT, [JobOptions(gpus=GpuRequest(3), constraint="k80", comment=f"{SPEC};key=102")]
    )
    store.begin_action(6, "102", old, "resubmit", {})
    result = run_reconcile(rig, store)
    assert rig.commands() == [["scancel", "--verbose", old]]
    assert result.cancelled == [old]
    action = [a for a in store.actions() if a.kind == "resubmit"][-1]
    assert action.outcome == f"{INTERRUPTED}; job {old} replaced by job {new}, old job cancelled"


# -- steps of the placement ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["update", "placement", "release", "hold", "start_now"])
def test_an_interrupted_placement_step_is_left_to_the_next_round(
    rig: Rig, store: SqliteStore, kind: str
) -> None:
    """The job is pending (held or released): the next round converges from Slurm's state, so
    nothing is done now; the action is closed as interrupted."""
    rig.slurm.add_pending("101", restart_cnt=1, features="v100")
    rig.slurm.add_pending("102", held=False, restart_cnt=1)
    before = copy.deepcopy(rig.slurm.jobs)
    actions = [interrupted(store, kind, "101"), interrupted(store, kind, "102")]
    result = run_reconcile(rig, store)
    assert rig.slurm.calls == [SQUEUE]
    assert rig.slurm.jobs == before
    assert [(outcome(store, a).status, outcome(store, a).outcome) for a in actions] == [
        ("failed", INTERRUPTED),
        ("failed", INTERRUPTED),
    ]
    assert (result.requeue_held, result.called_off, result.cancelled) == ([], [], [])
    assert store.pending_actions() == []


# -- Slurm does not answer -----------------------------------------------------------------------


def test_slurm_unreachable_at_the_start_changes_nothing_and_can_be_retried(
    rig: Rig, store: SqliteStore
) -> None:
    """squeue answers with an error list: SlurmError before anything is sent, written or
    closed; called again with Slurm back, it settles everything."""
    rig.slurm.add_running("101", "n2", "p100")
    new_id = resubmitted(rig)
    rig.slurm.add_running("103", "n3", "k80")
    ids = [
        interrupted(store, "signal", "101", restart_count=0),
        interrupted(store, "submit", "102"),
        interrupted(store, "call_off", "103", restart_count=0),
    ]
    before = copy.deepcopy(rig.slurm.jobs)
    rig.slurm.unreachable = True
    with pytest.raises(SlurmParseError, match="Failed while looking for jobs") as raised:
        run_reconcile(rig, store)
    assert isinstance(raised.value, SlurmError)
    assert rig.slurm.calls == [SQUEUE] and rig.slurm.jobs == before
    assert [a.id for a in store.pending_actions()] == ids
    assert rig.read("101", "checkpoint_request.json") is None
    assert rig.read("103", "resume_request.json") is None

    rig.slurm.unreachable = False
    result = run_reconcile(rig, store)
    assert (result.requeue_held, result.cancelled, result.called_off) == (["101"], ["102"], ["103"])
    assert rig.slurm.record(new_id).state is JobState.PENDING
    assert store.pending_actions() == []


# -- crashes at the enactor's failpoints, then reconcile -------------------------------------------


class Killed(BaseException):
    """The controller's SIGKILL (nothing in the enactor may catch it)."""


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    kills: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        kills.append((pid, sig))
        raise Killed

    monkeypatch.setattr("slurm_hetsched.controller.enact_steps.os.kill", kill)
    return kills


def crash(rig: Rig, store: SqliteStore, failpoint: str, plan: RoundPlan) -> None:
    with pytest.raises(Killed):
        rig.enactor(journal=store, failpoint=failpoint).enact(rig.view(), plan)


MOVE = RoundPlan(round=5, move={"101": placement("101", ("n1", "v100", 1))})


def pending(store: SqliteStore) -> list[tuple[str, str]]:
    return [(a.kind, a.slurm_job_id) for a in store.pending_actions()]


def test_a_crash_before_the_requeue_is_finished_by_reconcile(
    rig: Rig, store: SqliteStore, kills: list[tuple[int, int]]
) -> None:
    """Killed with the requeue-hold journaled but not sent: the job acked and pauses;
    reconcile signals it again and requeue-holds it after the new ack."""
    rig.slurm.add_running("101", "n2", "p100")
    crash(rig, store, "before:requeue_hold", MOVE)
    assert kills == [(os.getpid(), signal.SIGKILL)]
    assert pending(store) == [("checkpoint", "101"), ("requeue_hold", "101")]
    acked = rig.wrapper.acked["101"]
    rig.clock.sleep(30.0)
    result = run_reconcile(rig, store)
    assert rig.commands() == [[*SIGNAL, "101"], ["scontrol", "requeuehold", "101"]]
    assert rig.wrapper.acked["101"] > acked, "a fresh ack was awaited"
    assert result.requeue_held == ["101"] and store.pending_actions() == []


def test_a_crash_before_the_old_job_is_cancelled_is_finished_by_reconcile(
    rig: Rig, store: SqliteStore, kills: list[tuple[int, int]]
) -> None:
    """Killed after the replacement was submitted and released, before the old job's cancel:
    reconcile cancels the old job."""
    rig.slurm.add_running("102", "n3", "k80")
    plan = RoundPlan(round=5, move={"102": placement("102", ("n1", "v100", 1), ("n2", "p100", 1))})
    crash(rig, store, "before:cancel", plan)
    assert pending(store) == [("resubmit", "102"), ("cancel", "102")]
    result = run_reconcile(rig, store)
    assert rig.commands() == [["scancel", "--verbose", "102"]]
    assert result.cancelled == ["102"] and store.pending_actions() == []
    assert rig.slurm.record("102").state is JobState.CANCELLED
    assert rig.slurm.record("200").state is JobState.PENDING


@pytest.mark.parametrize("failpoint", ["after:submit", "before:release"])
def test_a_crash_after_the_submission_cancels_the_old_job_and_leaves_the_new_one(
    rig: Rig, store: SqliteStore, kills: list[tuple[int, int]], failpoint: str
) -> None:
    """Killed after sbatch took the replacement, before its release: only the open `resubmit`
    (and the copy's release) says so. Reconcile cancels the old job and leaves the new one, still
    held as submitted, to the next round."""
    rig.slurm.add_running("102", "n3", "k80")
    plan = RoundPlan(round=5, move={"102": placement("102", ("n1", "v100", 1), ("n2", "p100", 1))})
    crash(rig, store, failpoint, plan)
    assert kills == [(os.getpid(), signal.SIGKILL)]
    left = [("resubmit", "102")] + ([("release", "200")] if failpoint == "before:release" else [])
    assert pending(store) == left
    result = run_reconcile(rig, store)
    assert rig.commands() == [["scancel", "--verbose", "102"]]
    assert result.cancelled == ["102"] and result.requeue_held == []
    assert rig.slurm.record("102").state is JobState.CANCELLED
    new = rig.slurm.record("200")
    assert new.state is JobState.PENDING and new.held
    resubmit = next(a for a in store.actions() if a.kind == "resubmit")
    assert resubmit.outcome == f"{INTERRUPTED}; job 102 replaced by job 200, old job cancelled"


TWO = RoundPlan(round=5, move={"101": placement("101", ("n1", "v100", 1))}, stop=("102",))


@pytest.mark.parametrize(
    ("failpoint", "left", "redone"),
    [
        # After 101's signal, before 102's `checkpoint` was opened: 102 was never asked.
        ("after:signal", [("checkpoint", "101")], ["101"]),
        (
            "after:ack",
            [("checkpoint", "101"), ("checkpoint", "102"), ("ack", "102")],
            ["101", "102"],
        ),
    ],
)
def test_a_crash_between_the_signal_and_the_requeue_is_finished_by_reconcile(
    rig: Rig,
    store: SqliteStore,
    kills: list[tuple[int, int]],
    failpoint: str,
    left: list[tuple[str, str]],
    redone: list[str],
) -> None:
    """Killed after the signal (or the ack) was recorded done and before the next action was
    journaled: the acked job pauses, and only its open `checkpoint` says so. Reconcile signals
    it again and requeue-holds it after the fresh ack, rather than leave it paused until its
    lease runs out; a job never signalled is left running."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.slurm.add_running("102", "n3", "k80")
    crash(rig, store, failpoint, TWO)
    assert kills == [(os.getpid(), signal.SIGKILL)]
    assert "101" in rig.wrapper.acked, "the job acked: it now pauses"
    assert pending(store) == left
    first_ack = rig.wrapper.acked["101"]
    rig.clock.sleep(30.0)
    rig.wrapper.delays.update(dict.fromkeys(redone, 2.0))
    result = run_reconcile(rig, store)
    assert rig.commands() == [[*SIGNAL, key] for key in redone] + [
        ["scontrol", "requeuehold", key] for key in redone
    ]
    for key in redone:
        assert rig.wrapper.acked[key] > first_ack, "a fresh ack was awaited"
        assert rig.time_of("scontrol", "requeuehold", key) >= rig.wrapper.acked[key]
        held = rig.slurm.record(key)
        assert held.held and held.restart_count == 1
    assert result.requeue_held == redone and result.outcome.no_ack == []
    if redone == ["101"]:
        assert rig.slurm.record("102").state is JobState.RUNNING
        assert rig.slurm.signals == [("101", "USR2"), ("101", "USR2")]
        assert rig.read("102", "checkpoint_request.json") is None
    checkpoint = next(a for a in store.actions(job_key="101") if a.kind == "checkpoint")
    assert (checkpoint.status, checkpoint.outcome) == (
        "failed",
        f"{INTERRUPTED}; signalled again, requeue-held after its ack",
    )
    assert rig.read("101", "resume_request.json") is None
