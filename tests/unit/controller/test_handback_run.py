"""Carrying a hand-back out (`Handback`, `hand_back_all`, `run_handback`) against an in-memory
Slurm that answers as 22.05 does: the calls per job in order, one job's failure reported while
the others go on, nothing left held by a failure, a rerun that finishes what failed, the
journal, the resume request of a paused job, dry runs, and the controller's lock."""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path

import pytest
from controller_builders import held, running, slurm_job

from slurm_hetsched.controller.config import ControllerConfig
from slurm_hetsched.controller.handback_command import hand_back_all, run_handback
from slurm_hetsched.controller.service import ControllerRunningError, SingleControllerLock
from slurm_hetsched.controller.statefiles import JobFolder, write_checkpoint_request
from slurm_hetsched.errors import InvalidRequestError, SlurmCommandError, UnknownJobError
from slurm_hetsched.slurm.records import JobState, JobUpdate, SlurmJob
from slurm_hetsched.statefolder import RESUME_FILE
from slurm_hetsched.store.sqlite import SqliteStore
from slurm_hetsched.wrapper.files import read_json

ME = os.geteuid()
MANAGED = "hetsched r=7 v100x1@n1 share=v100:1 prio=1 started"
COMMENT = "hetsched handed-back: test"
KEPT = COMMENT + " [target kept while running]"


class FakeSlurm:
    """Jobs by id; `release` lifts the hold, `update` sets what it names; `fail` injects."""

    def __init__(self, jobs: list[SlurmJob]) -> None:
        self.jobs = {j.job_id: j for j in jobs}
        self.calls: list[tuple[str, str, str]] = []
        self.fail: dict[tuple[str, str], Exception] = {}

    def list_jobs(self, job_ids: object = None) -> list[SlurmJob]:
        return list(self.jobs.values())

    def _call(self, name: str, job_id: str, what: str = "") -> None:
        self.calls.append((name, job_id, what))
        error = self.fail.get((name, job_id))
        if error is not None:
            raise error

    def release(self, job_id: str) -> None:
        self._call("release", job_id)
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], reason="Priority")

    def update(self, job_id: str, update: JobUpdate) -> None:
        if update.admin_comment is not None:
            self._call("update", job_id, "comment")
            self.jobs[job_id] = dataclasses.replace(
                self.jobs[job_id], admin_comment=update.admin_comment
            )
            return
        self._call("update", job_id, "untarget" if update.required_nodes == "" else "features")
        job = self.jobs[job_id]
        if job.state is not JobState.PENDING:  # what 22.05 answers
            raise InvalidRequestError(["scontrol"], 1, "Job is no longer pending execution")
        nodes = job.required_nodes if update.required_nodes is None else ""
        self.jobs[job_id] = dataclasses.replace(job, features="", required_nodes=nodes)

    def by_job(self, job_id: str) -> list[str]:
        return [f"{name}:{what}" if what else name for name, j, what in self.calls if j == job_id]


def _retargeted(job_id: str) -> SlurmJob:
    job = slurm_job(job_id, reason="job_requeued_in_held_state", admin_comment=MANAGED)
    return dataclasses.replace(job, features="v100", required_nodes="n1")


def _queue() -> list[SlurmJob]:
    return [
        held("1"),  # never seen by the controller
        _retargeted("2"),  # the controller stopped mid-move
        running("3", "n2", "p100", admin_comment=MANAGED, user_id=ME),
        held("4", admin_comment="hetsched handed-back: earlier"),  # the user's hold since
        held("5", comment="not a template job"),
    ]


def _config(tmp_path: Path) -> ControllerConfig:
    return ControllerConfig(store=tmp_path / "rounds.sqlite", state_root=tmp_path / "state")


