"""Running a profile against a fake Slurm: submit, wait, read, write; and every job it
submitted cancelled on a timeout, Ctrl-C or a refused submission."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from profile_fakes import FakeBackend, FakeClocks, progress, request

from slurm_hetsched.errors import SlurmNotFoundError
from slurm_hetsched.profiling.plan import JOB_SCRIPT, ProfileError
from slurm_hetsched.profiling.run import Clocks, run_profile
from slurm_hetsched.slurm import JobState

SPEEDS = {"v100": 30.0, "p100": 20.0, "k80": 10.0}


def finished(gpu_type: str) -> tuple[JobState, dict[str, Any] | None]:
    return JobState.COMPLETED, progress("?", gpu_type, SPEEDS[gpu_type])


def clocks(fake: FakeClocks) -> Clocks:
    return Clocks(monotonic=fake.monotonic, wall=fake.wall, sleep=fake.sleep)


def test_one_job_per_type_measured_and_written(tmp_path: Path) -> None:
    backend = FakeBackend(finished, polls_to_finish=3)
    out = io.StringIO()
    measurements = run_profile(
        request(tmp_path),
        backend,
        out=out,
        clocks=clocks(FakeClocks()),
    )
    assert sorted((m.case.gpu_type, m.steps_per_s) for m in measurements) == sorted(SPEEDS.items())
    assert all(script == JOB_SCRIPT for _, script, _ in backend.submitted)
    written = json.loads((tmp_path / "profile.json").read_text())
    assert written["throughputs"] == {"my-model": {"1": SPEEDS}}
    text = out.getvalue()
    assert "p100  1     20       0.667" in text and "wrote " in text
    assert not backend.cancelled


def test_a_failed_job_is_named_with_its_output_and_the_others_are_written(
    tmp_path: Path,
) -> None:
    def k80_fails(gpu_type: str) -> tuple[JobState, dict[str, Any] | None]:
        if gpu_type == "k80":
            return JobState.FAILED, progress("?", "k80", 1.0, status="failed")
        return finished(gpu_type)

    backend = FakeBackend(k80_fails)
    with pytest.raises(ProfileError) as raised:
        run_profile(request(tmp_path), backend, out=io.StringIO(), clocks=clocks(FakeClocks()))
    message = str(raised.value)
    assert "1 of 3 profile jobs measured nothing" in message
    assert "k80 x1 (job 100, FAILED): its last progress report says 'failed'" in message
    assert "\n  output: " in message and "k80x1-100.out" in message
    assert "| job 100 said goodbye" in message
    written = json.loads((tmp_path / "profile.json").read_text())
    assert written["throughputs"] == {"my-model": {"1": {"p100": 20.0, "v100": 30.0}}}


def test_a_job_without_a_report_is_a_failure(tmp_path: Path) -> None:
    backend = FakeBackend(lambda gpu_type: (JobState.COMPLETED, None))
    fake = FakeClocks()
    with pytest.raises(ProfileError, match="no usable progress report"):
        run_profile(
            request(tmp_path, gpu_types=("v100",)), backend, out=io.StringIO(), clocks=clocks(fake)
        )
    assert fake.now >= 10.0  # waited for a report a shared filesystem might show late
    assert not (tmp_path / "profile.json").exists()


def test_a_finished_run_without_a_rate_is_not_waited_for(tmp_path: Path) -> None:
    backend = FakeBackend(lambda gpu_type: (JobState.COMPLETED, progress("?", gpu_type, None)))
    fake = FakeClocks()
    with pytest.raises(ProfileError, match="raise --steps"):
        run_profile(
            request(tmp_path, gpu_types=("v100",)), backend, out=io.StringIO(), clocks=clocks(fake)
        )
    assert fake.now < 10.0


def test_the_timeout_cancels_every_job(tmp_path: Path) -> None:
    backend = FakeBackend(finished, polls_to_finish=10**6)
    out = io.StringIO()
    with pytest.raises(ProfileError, match=r"timed out after 60 s.*PENDING"):
        run_profile(
            request(tmp_path, timeout_s=60.0), backend, out=out, clocks=clocks(FakeClocks())
        )
    assert sorted(backend.cancelled) == ["100", "101", "102"]
    assert "cancelled profile jobs" in out.getvalue()


def test_ctrl_c_cancels_every_job(tmp_path: Path) -> None:
    backend = FakeBackend(finished, polls_to_finish=10**6)

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_profile(
            request(tmp_path),
            backend,
            out=io.StringIO(),
            clocks=Clocks(sleep=interrupted),
        )
    assert sorted(backend.cancelled) == ["100", "101", "102"]


def test_a_refused_submission_cancels_the_jobs_already_submitted(tmp_path: Path) -> None:
    backend = FakeBackend(finished, refuse_gres="gpu:v100:1")
    with pytest.raises(ProfileError, match=r"Slurm refused the profile job for v100 x1: .*gres"):
        run_profile(request(tmp_path), backend, out=io.StringIO(), clocks=clocks(FakeClocks()))
    assert sorted(backend.cancelled) == ["100", "101"]


def test_a_bad_output_fails_before_anything_is_submitted(tmp_path: Path) -> None:
    (tmp_path / "profile.json").write_text('{"v100": {}}')
    backend = FakeBackend(finished)
    with pytest.raises(ProfileError, match="Gavel's format"):
        run_profile(request(tmp_path), backend, out=io.StringIO())
    assert not backend.submitted


def test_no_slurm_is_a_clear_error(tmp_path: Path) -> None:
    class NoSlurm(FakeBackend):
        def list_nodes(self) -> Any:
            raise SlurmNotFoundError("sinfo not found: install Slurm's client tools")

    with pytest.raises(ProfileError, match="cannot ask Slurm for the cluster's nodes: sinfo"):
        run_profile(request(tmp_path), NoSlurm(finished), out=io.StringIO())
