"""`hetsched watchdog`: hand the managed jobs back to Slurm when the controller has gone silent.

Run by a systemd timer on the controller's host (etc/hetsched-watchdog.timer). The controller
records a heartbeat in its store after every round (store/sqlite.py `beat`). The jobs are
handed back (controller/handback.py) only when both say the controller is gone: no live
controller holds its lock (a hung one that still holds it is reported, not overruled), and
its last sign of life (the heartbeat, else the last round or action written by a version that
kept no heartbeat) is older than the limit. A store with neither means no controller ever ran
with this config: nothing is touched. `judge` decides and does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TextIO

from slurm_hetsched.controller.config import ControllerConfig
from slurm_hetsched.controller.handback import HandbackSlurm
from slurm_hetsched.controller.handback_command import hand_back_all
from slurm_hetsched.controller.service import ControllerRunningError, SingleControllerLock
from slurm_hetsched.rounds.clocks import SYSTEM_CLOCK
from slurm_hetsched.store.sqlite import Heartbeat, SqliteStore


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the watchdog concluded: whether to hand the jobs back, what to print, and the
    reason for the jobs' admin comments."""

    hand_back: bool
    message: str
    reason: str = ""


def judge(
    *,
    now_s: float,
    after_s: float,
    beat: Heartbeat | None,
    last_written_s: float | None,
    lock_holder: int | None = None,
    lock_held: bool = False,
) -> Verdict:
    """Whether the controller is gone (pure).

    Args:
        now_s: now, Unix seconds.
        after_s: the silence, in seconds, after which the controller counts as gone.
        beat: its last heartbeat, if any.
        last_written_s: when it last wrote a round or an action (for a store without beats).
        lock_holder: the pid written next to the lock, if known.
        lock_held: a live process holds the controller's lock.
    """
    last = beat.at_s if beat is not None else last_written_s
    heard = "never" if last is None else f"{_when(last)} ({max(0.0, now_s - last):.0f} s ago)"
    if beat is not None and beat.round is not None:
        heard += f", round {beat.round}"
    if lock_held:
        who = f"pid {lock_holder}" if lock_holder else "a process"
        message = f"controller alive: {who} holds its lock; last heartbeat {heard}"
        if last is not None and now_s - last > after_s:
            message += (
                f"; silent for more than {after_s:.0f} s while holding the lock, so it may hang: "
                "see its log (journalctl -u hetsched-controller). Jobs are not handed back "
                "while it holds the lock"
            )
        return Verdict(False, message)
    if last is None:
        return Verdict(
            False, "no controller has run with this store (no heartbeat, no round): nothing to do"
        )
    if now_s - last < after_s:
        return Verdict(
            False,
            f"controller not running, last heard from {heard}; its jobs are handed back after "
            f"{after_s:.0f} s of silence (watchdog.after_s)",
        )
    return Verdict(
        True,
        f"controller not running and silent since {heard}, longer than {after_s:.0f} s: "
        "handing its jobs back to Slurm",
        reason=f"controller silent since {_when(last)}",
    )


def run_watchdog(
    config: ControllerConfig,
    *,
    after_s: float,
    out: TextIO,
    slurm: HandbackSlurm | None = None,
    clock: Callable[[], float] = SYSTEM_CLOCK.now,
) -> int:
    """`hetsched watchdog`: print the verdict, and hand the jobs back if the controller is
    gone; returns the exit status (1 if a job's hand-back failed)."""
    if not config.store.exists():
        print(
            f"watchdog: no store at {config.store}: no controller has run with this config; "
            "nothing to do",
            file=out,
        )
        return 0
    lock = SingleControllerLock(config.lock_path)
    try:
        lock.__enter__()
    except ControllerRunningError:
        holder = _read_pid(Path(f"{config.lock_path}.pid"))
        store = SqliteStore(config.store)
        try:
            verdict = _verdict(store, clock(), after_s, lock_held=True, lock_holder=holder)
        finally:
            store.close()
        print(f"watchdog: {verdict.message}", file=out)
        return 0
    # Held from here on: a controller starting now waits for its next try.
    try:
        store = SqliteStore(config.store)
        try:
            verdict = _verdict(store, clock(), after_s)
            print(f"watchdog: {verdict.message}", file=out)
            if not verdict.hand_back:
                return 0
            return hand_back_all(
                config,
                reason=verdict.reason,
                dry_run=False,
                out=out,
                slurm=slurm,
                clock=clock,
                store=store,
            )
        finally:
            store.close()
    finally:
        lock.__exit__()


def _verdict(
    store: SqliteStore,
    now_s: float,
    after_s: float,
    *,
    lock_held: bool = False,
    lock_holder: int | None = None,
) -> Verdict:
    """`judge` on what the store says."""
    return judge(
        now_s=now_s,
        after_s=after_s,
        beat=store.last_beat(),
        last_written_s=store.last_written_s(),
        lock_holder=lock_holder,
        lock_held=lock_held,
    )


def _when(at_s: float) -> str:
    """Local time with its offset, to the second (what admins read in logs)."""
    return datetime.fromtimestamp(at_s).astimezone().isoformat(timespec="seconds")


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
