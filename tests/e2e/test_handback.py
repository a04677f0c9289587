"""`hetsched handback` and `hetsched watchdog` on the dev cluster (issue 14, safe under faults).

Template-like jobs (held, untyped GPUs, a `hetsched:` comment; `sleep` stands in for training)
go through one real controller round, so some run on the target it set and some stay held;
then the hand-back gives every managed job to Slurm: running or pending and not held, the
pending ones without the controller's Features and ReqNodeList, the admin comment saying why,
and jobs that are not the controller's left exactly as they were. The watchdog does the same
only when no controller holds the lock and the heartbeat is stale.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from slurm_hetsched.controller.service import SingleControllerLock
from slurm_hetsched.errors import SlurmError
from slurm_hetsched.slurm import CliSlurmBackend, GpuRequest, JobOptions, JobUpdate, SlurmJob
from tests.integration.conftest import Submitter

from .controller_harness import LiveController

T = TypeVar("T")
SPEC = "hetsched:class=LM (batch size 20);steps=1000"
SLEEP = "#!/bin/bash\nexec sleep 900\n"
MANAGED_BEFORE = "hetsched r=1 v100x2@n1 share=v100:1 prio=1 moved:k80->v100"
KEPT = " [target kept while running]"


def poll(probe: Callable[[], T | None], what: str, polls: int = 240, every_s: float = 0.5) -> T:
    """`probe`'s first truthy answer, asking at most `polls` times (a count, not a deadline,
    so a busy machine only makes it slower)."""
    last: T | None = None
    for _ in range(polls):
        last = probe()
        if last:
            return last
        time.sleep(every_s)
    pytest.fail(f"{what}: not seen in {polls} polls (last: {last!r})")


@pytest.fixture
def name(backend: CliSlurmBackend) -> Iterator[str]:
    """A job name of this test only; every active job with it is cancelled afterwards, the
    controller's re-submissions included."""
    job_name = f"hb-{uuid.uuid4().hex[:10]}"
    yield job_name
    for job in backend.list_jobs():
        if job.name == job_name and job.state.is_active:
            try:
                backend.cancel(job.job_id)
            except SlurmError:
                pass  # ended meanwhile


def submit_sleep(
    submit: Submitter, name: str, *, comment: str = SPEC, gpus: int = 2, hold: bool = True
) -> str:
    options = JobOptions(
        job_name=name, gpus=GpuRequest(gpus), comment=comment, hold=hold, requeue=True
    )
    return submit(SLEEP, options)


def ours(backend: CliSlurmBackend, name: str) -> dict[str, SlurmJob]:
    """The test's active jobs by id (leaders only)."""
    return {
        j.job_id: j
        for j in backend.list_jobs()
        if j.name == name and j.state.is_active and j.het_job_offset in (None, 0)
    }


def controller_for(tmp_path: Path, slurm_conf: str, state_root: Path) -> LiveController:
    folder = tmp_path / "controller"
    folder.mkdir()
    return LiveController(folder, slurm_conf, state_root)


