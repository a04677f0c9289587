"""`hetsched controller`: the service that runs the round tick against Slurm, round after round.

One controller at a time (a lock file); on start it settles what a crashed predecessor left
under way (controller/reconcile.py); then every `round_s` it runs one tick (observe -> decide ->
plan -> enact -> record), logs one key=value line, and updates the optional metrics. A
slurmctld that does not answer makes the round skip (logged, counted), never crash the service.
`RoundService` is the loop both the service and a dry run (controller/dry_run.py) run.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from filelock import FileLock, Timeout

from slurm_hetsched.controller.enact import EnactOutcome, EnactSettings, SlurmEnactor
from slurm_hetsched.controller.fork_tracker import ForkSettings, ForkTracker
from slurm_hetsched.controller.live import SlurmCluster
from slurm_hetsched.controller.observer import (
    ObserveSettings,
    SlurmObservation,
    SlurmUnavailableError,
)
from slurm_hetsched.controller.reconcile import reconcile
from slurm_hetsched.controller.restart_cost import RestartSettings
from slurm_hetsched.controller.restarts import RestartTracker
from slurm_hetsched.controller.statefiles import check_state_root
from slurm_hetsched.core.model.accounts import accounts_with
from slurm_hetsched.core.policies import get_policy
from slurm_hetsched.core.policies.base import Policy
from slurm_hetsched.core.ports import Clock, RoundRecord
from slurm_hetsched.core.problem import SiteData
from slurm_hetsched.errors import HetschedError, SlurmError
from slurm_hetsched.rounds.clocks import SYSTEM_CLOCK, sleeper
from slurm_hetsched.rounds.tick import Tick, TickSettings
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.cli import SlurmCli
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
    forks: ForkSettings | None = None
    # Tenants' GPU quotas read again before each round (quotas_from = "slurm": a quota
    # changed with sacctmgr counts from the next round); None: `site.accounts` as given.
    read_quotas: Callable[[], Mapping[str, Mapping[str, int]]] | None = None


@dataclass(slots=True)
class RoundSummary:
    """One round as the log line and the metrics see it."""

    fields: dict[str, Any]
    record: RoundRecord | None = None


class RoundService:
    """Runs a tick over Slurm round after round: the loop, the stop signals and the summary
    of each round. The live controller and the dry run differ only in the hooks below."""

    dry_run = False
    tick: Tick[SlurmObservation]  # built by each kind, over its own cluster and store

    def __init__(self, settings: ServiceSettings, policy: Policy, clock: Clock) -> None:
        self.settings = settings
        self.policy = policy
        self.clock = clock
        self._stop = threading.Event()
        self._needs_reconcile = False

    def _refresh_quotas(self) -> None:
        """The tenants' quotas as Slurm holds them now; on a failure the last ones stay (a
        round never stops for them)."""
        if self.settings.read_quotas is None:
            return
        try:
            quotas = self.settings.read_quotas()
        except (HetschedError, OSError) as exc:
            logger.warning("tenant quotas not read again, the last ones kept: %s", exc)
            return
        self.tick.site = dataclasses.replace(self.tick.site, accounts=accounts_with(quotas))

    # -- hooks ---------------------------------------------------------------------------------

    def _outcome(self) -> EnactOutcome:
        """What the last round's enactment did."""
        return EnactOutcome()

    def _reconcile(self) -> None:
        """Settle what an earlier run left under way (the live controller only)."""

    def _after_round(self, summary: RoundSummary) -> None:
        """After each round, skipped or not."""

    def close(self) -> None:
        """Release what the service holds."""

    # -- one round -----------------------------------------------------------------------------

    def run_round(self) -> RoundSummary:
        """One round; a Slurm that does not answer gives a skipped round, not an exception."""
        started = time.perf_counter()
        self._refresh_quotas()
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
        outcome = self._outcome()
        observed = self.tick.last_observation
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
            "rejected": len(observed.view.rejected) if observed is not None else 0,
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
        round_s = self.settings.tick.round_s
        while not self._stop.is_set():
            began = self.clock.now()
            if self._needs_reconcile:
                self._needs_reconcile = False
                self._reconcile()
            summary = self.run_round()
            self._after_round(summary)
            if on_round is not None:
                on_round(summary)
            if once:
                break
            # Never more than one round: a wall clock stepped back must not stall the service.
            self._stop.wait(min(round_s, max(0.0, began + round_s - self.clock.now())))

    def stop(self) -> None:
        self._stop.set()

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


class Controller(RoundService):
    """The live controller: a tick over Slurm, its round store, and the service around it."""

    def __init__(
        self,
        settings: ServiceSettings,
        *,
        clock: Clock = SYSTEM_CLOCK,
        slurm: CliSlurmBackend | None = None,
    ) -> None:
        # Before anything else: a state root others can write lets them plant job folders.
        check_state_root(settings.observe.state_root, create=True)
        super().__init__(settings, get_policy(settings.policy, settings.policy_options), clock)
        self.slurm = slurm or CliSlurmBackend(settings.cli)
        self.store = SqliteStore(settings.store_path, clock=clock.now)
        enactor = SlurmEnactor(
            self.slurm, self.store, settings.enact, clock=clock.now, sleep=sleeper(clock)
        )
        forks = settings.forks or ForkSettings(round_s=settings.tick.round_s)
        self.cluster = SlurmCluster(
            self.slurm,
            enactor,
            self.store,
            self.store.load,
            settings.site.table,
            settings.observe,
            registry=self.store,
            restarts=RestartTracker(self.store, settings.restarts),
            forks=ForkTracker(enactor, self.store, settings.site.table, forks),
            clock=clock.now,
        )
        self.tick = Tick(self.policy, settings.site, self.cluster, self.store, settings.tick)

    def _outcome(self) -> EnactOutcome:
        return self.cluster.last.outcome

    def _after_round(self, summary: RoundSummary) -> None:
        # The watchdog's sign of life (controller/watchdog.py), also after a skipped round.
        self.store.beat(self.clock.now(), summary.fields.get("round"))

    def _reconcile(self) -> None:
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

    def close(self) -> None:
        self.store.close()


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
