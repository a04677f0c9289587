"""What `hetsched handback` does around controller/handback.py: the lock, the store, Slurm and
the lines it prints (cli.py parses; `hetsched watchdog` calls `hand_back_all` too).

The controller's lock is taken for the whole hand-back: a controller that holds it would take
the jobs back at its next round, and one starting meanwhile waits for the next try instead of
racing the hand-back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, tzinfo
from typing import TextIO

from slurm_hetsched.controller.config import ControllerConfig
from slurm_hetsched.controller.handback import (
    Handback,
    HandbackResult,
    HandbackSlurm,
    plan_handback,
)
from slurm_hetsched.controller.scope import Scope
from slurm_hetsched.controller.service import SingleControllerLock
from slurm_hetsched.rounds.clocks import SYSTEM_CLOCK
from slurm_hetsched.slurm.backend import CliSlurmBackend
from slurm_hetsched.slurm.cli import SlurmCli
from slurm_hetsched.store.sqlite import SqliteStore


def run_handback(
    config: ControllerConfig,
    *,
    reason: str,
    dry_run: bool,
    out: TextIO,
    slurm: HandbackSlurm | None = None,
    clock: Callable[[], float] = SYSTEM_CLOCK.now,
) -> int:
    """`hetsched handback`; returns the exit status (1 if any job failed).

    Raises:
        ControllerRunningError: a controller holds the lock (not for a dry run).
        SlurmError: Slurm's queue cannot be read (nothing was changed).
    """
    if dry_run:
        return hand_back_all(config, reason=reason, dry_run=True, out=out, slurm=slurm, clock=clock)
    with SingleControllerLock(config.lock_path):
        return hand_back_all(
            config, reason=reason, dry_run=False, out=out, slurm=slurm, clock=clock
        )


def hand_back_all(
    config: ControllerConfig,
    *,
    reason: str,
    dry_run: bool,
    out: TextIO,
    slurm: HandbackSlurm | None = None,
    clock: Callable[[], float] = SYSTEM_CLOCK.now,
    store: SqliteStore | None = None,
) -> int:
    """Hand every managed job back (the caller holds the lock); prints one line per job and a
    summary; returns 1 if any job failed, else 0.

    Args:
        store: the open store to journal in; None: the config's, if it exists (a dry run
            never opens it).
    """
    slurm = slurm if slurm is not None else slurm_backend(config)
    jobs = slurm.list_jobs()
    scope = Scope.of(config.partitions, config.qos)
    items = plan_handback(jobs, scope, reason, now_s=clock(), local_tz=_local_tz())
    if dry_run:
        results = [HandbackResult(item) for item in items]
    else:
        own = store is None and config.store.exists()
        journal = SqliteStore(config.store) if own else store
        try:
            if journal is not None:
                _warn_interrupted(journal, out)
            round_ = (journal.last_round_number() or 0) if journal is not None else 0
            handback = Handback(slurm, journal, config.state_root, round_=round_, clock=clock)
            results = handback.run(items)
        finally:
            if own and journal is not None:
                journal.close()
    for result in results:
        print(describe(result, dry_run=dry_run), file=out)
    print(summary(results, dry_run=dry_run), file=out)
    return 0 if all(r.ok for r in results) else 1


def slurm_backend(config: ControllerConfig) -> CliSlurmBackend:
    """The backend with the config's [slurm] settings (no site data needed: a hand-back must
    work even when the throughput files are what broke the controller)."""
    return CliSlurmBackend(
        SlurmCli(
            slurm_conf=config.slurm_conf,
            timeout_s=config.command_timeout_s,
            bin_dir=config.bin_dir,
            retries=config.retries,
            retry_backoff_s=config.retry_backoff_s,
        )
    )


def describe(result: HandbackResult, *, dry_run: bool = False) -> str:
    """One line per job: what was (or would be) done, what was left and why."""
    item = result.item
    head = f"job {item.job_id} ({item.identity}, {item.user}, {item.state.value}):"
    if dry_run:
        would = [
            *(f"untarget {c}" for c in item.untarget),
            *(["release"] if item.release else []),
            *(["resume request if it was asked to checkpoint"] if item.resume else []),
            *([f"admin comment {item.comment!r}"] if item.comment is not None else []),
        ]
        parts = [("would " + ", ".join(would)) if would else "nothing to do"]
    elif result.failed:
        parts = ["FAILED: " + "; ".join(result.failed), *result.done]
    else:
        parts = result.done or ["already handed back"]
    return f"{head} {'; '.join([*parts, *result.warnings, *item.notes])}"


def summary(results: Sequence[HandbackResult], *, dry_run: bool = False) -> str:
    """The last line: how many jobs, how many changed, how many failed and what to do."""
    failed = sum(not r.ok for r in results)
    if dry_run:
        worked = sum(r.item.has_work for r in results)
        return f"dry run: {len(results)} managed jobs, {worked} to hand back; nothing was changed"
    changed = sum(r.ok and bool(r.done) for r in results)
    text = (
        f"handed back {changed} of {len(results)} managed jobs "
        f"({len(results) - changed - failed} had nothing left to do), {failed} failed"
    )
    if failed:
        text += "; fix the cause shown above and run `hetsched handback` again"
    return text


def _warn_interrupted(store: SqliteStore, out: TextIO) -> None:
    pending = store.pending_actions()
    if pending:
        jobs = ", ".join(sorted({a.slurm_job_id for a in pending}))
        print(
            f"note: {len(pending)} actions of a stopped controller were left under way (jobs "
            f"{jobs}); a controller started later settles them first (docs/handback.md)",
            file=out,
        )


def _local_tz() -> tzinfo:
    tz = datetime.now().astimezone().tzinfo
    assert tz is not None
    return tz
