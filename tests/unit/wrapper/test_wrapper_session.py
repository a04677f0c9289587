"""JobSession: signal flag -> checkpoint -> ack -> pause; lease timeout; SIGTERM; periodic."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from wrapper_fakes import FakeClock, make_env, no_gpus

from slurm_hetsched.wrapper.checkpoint import CheckpointReader, CheckpointWriter
from slurm_hetsched.wrapper.progress import read_ack, read_progress
from slurm_hetsched.wrapper.session import JobSession, Terminated
from slurm_hetsched.wrapper.signals import SignalFlags


class Counter:
    """A trivial 'model': its state is the list of steps it has seen."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.saves = 0

    def save(self, writer: CheckpointWriter) -> None:
        self.saves += 1
        writer.save_object("state.bin", {"seen": list(self.seen)})

    def load(self, reader: CheckpointReader) -> None:
        self.seen = reader.load_object("state.bin")["seen"]


def session_for(
    tmp_path: Path, counter: Counter, clock: FakeClock, total: int = 10, **options: Any
) -> JobSession:
    env = make_env(tmp_path / "state", **options.pop("env", {}))
    return JobSession(
        total_steps=total,
        save=counter.save,
        load=counter.load,
        env=env,
        gpu_lookup=no_gpus,
        clock=clock.monotonic,
        wall=clock.wall,
        sleep=clock.sleep,
        **options,
    )


def raise_signal(signum: int) -> None:
    """Deliver a signal to this process; Python runs the handler before this returns."""
    os.kill(os.getpid(), signum)
    time.sleep(0.01)


def test_handler_only_sets_a_flag() -> None:
    flags = SignalFlags(signal.SIGUSR2)
    assert flags.install()
    try:
        raise_signal(signal.SIGUSR2)
        raise_signal(signal.SIGUSR2)
        assert flags.received == 2
        assert flags.take_checkpoint_request() and not flags.take_checkpoint_request()
        raise_signal(signal.SIGTERM)
        assert flags.terminate_requested
    finally:
        flags.uninstall()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_signal_checkpoints_acks_and_pauses_until_the_lease_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock, counter = FakeClock(), Counter()
    pause_progress: list[Any] = []
    clock.on_sleep = lambda n: pause_progress.append(read_progress(tmp_path / "state"))
    session = session_for(tmp_path, counter, clock, lease_timeout_s=30.0)
    with caplog.at_level(logging.INFO), session:
        while not session.finished:
            counter.seen.append(session.step)
            if session.step == 3:
                raise_signal(signal.SIGUSR2)
            session.step_done()
    state = tmp_path / "state"
    ack = read_ack(state)
    assert ack is not None and (ack.job_id, ack.restart_count, ack.step) == ("42", 0, 4)
    assert ack.checkpoint == "ckpt-4" and (state / "ckpt-4" / "COMMITTED").is_file()
    assert pause_progress[0]["status"] == "paused" and pause_progress[0]["step"] == 4
    assert clock.sleeps == 150  # paused 30 s in 0.2 s polls, then trained on
    assert "no requeue within the lease of 30 s" in caplog.text
    assert counter.seen == list(range(10)), "training went on after the lease"
    final = read_progress(state)
    assert final is not None and final["status"] == "done" and final["step"] == 10


