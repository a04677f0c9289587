"""`hetsched controller`: the service that runs the round tick against Slurm, round after round.

One controller at a time (a lock file); on start it settles what a crashed predecessor left
under way (controller/reconcile.py); then every `round_s` it runs one tick (observe -> decide ->
plan -> enact -> record), logs one key=value line, and updates the optional metrics. A
slurmctld that does not answer makes the round skip (logged, counted), never crash the service.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from filelock import FileLock, Timeout

from slurm_hetsched.controller.enact import EnactSettings, SlurmEnactor
from slurm_hetsched.controller.live import (
    ObserveSettings,
    ReadOnlyRegistry,
    SlurmCluster,
    SlurmUnavailableError,
)
from slurm_hetsched.controller.reconcile import reconcile
from slurm_hetsched.controller.restart_cost import RestartSettings
from slurm_hetsched.controller.restarts import RestartTracker
from slurm_hetsched.controller.statefiles import check_state_root
from slurm_hetsched.core.model import RoundPlan
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.ports import EnactReport, RoundRecord
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.errors import HetschedError, SlurmError
from slurm_hetsched.rounds.tick import Tick, TickSettings
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.cli import SlurmCli
from slurm_hetsched.store.memory import MemoryStore
from slurm_hetsched.store.sqlite import SqliteStore

logger = logging.getLogger(__name__)


class ControllerRunningError(HetschedError):
    """Another controller holds the lock."""


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    """Everything the service needs, resolved from the config file and the command line."""

    policy: str
    policy_options: dict[str, Any]
    site: SiteData
    tick: TickSettings
    store_path: Path
    lock_path: Path
    enact: EnactSettings
    observe: ObserveSettings
    cli: SlurmCli
    restarts: RestartSettings = field(default_factory=RestartSettings)


@dataclass(slots=True)
class RoundSummary:
    """One round as the log line and the metrics see it."""

    fields: dict[str, Any]
    record: RoundRecord | None = None


class Controller:
    """The live controller: a tick over Slurm plus the service around it."""

    def __init__(self, settings: ServiceSettings, *, dry_run: bool = False) -> None:
        self.settings = settings
        self.dry_run = dry_run
        # Before anything else: a state root others can write lets them plant job folders.
        # (A dry run creates nothing; the real run makes a missing root.)
        if not dry_run or os.path.lexists(settings.observe.state_root):
            check_state_root(settings.observe.state_root, create=not dry_run)
        self.slurm = CliSlurmBackend(settings.cli)
        # A dry run reads the store if there is one, and never creates it.
        self._store: SqliteStore | None = None
        if not dry_run or settings.store_path.exists():
            self._store = SqliteStore(settings.store_path)
        self.policy = get_policy(settings.policy, settings.policy_options)
        journal: Any = _DryJournal() if dry_run else self.store
        registry: Any = ReadOnlyRegistry(self._store) if dry_run else self.store
        self.cluster = SlurmCluster(
            self.slurm,
            SlurmEnactor(self.slurm, journal, settings.enact),
            journal,
            self._last_record,
            settings.site.table,
            settings.observe,
            registry=registry,
            # A dry run measures in memory: what it sees is measured again by the service.
            restarts=RestartTracker(self._store, settings.restarts, save=not dry_run),
        )
        # A dry run plans on a copy of the last round in memory: nothing reaches the store.
        self._memory: MemoryStore | None = None
        if dry_run:
            self._memory = MemoryStore()
            last = self._store.load() if self._store is not None else None
            if last is not None:
                self._memory.save_enacted(last)
        backend: Any = _DryRunCluster(self.cluster) if dry_run else self.cluster
        self.tick = Tick(
            self.policy,
            settings.site,
            backend,
            self._memory if self._memory is not None else self.store,
            settings.tick,
        )
        self._stop = threading.Event()
        self._needs_reconcile = False

    @property
    def store(self) -> SqliteStore:
        """The round store (not there in a dry run without one)."""
        if self._store is None:
            raise HetschedError("no round store in this dry run")
        return self._store

    def _last_record(self) -> RoundRecord | None:
        if self._memory is not None:
            return self._memory.load()
        return self.store.load()

    # -- one round -----------------------------------------------------------------------------

    def run_round(self) -> RoundSummary:
        """One round; a Slurm that does not answer gives a skipped round, not an exception."""
        started = time.perf_counter()
        try:
            record = self.tick.run_round()
        except SlurmUnavailableError as exc:
            logger.warning("round skipped: %s", exc)
            return RoundSummary({"skipped": "slurm-unavailable", "error": str(exc)[:200]})
        except Exception as exc:  # one bad round must not end the service
            # A solver or store failure, or a bug: the round's actions taken so far are in
            # the journal; settle any left pending before the next round, as after a crash.
            logger.exception("round failed; the next round settles what it left under way")
            self._needs_reconcile = True
            return RoundSummary({"skipped": "round-failed", "error": str(exc)[:200]})
        outcome = self.cluster.last.outcome
        plan = record.plan
        fields: dict[str, Any] = {
            "round": record.round,
            "policy": self.policy.name,
            "jobs": len(record.snapshot.jobs) if record.snapshot else 0,
            "placed": len(plan.placements),
            "kept": len(outcome.kept),
            "moved": len(outcome.moved),
            "started": len(outcome.started),
            "stopped": len(outcome.stopped),
            "resubmitted": len(outcome.resubmitted),
            "no_ack": len(outcome.no_ack),
            "failed": len(record.report.failed) if record.report else 0,
            "rejected": len(self.cluster.view.rejected) if self.cluster.view else 0,
            "recomputed": int(record.recomputed),
            "solve_s": record.allocation.solve_s if record.recomputed else 0.0,
            "round_s": time.perf_counter() - started,
        }
        fields |= {f"{phase}_s": t for phase, t in self.tick.timings.items()}
        if self.dry_run:
            fields["dry_run"] = 1
        return RoundSummary(fields, record)

    # -- the service ---------------------------------------------------------------------------

    def serve(
        self,
        *,
        once: bool = False,
        on_round: Callable[[RoundSummary], None] | None = None,
    ) -> None:
        """Run rounds until stopped (SIGTERM, SIGINT) or, with `once`, one round."""
        previous = self._install_signal_handlers()
        try:
            self._serve(once=once, on_round=on_round)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _serve(self, *, once: bool, on_round: Callable[[RoundSummary], None] | None) -> None:
        self._reconcile()
        while not self._stop.is_set():
            began = time.monotonic()
            if self._needs_reconcile:
                self._needs_reconcile = False
                self._reconcile()
            summary = self.run_round()
            if not self.dry_run:  # the watchdog's sign of life (controller/watchdog.py)
                self.store.beat(time.time(), summary.fields.get("round"))
            if on_round is not None:
                on_round(summary)
            if once:
                break
            self._stop.wait(max(0.0, began + self.settings.tick.round_s - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()

    def _reconcile(self) -> None:
        if self.dry_run:
            return
        while not self._stop.is_set():
            try:
                done = reconcile(
                    self.store,
                    self.slurm,
                    self.cluster.enactor,
                    lambda: self.cluster.read_view(self.store.load()).managed,
                )
            except SlurmError as exc:
                logger.warning("cannot reconcile with Slurm yet (%s); retrying", exc)
                self._stop.wait(min(30.0, self.settings.tick.round_s))
                continue
            if done.interrupted:
                logger.warning(
                    "reconciled %d interrupted actions: requeue-held %s, called off %s, "
                    "cancelled %s",
                    len(done.interrupted),
                    done.requeue_held or "none",
                    done.called_off or "none",
                    done.cancelled or "none",
                )
            return

    def _install_signal_handlers(self) -> dict[int, Any]:
        """Stop after the round on SIGTERM and SIGINT; returns the handlers they replace."""
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            logger.info("got %s: stopping after this round", signal.Signals(signum).name)
            self._stop.set()

        return {
            signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)
        }

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


class SingleControllerLock:
    """The lock that lets one controller run at a time (released when the process dies)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = FileLock(str(path))

    def __enter__(self) -> SingleControllerLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=0)
        except Timeout as exc:
            holder = _read_pid(self.path.with_name(self.path.name + ".pid"))
            who = f" (pid {holder})" if holder else ""
            raise ControllerRunningError(
                f"another hetsched controller is running{who}: it holds {self.path}. Stop it "
                "first (systemctl stop hetsched-controller), or use --dry-run, which needs no lock"
            ) from exc
        self.path.with_name(self.path.name + ".pid").write_text(f"{os.getpid()}\n")
        return self

    def __exit__(self, *exc: object) -> None:
        self.path.with_name(self.path.name + ".pid").unlink(missing_ok=True)
        self._lock.release()


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


class _DryJournal:
    """Journal for --dry-run: nothing is taken, so nothing is recorded."""

    def begin_action(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def finish_action(self, *args: Any, **kwargs: Any) -> None:
        return None


class _DryRunCluster:
    """Observes the real cluster, prints what it would do, and changes nothing."""

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.planned: list[str] = []

    def observe(self) -> Any:
        return self.cluster.observe()

    def enact(self, plan: RoundPlan) -> EnactReport:
        from slurm_hetsched.controller.admin_comment import describe_target
        from slurm_hetsched.controller.enact import classify

        assert self.cluster.view is not None
        work = classify(self.cluster.view, plan)
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
        for rejected in self.cluster.view.rejected:
            lines.append(f"reject job {rejected.job_id} of {rejected.user}: {rejected.reason}")
        self.planned = lines or ["nothing to do"]
        return EnactReport()


def settings_replace(settings: ServiceSettings, **changes: Any) -> ServiceSettings:
    return dataclasses.replace(settings, **changes)
