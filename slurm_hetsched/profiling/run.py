"""Running a profile: submit one job per case, wait for them, read what each measured, write
the table.

Every job this run submitted and did not see end is cancelled when anything goes wrong on
the way (the timeout, Ctrl-C, a refused submission), so a profile leaves nothing queued.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, TextIO

from slurm_hetsched.errors import SlurmCommandError, SlurmError, UnknownJobError
from slurm_hetsched.profiling.plan import (
    JOB_SCRIPT,
    ProfileCase,
    ProfileError,
    ProfileRequest,
    job_options,
    plan_cases,
)
from slurm_hetsched.profiling.results import (
    Measurement,
    UnfinishedReport,
    format_results,
    output_tail,
    read_measurement,
)
from slurm_hetsched.profiling.table_file import load_existing, merged_table, write_table
from slurm_hetsched.slurm import JobOptions, JobState, SlurmJob, SlurmNode

logger = logging.getLogger(__name__)

DEFAULT_POLL_S = 2.0
# A job's last progress report can reach a shared filesystem's readers a little after Slurm
# says the job completed (NFS attribute caching): re-read it this long before giving up.
REPORT_GRACE_S = 10.0


class ProfileBackend(Protocol):
    """What a profile needs of the Slurm backend (`CliSlurmBackend` has it)."""

    def list_nodes(self) -> list[SlurmNode]: ...

    def submit(self, script: str | Path, components: Sequence[JobOptions]) -> str: ...

    def list_jobs(self, job_ids: Sequence[str] | None = None) -> list[SlurmJob]: ...

    def job(self, job_id: str) -> SlurmJob: ...

    def cancel(self, job_id: str, *, signal: str | None = None) -> None: ...


@dataclass(frozen=True, slots=True)
class Clocks:
    """Time for the waits; injected by tests."""

    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep


def run_profile(
    request: ProfileRequest,
    backend: ProfileBackend,
    *,
    out: TextIO,
    clocks: Clocks | None = None,
    poll_s: float = DEFAULT_POLL_S,
) -> list[Measurement]:
    """Measure `request.job_class` on every case and write the table to `request.output`.

    Returns:
        the measurements written.

    Raises:
        ProfileError: Slurm cannot be asked or refused a job, the timeout passed, or a job
            measured nothing (the others are written first; the message names each failed
            job with its output file). Every job not seen ending is cancelled first, on
            KeyboardInterrupt too.
    """
    clocks = clocks or Clocks()
    existing = load_existing(request.output)  # a bad --output fails before any job runs
    try:
        nodes = backend.list_nodes()
    except SlurmError as exc:
        raise ProfileError(
            f"cannot ask Slurm for the cluster's nodes: {exc}\n(is Slurm's client installed and "
            'SLURM_CONF set? on the dev cluster: eval "$(hetsched devcluster env)")'
        ) from exc
    cases, notes = plan_cases(nodes, request)
    for note in notes:
        print(note, file=out)
    run_dir = _make_run_dir(request.workdir)
    state_root = run_dir / "state"
    uid = os.geteuid()  # the jobs run as the user who submits them
    state_root.mkdir(mode=0o700)
    (state_root / str(uid)).mkdir(mode=0o700)
    print(f"run folder (job outputs, state folders): {run_dir}", file=out)
    submitted: dict[str, ProfileCase] = {}
    ended: dict[str, SlurmJob | None] = {}
    try:
        for case in cases:
            options = job_options(
                case,
                request,
                state_dir=state_root / str(uid) / case.name,
                output=run_dir / f"{case.name}-%j.out",
                chdir=Path.cwd(),
            )
            try:
                job_id = backend.submit(JOB_SCRIPT, [options])
            except SlurmError as exc:
                raise ProfileError(
                    f"Slurm refused the profile job for {case.gpu_type} x{case.num_gpus}: {exc}"
                ) from exc
            submitted[job_id] = case
            print(f"submitted job {job_id}: {case.gpu_type} x{case.num_gpus}", file=out, flush=True)
        wait_for_jobs(backend, submitted, ended, request.timeout_s, clocks, poll_s)
    except BaseException:
        cancel_jobs(backend, [j for j in submitted if j not in ended], out)
        raise
    measurements, failures = _collect(submitted, ended, run_dir, state_root, uid, clocks)
    if measurements:
        existing = load_existing(request.output)  # again: it may have changed meanwhile
        data = merged_table(
            existing,
            request.job_class,
            measurements,
            source=f"measured with hetsched profile, {datetime.now(UTC):%Y-%m-%d}",
        )
        write_table(request.output, data, request.job_class, measurements)
        print(format_results(request.job_class, measurements), file=out)
        verb = "merged into" if existing is not None else "wrote"
        print(f"{verb} {request.output} ({len(measurements)} entries)", file=out)
    if failures:
        raise ProfileError(
            f"{len(failures)} of {len(submitted)} profile jobs measured nothing:\n"
            + "\n".join(failures)
        )
    return measurements


def wait_for_jobs(
    backend: ProfileBackend,
    jobs: Mapping[str, ProfileCase],
    ended: dict[str, SlurmJob | None],
    timeout_s: float,
    clocks: Clocks,
    poll_s: float,
) -> None:
    """Poll Slurm until every job in `jobs` has ended, filling `ended` (job id -> its last
    record; None once Slurm forgot it).

    Raises:
        ProfileError: `timeout_s` passed first; the message shows where each job waits.
    """
    deadline = clocks.monotonic() + timeout_s
    last: dict[str, SlurmJob] = {}
    while True:
        waiting = [j for j in jobs if j not in ended]
        if not waiting:
            return
        records = _job_records(backend, waiting)
        if records is not None:
            for job_id in waiting:
                record = records.get(job_id)
                if record is None or not record.state.is_active:
                    ended[job_id] = record
                else:
                    last[job_id] = record
        if all(j in ended for j in jobs):
            return
        if clocks.monotonic() >= deadline:
            where = "; ".join(
                f"job {j} ({jobs[j].gpu_type} x{jobs[j].num_gpus}) {_where(last.get(j))}"
                for j in jobs
                if j not in ended
            )
            raise ProfileError(
                f"timed out after {timeout_s:g} s (--timeout); cancelled the jobs still "
                f"queued or running: {where}"
            )
        clocks.sleep(poll_s)


def cancel_jobs(backend: ProfileBackend, job_ids: Sequence[str], out: TextIO) -> None:
    """Cancel each job; one that has ended meanwhile is no error."""
    for job_id in job_ids:
        try:
            backend.cancel(job_id)
        except SlurmError as exc:
            logger.info("cancelling job %s: %s", job_id, exc)
    if job_ids:
        print(f"cancelled profile jobs {', '.join(job_ids)}", file=out, flush=True)


def _job_records(backend: ProfileBackend, job_ids: Sequence[str]) -> dict[str, SlurmJob] | None:
    """The jobs Slurm still knows, by id; None when Slurm did not answer this time."""
    try:
        return {job.job_id: job for job in backend.list_jobs(job_ids)}
    except UnknownJobError:
        # Some Slurm versions refuse the whole list for one id they forgot: ask one by one.
        found: dict[str, SlurmJob] = {}
        for job_id in job_ids:
            try:
                found[job_id] = backend.job(job_id)
            except UnknownJobError:
                pass
            except SlurmCommandError as exc:
                logger.warning("asking Slurm about job %s: %s", job_id, exc)
                return None
        return found
    except SlurmCommandError as exc:  # slurmctld busy or restarting: ask again next time
        logger.warning("asking Slurm about the profile jobs: %s", exc)
        return None


def _collect(
    submitted: Mapping[str, ProfileCase],
    ended: Mapping[str, SlurmJob | None],
    run_dir: Path,
    state_root: Path,
    uid: int,
    clocks: Clocks,
) -> tuple[list[Measurement], list[str]]:
    """Each ended job's measurement, or a line saying why it has none."""
    measurements: list[Measurement] = []
    failures: list[str] = []
    for job_id, case in submitted.items():
        record = ended.get(job_id)
        state = record.state if record is not None else None
        grace_until = clocks.monotonic() + (REPORT_GRACE_S if state is JobState.COMPLETED else 0)
        while True:
            try:
                measurements.append(
                    read_measurement(state_root, uid, case, job_id, now_s=clocks.wall())
                )
                break
            except ProfileError as exc:
                if isinstance(exc, UnfinishedReport) and clocks.monotonic() < grace_until:
                    clocks.sleep(1.0)
                    continue
                output = run_dir / f"{case.name}-{job_id}.out"
                ended_as = state.value if state is not None else "gone from the queue"
                tail = output_tail(output)
                failures.append(
                    f"- {case.gpu_type} x{case.num_gpus} (job {job_id}, {ended_as}): {exc}\n"
                    f"  output: {output}" + (f"\n{tail}" if tail else "")
                )
                break
    for m in measurements:
        if m.reported_gpu_type not in (None, "unknown", m.case.gpu_type):
            logger.warning(
                "job %s asked for %s GPUs but its wrapper saw %s: check the node's GRES",
                m.job_id,
                m.case.gpu_type,
                m.reported_gpu_type,
            )
    return measurements, failures


def _where(record: SlurmJob | None) -> str:
    if record is None:
        return "(state unknown)"
    reason = f" ({record.reason})" if record.reason and record.reason != "None" else ""
    return f"{record.state.value}{reason}"


def _make_run_dir(workdir: Path) -> Path:
    try:
        return Path(tempfile.mkdtemp(prefix="hetsched-profile-", dir=workdir)).resolve()
    except OSError as exc:
        raise ProfileError(f"--workdir {workdir}: cannot make the run folder: {exc}") from exc
