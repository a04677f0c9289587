"""The checkpoint-before-move protocol of `SlurmEnactor` (controller/enact.py) against Slurm as
recorded: the real `CliSlurmBackend` builds every argv and parses every answer, and the recording
fake (recorded_slurm.py) answers from tests/golden/slurm-22.05. Time is injected; "the wrapper"
acks with the wrapper's own `write_ack` into real state folders.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controller_builders import TABLE, placement
from enact_rig import Rig, make_rig

from slurm_hetsched.controller.enact import ACTION_KINDS, EnactSettings
from slurm_hetsched.controller.live import SlurmCluster
from slurm_hetsched.controller.observer import ObserveSettings, SlurmObservation
from slurm_hetsched.core.model import RoundPlan
from slurm_hetsched.errors import (
    HetschedError,
    InvalidRequestError,
    SlurmCommandError,
    SlurmParseError,
    UnknownJobError,
)
from slurm_hetsched.slurm.records import JobState

SIGNAL = ["scancel", "--verbose", "--batch", "--signal=USR2"]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    rig = make_rig(tmp_path)
    yield rig
    assert not rig.slurm.surprises, "the fake was asked something it has no recording of"


# -- the fake answers as recorded -------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "label", "call", "error"),
    [
        (
            "requeuehold",
            "requeue-pending-job",
            lambda b: b.requeue_hold("101"),
            InvalidRequestError,
        ),
        (
            "update",
            "update-features-running",
            lambda b: b.retarget("101", "k80", 1),
            InvalidRequestError,
        ),
        ("release", "update-unknown-job", lambda b: b.release("101"), UnknownJobError),
        (
            "requeuehold",
            "requeuehold-unreachable",
            lambda b: b.requeue_hold("101"),
            SlurmCommandError,
        ),
        ("squeue", "squeue-json-unreachable", lambda b: b.list_jobs(), SlurmParseError),
    ],
)
def test_a_recorded_refusal_raises_what_the_real_cli_raises_for_it(
    rig: Rig, verb: str, label: str, call: Any, error: type[Exception]
) -> None:
    """The recorded text, with the job asked about, classified by the real cli: the exact type
    (an unreachable slurmctld is no refusal of the request)."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.slurm.refusals[(verb, "" if verb == "squeue" else "101")] = label
    with pytest.raises(error) as raised:
        call(rig.backend)
    assert type(raised.value) is error
    if isinstance(raised.value, SlurmCommandError):
        assert raised.value.stderr.endswith("for job 101"), raised.value.stderr


# -- the step order ----------------------------------------------------------------------------


