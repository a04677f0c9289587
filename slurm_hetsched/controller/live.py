"""The live cluster behind the round tick: Slurm as a `ClusterBackend` (core/ports.py).

`observe` reads the cluster through the read-only observer (controller/observer.py) and keeps
what changed in the registry (job key bindings, set-aside jobs); `enact` carries the plan out on
the observation it was made from (controller/enact.py), keeps the jobs the round set aside,
hands jobs with a bad spec back to Slurm, and updates the admin comments that make the rounds
visible in `squeue` (controller/round_report.py). The tick itself is the simulator's,
unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import Any, Protocol

from slurm_hetsched.controller.enact import Journal, SlurmEnactor
from slurm_hetsched.controller.fork_tracker import ForkTracker
from slurm_hetsched.controller.jobview import SetAside, SlurmView
from slurm_hetsched.controller.observer import (
    ObserveSettings,
    RegistryReader,
    SlurmObservation,
    SlurmObserver,
)
from slurm_hetsched.controller.restarts import RestartTracker
from slurm_hetsched.controller.round_report import (
    LastRound,
    report_refused,
    write_admin_comments,
)
from slurm_hetsched.core.model import RoundPlan
from slurm_hetsched.core.ports import EnactReport, RoundRecord
from slurm_hetsched.core.throughput import ThroughputTable
from slurm_hetsched.rounds.clocks import SYSTEM_CLOCK
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.records import SlurmJob

logger = logging.getLogger(__name__)


class Registry(RegistryReader, Protocol):
    """Where job key bindings and set-aside jobs are kept between rounds (store/sqlite.py)."""

    def save_key_bindings(self, rows: Iterable[Mapping[str, Any]]) -> None: ...

    def save_set_aside(self, rows: Iterable[Mapping[str, Any]]) -> None: ...


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
        forks: ForkTracker | None = None,
        clock: Callable[[], float] = SYSTEM_CLOCK.now,
    ) -> None:
        self.slurm = slurm
        self.enactor = enactor
        self.journal = journal
        self.registry = registry
        self.last_record = last_record
        self.settings = settings
        self.observer = SlurmObserver(
            slurm, table, settings, registry=registry, restarts=restarts, clock=clock
        )
        self.forks = forks
        if forks is not None:
            enactor.fork_sections = forks.section
        self.last = LastRound()
        self._unprofiled: tuple[str, ...] = ()

    @property
    def restarts(self) -> RestartTracker | None:
        return self.observer.restarts

    # -- observe -------------------------------------------------------------------------------

    def read_view(self, last: RoundRecord | None) -> SlurmView:
        """Slurm now, in the controller's terms (controller/observer.py); writes nothing."""
        return self.observer.read_view(last)

    def observe(self) -> SlurmObservation:
        observed = self.observer.observe(self.last_record())
        view = observed.view
        # Kept before the round decides, so a failed round never forgets who owns a key;
        # written only when they changed (most rounds change neither).
        if self.registry is not None:
            if dict(view.key_bindings) != dict(observed.stored_bindings):
                self.registry.save_key_bindings(asdict(b) for b in view.key_bindings.values())
            if dict(view.set_aside) != dict(observed.stored_aside):
                self._save_set_aside(view.set_aside)
        if view.unprofiled_gpu_types != self._unprofiled:
            self._unprofiled = view.unprofiled_gpu_types
            if view.unprofiled_gpu_types:
                logger.warning(
                    "GPU types %s have no throughput column and no datasheet figures to "
                    "estimate one: their GPUs are left to Slurm; give their figures in "
                    "site.gpu_types or profile them (hetsched profile) to schedule on them",
                    ", ".join(view.unprofiled_gpu_types),
                )
        return observed

    # -- enact ---------------------------------------------------------------------------------

    def enact(self, plan: RoundPlan, observed: SlurmObservation) -> EnactReport:
        view = observed.view
        for key, why in sorted(plan.held.items()):
            logger.info("round %d: job %s kept on its GPUs: %s", plan.round, key, why)
        # Forked jobs (HadarE): the round that ends is merged and the next one planned before
        # the copies are placed; copies of finished jobs are left to the tracker.
        left = self.forks.before_enact(view, plan) if self.forks is not None else set()
        enacted = view
        if left:
            managed = {k: j for k, j in view.managed.items() if k not in left}
            enacted = dataclasses.replace(view, managed=managed)
        report, outcome = self.enactor.enact(enacted, plan)
        if self.forks is not None:
            self.forks.after_enact(view, plan, outcome)
        self.last = LastRound(outcome=outcome)
        if self.restarts is not None:
            try:
                self.restarts.moved(plan.round, outcome.moved)
            except Exception:  # the moves are made; only their timing is lost
                logger.exception("round %d: cannot watch the restarts of its moves", plan.round)
        set_aside = self._record_set_aside(view, plan)
        refused = [(r.job, r.reason) for r in view.rejected] + set_aside
        release = self.settings.release_rejected
        report_refused(self.slurm, self.journal, plan.round, refused, self.last, release=release)
        record = self.last_record()
        allocation = record.allocation if record is not None else None
        write_admin_comments(
            self.slurm, view, plan, outcome, allocation, self.last, self.observer.table
        )
        return report

    def _record_set_aside(self, view: SlurmView, plan: RoundPlan) -> list[tuple[SlurmJob, str]]:
        """Keep the jobs this round set aside (refused from the next observation on, until
        their comment changes); returns them with the reason to report."""
        if not plan.set_aside:
            return []
        kept = dict(view.set_aside)
        out = []
        for key, reason in sorted(plan.set_aside.items()):
            job = view.managed.get(key)
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
        if self.registry is None:
            return
        self.registry.save_set_aside(
            {"job": key, "comment": a.comment, "reason": a.reason, "round": a.round}
            for key, a in entries.items()
        )
