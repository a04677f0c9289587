"""How slurmctld starts: from the state an earlier start saved, or clean.

`up` never throws jobs away by accident. After slurmctld died (killed, crashed, the machine
rebooted) it restarts from what slurmctld saved in state/, so queued and running jobs go on.
It starts clean only in a folder with no saved state yet, after a `down` that cancelled every
job (nothing is left worth keeping), or when asked to (`up --clean`).
"""

from __future__ import annotations

import enum
from pathlib import Path

from slurm_hetsched.devcluster.render import ClusterPaths
from slurm_hetsched.slurm import SlurmNode
from slurm_hetsched.slurm.records import PLANNABLE_BASE_STATES


class StartMode(enum.Enum):
    FIRST = "first"  # no saved state in this folder yet
    AFTER_DOWN = "after-down"  # the last stop was a `down` that cancelled every job
    RESTORE = "restore"  # saved state of a slurmctld that stopped any other way
    CLEAN = "clean"  # `up --clean`


def choose_start(paths: ClusterPaths, *, clean: bool) -> StartMode:
    """How slurmctld starts in `paths` (`clean`: the user asked for a clean start)."""
    if clean:
        return StartMode.CLEAN
    if not paths.job_state.exists():
        return StartMode.FIRST
    if paths.stopped_clean.exists():
        return StartMode.AFTER_DOWN
    return StartMode.RESTORE


def slurmctld_argv(slurm_conf: Path, mode: StartMode) -> list[str]:
    """The command that starts slurmctld in `mode`."""
    if mode is StartMode.RESTORE:
        # Neither -c (it would forget every job) nor -i: state that cannot be read stops
        # slurmctld with the reason in its log, rather than silently dropping jobs;
        # `up --clean` is the explicit way to start without it.
        return ["slurmctld", "-f", str(slurm_conf)]
    # -c: start without saved jobs and node states; -i: ignore errors in what it skips.
    return ["slurmctld", "-f", str(slurm_conf), "-c", "-i"]


def describe(mode: StartMode, paths: ClusterPaths) -> str:
    """One line for `up`'s report: how slurmctld started and what became of saved jobs."""
    if mode is StartMode.RESTORE:
        return (
            f"slurmctld restarted from the state saved in {paths.state}: jobs of the earlier "
            "start are kept (`hetsched devcluster up --clean` would discard them)"
        )
    if mode is StartMode.CLEAN:
        return "slurmctld started clean (--clean): saved jobs and node states discarded"
    if mode is StartMode.AFTER_DOWN:
        return "slurmctld started clean: the last `down` had cancelled every job"
    return "slurmctld started (no saved state yet)"


def restart_hint(paths: ClusterPaths) -> str:
    """What to do when slurmctld does not start from its saved state."""
    return (
        f"slurmctld was restarted from the state saved in {paths.state}; if that state "
        "cannot be read (see the log), `hetsched devcluster up --clean` starts without it "
        "(its jobs are lost)"
    )


def mark_stopped_clean(paths: ClusterPaths) -> None:
    """Record that `down` cancelled every job before stopping slurmctld."""
    paths.stopped_clean.parent.mkdir(parents=True, exist_ok=True)
    paths.stopped_clean.write_text("every job was cancelled by `hetsched devcluster down`\n")


def forget_stopped_clean(paths: ClusterPaths) -> None:
    """A slurmctld runs again: from now on its saved state holds jobs worth keeping."""
    paths.stopped_clean.unlink(missing_ok=True)


def unsaved_jobs_note(paths: ClusterPaths) -> str | None:
    """For `down` when it could not cancel the jobs: what the next `up` will do with them."""
    if not paths.job_state.exists() or paths.stopped_clean.exists():
        return None
    return (
        "the jobs slurmctld saved were not cancelled: the next `up` restores them "
        "(`hetsched devcluster up --clean` discards them)"
    )


def drained_but_answering(node: SlurmNode) -> bool:
    """A drained node whose slurmd answers: ready for `up`, since a drain restored from the
    saved state is an admin's decision that a restart must not undo."""
    flags = {flag.upper() for flag in node.state_flags}
    return (
        node.state.upper() in PLANNABLE_BASE_STATES
        and bool(flags & {"DRAIN", "DRAINED", "DRAINING"})
        and not flags & {"NOT_RESPONDING", "NO_RESPOND"}
    )
