"""Faults in the middle of a move, on the dev cluster: a controller killed between journaling
a signal and sending it, and slurmctld gone for rounds while a move is under way.

What is asserted is counted from the journal, the jobs' logs and Slurm: which actions ran in
which order, which steps each run printed, and the jobs' final parameters.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from slurm_hetsched.slurm import CliSlurmBackend
from slurm_hetsched.store.sqlite import Action

from .conftest import STEPS, JobLog, Submitter, wait_for
from .controller_harness import REPO, LiveController, drained, wait_all_done, wait_settled
from .test_controller import controller_for, submit_managed


def actions_of(ctl: LiveController) -> list[Action]:
    store = ctl.store()
    try:
        return store.actions()
    finally:
        store.close()


def steps_done_twice(log: JobLog) -> list[int]:
    """Steps printed by more than one run of the job (work repeated after a lost move)."""
    seen: set[int] = set()
    again = []
    for step, _, _ in log.steps:
        if step in seen:
            again.append(step)
        seen.add(step)
    return again


def wait_training(submit: Submitter, backend: CliSlurmBackend, job_ids: list[str]) -> None:
    """Wait until every running job has printed a step of its current run: a job signalled
    before its first step has no progress to lose, and the test would prove nothing (on a
    slow machine torch's import alone can outlast a round)."""

    def probe() -> bool:
        for job in wait_settled(backend, job_ids).values():
            if job.state.value != "RUNNING":
                continue
            log_path = submit.folder / f"slurm-{job.job_id}.out"
            text = log_path.read_text() if log_path.exists() else ""
            if job.restart_count not in JobLog.parse(text).runs():
                return False
        return True

    wait_for(probe, f"jobs {job_ids} training", 120, every_s=0.5)


def test_a_signal_journaled_but_never_sent_is_sent_again_after_a_restart(
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
) -> None:
    """Three jobs share n1's two v100s, so the second round checkpoints one of them. That
    round's controller is SIGKILLed after journaling the signal, before sending it. The
    restarted controller must signal the job again and requeue it only after its ack: the
    next run resumes from the acked step, and no step is done twice."""
    ctl = controller_for(tmp_path, slurm_conf, state_root, round_s=4.0)
    with drained(backend, ["n2", "n3"]):
        ids = [submit_managed(submit, state_root, steps=100000) for _ in range(3)]
        for _ in range(10):
            done = ctl.once(failpoint="before:signal")
            if done.returncode == -signal.SIGKILL:
                break
            assert done.returncode == 0, done.stderr[-3000:]
            wait_training(submit, backend, ids)
            time.sleep(2.0)  # pacing: a few steps before the next round
        else:
            raise AssertionError("no round signalled a job")
        pending = [a for a in actions_of(ctl) if a.status == "pending"]
        # The move's checkpoint action is open, and its signal journaled but never sent.
        assert [a.kind for a in pending] == ["checkpoint", "signal"], pending
        interrupted = pending[-1]
        job_id = interrupted.slurm_job_id
        restart_before = backend.job(job_id).restart_count

        ctl.once()  # restarts: reconciles the interrupted signal, then runs a round
        journal = [
            a
            for a in actions_of(ctl)
            if a.id > interrupted.id and a.job_key == job_id and a.kind != "checkpoint"
        ]
        kinds = [(a.kind, a.status) for a in journal]
        assert kinds[:3] == [("signal", "done"), ("ack", "done"), ("requeue_hold", "done")], kinds
        acked_step = int(journal[1].outcome.split()[1])  # "step N in <checkpoint>"

        # The job runs again (this round or a later one) and resumes after the acked step.
        for _ in range(10):
            job = wait_settled(backend, ids)[job_id]
            if job.state.value == "RUNNING" and job.restart_count > restart_before:
                break
            ctl.once()
        log_path = submit.folder / f"slurm-{job_id}.out"
        wait_for(
            lambda: restart_before + 1 in JobLog.parse(log_path.read_text()).runs(),
            f"job {job_id} printing steps of its next run",
            60,
        )
    log = JobLog.parse(log_path.read_text())
    assert log.runs()[restart_before][-1] == acked_step, "the run stopped at its checkpoint"
    assert log.runs()[restart_before + 1][0] == acked_step + 1, "and the next resumed from it"
    assert steps_done_twice(log) == []
    assert [a for a in actions_of(ctl) if a.status == "pending"] == []


def test_slurmctld_gone_for_two_rounds_in_a_move_leaves_nothing_half_done(
    submit: Submitter,
    backend: CliSlurmBackend,
    slurm_conf: str,
    state_root: Path,
    tmp_path: Path,
    reference_digest: str,
) -> None:
    """The service runs; once a round has signalled a job, slurmctld is stopped until two
    rounds were skipped, then started again (`hetsched devcluster up`, keeping its jobs). The
    move in flight is called off or finished, never half-applied; the rounds after slurmctld
    is back all succeed; every job finishes with the parameters of an uninterrupted run and no
    step done twice. A second controller is refused while the service runs."""
    ctl = controller_for(
        tmp_path,
        slurm_conf,
        state_root,
        round_s=4.0,
        command_timeout_s=5.0,
        retries=0,
        requeue_timeout_s=10.0,
    )
    pid_file = Path(slurm_conf).parents[1] / "run" / "slurmctld.pid"
    with drained(backend, ["n2", "n3"]):
        # Checkpoints take 3 s: slurmctld goes away between the signal and the requeue.
        ids = [
            submit_managed(submit, state_root, HETSCHED_TEST_CHECKPOINT_STALL_S="3")
            for _ in range(3)
        ]
        service = ctl.start()
        try:
            wait_for(
                lambda: any(a.kind == "signal" and a.status == "done" for a in actions_of(ctl)),
                "a round signalling a job",
                120,
            )
            second = ctl.once(check=False)
            assert second.returncode == 1
            assert "another hetsched controller is running" in second.stderr

            subprocess.run(["kill", "-TERM", pid_file.read_text().strip()], check=True)
            skipped = wait_for(
                lambda: ctl.log.read_text().count("skipped=slurm-unavailable") >= 2,
                "two skipped rounds",
                180,
            )
            assert skipped
            up = subprocess.run(
                [sys.executable, "-m", "slurm_hetsched.cli", "devcluster", "up"],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                cwd=REPO,
            )
            assert up.returncode == 0, up.stderr[-2000:]
            store = ctl.store()
            try:
                back_after_round = store.last_round_number() or 0
            finally:
                store.close()
            wait_all_done(backend, ids, 300)
            assert service.poll() is None, "the service survived slurmctld's absence"
        finally:
            service.send_signal(signal.SIGTERM)
            assert service.wait(timeout=60) == 0, ctl.log.read_text()[-3000:]
            # Slurm 22.05 keeps one GPU of n1 counted as used after this restart (GresUsed
            # with no job on the node) until a reconfigure: leave the cluster as found.
            backend.reconfigure()

    log_text = ctl.log.read_text()
    after = log_text[log_text.rfind("skipped=slurm-unavailable") :]
    assert "skipped=round-failed" not in after, after[-3000:]
    store = ctl.store()
    try:
        assert store.pending_actions() == []
        comeback = [r for r in store.rounds() if r.round > back_after_round]
    finally:
        store.close()
    assert comeback, "rounds ran after slurmctld came back"
    assert [r.report.failed for r in comeback if r.report and r.report.failed] == []
    for job_id in ids:
        log = JobLog.parse((submit.folder / f"slurm-{job_id}.out").read_text())
        assert log.final_steps == STEPS and log.digest == reference_digest, log.text[-2000:]
        assert steps_done_twice(log) == [], job_id
