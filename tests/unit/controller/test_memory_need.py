"""A managed job's GPU memory need as the controller sees it: the spec's `mem=` and the peak
its progress report measured (`peak_mem_gib`, checked like every figure a user's file holds),
the larger of the two reaching the snapshot (`Job.mem_gib`)."""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import UTC
from pathlib import Path
from typing import Any, cast

import pytest
from controller_builders import RESNET, managed, running, slurm_job
from test_controller_statefiles import NOW, progress_payload

from slurm_hetsched.controller.managed import ManagedJob, Progress
from slurm_hetsched.controller.observer import ObserveSettings, SlurmObserver
from slurm_hetsched.controller.snapshot import snapshot_job
from slurm_hetsched.controller.statefiles import JobFolder, read_progress
from slurm_hetsched.core.jobspec import MEM_GIB_MAX, parse_job_spec

ME = os.geteuid()


def report(**changes: Any) -> dict[str, Any]:
    """The statefiles tests' valid report, with a measured peak."""
    return progress_payload(**{"peak_mem_gib": 9.5, **changes})


@pytest.fixture
def folder(tmp_path: Path) -> JobFolder:
    root = tmp_path / "root"
    root.mkdir(mode=0o711)
    return JobFolder(root, ME, "k1")


def write(folder: JobFolder, payload: dict[str, Any]) -> None:
    folder.path.mkdir(parents=True, exist_ok=True)
    (folder.path / "progress.json").write_text(json.dumps(payload))


def read(folder: JobFolder) -> dict[str, Any] | None:
    return read_progress(folder, job_ids={"123", "k1"}, now_s=NOW, max_age_s=600.0)


# ----------------------------------------------------------------------------------------------
# progress.json: peak_mem_gib


@pytest.mark.parametrize("peak", [None, 1e-6, 9.5, 80, MEM_GIB_MAX])
def test_a_plausible_peak_or_none_is_read(folder: JobFolder, peak: float | None) -> None:
    write(folder, report(peak_mem_gib=peak))
    payload = read(folder)
    assert payload is not None and payload["peak_mem_gib"] == peak


def test_a_report_without_a_peak_is_read(folder: JobFolder) -> None:
    payload = report()
    del payload["peak_mem_gib"]
    write(folder, payload)
    assert read(folder) is not None


@pytest.mark.parametrize(
    "peak",
    [-1.0, 0, 0.0, float("nan"), float("inf"), MEM_GIB_MAX * 1.001, 1e300, "12", True, [12]],
    ids=repr,
)
def test_a_hostile_peak_is_ignored_without_an_exception(folder: JobFolder, peak: Any) -> None:
    write(folder, report(peak_mem_gib=peak))  # json.dumps writes NaN and Infinity, as a user may
    assert read(folder) is None


def test_the_observer_carries_the_peak_into_the_progress(folder: JobFolder) -> None:
    write(folder, report(peak_mem_gib=20.25))
    observer = SlurmObserver(
        cast(Any, None), cast(Any, None), ObserveSettings(state_root=folder.state_root)
    )
    job = managed(running("123", "n1", "v100", user_id=ME), key="k1")
    progress = observer._progress(job, NOW)
    assert progress is not None and progress.peak_mem_gib == 20.25
    write(folder, report(peak_mem_gib=None))
    progress = observer._progress(job, NOW)
    assert progress is not None and progress.peak_mem_gib is None


# ----------------------------------------------------------------------------------------------
# snapshot_job: the larger of the two


def with_spec(comment: str) -> ManagedJob:
    spec = parse_job_spec(comment, local_tz=UTC, now_s=NOW)
    return dataclasses.replace(managed(slurm_job("7", comment=comment), key="7"), spec=spec)


@pytest.mark.parametrize(
    ("mem", "peak", "need"),
    [
        (None, None, None),
        ("12.5", None, 12.5),
        ("40G", None, 40.0),
        (None, 9.5, 9.5),
        ("12", 30.0, 30.0),  # the job grew past its own estimate
        ("40GiB", 30.0, 40.0),  # the spec's margin over what it used so far stands
    ],
)
def test_the_need_is_the_larger_of_the_spec_and_the_measured_peak(
    mem: str | None, peak: float | None, need: float | None
) -> None:
    comment = f"hetsched:class={RESNET};steps=100" + (f";mem={mem}" if mem else "")
    job = with_spec(comment)
    progress = Progress(step=10, peak_mem_gib=peak)
    assert snapshot_job(job, progress, None, {}, ("k80", "v100"), NOW).mem_gib == need


def test_without_a_report_the_spec_alone_counts() -> None:
    job = with_spec(f"hetsched:class={RESNET};mem=14")
    assert snapshot_job(job, None, None, {}, ("v100",), NOW).mem_gib == 14.0


def _measured(job: ManagedJob) -> dict[str, float]:
    progress = Progress(step=10, steps_per_s=5.0, gpu_type="v100", restart_count=0)
    return dict(snapshot_job(job, progress, None, {}, ("k80", "v100"), NOW).measured_steps_per_s)


def test_only_a_run_on_one_type_at_the_jobs_own_count_is_a_measurement() -> None:
    """A heterogeneous run reports the gang's rate (its slowest type, spread) under rank 0's
    type; an elastic job grown past its smallest gang runs at another count than the row the
    measurement rescales. Neither is one type's figure at the job's count."""
    comment = f"hetsched:class={RESNET};steps=100"
    plain = with_spec(comment)
    plain = dataclasses.replace(plain, components=(running("7", "n1", "v100", gpus=1),))
    assert _measured(plain) == {"v100": 5.0}
    parts = (running("7", "n1", "v100", gpus=1), running("8", "n3", "k80", gpus=1))
    assert _measured(dataclasses.replace(plain, components=parts, num_gpus=2)) == {}
    elastic = with_spec(comment + ";gpus=1-2")
    on_one = dataclasses.replace(elastic, components=plain.components, num_gpus=1)
    assert _measured(on_one) == {"v100": 5.0}
    grown = (running("7", "n1", "v100", gpus=2),)
    assert _measured(dataclasses.replace(elastic, components=grown, num_gpus=2)) == {}
