"""The live cluster behind the round tick: Slurm as a `ClusterBackend` (core/ports.py).

`observe` reads the queue and the nodes (plus each managed job's trusted progress report) and
returns the snapshot the tick decides on; `enact` carries the plan out (controller/enact.py),
keeps the jobs the round set aside, hands jobs with a bad spec back to Slurm, and updates the
admin comments that make the rounds visible in `squeue` (controller/round_report.py). The tick
itself is the simulator's, unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Any, Protocol

from slurm_hetsched.controller.enact import Journal, SlurmEnactor, runs_on, starting_on
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
from slurm_hetsched.controller.round_report import (
    LastRound,
    hold_is_ours,
    report_refused,
    write_admin_comments,
)
from slurm_hetsched.controller.statefiles import JobFolder, read_progress
from slurm_hetsched.core.model import Placement, RoundPlan
from slurm_hetsched.core.ports import EnactReport, Observation, RoundRecord
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.errors import HetschedError, SlurmError
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.records import JobState, SlurmJob

__all__ = [
    "LastRound",
    "ObserveSettings",
    "ReadOnlyRegistry",
    "Registry",
    "SlurmCluster",
    "SlurmUnavailableError",
    "hold_is_ours",
]

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


class Registry(Protocol):
    """Where job key bindings and set-aside jobs are kept between rounds (store/sqlite.py)."""

    def key_bindings(self) -> list[dict[str, Any]]: ...

    def save_key_bindings(self, rows: Iterable[Mapping[str, Any]]) -> None: ...

    def set_aside(self) -> list[dict[str, Any]]: ...

    def save_set_aside(self, rows: Iterable[Mapping[str, Any]]) -> None: ...


class ReadOnlyRegistry:
    """A registry's content without writing anything back (`status`, dry runs)."""

    def __init__(self, source: Registry | None) -> None:
        self._keys = source.key_bindings() if source is not None else []
        self._aside = source.set_aside() if source is not None else []

    def key_bindings(self) -> list[dict[str, Any]]:
        return self._keys

    def save_key_bindings(self, rows: Iterable[Mapping[str, Any]]) -> None:
        return None

    def set_aside(self) -> list[dict[str, Any]]:
        return self._aside

    def save_set_aside(self, rows: Iterable[Mapping[str, Any]]) -> None:
        return None