def test_handback_gives_every_managed_job_to_slurm(
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
    name: str,
) -> None:
    ctl = controller_for(tmp_path, slurm_conf, state_root)
    # Five 2-GPU jobs on 8 GPUs: the round places four, one stays held.
    for _ in range(5):
        submit_sleep(submit, name)
    ctl.once()
    store = ctl.store()
    try:
        beat = store.last_beat()
    finally:
        store.close()
    assert beat is not None and beat.round == 1, "the service beats after its round"

    def placed_and_started() -> dict[str, SlurmJob] | None:
        jobs = ours(backend, name)
        running = [j for j in jobs.values() if j.state.value == "RUNNING"]
        starting = [j for j in jobs.values() if j.state.value == "PENDING" and not j.held]
        return jobs if running and not starting else None

    before = poll(placed_and_started, "the round's jobs running on their targets")
    held_before = [j for j in before.values() if j.held]
    assert held_before, "one job waits held for a later round"
    assert all(j.features for j in before.values() if j.state.value == "RUNNING")
    # A controller stopped mid-move: retargeted and commented, never released.
    mid_move = submit_sleep(submit, name)
    backend.update(
        mid_move,
        JobUpdate(features="v100", required_nodes="n1", admin_comment=MANAGED_BEFORE),
    )
    # A heterogeneous re-submission (one component per GPU type) the controller left held.
    het = submit(
        SLEEP,
        *(
            JobOptions(
                job_name=name,
                gpus=GpuRequest(1),
                constraint=gpu_type,
                nodelist=node,
                nodes=1,
                comment=f"{SPEC};key={name}",
                hold=True,
                requeue=True,
            )
            for gpu_type, node in (("v100", "n1"), ("p100", "n2"))
        ),
    )
    backend.update(het, JobUpdate(admin_comment=MANAGED_BEFORE))
    never_seen = submit_sleep(submit, name)
    not_ours = submit_sleep(submit, name, comment="my own job")
    refused = submit_sleep(submit, name)
    backend.update(refused, JobUpdate(admin_comment="hetsched not-managed: test refusal"))

    done = ctl.command("handback", "--reason", "e2e test")
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = ours(backend, name)
    managed = {j for j in jobs if j not in (not_ours, refused)}
    assert {mid_move, het, never_seen} <= managed and len(managed) == 8
    lines = done.stdout.splitlines()
    assert lines[-1] == "handed back 8 of 8 managed jobs (0 had nothing left to do), 0 failed"
    assert sorted(line.split()[1] for line in lines[:-1]) == sorted(managed)
    for job_id in managed:
        job = jobs[job_id]
        assert job.state.value == "RUNNING" or (job.state.value == "PENDING" and not job.held)
        if job.state.value == "PENDING":
            # 22.05 refuses ReqNodeList on a heterogeneous job's leader (below).
            assert (job.features, job.required_nodes) == ("", "n1" if job_id == het else ""), job
            assert job.admin_comment == "hetsched handed-back: e2e test", job
        else:
            # Slurm 22.05 refuses to change either on a running job: it keeps its target,
            # and the comment says so for a later hand-back.
            assert job.features, job
            assert job.admin_comment == f"hetsched handed-back: e2e test{KEPT}", job
    assert "keeps Features/ReqNodeList while it runs" in done.stdout
    assert jobs[mid_move].features == "" and jobs[mid_move].required_nodes == ""
    second = next(j for j in backend.list_jobs() if j.het_job_id == het and j.het_job_offset)
    assert (second.features, second.required_nodes) == ("", ""), second
    assert "its first component keeps ReqNodeList=n1" in done.stdout
    assert jobs[not_ours].held and jobs[not_ours].admin_comment == ""
    assert jobs[refused].held
    assert jobs[refused].admin_comment == "hetsched not-managed: test refusal"
    store = ctl.store()
    try:
        journal = {a.slurm_job_id: (a.kind, a.status) for a in store.actions(round_=1)}
    finally:
        store.close()
    assert all(journal.get(j) == ("handback", "done") for j in managed), journal

    # Requeued later (an admin, a node failure), a running job is pending with the old target:
    # the next hand-back clears it, and leaves the hold, which is no longer the controller's.
    requeued = next(j for j in managed if jobs[j].state.value == "RUNNING")
    backend.requeue_hold(requeued)
    poll(lambda: ours(backend, name)[requeued].held, f"job {requeued} requeued and held")
    assert ours(backend, name)[requeued].features, "Slurm keeps the target over a requeue"
    again = ctl.command("handback", "--reason", "e2e test")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "handed back 1 of 8 managed jobs (7 had nothing left to do), 0 failed" in again.stdout
    job = ours(backend, name)[requeued]
    assert (job.features, job.required_nodes, job.held) == ("", "", True), job
    assert job.admin_comment == "hetsched handed-back: e2e test"

    # A controller started later manages them again (what an admin who restarts it wants).
    dry = ctl.once("--dry-run")
    planned = {
        line.split("(job ")[1].split(")")[0] for line in dry.stdout.splitlines() if "(job " in line
    }
    assert managed <= planned, dry.stdout


def test_the_watchdog_hands_back_only_when_the_controller_is_gone(
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
    name: str,
) -> None:
    ctl = controller_for(tmp_path, slurm_conf, state_root)
    ids = [submit_sleep(submit, name, gpus=1) for _ in range(2)]

    def beat(age_s: float) -> None:
        store = ctl.store()
        try:
            store.beat(time.time() - age_s, 9)
        finally:
            store.close()

    def untouched() -> bool:
        jobs = ours(backend, name)
        return all(jobs[j].held and jobs[j].admin_comment == "" for j in ids)

    lock = ctl.store_path.with_name(ctl.store_path.name + ".lock")
    beat(0)
    with SingleControllerLock(lock):
        alive = ctl.command("watchdog")
        beat(7200)
        hung = ctl.command("watchdog")
    assert alive.returncode == 0 and "controller alive" in alive.stdout, alive
    assert hung.returncode == 0 and "may hang" in hung.stdout, hung
    assert untouched(), "a controller holding its lock keeps its jobs, silent or not"

    gone = ctl.command("watchdog")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert "silent since" in gone.stdout and "handed back 2 of 2 managed jobs" in gone.stdout
    jobs = ours(backend, name)
    for job_id in ids:
        assert not jobs[job_id].held, jobs[job_id]
        assert jobs[job_id].admin_comment.startswith(
            "hetsched handed-back: controller silent since "
        )
    again = ctl.command("watchdog")
    assert again.returncode == 0
    assert "handed back 0 of 2 managed jobs (2 had nothing left to do), 0 failed" in again.stdout
