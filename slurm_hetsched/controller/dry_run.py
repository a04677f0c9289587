"""`hetsched controller --dry-run`: one round on the real cluster that changes nothing.

It observes through the read-only observer, decides with the live controller's tick on a copy
of the last round in memory, and lists what the round would do instead of doing it. It takes
no lock, creates no store and no state root, and writes nothing to Slurm or the journal.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from slurm_hetsched.controller.admin_comment import describe_target
from slurm_hetsched.controller.enact_work import classify
from slurm_hetsched.controller.observer import SlurmObservation, SlurmObserver
from slurm_hetsched.controller.restarts import RestartTracker
from slurm_hetsched.controller.service import RoundService, ServiceSettings
from slurm_hetsched.controller.statefiles import check_state_root
from slurm_hetsched.core.model import RoundPlan
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.ports import Clock, EnactReport, RoundRecord
from slurm_hetsched.rounds.clocks import SYSTEM_CLOCK
from slurm_hetsched.rounds.tick import Tick
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.store.memory import MemoryStore
from slurm_hetsched.store.sqlite import SqliteStore


class DryRunCluster:
    """Observes the real cluster and lists what a plan would do there; changes nothing."""

    def __init__(
        self, observer: SlurmObserver, last_record: Callable[[], RoundRecord | None]
    ) -> None:
        self.observer = observer
        self.last_record = last_record
        self.planned: list[str] = []

    def observe(self) -> SlurmObservation:
        return self.observer.observe(self.last_record())

    def enact(self, plan: RoundPlan, observed: SlurmObservation) -> EnactReport:
        view = observed.view
        work = classify(view, plan)
        lines = []
        for key, job in work.keep.items():
            lines.append(f"keep   {key} (job {job.slurm_id})")
        for key, (job, target) in work.move.items():
            lines.append(f"move   {key} (job {job.slurm_id}) -> {describe_target(target)}")
        for key, (job, target) in work.start.items():
            lines.append(f"start  {key} (job {job.slurm_id}) -> {describe_target(target)}")
        for key, job in work.stop.items():
            lines.append(f"stop   {key} (job {job.slurm_id}): checkpoint and requeue-hold")
        for key, job in work.hold.items():
            lines.append(f"hold   {key} (job {job.slurm_id})")
        for rejected in view.rejected:
            lines.append(f"reject job {rejected.job_id} of {rejected.user}: {rejected.reason}")
        self.planned = lines or ["nothing to do"]
        return EnactReport()


class DryRunController(RoundService):
    """A round service whose rounds plan on a copy of the last round and enact nothing."""

    dry_run = True

    def __init__(
        self,
        settings: ServiceSettings,
        *,
        clock: Clock = SYSTEM_CLOCK,
        slurm: CliSlurmBackend | None = None,
    ) -> None:
        # A state root others can write is refused even here; a missing one is not made.
        if os.path.lexists(settings.observe.state_root):
            check_state_root(settings.observe.state_root, create=False)
        super().__init__(settings, get_policy(settings.policy, settings.policy_options), clock)
        # The store is read if there is one, and never created.
        self._store = SqliteStore(settings.store_path) if settings.store_path.exists() else None
        self._memory = MemoryStore()
        last = self._store.load() if self._store is not None else None
        if last is not None:
            self._memory.save_enacted(last)
        observer = SlurmObserver(
            slurm or CliSlurmBackend(settings.cli),
            settings.site.table,
            settings.observe,
            registry=self._store,
            # Measured in memory: what it sees is measured again by the service.
            restarts=RestartTracker(self._store, settings.restarts, save=False),
            clock=clock.now,
        )
        self.cluster = DryRunCluster(observer, self._memory.load)
        self.tick = Tick(self.policy, settings.site, self.cluster, self._memory, settings.tick)

    @property
    def planned(self) -> list[str]:
        """What the last round would have done, one line per job."""
        return self.cluster.planned

    def _last_record(self) -> RoundRecord | None:
        return self._memory.load()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
