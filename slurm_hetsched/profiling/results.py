"""What a finished profile job measured, and the results as a small table.

A job's rate is the `steps_per_s` of the final progress report the wrapper writes when
training ends (status `done`): steps over training time, by the job's own monotonic clock,
over its last 60 s (docs/job-side.md). That leaves out queueing, start-up and Slurm's
bookkeeping, which the wall-clock time of the job would include.

The state folder is written by the job, and the profile may run as root, so it is read with
the controller's safe readers (controller/statefiles.py): no links followed, the user's own
regular files only, sizes and figures bounded.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetsched.controller.statefiles import JobFolder, read_progress
from slurm_hetsched.profiling.plan import ProfileCase, ProfileError

_TAIL_BYTES = 4096
_TAIL_LINES = 8


class UnfinishedReport(ProfileError):
    """No final progress report: none, or one of a run still under way (which a shared
    filesystem can show for a moment after the job ended)."""


@dataclass(frozen=True, slots=True)
class Measurement:
    """One profile job's result.

    Attributes:
        case: the GPU type and count the job asked Slurm for.
        job_id: Slurm's job id.
        steps_per_s: the rate the wrapper measured (> 0).
        steps: the steps the job trained.
        reported_gpu_type: the GPU type the wrapper saw (`unknown` where the node has several).
    """

    case: ProfileCase
    job_id: str
    steps_per_s: float
    steps: int
    reported_gpu_type: str | None


def measurement_from_progress(
    case: ProfileCase, job_id: str, payload: Mapping[str, Any] | None
) -> Measurement:
    """The measurement in a job's final progress report.

    Raises:
        UnfinishedReport: no report, or a report of a run that did not finish;
        ProfileError: a finished run without a usable rate. The message says what to do.
    """
    if payload is None:
        raise UnfinishedReport(
            "no usable progress report (progress.json) in its state folder: does the command "
            "train through the wrapper (JobSession or TorchTrainer, docs/job-side.md)?"
        )
    status, step = payload.get("status"), payload.get("step")
    if status != "done":
        raise UnfinishedReport(
            f"its last progress report says {status!r} at step {step} of "
            f"{payload.get('total_steps')}, not 'done'"
        )
    rate = payload.get("steps_per_s")
    if rate is None:
        raise ProfileError(
            f"it trained {step} steps in under a second, too briefly to measure a rate: "
            "raise --steps"
        )
    if not (isinstance(rate, int | float) and math.isfinite(rate) and rate > 0):
        raise ProfileError(f"it reported {rate!r} steps/s: a class that cannot run there?")
    gpu_type = payload.get("gpu_type")
    return Measurement(
        case=case,
        job_id=job_id,
        steps_per_s=float(rate),
        steps=int(step) if isinstance(step, int) else 0,
        reported_gpu_type=str(gpu_type)[:64] if gpu_type is not None else None,
    )


def read_measurement(
    state_root: Path, uid: int, case: ProfileCase, job_id: str, *, now_s: float
) -> Measurement:
    """The measurement of job `job_id`, from `<state_root>/<uid>/<case.name>/progress.json`.

    Raises:
        ProfileError: see `measurement_from_progress`.
    """
    folder = JobFolder(state_root=state_root, uid=uid, key=case.name)
    payload = read_progress(folder, job_ids={job_id}, now_s=now_s, max_age_s=math.inf)
    return measurement_from_progress(case, job_id, payload)


def format_results(job_class: str, measurements: Sequence[Measurement]) -> str:
    """A small table: type, GPUs, steps/s, ratio to the fastest type at the same count."""
    fastest: dict[int, float] = {}
    for m in measurements:
        fastest[m.case.num_gpus] = max(fastest.get(m.case.num_gpus, 0.0), m.steps_per_s)
    rows = [("TYPE", "GPUS", "STEPS/S", "RATIO", "JOB")]
    for m in sorted(measurements, key=lambda m: (m.case.num_gpus, -m.steps_per_s)):
        ratio = m.steps_per_s / fastest[m.case.num_gpus]
        rows.append(
            (
                m.case.gpu_type,
                str(m.case.num_gpus),
                f"{m.steps_per_s:.4g}",
                f"{ratio:.3f}",
                m.job_id,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    header = (
        f"class {job_class!r}: steps/s as each job's wrapper measured it; ratio to the fastest "
        "type at the same GPU count"
    )
    return "\n".join([header, *(line.rstrip() for line in lines)])


def output_tail(path: Path) -> str:
    """The last lines of a job's output file (for a failure message), or '' if unreadable.

    Opened without following links and only if it is a regular file: a job may have put
    anything there.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return ""
        os.lseek(fd, max(0, info.st_size - _TAIL_BYTES), os.SEEK_SET)
        data = os.read(fd, _TAIL_BYTES)
    except OSError:
        return ""
    finally:
        os.close(fd)
    lines = data.decode("utf-8", errors="replace").splitlines()[-_TAIL_LINES:]
    # Control characters (terminal escapes) are shown as '?'.
    shown = ("".join(c if c.isprintable() else "?" for c in line) for line in lines)
    return "\n".join(f"    | {line}" for line in shown)