def test_a_resume_request_ends_the_pause_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The controller called the move off (the requeue failed): the job trains on at once,
    not after its lease; a request of another run is not obeyed."""
    clock, counter = FakeClock(), Counter()
    state = tmp_path / "state"

    def controller(n: int) -> None:
        if n == 3:  # another run's request: ignored
            request = {"job_id": "42", "restart_count": 1, "requested_at": clock.wall()}
            (state / "resume_request.json").write_text(json.dumps(request))
        if n == 5:
            request = {"job_id": "42", "restart_count": 0, "requested_at": clock.wall()}
            (state / "resume_request.json").write_text(json.dumps(request))

    clock.on_sleep = controller
    session = session_for(tmp_path, counter, clock, lease_timeout_s=600.0)
    with caplog.at_level(logging.INFO), session:
        while not session.finished:
            counter.seen.append(session.step)
            if session.step == 3:
                raise_signal(signal.SIGUSR2)
            session.step_done()
    assert clock.sleeps == 5, "resumed at the first poll after the request, not after 600 s"
    assert "resume request at step" in caplog.text
    assert counter.seen == list(range(10))


def test_sigterm_while_paused_ends_the_job_promptly(tmp_path: Path) -> None:
    clock, counter = FakeClock(), Counter()
    clock.on_sleep = lambda n: raise_signal(signal.SIGTERM) if n == 5 else None
    session = session_for(tmp_path, counter, clock)
    with pytest.raises(Terminated) as stopped, session:
        while not session.finished:
            if session.step == 2:
                raise_signal(signal.SIGUSR2)
            session.step_done()
    assert stopped.value.code == 143
    assert clock.sleeps == 5 and session.step == 3
    progress = read_progress(tmp_path / "state")
    assert progress is not None and progress["status"] == "stopped"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, "handlers restored"


def test_sigterm_in_real_time_while_paused(tmp_path: Path) -> None:
    counter = Counter()
    session = JobSession(
        total_steps=10,
        save=counter.save,
        load=counter.load,
        env=make_env(tmp_path / "s"),
        gpu_lookup=no_gpus,
    )
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGTERM))
    with pytest.raises(Terminated), session:
        raise_signal(signal.SIGUSR2)
        timer.start()
        started = time.monotonic()
        try:
            session.step_done()  # pauses (lease 600 s) until SIGTERM
        finally:
            waited = time.monotonic() - started
    assert 0.25 < waited < 1.5


def test_sigterm_during_training_stops_at_the_step_boundary(tmp_path: Path) -> None:
    clock, counter = FakeClock(), Counter()
    session = session_for(tmp_path, counter, clock)
    with pytest.raises(Terminated), session:
        while not session.finished:
            counter.seen.append(session.step)
            if session.step == 5:
                raise_signal(signal.SIGTERM)
            session.step_done()
    assert counter.seen == list(range(6)) and counter.saves == 0


def test_signal_while_paused_is_acknowledged_again(tmp_path: Path) -> None:
    clock, counter = FakeClock(), Counter()
    acks: list[float] = []

    def during_pause(n: int) -> None:
        ack = read_ack(tmp_path / "state")
        acks.append(ack.written_at if ack else 0.0)
        if n == 3:
            raise_signal(signal.SIGUSR2)  # the controller restarted and signals again
        if n == 6:
            raise_signal(signal.SIGTERM)

    clock.on_sleep = during_pause
    session = session_for(tmp_path, counter, clock)
    with pytest.raises(Terminated), session:
        raise_signal(signal.SIGUSR2)
        session.step_done()
    assert acks[0] == acks[2] < acks[3], "a second, newer ack after the second signal"
    assert counter.saves == 1 and session.acks == 2


def test_resume_from_newest_checkpoint(tmp_path: Path) -> None:
    clock, first = FakeClock(), Counter()
    session = session_for(tmp_path, first, clock, checkpoint_every_steps=4)
    with pytest.raises(Terminated), session:
        while True:
            first.seen.append(session.step)
            if session.step == 9:
                raise_signal(signal.SIGTERM)
            session.step_done()
    second = Counter()
    resumed = session_for(tmp_path, second, clock, env={"restart_count": 1})
    with resumed:
        assert resumed.step == 8 and resumed.resumed_from is not None
        assert resumed.resumed_from.name == "ckpt-8" and second.seen == list(range(8))
        while not resumed.finished:
            second.seen.append(resumed.step)
            resumed.step_done()
    assert second.seen == list(range(10))


def test_periodic_checkpoints_by_steps_and_by_time(tmp_path: Path) -> None:
    clock, counter = FakeClock(), Counter()
    session = session_for(tmp_path, counter, clock, total=20, checkpoint_every_steps=5, keep=10)
    with session:
        while not session.finished:
            session.step_done()
    names = sorted(p.name for p in (tmp_path / "state").glob("ckpt-*"))
    assert names == ["ckpt-10", "ckpt-15", "ckpt-5"], "none at the last step: the job is done"

    timed, counter = tmp_path / "timed", Counter()
    session = session_for(
        timed, counter, clock, total=20, checkpoint_every_s=10.0, checkpoint_every_steps=0, keep=10
    )
    with session:
        while not session.finished:
            clock.advance(3.0)
            session.step_done()
    names = sorted(int(p.name[5:]) for p in (timed / "state").glob("ckpt-*"))
    assert names == [4, 8, 12, 16]


def test_signal_at_the_last_step_finishes_without_pausing(tmp_path: Path) -> None:
    clock, counter = FakeClock(), Counter()
    session = session_for(tmp_path, counter, clock, total=3)
    with session:
        while not session.finished:
            if session.step == 2:
                raise_signal(signal.SIGUSR2)
            session.step_done()
    assert clock.sleeps == 0 and read_ack(tmp_path / "state") is None


def test_failed_checkpoint_means_no_ack_and_training_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()

    def broken(writer: CheckpointWriter) -> None:
        raise OSError(28, "No space left on device")

    session = JobSession(
        total_steps=5,
        save=broken,
        env=make_env(tmp_path / "s"),
        gpu_lookup=no_gpus,
        clock=clock.monotonic,
        wall=clock.wall,
        sleep=clock.sleep,
    )
    with caplog.at_level(logging.ERROR), session:
        while not session.finished:
            if session.step == 1:
                raise_signal(signal.SIGUSR2)
            session.step_done()
    assert read_ack(tmp_path / "s") is None and clock.sleeps == 0
    assert "No space left on device" in caplog.text


def test_signal_handling_off(tmp_path: Path) -> None:
    clock, counter = FakeClock(), Counter()
    previous = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        session = session_for(tmp_path, counter, clock, env={"checkpoint_signal": None})
        with session:
            while not session.finished:
                if session.step == 2:
                    raise_signal(signal.SIGUSR2)
                session.step_done()
        assert read_ack(tmp_path / "state") is None
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_progress_json_during_the_run(tmp_path: Path) -> None:
    clock, counter = FakeClock(), Counter()
    session = session_for(tmp_path, counter, clock, total=None, progress_every_s=1.0)
    with session:
        for _ in range(30):
            clock.advance(0.25)
            session.step_done()
        payload = json.loads((tmp_path / "state" / "progress.json").read_text())
        assert payload["total_steps"] is None and payload["steps_per_s"] == pytest.approx(4.0)
        assert 26 <= payload["step"] <= 30


def test_request_left_before_the_handler_existed_is_answered_at_start(tmp_path: Path) -> None:
    """The controller wrote checkpoint_request.json and signalled while the job was still
    importing (the template ignored the signal): the wrapper answers it once started."""
    clock, first = FakeClock(), Counter()
    session = session_for(tmp_path, first, clock, checkpoint_every_steps=4)
    with session:
        for _ in range(6):
            first.seen.append(session.step)
            session.step_done()
    state = tmp_path / "state"
    # A request for another run (an earlier restart) is stale and ignored.
    (state / "checkpoint_request.json").write_text(
        json.dumps({"job_id": "42", "restart_count": 0, "requested_at": 1.0})
    )
    clock.on_sleep = lambda n: raise_signal(signal.SIGTERM) if n == 2 else None
    second = Counter()
    resumed = session_for(tmp_path, second, clock, env={"restart_count": 1})
    with resumed:
        assert read_ack(state) is None, "a stale request is not answered"
    (state / "checkpoint_request.json").write_text(
        json.dumps({"job_id": "42", "restart_count": 2, "requested_at": 2.0})
    )
    third = Counter()
    again = session_for(tmp_path, third, clock, env={"restart_count": 2})
    with pytest.raises(Terminated):
        again.start()  # acks the checkpoint it resumed from and pauses until SIGTERM
    ack = read_ack(state)
    assert ack is not None and (ack.restart_count, ack.step, ack.checkpoint) == (2, 4, "ckpt-4")
    assert third.saves == 0 and clock.sleeps == 2, "no step trained, no new checkpoint"


def test_a_one_process_program_in_a_multi_rank_step_trains_once(tmp_path: Path) -> None:
    # srun starts one task per GPU; a program that joins no process group must not train (and
    # write the state folder) once per task: rank 0 trains, the others leave at once.
    other = session_for(tmp_path, Counter(), FakeClock(), env={"rank": 1, "world_size": 2})
    with pytest.raises(SystemExit) as left:
        other.start()
    assert left.value.code == 0
    assert not (tmp_path / "state").exists(), "rank 1 touched nothing"
    counter = Counter()
    first = session_for(tmp_path, counter, FakeClock(), total=3, env={"world_size": 2})
    with first:
        while not first.finished:
            counter.seen.append(first.step)
            first.step_done()
    assert counter.seen == [0, 1, 2]