def test_every_managed_job_is_handed_back_in_order_and_journaled(tmp_path: Path) -> None:
    config = _config(tmp_path)
    store = SqliteStore(config.store)
    store.close()
    slurm = FakeSlurm(_queue())
    out = io.StringIO()
    status = hand_back_all(config, reason="test", dry_run=False, out=out, slurm=slurm)
    assert status == 0, out.getvalue()
    assert slurm.by_job("1") == ["release", "update:comment"]
    assert slurm.by_job("2") == ["update:untarget", "release", "update:comment"]
    assert slurm.by_job("3") == ["update:comment"], "a running job: its comment only"
    assert slurm.by_job("4") == ["update:comment"], "the user's hold stays"
    assert slurm.by_job("5") == [], "not a template job"
    assert slurm.jobs["2"].features == "" and slurm.jobs["2"].required_nodes == ""
    assert all(slurm.jobs[j].admin_comment == COMMENT for j in "124")
    assert slurm.jobs["3"].admin_comment == KEPT, "a running job keeps the target it runs on"
    assert all(not slurm.jobs[j].held for j in "123") and slurm.jobs["4"].held
    lines = out.getvalue().splitlines()
    assert len(lines) == 5 and lines[-1].startswith("handed back 4 of 4 managed jobs")
    assert "left held: the hold (JobHeldUser) is not the controller's" in lines[3]
    store = SqliteStore(config.store)
    try:
        journal = [(a.slurm_job_id, a.kind, a.status) for a in store.actions()]
    finally:
        store.close()
    assert journal == [(j, "handback", "done") for j in "1234"]


