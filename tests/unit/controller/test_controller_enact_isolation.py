"""One job's failed action is that job's problem (`SlurmEnactor.enact`): it is recorded for the
job, the other jobs' actions go on, a job left held is released, and a job signalled for a move
that cannot happen is told to train on (resume_request.json) rather than stay paused.

The Slurm side is a small in-memory cluster that answers as Slurm 22.05 does for these calls;
the jobs' state folders are real folders, and "the wrapper" acks by writing ack.json when the
signal arrives.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from controller_builders import managed, placement, running, slurm_job

from slurm_hetsched.controller.enact import EnactSettings, SlurmEnactor
from slurm_hetsched.controller.jobview import SlurmView
from slurm_hetsched.core.model import ClusterSnapshot, RoundPlan
from slurm_hetsched.errors import InvalidRequestError
from slurm_hetsched.slurm.records import JobState, JobUpdate, SlurmJob

ME = os.geteuid()


class MemoryJournal:
    def __init__(self) -> None:
        self.actions: list[dict[str, Any]] = []

    def begin_action(
        self, round_: int, job_key: str, slurm_job_id: str, kind: str, detail: dict[str, Any]
    ) -> int:
        self.actions.append({"job": job_key, "kind": kind, "status": "pending"})
        return len(self.actions) - 1

    def finish_action(self, action_id: int, ok: bool, outcome: str = "") -> None:
        self.actions[action_id] |= {"status": "done" if ok else "failed", "outcome": outcome}

    def kinds(self, job: str) -> list[tuple[str, str]]:
        return [(a["kind"], a["status"]) for a in self.actions if a["job"] == job]


class MemorySlurm:
    """Jobs by id; requeue-hold makes a running job pending and held; `fail` injects errors."""

    def __init__(self, jobs: list[SlurmJob], state_root: Path) -> None:
        self.jobs = {j.job_id: j for j in jobs}
        self.state_root = state_root
        self.calls: list[tuple[str, str]] = []
        self.fail: dict[tuple[str, str], Exception] = {}

    def _call(self, name: str, job_id: str) -> None:
        self.calls.append((name, job_id))
        error = self.fail.get((name, job_id))
        if error is not None:
            raise error

    def list_jobs(self, job_ids: object = None) -> list[SlurmJob]:
        return list(self.jobs.values())

    def signal(self, job_id: str, signal: str, *, target: str = "batch") -> None:
        self._call("signal", job_id)
        job = self.jobs[job_id]
        folder = self.state_root / str(ME) / job_id
        ack = {
            "job_id": job_id,
            "restart_count": job.restart_count,
            "step": 10,
            "checkpoint": "ckpt-10",
            "written_at": 2e9,
        }
        (folder / "ack.json").write_text(json.dumps(ack))

    def requeue_hold(self, job_id: str) -> None:
        self._call("requeue_hold", job_id)
        self.jobs[job_id] = dataclasses.replace(
            self.jobs[job_id], state=JobState.PENDING, reason="job_requeued_in_held_state"
        )

    def hold(self, job_id: str) -> None:
        self._call("hold", job_id)

    def release(self, job_id: str) -> None:
        self._call("release", job_id)
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], reason="Priority")

    def retarget(self, job_id: str, gpu_type: str, num_gpus: int, nodes: str | None = None) -> None:
        self._call("retarget", job_id)

    def update(self, job_id: str, update: JobUpdate) -> None:
        self._call("update", job_id)


def enactor_for(slurm: MemorySlurm, journal: MemoryJournal, root: Path) -> SlurmEnactor:
    clock = [1e9]

    def sleep(s: float) -> None:
        clock[0] += s

    settings = EnactSettings(state_root=root, ack_timeout_s=5.0, requeue_timeout_s=5.0)
    return SlurmEnactor(slurm, journal, settings, clock=lambda: clock[0], sleep=sleep)  # type: ignore[arg-type]


def setup(tmp_path: Path) -> tuple[MemorySlurm, MemoryJournal, SlurmEnactor, SlurmView, RoundPlan]:
    root = tmp_path / "state"
    jobs = [
        running("1", "n2", "p100", user_id=ME),
        running("2", "n3", "k80", user_id=ME),
        slurm_job("3", state=JobState.PENDING, reason="JobHeldUser", user_id=ME),
        slurm_job("4", state=JobState.PENDING, reason="JobHeldUser", user_id=ME),
    ]
    for job in jobs:
        (root / str(ME) / job.job_id).mkdir(parents=True)
    slurm = MemorySlurm(jobs, root)
    journal = MemoryJournal()
    view = SlurmView(
        now_s=0.0,
        managed={j.job_id: managed(j) for j in jobs},
        rejected=(),
        nodes=(),
        snapshot=ClusterSnapshot(now_s=0.0, nodes=(), jobs=()),
    )
    plan = RoundPlan(
        round=4,
        move={
            "1": placement("1", ("n1", "v100", 1)),
            "2": placement("2", ("n1", "v100", 1)),
        },
        start={
            "3": placement("3", ("n3", "k80", 1)),
            "4": placement("4", ("n3", "k80", 1)),
        },
    )
    return slurm, journal, enactor_for(slurm, journal, root), view, plan


def resume_request(root: Path, job_id: str) -> dict[str, Any] | None:
    path = root / str(ME) / job_id / "resume_request.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_a_refused_requeue_calls_the_move_off_and_the_others_move(tmp_path: Path) -> None:
    slurm, journal, enactor, view, plan = setup(tmp_path)
    slurm.fail[("requeue_hold", "1")] = InvalidRequestError(
        ["scontrol", "requeuehold", "1"], 1, "Requested operation is presently disabled"
    )
    report, out = enactor.enact(view, plan)
    assert "requeue_hold failed" in report.failed["1"] and set(report.failed) == {"1"}
    assert out.moved == ["2"] and out.started == ["3", "4"]
    # Job 1 acked and paused; it is told at once to train on, on the run it was asked on.
    request = resume_request(tmp_path / "state", "1")
    assert request is not None and (request["job_id"], request["restart_count"]) == ("1", 0)
    assert resume_request(tmp_path / "state", "2") is None
    assert ("call_off", "done") in journal.kinds("1")
    assert ("release", "2") in slurm.calls and ("retarget", "2") in slurm.calls


def test_an_unexpected_error_in_one_jobs_placement_releases_it_and_the_rest_go_on(
    tmp_path: Path,
) -> None:
    slurm, _, enactor, view, plan = setup(tmp_path)
    place = enactor._place

    def broken_for_3(round_: int, record: SlurmJob, job: Any, *args: Any, **kwargs: Any) -> bool:
        if job.key == "3":
            raise RuntimeError("a bug that only job 3's data reaches")
        return place(round_, record, job, *args, **kwargs)

    enactor._place = broken_for_3  # type: ignore[method-assign]
    report, out = enactor.enact(view, plan)
    assert "RuntimeError" in report.failed["3"] and set(report.failed) == {"3"}
    assert sorted(out.moved) == ["1", "2"] and out.started == ["4"]
    assert ("release", "3") in slurm.calls, "never left held by a failed round"


def test_a_failing_step_of_any_kind_is_recorded_for_its_job_only(tmp_path: Path) -> None:
    slurm, _, enactor, view, plan = setup(tmp_path)
    slurm.fail[("retarget", "4")] = TypeError("unexpected")
    report, out = enactor.enact(view, plan)
    assert set(report.failed) == {"4"} and "update failed" in report.failed["4"]
    assert ("release", "4") in slurm.calls, "released unchanged rather than left held"
    assert out.started == ["3"] and sorted(out.moved) == ["1", "2"]


def test_jobs_set_aside_are_not_touched(tmp_path: Path) -> None:
    slurm, _, enactor, view, plan = setup(tmp_path)
    plan = dataclasses.replace(plan, set_aside={"1": "the policy fails with it"})
    moves = dict(plan.move)
    del moves["1"]
    plan = dataclasses.replace(plan, move=moves)
    _, out = enactor.enact(view, plan)
    assert not [c for c in slurm.calls if c[1] == "1"], "neither signalled nor stopped"
    assert out.stopped == [] and out.moved == ["2"]