def test_a_move_and_a_stop_take_their_steps_in_order_each_journaled_first(rig: Rig) -> None:
    """Signal every job at once, acks, requeue-hold, then for the move only: update, placement
    file, release, StartTime=now; each action is journaled before its command goes out. Each
    job's `checkpoint` is opened before its signal and finished once it is requeue-held."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.slurm.add_running("102", "n3", "k80")
    view = rig.view()
    plan = RoundPlan(round=7, move={"101": placement("101", ("n1", "v100", 2))}, stop=("102",))
    report, out = rig.enactor().enact(view, plan)
    assert rig.timeline() == [
        "begin checkpoint 101",
        "begin signal 101",
        "$ scancel --verbose --batch --signal=USR2 101",
        "done signal 101",
        "begin checkpoint 102",
        "begin signal 102",
        "$ scancel --verbose --batch --signal=USR2 102",
        "done signal 102",
        "begin ack 101",
        "begin ack 102",
        "done ack 101",
        "done ack 102",
        "begin requeue_hold 101",
        "$ scontrol requeuehold 101",
        "done requeue_hold 101",
        "begin requeue_hold 102",
        "$ scontrol requeuehold 102",
        "done requeue_hold 102",
        "done checkpoint 101",
        "done checkpoint 102",
        "begin update 101",
        "$ scontrol update JobId=101 Features=v100 TresPerNode=gres:gpu:2 ReqNodeList=n1",
        "done update 101",
        "begin placement 101",
        "done placement 101",
        "begin release 101",
        "$ scontrol release 101",
        "done release 101",
        "begin start_now 101",
        "$ scontrol update JobId=101 StartTime=now",
        "done start_now 101",
    ]
    assert (report.failed, out.moved, out.stopped) == ({}, ["101"], ["102"])
    assert out.previous_type == {"101": "p100"}
    assert rig.journal.pending() == []
    for key in ("101", "102"):
        checkpoint = rig.journal.first("checkpoint", key)
        assert checkpoint.detail == {"signal": "USR2", "restart_count": 0}
        assert (checkpoint.status, checkpoint.outcome) == ("done", "requeue-held")
    assert rig.slurm.signals == [("101", "USR2"), ("102", "USR2")]
    # The request file went first (a job still starting finds it), the placement before release.
    assert rig.read("101", "checkpoint_request.json") == {
        "job_id": "101",
        "restart_count": 0,
        "requested_at": rig.clock.now,
    }
    assert rig.read("101", "placement.json") == {
        "round": 7,
        "gpu_type": "v100",
        "num_gpus": 2,
        "nodes": ["n1"],
        "slices": [{"node": "n1", "gpu_type": "v100", "count": 2}],
    }
    assert rig.read("102", "placement.json") is None
    moved, stopped = rig.slurm.record("101"), rig.slurm.record("102")
    assert (moved.state, moved.held, moved.restart_count) == (JobState.PENDING, False, 1)
    assert (moved.features, moved.tres_per_node, moved.required_nodes) == (
        "v100",
        "gres:gpu:2",
        "n1",
    )
    assert (stopped.state, stopped.held, stopped.features) == (JobState.PENDING, True, "k80")


def test_a_resubmission_and_a_call_off_are_journaled_inside_their_umbrella_actions(
    rig: Rig,
) -> None:
    """102 moves onto two nodes: `resubmit` is opened before the submission and finished after
    the old job's cancel, the copy's release in between. 103's requeue is refused: it is called
    off, and its `checkpoint` fails with that refusal, after the call-off."""
    rig.slurm.add_running("102", "n3", "k80")
    rig.slurm.add_running("103", "n3", "k80")
    rig.slurm.refusals[("requeuehold", "103")] = "requeue-pending-job"
    plan = RoundPlan(
        round=7,
        move={
            "102": placement("102", ("n1", "v100", 1), ("n2", "p100", 1)),
            "103": placement("103", ("n1", "v100", 1)),
        },
    )
    report, out = rig.enactor().enact(rig.view(), plan)
    assert rig.timeline() == [
        "begin checkpoint 102",
        "begin signal 102",
        "$ scancel --verbose --batch --signal=USR2 102",
        "done signal 102",
        "begin checkpoint 103",
        "begin signal 103",
        "$ scancel --verbose --batch --signal=USR2 103",
        "done signal 103",
        "begin ack 102",
        "begin ack 103",
        "done ack 102",
        "done ack 103",
        "begin requeue_hold 102",
        "$ scontrol requeuehold 102",
        "done requeue_hold 102",
        "begin requeue_hold 103",
        "$ scontrol requeuehold 103",
        "failed requeue_hold 103",
        "begin call_off 103",
        "done call_off 103",
        "done checkpoint 102",
        "failed checkpoint 103",
        "$ scontrol write batch_script 102 -",
        "begin placement 102",
        "done placement 102",
        "begin resubmit 102",
        "begin submit 102",
        "$ sbatch ...",
        "done submit 102",
        "begin release 102",
        "$ scontrol release 200",
        "done release 102",
        "begin cancel 102",
        "$ scancel --verbose 102",
        "done cancel 102",
        "done resubmit 102",
    ]
    refused = "requeue_hold failed: `scontrol requeuehold 103` exited with 1: "
    refused += "Job is pending execution for job 103"
    assert report.failed == {"103": refused}
    assert (out.moved, out.resubmitted) == (["102"], {"102": "200"})
    assert rig.journal.pending() == []
    checkpoint = rig.journal.first("checkpoint", "103")
    assert (checkpoint.status, checkpoint.outcome) == ("failed", refused)
    resubmit = rig.journal.first("resubmit", "102")
    assert resubmit.detail == {"slices": [["n1", "v100", 1], ["n2", "p100", 1]]}
    assert (resubmit.slurm_id, resubmit.status, resubmit.outcome) == (
        "102",
        "done",
        "job 102 replaced by job 200",
    )
    assert rig.journal.first("release", "102").slurm_id == "200"
    # One component per slice, each with one rank per GPU (the template's srun).
    (sbatch,) = [c for c in rig.commands() if c[0] == "sbatch"]
    assert sbatch.count("--ntasks=1") == 2 and ":" in sbatch
    assert rig.read("103", "resume_request.json") is not None
    assert rig.slurm.record("102").state is JobState.CANCELLED
    assert rig.slurm.record("200").state is JobState.PENDING and not rig.slurm.record("200").held
    # The copy gets only its variables, through sbatch's environment: no --export list (which
    # makes Slurm 26.05 log the user in and hold the job when that fails), none of ours.
    ((sbatch, added, inherits),) = rig.slurm.submissions
    assert [a for a in sbatch if a.startswith("--export")] == ["--export=ALL"] * 2
    assert not inherits and added["HETSCHED_JOB_KEY"] == "102"
    assert added["PATH"] == "/usr/local/bin:/usr/bin:/bin"


def test_the_requeue_is_awaited_until_slurm_shows_the_job_held(rig: Rig) -> None:
    """A requeue Slurm shows as COMPLETING for a few looks: the update waits for "held"."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.slurm.requeue_polls = 3
    view = rig.view()
    plan = RoundPlan(round=7, move={"101": placement("101", ("n1", "v100", 1))})
    report, out = rig.enactor().enact(view, plan)
    assert (report.failed, out.moved) == ({}, ["101"])
    looks = rig.slurm.calls.index(
        [
            "scontrol",
            "update",
            "JobId=101",
            "Features=v100",
            "TresPerNode=gres:gpu:1",
            "ReqNodeList=n1",
        ]
    )
    after_requeue = rig.slurm.calls[
        rig.slurm.calls.index(["scontrol", "requeuehold", "101"]) : looks
    ]
    assert after_requeue.count(["squeue", "--json", "--states=all"]) == 4