def test_one_jobs_failure_is_reported_the_others_go_on_and_nothing_stays_held(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    SqliteStore(config.store).close()
    slurm = FakeSlurm(_queue())
    slurm.fail[("update", "2")] = SlurmCommandError(["scontrol"], 1, "slurmctld busy")
    slurm.fail[("release", "1")] = SlurmCommandError(["scontrol"], 1, "slurmctld busy")
    out = io.StringIO()
    assert hand_back_all(config, reason="test", dry_run=False, out=out, slurm=slurm) == 1
    text = out.getvalue()
    assert "job 2 (2, alice, PENDING): FAILED: untarget 2 failed" in text
    assert "job 1 (1, alice, PENDING): FAILED: release failed" in text
    assert text.splitlines()[-1].endswith(
        "2 failed; fix the cause shown above and run `hetsched handback` again"
    )
    assert slurm.by_job("2")[:2] == ["update:untarget", "release"], "released all the same"
    assert not slurm.jobs["2"].held
    assert slurm.jobs["1"].admin_comment == "" and slurm.jobs["2"].admin_comment == MANAGED, (
        "no handed-back comment where a step failed, so a rerun sees the hold as ours"
    )
    assert slurm.jobs["3"].admin_comment == KEPT, "the others went on"
    store = SqliteStore(config.store)
    try:
        statuses = {a.slurm_job_id: a.status for a in store.actions()}
    finally:
        store.close()
    assert statuses == {"1": "failed", "2": "failed", "3": "done", "4": "done"}
    # Once the cause is fixed, a rerun finishes exactly what failed.
    slurm.fail.clear()
    slurm.calls.clear()
    out = io.StringIO()
    assert hand_back_all(config, reason="test", dry_run=False, out=out, slurm=slurm) == 0
    assert slurm.by_job("1") == ["release", "update:comment"]
    assert slurm.by_job("2") == ["update:untarget", "update:comment"]
    assert slurm.by_job("3") == [] and slurm.by_job("4") == []
    assert "job 3 (3, alice, RUNNING): already handed back" in out.getvalue()


def test_a_heterogeneous_jobs_leader_keeps_its_node_list(tmp_path: Path) -> None:
    leader = dataclasses.replace(
        _retargeted("20"), het_job_id="20", het_job_offset=0, reason="JobHeldUser"
    )
    other = dataclasses.replace(leader, job_id="21", het_job_offset=1, features="p100")
    slurm = FakeSlurm([leader, other])
    out = io.StringIO()
    assert hand_back_all(_config(tmp_path), reason="test", dry_run=False, out=out, slurm=slurm) == 0
    assert slurm.by_job("20") == ["update:features", "release", "update:comment"]
    assert slurm.by_job("21") == ["update:untarget"]


def test_a_job_gone_meanwhile_is_no_failure(tmp_path: Path) -> None:
    slurm = FakeSlurm([held("1")])
    slurm.fail[("release", "1")] = UnknownJobError(["scontrol"], 1, "Invalid job id specified")
    out = io.StringIO()
    assert hand_back_all(_config(tmp_path), reason="test", dry_run=False, out=out, slurm=slurm) == 0
    assert "release: the job left Slurm meanwhile" in out.getvalue()


def test_a_paused_job_is_told_to_train_on_once(tmp_path: Path) -> None:
    config = _config(tmp_path)
    root = config.state_root
    root.mkdir(mode=0o711)
    SqliteStore(config.store).close()
    jobs = [
        running("3", "n2", "p100", admin_comment=MANAGED, user_id=ME),
        running("6", "n1", "v100", admin_comment=MANAGED, user_id=ME, restart_count=2),
        running("7", "n3", "k80", admin_comment=MANAGED, user_id=ME),
    ]
    # Job 3 was asked to checkpoint (this run); job 6's request names an earlier run; job 7
    # was never asked.
    write_checkpoint_request(JobFolder(root, ME, "3"), job_id="3", restart_count=0, at=50.0)
    write_checkpoint_request(JobFolder(root, ME, "6"), job_id="6", restart_count=1, at=50.0)
    slurm = FakeSlurm(jobs)
    out = io.StringIO()
    hand_back_all(config, reason="test", dry_run=False, out=out, slurm=slurm, clock=lambda: 100.0)
    resume = read_json(root / str(ME) / "3" / RESUME_FILE)
    assert resume == {"job_id": "3", "restart_count": 0, "requested_at": 100.0}
    assert "told to train on (resume_request.json)" in out.getvalue()
    assert not (root / str(ME) / "6" / RESUME_FILE).exists(), "another run's request"
    assert not (root / str(ME) / "7").exists(), "never asked: no folder is created"
    # A second hand-back does not tell it again (the request it answers is the same), and
    # records nothing: it had nothing to do.
    out = io.StringIO()
    hand_back_all(config, reason="test", dry_run=False, out=out, slurm=slurm, clock=lambda: 300.0)
    assert read_json(root / str(ME) / "3" / RESUME_FILE) == resume
    assert "told to train on" not in out.getvalue()
    assert out.getvalue().splitlines()[-1] == (
        "handed back 0 of 3 managed jobs (3 had nothing left to do), 0 failed"
    )
    store = SqliteStore(config.store)
    try:
        assert len(store.actions()) == 3, "one per job, from the first hand-back only"
    finally:
        store.close()


def test_a_resume_request_that_cannot_be_written_is_a_warning_not_a_failure(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    config.state_root.mkdir(mode=0o711)
    folder = JobFolder(config.state_root, ME, "3")
    write_checkpoint_request(folder, job_id="3", restart_count=0, at=50.0)
    (config.state_root / str(ME) / "3" / RESUME_FILE).mkdir()  # in the way of the file
    job = running("3", "n2", "p100", admin_comment=MANAGED, user_id=ME)
    out = io.StringIO()
    slurm = FakeSlurm([job])
    assert hand_back_all(config, reason="test", dry_run=False, out=out, slurm=slurm) == 0
    line = out.getvalue().splitlines()[0]
    assert line.startswith("job 3 (3, alice, RUNNING): commented; no resume request (")
    assert "it trains on after its lease" in line


def test_a_dry_run_changes_nothing_and_records_nothing(tmp_path: Path) -> None:
    config = _config(tmp_path)
    slurm = FakeSlurm(_queue())
    out = io.StringIO()
    assert run_handback(config, reason="test", dry_run=True, out=out, slurm=slurm) == 0
    assert slurm.calls == []
    assert not config.store.exists() and not config.lock_path.exists()
    text = out.getvalue()
    assert "job 2 (2, alice, PENDING): would untarget 2, release, admin comment" in text
    assert text.splitlines()[-1] == ("dry run: 4 managed jobs, 4 to hand back; nothing was changed")


def test_a_running_controller_keeps_its_jobs(tmp_path: Path) -> None:
    config = _config(tmp_path)
    slurm = FakeSlurm(_queue())
    with SingleControllerLock(config.lock_path):
        with pytest.raises(ControllerRunningError, match=r"pid \d+.*Stop it first"):
            run_handback(config, reason="test", dry_run=False, out=io.StringIO(), slurm=slurm)
    assert slurm.calls == []
    # Stopped: the hand-back takes the lock itself, and gives it back.
    assert run_handback(config, reason="t", dry_run=False, out=io.StringIO(), slurm=slurm) == 0
    with SingleControllerLock(config.lock_path):
        pass
