"""Fakes shared by the unit tests of `hetsched profile`: nodes, job records, and a backend
whose jobs "run" by writing the progress report a wrapper would have written."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from slurm_hetsched.errors import InvalidRequestError, UnknownJobError
from slurm_hetsched.profiling.plan import ProfileRequest
from slurm_hetsched.slurm import JobOptions, JobState, SlurmJob, SlurmNode

COMMAND = ("python", "train.py", "--steps", "{steps}")


def node(
    name: str, gpus: dict[str, int], *, state: str = "IDLE", flags: tuple[str, ...] = ()
) -> SlurmNode:
    return SlurmNode(
        name=name,
        state=state,
        state_flags=flags,
        gpus=gpus,
        gpus_used={},
        features=tuple(gpus),
        active_features=tuple(gpus),
        partitions=("gpu",),
        reason="",
        cpus=8,
        alloc_cpus=0,
    )


NODES = [node("n1", {"v100": 2}), node("n2", {"p100": 2}), node("n3", {"k80": 4})]


def job_record(job_id: str, state: JobState, reason: str = "None") -> SlurmJob:
    return SlurmJob(
        job_id=job_id,
        name="hetsched-profile",
        user="root",
        user_id=0,
        account="",
        partition="gpu",
        state=state,
        state_flags=(),
        reason=reason,
        comment="",
        admin_comment="",
        restart_count=0,
        requeue=False,
        priority=1,
        tres_per_node="",
        gpus_per_node=None,
        features="",
        required_nodes="",
        excluded_nodes="",
        nodes="",
        batch_host="",
        gres_detail=(),
        submit_time=None,
        start_time=None,
    )


def request(tmp_path: Path, **overrides: Any) -> ProfileRequest:
    values: dict[str, Any] = {
        "job_class": "my-model",
        "command": COMMAND,
        "output": tmp_path / "profile.json",
        "steps": 200,
        "workdir": tmp_path,
    }
    values.update(overrides)
    return ProfileRequest(**values)


def progress(
    job_id: str, gpu_type: str, rate: float | None, status: str = "done"
) -> dict[str, Any]:
    return {
        "job_key": job_id,
        "job_id": job_id,
        "restart_count": 0,
        "step": 200 if status == "done" else 57,
        "total_steps": 200,
        "steps_per_s": rate,
        "gpu_type": gpu_type,
        "num_gpus": 1,
        "node": "n1",
        "status": status,
        "updated_at": 1.7e9,
    }


class FakeBackend:
    """Jobs start PENDING; after `polls_to_finish` polls each ends as `outcome(gpu_type)` says:
    (final state, progress report or None). Records submissions and cancellations."""

    def __init__(
        self,
        outcome: Callable[[str], tuple[JobState, dict[str, Any] | None]],
        *,
        nodes: Sequence[SlurmNode] = NODES,
        polls_to_finish: int = 1,
        refuse_gres: str | None = None,
    ) -> None:
        self.outcome = outcome
        self.nodes = list(nodes)
        self.polls_to_finish = polls_to_finish
        self.refuse_gres = refuse_gres
        self.submitted: list[tuple[str, str, JobOptions]] = []
        self.cancelled: list[str] = []
        self.states: dict[str, JobState] = {}
        self.polls = 0

    def list_nodes(self) -> list[SlurmNode]:
        return self.nodes

    def submit(self, script: str | Path, components: Sequence[JobOptions]) -> str:
        (options,) = components
        assert options.gpus is not None
        if options.gpus.gres() == self.refuse_gres:
            raise InvalidRequestError(
                ["sbatch"], 1, "Invalid generic resource (gres) specification"
            )
        job_id = str(100 + len(self.submitted))
        self.submitted.append((job_id, str(script), options))
        self.states[job_id] = JobState.PENDING
        return job_id

    def list_jobs(self, job_ids: Sequence[str] | None = None) -> list[SlurmJob]:
        self.polls += 1
        if self.polls >= self.polls_to_finish:
            for job_id, _, options in self.submitted:
                if self.states[job_id] is JobState.PENDING:
                    self._finish(job_id, options)
        return [job_record(j, self.states[j]) for j in job_ids or self.states]

    def job(self, job_id: str) -> SlurmJob:
        if job_id not in self.states:
            raise UnknownJobError(["squeue"], 1, "Invalid job id specified")
        return job_record(job_id, self.states[job_id])

    def cancel(self, job_id: str, *, signal: str | None = None) -> None:
        self.cancelled.append(job_id)
        self.states[job_id] = JobState.CANCELLED

    def _finish(self, job_id: str, options: JobOptions) -> None:
        assert options.gpus is not None and options.gpus.gpu_type is not None
        state, report = self.outcome(options.gpus.gpu_type)
        self.states[job_id] = state
        assert options.export is not None and options.output is not None
        Path(options.output.replace("%j", job_id)).write_text(f"job {job_id} said goodbye\n")
        if report is not None:
            folder = Path(options.export["HETSCHED_PROFILE_STATE_DIR"])
            folder.mkdir(mode=0o700, exist_ok=True)
            report = dict(report, job_id=job_id, job_key=job_id)
            (folder / "progress.json").write_text(json.dumps(report))


class FakeClocks:
    """Clocks that move only when slept on."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1.7e9 + self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def uid_folder(tmp_path: Path) -> Path:
    return tmp_path / str(os.geteuid())