# -- the ack timeout ---------------------------------------------------------------------------


def test_a_job_that_never_acks_is_requeued_at_the_ack_timeout(rig: Rig) -> None:
    """No ack: requeued once `ack_timeout_s` passed on the injected clock, recorded in no_ack
    and as a failed ack; the job that acked had its ack taken when it came."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.slurm.add_running("102", "n3", "k80")
    rig.wrapper.delays.update({"101": 2.0, "102": None})
    view = rig.view()
    start = rig.clock.now
    plan = RoundPlan(round=7, move={"101": placement("101", ("n1", "v100", 1))}, stop=("102",))
    report, out = rig.enactor(ack_timeout_s=10.0).enact(view, plan)
    assert out.no_ack == ["102"]
    late = rig.journal.first("ack", "102")
    assert late.status == "failed" and late.outcome.startswith("no ack within 10 s")
    assert rig.time_of("scontrol", "requeuehold", "102") >= start + 10.0
    acked = rig.journal.first("ack", "101")
    assert (acked.status, acked.outcome) == ("done", "step 120 in ckpt-120")
    assert acked.finished_at == rig.wrapper.acked["101"] == start + 2.0
    assert (report.failed, out.moved, out.stopped) == ({}, ["101"], ["102"])


def test_when_every_job_acks_the_requeue_does_not_wait_for_the_timeout(rig: Rig) -> None:
    """The wait ends with the last ack, not at `ack_timeout_s`."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.slurm.add_running("102", "n3", "k80")
    rig.wrapper.delays.update({"101": 1.5, "102": 3.0})
    view = rig.view()
    start = rig.clock.now
    plan = RoundPlan(round=7, stop=("101", "102"))
    _, out = rig.enactor(ack_timeout_s=60.0).enact(view, plan)
    assert out.no_ack == [] and out.stopped == ["101", "102"]
    assert start + 3.0 <= rig.time_of("scontrol", "requeuehold", "101") < start + 4.0


