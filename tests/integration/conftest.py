"""Fixtures for tests against the real dev cluster: a backend, job submission that cleans up
after itself, and polling with a timeout (never sleep-then-assert)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from slurm_hetsched.errors import SlurmError
from slurm_hetsched.slurm import CliSlurmBackend, JobOptions, SlurmCli, SlurmJob

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None], what: str, timeout_s: float = 60.0, every_s: float = 0.25
) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` after the timeout."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every_s)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="session")
def backend(slurm_conf: str) -> CliSlurmBackend:
    return CliSlurmBackend(SlurmCli(slurm_conf=slurm_conf, timeout_s=30))


class Submitter:
    """Submits jobs for one test and cancels all of them afterwards."""

    def __init__(self, backend: CliSlurmBackend, folder: Path) -> None:
        self.backend = backend
        self.folder = folder
        self.job_ids: list[str] = []

    def __call__(self, script: str, *components: JobOptions) -> str:
        options = components or (JobOptions(),)
        # Every job writes its output next to the test's files.
        first = options[0]
        if first.output is None:
            output = str(self.folder / "slurm-%j.out")
            options = (dataclasses.replace(first, output=output), *options[1:])
        job_id = self.backend.submit(script, options)
        self.job_ids.append(job_id)
        return job_id

    def job(self, job_id: str) -> SlurmJob:
        return self.backend.job(job_id)

    def wait_state(self, job_id: str, state: str, timeout_s: float = 60.0) -> SlurmJob:
        def probe() -> SlurmJob | None:
            job = self.job(job_id)
            return job if job.state.value == state else None

        return wait_for(probe, f"job {job_id} to be {state}", timeout_s)

    def cancel_all(self) -> None:
        for job_id in self.job_ids:
            try:
                self.backend.cancel(job_id)
            except SlurmError:
                pass  # already finished and gone


@pytest.fixture
def submit(backend: CliSlurmBackend, tmp_path: Path) -> Iterator[Submitter]:
    submitter = Submitter(backend, tmp_path)
    yield submitter
    submitter.cancel_all()


def read_when(path: Path, needle: str, timeout_s: float = 60.0) -> str:
    """The text of `path` once it contains `needle`."""

    def probe() -> str | None:
        try:
            text = path.read_text()
        except OSError:
            return None
        return text if needle in text else None

    return wait_for(probe, f"{needle!r} in {path}", timeout_s)
