"""The checkpoint-before-move protocol end to end on the dev cluster (issue 6, part 4).

Each test submits the shipped template running examples/train_mlp.py (300 steps, seed 0),
drives it the way the controller will, and checks that the job ends with parameters
bit-identical to an uninterrupted local run.
"""

from __future__ import annotations

import time
from pathlib import Path

from slurm_hetsched.slurm import CliSlurmBackend
from slurm_hetsched.wrapper import read_ack, read_progress

from .conftest import (
    STEPS,
    FakeController,
    Submitter,
    signal_time,
    submit_template,
    wait_done,
    wait_for,
)

STEP_TIME = "0.03"  # 300 steps take ~9 s: room to act mid-training


def test_move_from_k80_to_v100_resumes_bit_identical(
    submit: Submitter,
    backend: CliSlurmBackend,
    controller: FakeController,
    state_root: Path,
    reference_digest: str,
) -> None:
    job = submit_template(submit, state_root, ["--step-time-s", STEP_TIME])
    submitted = submit.job(job)
    assert submitted.held, "the template submits held jobs"
    assert submitted.comment == f"hetsched:class=LM (batch size 20);steps={STEPS}"
    assert submitted.requeue and submitted.gpus_per_node is not None
    assert submitted.gpus_per_node.gpu_type is None, "untyped --gres=gpu:N"
    controller.place(job, "k80", "n3")
    progress = controller.wait_progress(job, min_step=60)
    assert (progress["node"], progress["gpu_type"]) == ("n3", "k80")

    signalled = signal_time()
    backend.signal(job, "USR2")
    ack = controller.wait_ack(job, signalled)
    assert ack.restart_count == 0 and ack.checkpoint == f"ckpt-{ack.step}"
    assert (controller.state_dir(job) / ack.checkpoint / "COMMITTED").is_file()
    paused = read_progress(controller.state_dir(job))
    assert paused is not None and paused["status"] == "paused" and paused["step"] == ack.step
    assert submit.job(job).state.value == "RUNNING", "a paused job keeps running"

    acked = time.monotonic()
    controller.move(job, "v100", "n1")
    moved = controller.wait_progress(job, min_step=ack.step, restart=1)
    ack_to_running_s = time.monotonic() - acked
    assert (moved["node"], moved["gpu_type"]) == ("n1", "v100")

    log = wait_done(submit, job)
    assert log.digest == reference_digest
    assert [step for step, _, _ in log.steps] == list(range(1, STEPS + 1)), "each step once"
    assert log.runs()[0][-1] == ack.step and log.runs()[1][0] == ack.step + 1
    assert log.nodes() == {0: {"n3"}, 1: {"n1"}}
    assert f"resumed from ckpt-{ack.step} at step {ack.step}" in log.text
    final = read_progress(controller.state_dir(job))
    assert final is not None and final["status"] == "done" and final["step"] == STEPS
    print(f"ack to training again on n1: {ack_to_running_s:.1f} s")


def test_kill_during_checkpoint_write_resumes_from_previous(
    submit: Submitter,
    backend: CliSlurmBackend,
    controller: FakeController,
    state_root: Path,
    reference_digest: str,
) -> None:
    # Periodic checkpoints every 100 steps, each held 2 s before its commit (test hook), so
    # the job can be killed while ckpt-200 is half done.
    job = submit_template(
        submit,
        state_root,
        ["--step-time-s", "0.01"],
        HETSCHED_CHECKPOINT_EVERY_STEPS="100",
        HETSCHED_TEST_CHECKPOINT_STALL_S="2",
    )
    controller.place(job, "k80", "n3")
    state = controller.state_dir(job)
    wait_for(lambda: (state / "ckpt-100" / "COMMITTED").is_file(), "ckpt-100 committed", 45)
    temp = wait_for(lambda: list(state.glob(".tmp-ckpt-200-*")), "ckpt-200 being written", 30)
    backend.signal(job, "KILL")  # kill -9 of the training process (the template exec'd it)
    wait_for(lambda: not submit.job(job).state.is_active, f"job {job} killed", 30)
    assert temp[0].exists() and not (state / "ckpt-200").exists()

    backend.requeue(job)
    controller.move_pending(job, "v100", "n1")
    log = wait_done(submit, job)
    assert "resumed from ckpt-100 at step 100" in log.text
    assert log.runs()[1][0] == 101, "the second run starts after the last committed checkpoint"
    assert log.digest == reference_digest
    assert not list(state.glob(".tmp-ckpt-*")), "the torn write's folder is cleaned up"


def test_job_ignoring_the_signal_resumes_from_its_last_periodic_checkpoint(
    submit: Submitter,
    backend: CliSlurmBackend,
    controller: FakeController,
    state_root: Path,
    reference_digest: str,
) -> None:
    job = submit_template(
        submit,
        state_root,
        ["--step-time-s", STEP_TIME, "--ignore-checkpoint-signal"],
        HETSCHED_CHECKPOINT_EVERY_STEPS="50",
    )
    controller.place(job, "k80", "n3")
    controller.wait_progress(job, min_step=120)
    signalled = signal_time()
    backend.signal(job, "USR2")
    # The controller's own timeout (short here): no ack comes, it moves the job anyway.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        ack = read_ack(controller.state_dir(job))
        assert ack is None or ack.written_at < signalled, "a job ignoring the signal acked"
        time.sleep(0.2)
    assert submit.job(job).state.value == "RUNNING", "the ignored signal did not kill it"

    controller.move(job, "v100", "n1")
    log = wait_done(submit, job)
    first_run = log.runs()[0]
    last_periodic = max(step for step in range(50, first_run[-1] + 1, 50))
    assert f"resumed from ckpt-{last_periodic} at step {last_periodic}" in log.text
    assert log.runs()[1][0] == last_periodic + 1
    assert log.digest == reference_digest


def test_paused_job_resumes_after_its_lease(
    submit: Submitter,
    backend: CliSlurmBackend,
    controller: FakeController,
    state_root: Path,
    reference_digest: str,
) -> None:
    job = submit_template(
        submit, state_root, ["--step-time-s", STEP_TIME], HETSCHED_LEASE_TIMEOUT_S="3"
    )
    controller.place(job, "k80", "n3")
    controller.wait_progress(job, min_step=60)
    signalled = signal_time()
    backend.signal(job, "USR2")
    ack = controller.wait_ack(job, signalled)
    # Never requeued: after the 3 s lease it trains on, in the same run, on the same node.
    log = wait_done(submit, job)
    assert "no requeue within the lease of 3 s" in log.text
    assert [step for step, _, _ in log.steps] == list(range(1, STEPS + 1))
    assert set(log.runs()) == {0} and ack.step in log.runs()[0]
    assert log.digest == reference_digest