class SlurmCluster:
    """Slurm as the tick's cluster backend."""

    def __init__(
        self,
        slurm: CliSlurmBackend,
        enactor: SlurmEnactor,
        journal: Journal,
        last_record: Callable[[], RoundRecord | None],
        table: ThroughputTable,
        settings: ObserveSettings,
        *,
        registry: Registry | None = None,
        restarts: RestartTracker | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.slurm = slurm
        self.enactor = enactor
        self.journal = journal
        self.registry: Registry = registry if registry is not None else ReadOnlyRegistry(None)
        # None: no restart costs (every job gets the mechanism's default).
        self.restarts = restarts
        self.last_record = last_record
        self.table = table
        self.settings = settings
        self.clock = clock
        self.view: SlurmView | None = None
        self.last = LastRound()
        self._unprofiled: tuple[str, ...] = ()
        # What the registry held at the last read: key bindings and set-aside jobs.
        self._stored: tuple[dict[str, KeyBinding], dict[str, SetAside]] = ({}, {})

    # -- observe -------------------------------------------------------------------------------

    def read_view(self, last: RoundRecord | None) -> SlurmView:
        """Slurm now, in the controller's terms, remembering from `last` (the last round)
        arrivals and measured rates; with each job's restart cost in the snapshot (raises
        SlurmUnavailableError)."""
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
        bindings = {row["key"]: KeyBinding(**row) for row in self.registry.key_bindings()}
        aside = {
            row["job"]: SetAside(row["comment"], row["reason"], row["round"])
            for row in self.registry.set_aside()
        }
        self._stored = (bindings, aside)
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
        return self._with_restart_costs(view)

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

    def observe(self) -> Observation:
        last = self.last_record()
        view = self.read_view(last)
        self.view = view
        # Kept before the round decides, so a failed round never forgets who owns a key;
        # written only when they changed (most rounds change neither).
        bindings, aside = self._stored
        if dict(view.key_bindings) != bindings:
            self.registry.save_key_bindings(asdict(b) for b in view.key_bindings.values())
        if dict(view.set_aside) != aside:
            self._save_set_aside(view.set_aside)
        if view.unprofiled_gpu_types != self._unprofiled:
            self._unprofiled = view.unprofiled_gpu_types
            if view.unprofiled_gpu_types:
                logger.warning(
                    "GPU types %s are not in the throughput table: their GPUs are left to "
                    "Slurm; add them to the site's throughput file to schedule on them",
                    ", ".join(view.unprofiled_gpu_types),
                )
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
        return Observation(
            snapshot=view.snapshot, ran_s=ran_s, finished=finished, not_running=not_running
        )

    def _progress(self, job: ManagedJob, now_s: float) -> Progress | None:
        if job.leader.user_id is None:
            return None
        folder = JobFolder(self.settings.state_root, job.leader.user_id, job.job_key)
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
        return Progress(
            step=int(payload["step"]),
            total_steps=payload.get("total_steps"),
            steps_per_s=float(rate) if rate is not None else None,
            gpu_type=gpu_type if isinstance(gpu_type, str) else None,
            restart_count=restart if isinstance(restart, int) else None,
            status=status if isinstance(status, str) else "running",
            job_id=str(job_id)[:64] if isinstance(job_id, str | int) else None,
            updated_at=float(payload["updated_at"]),  # finite: read_progress checked it
        )

    # -- enact ---------------------------------------------------------------------------------

    def enact(self, plan: RoundPlan) -> EnactReport:
        if self.view is None:
            raise HetschedError("enact before observe")
        for key, why in sorted(plan.held.items()):
            logger.info("round %d: job %s kept on its GPUs: %s", plan.round, key, why)
        report, outcome = self.enactor.enact(self.view, plan)
        self.last = LastRound(outcome=outcome)
        if self.restarts is not None:
            try:
                self.restarts.moved(plan.round, outcome.moved)
            except Exception:  # the moves are made; only their timing is lost
                logger.exception("round %d: cannot watch the restarts of its moves", plan.round)
        set_aside = self._record_set_aside(plan)
        refused = [(r.job, r.reason) for r in self.view.rejected] + set_aside
        release = self.settings.release_rejected
        report_refused(self.slurm, self.journal, plan.round, refused, self.last, release=release)
        record = self.last_record()
        allocation = record.allocation if record is not None else None
        write_admin_comments(self.slurm, self.view, plan, outcome, allocation, self.last)
        return report

    def _record_set_aside(self, plan: RoundPlan) -> list[tuple[SlurmJob, str]]:
        """Keep the jobs this round set aside (refused from the next observation on, until
        their comment changes); returns them with the reason to report."""
        assert self.view is not None
        if not plan.set_aside:
            return []
        kept = dict(self.view.set_aside)
        out = []
        for key, reason in sorted(plan.set_aside.items()):
            job = self.view.managed.get(key)
            if job is None:
                continue
            kept[key] = SetAside(job.leader.comment, reason, plan.round)
            out.append((job.leader, f"set aside in round {plan.round}: {reason}"))
            logger.warning(
                "round %d: job %s (%s) set aside: %s", plan.round, key, job.slurm_id, reason
            )
        self._save_set_aside(kept)
        return out

    def _save_set_aside(self, entries: Mapping[str, SetAside]) -> None:
        self.registry.save_set_aside(
            {"job": key, "comment": a.comment, "reason": a.reason, "round": a.round}
            for key, a in entries.items()
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
    from datetime import datetime

    tz = datetime.now().astimezone().tzinfo
    assert tz is not None
    return tz