# -- harmless errors ---------------------------------------------------------------------------


def test_a_hold_refused_because_the_job_started_meanwhile_is_no_failure(rig: Rig) -> None:
    """A released job Slurm starts before the hold: "no longer pending" is no failure, and the
    job is not retargeted or released (a later round moves it)."""
    rig.slurm.add_pending("104", held=False, features="k80", required_nodes="n3")
    view = rig.view()
    rig.slurm.start("104", "n3")  # Slurm starts it on its older target meanwhile
    plan = RoundPlan(round=7, start={"104": placement("104", ("n1", "v100", 1))})
    report, out = rig.enactor().enact(view, plan)
    assert report.failed == {} and out.failed == {} and out.started == []
    hold = rig.journal.first("hold", "104")
    assert (
        hold.status == "failed" and "Job is no longer pending execution for job 104" in hold.outcome
    )
    assert rig.commands() == [["scontrol", "hold", "104"]]
    assert rig.slurm.record("104").state is JobState.RUNNING
    with pytest.raises(InvalidRequestError):  # how the real cli classifies the recorded text
        rig.backend.hold("104")


def test_an_admin_comment_on_a_job_that_finished_meanwhile_is_no_failure(rig: Rig) -> None:
    """The round's admin comment on a job that ended since the observation is refused by
    Slurm: the round reports nothing and the other jobs get theirs."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.slurm.add_running("102", "n3", "k80")
    view = rig.view()
    rig.slurm.finish("101")
    keep = {"101": placement("101", ("n2", "p100", 1)), "102": placement("102", ("n3", "k80", 1))}
    settings = ObserveSettings(state_root=rig.root)
    cluster = SlurmCluster(rig.backend, rig.enactor(), rig.journal, lambda: None, TABLE, settings)
    observed = SlurmObservation(snapshot=view.snapshot, view=view)
    report = cluster.enact(RoundPlan(round=7, keep=keep), observed)
    assert report.failed == {} and cluster.last.comments_written == 1
    assert rig.slurm.sent("scontrol", "update", "JobId=101"), "it was tried"
    assert rig.slurm.record("101").admin_comment == ""
    assert rig.slurm.record("102").admin_comment.startswith("hetsched r=7 k80x1@n3")
    with pytest.raises(InvalidRequestError):
        rig.backend.set_admin_comment("101", "hetsched r=7")


def test_a_job_that_finished_instead_of_acking_is_not_requeued(rig: Rig) -> None:
    """A job at its last step ends rather than acks: the wait stops at the next look, the job
    is reported finished, neither requeued (it would run again) nor called off."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.slurm.hooks["signal"] = rig.slurm.finish
    view = rig.view()
    start = rig.clock.now
    plan = RoundPlan(round=7, move={"101": placement("101", ("n1", "v100", 1))})
    report, out = rig.enactor(ack_timeout_s=60.0).enact(view, plan)
    assert (report.failed, out.finished, out.no_ack, out.moved) == ({}, ["101"], [], [])
    ack = rig.journal.first("ack", "101")
    assert (ack.status, ack.outcome) == ("failed", "job COMPLETED, no ack")
    checkpoint = rig.journal.first("checkpoint", "101")
    assert (checkpoint.status, checkpoint.outcome) == ("done", "the job ended instead")
    assert rig.journal.pending() == []
    assert rig.clock.now - start < 5.0, "not waited out"
    assert rig.commands() == [[*SIGNAL, "101"]]
    assert rig.read("101", "resume_request.json") is None
    assert rig.slurm.record("101").state is JobState.COMPLETED


