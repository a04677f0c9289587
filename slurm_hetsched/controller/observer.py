"""Reading the live cluster, and nothing else: Slurm's queue and nodes, each managed job's
trusted progress report and restart cost, in the controller's terms (controller/jobview.py).

`SlurmObserver` never writes: `hetsched status`, dry runs and the live controller all observe
through it; only the live cluster (controller/live.py) keeps what an observation changed. Its
`SlurmObservation` is what the tick decides on plus the view it came from, handed back to the
enactor as a value.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any, Protocol

from slurm_hetsched.controller.enact_work import runs_on, starting_on
from slurm_hetsched.controller.jobview import (
    DEFAULT_KEY_RELEASE_S,
    ManagedJob,
    Progress,
    SetAside,
    SlurmView,
    build_view,
)
from slurm_hetsched.controller.keys import KeyBinding
from slurm_hetsched.controller.restarts import RestartTracker
from slurm_hetsched.controller.statefiles import JobFolder, read_progress
from slurm_hetsched.core.model import Placement
from slurm_hetsched.core.ports import Observation, RoundRecord
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.errors import SlurmError
from slurm_hetsched.rounds.clocks import SYSTEM_CLOCK
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.records import JobState

logger = logging.getLogger(__name__)


class SlurmUnavailableError(SlurmError):
    """slurmctld did not answer (after retries): the round is skipped, nothing was changed."""


@dataclass(frozen=True, slots=True)
class ObserveSettings:
    """What to observe and how far to trust it.

    Attributes:
        state_root: the folder holding one state folder per job key.
        local_tz: the time zone of a `due=` without an offset (None: the host's).
        partitions: manage only these partitions' jobs and nodes (empty: all).
        qos: manage only jobs of these QOS (empty: any).
        progress_max_age_s: a progress report older than this is ignored.
        release_rejected: hand held jobs with a bad spec back to Slurm.
        key_release_s: a job key stays bound to its user this long after its last job left
            Slurm.
    """

    state_root: Path
    local_tz: tzinfo | None = None
    partitions: tuple[str, ...] = ()
    qos: tuple[str, ...] = ()
    progress_max_age_s: float = 600.0
    release_rejected: bool = True
    key_release_s: float = DEFAULT_KEY_RELEASE_S


class RegistryReader(Protocol):
    """Where job key bindings and set-aside jobs are read from (store/sqlite.py)."""

    def key_bindings(self) -> list[dict[str, Any]]: ...

    def set_aside(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmObservation(Observation):
    """The tick's observation plus the Slurm view it was made from (what the enactor acts on),
    and the registry's content when it was read (so only a change is written back)."""

    view: SlurmView
    stored_bindings: Mapping[str, KeyBinding] = field(default_factory=dict)
    stored_aside: Mapping[str, SetAside] = field(default_factory=dict)


class SlurmObserver:
    """Reads Slurm (through the backend's commands) and the state folders; writes nothing."""

    def __init__(
        self,
        slurm: CliSlurmBackend,
        table: ThroughputTable,
        settings: ObserveSettings,
        *,
        registry: RegistryReader | None = None,
        restarts: RestartTracker | None = None,
        clock: Callable[[], float] = SYSTEM_CLOCK.now,
    ) -> None:
        self.slurm = slurm
        self.table = table
        self.settings = settings
        self.registry = registry
        # None: no restart costs (every job gets the mechanism's default).
        self.restarts = restarts
        self.clock = clock

    def read_view(self, last: RoundRecord | None) -> SlurmView:
        """Slurm now, in the controller's terms, remembering from `last` (the last round)
        arrivals and measured rates; with each job's restart cost in the snapshot (raises
        SlurmUnavailableError)."""
        return self._read(last)[0]

    def observe(self, last: RoundRecord | None) -> SlurmObservation:
        """The round's observation after `last`: the view, and what ran since `last`."""
        view, bindings, aside = self._read(last)
        ran_s: dict[str, float] = {}
        finished: tuple[str, ...] = ()
        not_running: tuple[str, ...] = ()
        if last is not None:
            not_running = _not_running(view, last.state.placements)
            for key in last.state.placements:
                job = view.managed.get(key)
                if job is not None and job.running and job.leader.start_time is not None:
                    ran_s[key] = max(0.0, view.now_s - max(last.now_s, job.leader.start_time))
            finished = tuple(sorted(set(last.allocation.job_ids) - set(view.managed)))
        return SlurmObservation(
            snapshot=view.snapshot,
            ran_s=ran_s,
            finished=finished,
            not_running=not_running,
            view=view,
            stored_bindings=bindings,
            stored_aside=aside,
        )

    def _read(
        self, last: RoundRecord | None
    ) -> tuple[SlurmView, dict[str, KeyBinding], dict[str, SetAside]]:
        try:
            jobs = self.slurm.list_jobs()
            nodes = self.slurm.list_nodes()
        except SlurmError as exc:
            raise SlurmUnavailableError(f"cannot read Slurm's queue and nodes: {exc}") from exc
        now_s = self.clock()
        arrivals: dict[str, float] = {}
        measured: dict[str, Mapping[str, float]] = {}
        if last is not None and last.snapshot is not None:
            arrivals = {job.key: job.arrival_s for job in last.snapshot.jobs}
            measured = {job.key: job.measured_steps_per_s for job in last.snapshot.jobs}
        tz = self.settings.local_tz or _local_tz()
        bindings: dict[str, KeyBinding] = {}
        aside: dict[str, SetAside] = {}
        if self.registry is not None:
            bindings = {row["key"]: KeyBinding(**row) for row in self.registry.key_bindings()}
            aside = {
                row["job"]: SetAside(row["comment"], row["reason"], row["round"])
                for row in self.registry.set_aside()
            }
        view = build_view(
            jobs,
            nodes,
            now_s=now_s,
            table=self.table,
            local_tz=tz,
            partitions=self.settings.partitions,
            qos=self.settings.qos,
            progress=lambda job: self._progress(job, now_s),
            arrivals=arrivals,
            measured=measured,
            key_bindings=bindings,
            key_release_s=self.settings.key_release_s,
            set_aside=aside,
        )
        return self._with_restart_costs(view), bindings, aside

    def _with_restart_costs(self, view: SlurmView) -> SlurmView:
        """The view whose snapshot carries each job's restart cost, after measuring the
        restarts it shows; a failure there leaves every job at the default, never the round."""
        if self.restarts is None:
            return view
        try:
            return self.restarts.observe(view)
        except Exception:
            logger.exception("cannot measure or estimate the jobs' restart costs this round")
            return view

    def _progress(self, job: ManagedJob, now_s: float) -> Progress | None:
        if job.leader.user_id is None:
            return None
        folder = JobFolder(self.settings.state_root, job.leader.user_id, job.job_key, copy=job.copy)
        payload = read_progress(
            folder,
            job_ids={job.slurm_id, job.job_key},
            now_s=now_s,
            max_age_s=self.settings.progress_max_age_s,
        )
        if payload is None:
            return None
        rate = payload.get("steps_per_s")
        gpu_type = payload.get("gpu_type")
        restart = payload.get("restart_count")
        status = payload.get("status")
        job_id = payload.get("job_id")
        peak = payload.get("peak_mem_gib")  # None or in bounds: read_progress checked it
        return Progress(
            step=int(payload["step"]),
            total_steps=payload.get("total_steps"),
            steps_per_s=float(rate) if rate is not None else None,
            gpu_type=gpu_type if isinstance(gpu_type, str) else None,
            restart_count=restart if isinstance(restart, int) else None,
            status=status if isinstance(status, str) else "running",
            job_id=str(job_id)[:64] if isinstance(job_id, str | int) else None,
            updated_at=float(payload["updated_at"]),  # finite: read_progress checked it
            peak_mem_gib=None if peak is None else float(peak),
        )


def _not_running(view: SlurmView, placements: Mapping[str, Placement]) -> tuple[str, ...]:
    """The placed jobs Slurm does not show on their placement: neither running there nor
    released to start there (requeued, a half-done move, pending after a slurmctld restart)."""
    out = []
    for key, placement in sorted(placements.items()):
        job = view.managed.get(key)
        if job is None:
            continue  # finished: the round forgets it anyway
        there = (job.running and runs_on(job, placement)) or (
            job.state is JobState.PENDING and starting_on(job, placement)
        )
        if not there:
            out.append(key)
    return tuple(out)


def _local_tz() -> tzinfo:
    tz = datetime.now().astimezone().tzinfo
    assert tz is not None
    return tz
