"""Make sure Slurm and munge are installed and munged runs (Debian 12, as root)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import slurm_hetsched.devcluster.processes as processes
from slurm_hetsched.errors import DevClusterError

logger = logging.getLogger(__name__)

# slurm-wlm pulls slurmctld, slurmd and the client tools; libslurm-dev carries spank.h for the
# SPANK plugin; the basic plugins include gres/gpu, cons_tres and the JSON serializer.
DEBIAN_PACKAGES = ("slurm-wlm", "munge", "libslurm-dev", "slurm-wlm-basic-plugins-dev")
REQUIRED_PROGRAMS = ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "munged")
# `--accounting` (devcluster/accounting.py): slurmdbd and a MariaDB server, and what it runs.
ACCOUNTING_PACKAGES = ("slurmdbd", "mariadb-server")
ACCOUNTING_PROGRAMS = (
    "slurmdbd",
    "sacctmgr",
    "sacct",
    "mariadbd",
    "mariadb-install-db",
    "mariadb-admin",
)
_PROGRAM_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


def which(program: str) -> str | None:
    # munged and the daemons live in /usr/sbin, which a non-login PATH may lack.
    path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(_PROGRAM_DIRS)
    return shutil.which(program, path=path)


# Header of the SPANK API, to build spank/hetsched_spank.c.
SPANK_HEADER = Path("/usr/include/slurm/spank.h")


def missing_programs(*, accounting: bool = False) -> list[str]:
    """Required programs (and the SPANK header) that are not installed; with `accounting`,
    those of slurmdbd and MariaDB too."""
    programs = REQUIRED_PROGRAMS + (ACCOUNTING_PROGRAMS if accounting else ())
    missing = [program for program in programs if which(program) is None]
    if not SPANK_HEADER.exists():
        missing.append(str(SPANK_HEADER))
    return missing


def packages(*, accounting: bool = False) -> tuple[str, ...]:
    """The Debian packages the dev cluster needs (with `accounting`: slurmdbd and MariaDB)."""
    return DEBIAN_PACKAGES + (ACCOUNTING_PACKAGES if accounting else ())


def ensure_installed(*, accounting: bool = False) -> bool:
    """Install Slurm and munge (with `accounting`: slurmdbd and MariaDB's server too) from
    Debian's packages when missing; True if it installed."""
    missing = missing_programs(accounting=accounting)
    if not missing:
        return False
    wanted = packages(accounting=accounting)
    if which("apt-get") is None:
        raise DevClusterError(
            f"{', '.join(missing)} not installed and no apt-get here: install Slurm 22.05 or "
            "newer and munge with your distribution's packages, then run this again"
        )
    print(
        f"installing {' '.join(wanted)} from Debian's packages (missing: {', '.join(missing)}) ...",
        file=sys.stderr,
        flush=True,
    )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *wanted],
    ):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            output = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise DevClusterError(f"`{' '.join(argv)}` failed ({done.returncode}):\n{output}")
    still = missing_programs(accounting=accounting)
    if still:
        raise DevClusterError(f"installed {' '.join(wanted)} but {', '.join(still)} still missing")
    return True


def munge_works() -> bool:
    munge = which("munge")
    if munge is None:
        return False
    done = subprocess.run([munge, "-n"], capture_output=True, check=False)
    return done.returncode == 0


def ensure_munged(started_marker: Path) -> int | None:
    """Start munged unless one already answers; returns the pid of the one we started.

    The pid goes into `started_marker`, so that `down` stops only a munged this tool started.
    """
    if munge_works():
        return None
    munged = which("munged")
    if munged is None:
        raise DevClusterError("munged not installed: run `hetsched devcluster up` as root")
    run_dir = Path("/run/munge")
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.chown(run_dir, "munge", "munge")
    key = Path("/etc/munge/munge.key")
    if not key.exists() or key.stat().st_size == 0:
        mungekey = which("mungekey")
        if mungekey is None:
            raise DevClusterError(f"{key} missing and mungekey not installed")
        _run_as_munge([mungekey, "-c"])
    _run_as_munge([munged])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if munge_works():
            pid = processes.read_pid(run_dir / "munged.pid")
            if pid is not None:
                started_marker.parent.mkdir(parents=True, exist_ok=True)
                started_marker.write_text(f"{pid}\n")
            return pid
        time.sleep(0.1)
    raise DevClusterError(
        "munged started but `munge -n` still fails; see /var/log/munge/munged.log"
    )


def _run_as_munge(argv: list[str]) -> None:
    # munged refuses to run as root.
    done = subprocess.run(
        ["runuser", "-u", "munge", "--", *argv], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise DevClusterError(f"`{' '.join(argv)}` as user munge failed: {done.stderr.strip()}")