# -- failpoints --------------------------------------------------------------------------------


class Killed(BaseException):
    """The controller's SIGKILL: a BaseException, so no `except Exception` in the enactor can
    swallow it, as nothing can catch the real one."""


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    kills: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        kills.append((pid, sig))
        raise Killed

    monkeypatch.setattr("slurm_hetsched.controller.enact_steps.os.kill", kill)
    return kills


# The first action of each kind in the round of `failpoint_round`, and its job.
FIRST = {
    "checkpoint": "101",
    "signal": "101",
    "ack": "101",
    "requeue_hold": "101",
    "call_off": "103",
    "update": "101",
    "placement": "101",
    "release": "101",
    "start_now": "101",
    "resubmit": "102",
    "submit": "102",
    "cancel": "102",
    "hold": "104",
}
# The umbrella actions, by their first and last steps: none is taken before the umbrella is
# journaled, and all are taken by the time it is recorded done.
UMBRELLAS = {"checkpoint": ("signal", "requeue_hold"), "resubmit": ("submit", "cancel")}


def failpoint_round(rig: Rig) -> RoundPlan:
    """101 moves type; 102 moves onto two nodes (re-submitted); 103's requeue is refused (its
    move is called off); 104, pending and released, is held and placed."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.slurm.add_running("102", "n3", "k80")
    rig.slurm.add_running("103", "n3", "k80")
    rig.slurm.add_pending("104", held=False, features="k80", required_nodes="n3")
    rig.slurm.refusals[("requeuehold", "103")] = "requeue-pending-job"
    return RoundPlan(
        round=7,
        move={
            "101": placement("101", ("n1", "v100", 1)),
            "102": placement("102", ("n1", "v100", 1), ("n2", "p100", 1)),
            "103": placement("103", ("n1", "v100", 1)),
        },
        start={"104": placement("104", ("n2", "p100", 1))},
    )


def taken(rig: Rig, kind: str, job: str) -> bool:
    """Whether the action was carried out: its command sent, its file written, its ack taken."""
    sent = rig.slurm.sent
    commands = {
        "signal": sent(*SIGNAL, job),
        "requeue_hold": sent("scontrol", "requeuehold", job),
        "update": [c for c in sent("scontrol", "update", f"JobId={job}") if "Features" in c[3]],
        "start_now": sent("scontrol", "update", f"JobId={job}", "StartTime=now"),
        "release": sent("scontrol", "release", job),
        "hold": sent("scontrol", "hold", job),
        "submit": sent("sbatch"),
        "cancel": sent("scancel", "--verbose", job),
    }
    files = {"placement": "placement.json", "call_off": "resume_request.json"}
    if kind == "ack":  # no command: the wait took the job's ack
        return rig.journal.first("ack", job).status == "done"
    if kind in files:
        return rig.read(job, files[kind]) is not None
    return bool(commands[kind])


def test_the_failpoint_round_without_a_failpoint_takes_every_kind_of_action(rig: Rig) -> None:
    """The scenario below reaches every action kind the enactor journals, on the job FIRST
    names, and finishes with nothing left pending."""
    assert sorted(FIRST) == sorted(ACTION_KINDS)
    plan = failpoint_round(rig)
    report, out = rig.enactor().enact(rig.view(), plan)
    assert {a.kind for a in rig.journal.actions} == set(ACTION_KINDS)
    for kind, job in FIRST.items():
        steps = UMBRELLAS.get(kind, (kind,))
        assert rig.journal.first(kind).job == job, kind
        assert all(taken(rig, step, job) for step in steps), kind
    assert rig.journal.pending() == []
    assert set(report.failed) == {"103"} and out.moved == ["101", "102"] and out.started == ["104"]
    assert out.resubmitted == {"102": "200"}


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("kind", ACTION_KINDS)
def test_a_failpoint_kills_the_controller_exactly_there(
    rig: Rig, kills: list[tuple[int, int]], when: str, kind: str
) -> None:
    """`before:<kind>`: SIGKILL right after the first such action is journaled, before it is
    taken; `after:<kind>`: right after it was taken and recorded done. For an umbrella action,
    before: none of its steps taken; after: all of them."""
    plan = failpoint_round(rig)
    job = FIRST[kind]
    steps = UMBRELLAS.get(kind, (kind,))
    enactor = rig.enactor(failpoint=f"{when}:{kind}")
    with pytest.raises(Killed):
        enactor.enact(rig.view(), plan)
    assert kills == [(os.getpid(), signal.SIGKILL)]
    action = rig.journal.first(kind)
    assert action.job == job
    if when == "before":
        assert action.status == "pending" and rig.log[-1] == f"begin {kind} {job}"
        assert not any(taken(rig, step, job) for step in steps)
    else:
        assert action.status == "done" and rig.log[-1] == f"done {kind} {job}"
        assert all(taken(rig, step, job) for step in steps)
    if kind == "checkpoint" and when == "before":
        assert rig.read(job, "checkpoint_request.json") is None, "opened before the request"
    if kind == "ack":
        assert not rig.slurm.sent("scontrol", "requeuehold"), "killed before the requeue"


@pytest.mark.parametrize("situation", ["never acks", "finishes"])
def test_the_after_ack_failpoint_fires_on_an_ack_that_did_not_come(
    rig: Rig, kills: list[tuple[int, int]], situation: str
) -> None:
    """`after:ack` also fires when the ack is recorded failed: at the timeout, or when the job
    ended instead; the job's `checkpoint` is left pending, and nothing was requeued."""
    rig.slurm.add_running("101", "n2", "p100")
    if situation == "never acks":
        rig.wrapper.delays["101"] = None
    else:
        rig.slurm.hooks["signal"] = rig.slurm.finish
    view = rig.view()
    start = rig.clock.now
    plan = RoundPlan(round=7, move={"101": placement("101", ("n1", "v100", 1))})
    with pytest.raises(Killed):
        rig.enactor(failpoint="after:ack", ack_timeout_s=10.0).enact(view, plan)
    assert kills == [(os.getpid(), signal.SIGKILL)]
    assert rig.log[-1] == "failed ack 101"
    ack = rig.journal.first("ack", "101")
    if situation == "never acks":
        assert ack.outcome.startswith("no ack within 10 s") and rig.clock.now >= start + 10.0
    else:
        assert ack.outcome == "job COMPLETED, no ack" and rig.clock.now < start + 5.0
    assert rig.journal.pending() == [("checkpoint", "101")]
    assert rig.commands() == [[*SIGNAL, "101"]]


@pytest.mark.parametrize(
    "failpoint",
    [
        "during:signal",
        "signal",
        "SIGKILL",
        "before:requeuehold",
        "after:bogus",
        "before:",
        "after:",
        ":signal",
        "before:Signal",
        "before:signal:ack",
        " before:signal",
    ],
)
def test_a_failpoint_other_than_before_or_after_a_kind_is_refused(failpoint: str, rig: Rig) -> None:
    """Only `before:<kind>` and `after:<kind>`, a kind the enactor journals; the refusal names
    them all."""
    with pytest.raises(HetschedError, match="expected before:<action> or after:<action>") as err:
        EnactSettings(state_root=rig.root, failpoint=failpoint)
    assert repr(failpoint) in str(err.value)
    assert str(err.value).endswith(", ".join(ACTION_KINDS))


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("kind", ACTION_KINDS)
def test_a_failpoint_at_every_kind_is_accepted(rig: Rig, when: str, kind: str) -> None:
    assert EnactSettings(state_root=rig.root, failpoint=f"{when}:{kind}").failpoint


# -- a missing Slurm answer --------------------------------------------------------------------


def test_no_answer_while_waiting_for_acks_is_not_taken_for_a_finished_job(rig: Rig) -> None:
    """squeue answers with an error list during the ack wait: the job still counts as
    running, and is requeued after its ack."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.wrapper.delays["101"] = 3.0
    view = rig.view()
    rig.slurm.silent["squeue"] = 2
    plan = RoundPlan(round=7, move={"101": placement("101", ("n1", "v100", 1))})
    report, out = rig.enactor().enact(view, plan)
    assert len(rig.slurm.unanswered) == 2, "both looks of the wait went unanswered"
    assert (out.finished, out.no_ack, report.failed, out.moved) == ([], [], {}, ["101"])
    assert rig.journal.first("ack", "101").status == "done"
    assert rig.time_of("scontrol", "requeuehold", "101") >= rig.wrapper.acked["101"]


def test_slurm_unreachable_at_the_requeue_leaves_every_job_running_and_called_off(
    rig: Rig,
) -> None:
    """No answer for the whole `requeue_timeout_s`: nobody is requeued (a finished job would
    run again), each is reported and told to train on; nothing is half applied."""
    rig.slurm.add_running("101", "n2", "p100")
    rig.slurm.add_running("102", "n3", "k80")
    view = rig.view()
    start = rig.clock.now
    rig.slurm.unreachable_from = "squeue"
    plan = RoundPlan(round=7, move={"101": placement("101", ("n1", "v100", 1))}, stop=("102",))
    report, out = rig.enactor(requeue_timeout_s=5.0).enact(view, plan)
    assert rig.commands() == [[*SIGNAL, "101"], [*SIGNAL, "102"]]
    assert rig.clock.now - start >= 5.0 and len(rig.slurm.unanswered) >= 5
    for key in ("101", "102"):
        assert "Slurm did not answer" in report.failed[key]
        assert rig.read(key, "resume_request.json") == {
            "job_id": key,
            "restart_count": 0,
            "requested_at": rig.clock.now,
        }
        assert ("call_off", "done") in rig.journal.kinds(key)
        checkpoint = rig.journal.first("checkpoint", key)
        assert (checkpoint.status, checkpoint.outcome) == ("failed", report.failed[key])
        assert rig.slurm.record(key).state is JobState.RUNNING
    assert rig.journal.pending() == []
    assert out.moved == [] and out.stopped == []


def test_slurm_unreachable_during_the_placement_leaves_the_job_held_till_next_round(
    rig: Rig,
) -> None:
    """Slurm goes away after the requeue-hold: the retarget fails, nothing is released onto a
    half-set target, the job is reported; the next round, Slurm back, starts it."""
    rig.slurm.add_running("101", "n2", "p100")
    plan = RoundPlan(round=7, move={"101": placement("101", ("n1", "v100", 2))})
    rig.slurm.unreachable_from = "update"
    report, out = rig.enactor().enact(rig.view(), plan)
    assert report.failed["101"].startswith("update failed:")
    assert "Unexpected message received for job 101" in report.failed["101"]
    held = rig.slurm.record("101")
    assert held.held and (held.features, held.tres_per_node) == ("p100", "gres:gpu:1")
    assert rig.read("101", "placement.json") is None and out.moved == []
    assert [u[:2] for u in rig.slurm.unanswered] == [
        ["scontrol", "update"],
        ["scontrol", "release"],
    ]
    with pytest.raises(SlurmCommandError):
        rig.backend.release("101")

    rig.slurm.unreachable = False
    again = RoundPlan(round=8, start={"101": placement("101", ("n1", "v100", 2))})
    report, out = rig.enactor().enact(rig.view(), again)
    assert (report.failed, out.started) == ({}, ["101"])
    started = rig.slurm.record("101")
    assert not started.held and (started.features, started.required_nodes) == ("v100", "n1")
    assert rig.read("101", "placement.json") is not None
