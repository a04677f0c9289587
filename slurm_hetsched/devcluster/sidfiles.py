"""What the sid dev cluster is made of, as pure functions: its ports, the wrapper scripts that
reach the chroot's Slurm commands from the host, the folders shared with the chroot, and the
check of the Slurm version found there (no I/O here; devcluster/sid.py does the work).

The sid cluster (docs/devcluster-sid.md) runs the same layout as the system Slurm's dev
cluster, on ports 1000 higher (6817 -> 7817, slurmd 6821.. -> 7821..), inside a Debian sid
chroot. Every folder that both sides use (the checkout, the cluster's folder, the system temp
dir, the host's Python) is bind-mounted at the SAME absolute path inside the chroot, so one
slurm.conf, one job script and one interpreter path are valid on both sides.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePath

from slurm_hetsched.errors import SlurmParseError
from slurm_hetsched.nodelayout import DevClusterConfig
from slurm_hetsched.slurm.version import SlurmVersion, parse_version

PORT_OFFSET = 1000
# The oldest Slurm the sid cluster accepts: the release most sites run or are moving to.
MIN_VERSION = SlurmVersion(24, 11, 0)
# Exists only inside the chroot: a wrapper that finds it runs the command directly (a job's
# shell, whose PATH still starts with the wrapper folder).
CHROOT_MARKER = "/etc/hetsched-sid-chroot"
# The commands the wrapper folder offers (only those the chroot has are written).
COMMANDS = (
    "sbatch",
    "squeue",
    "sinfo",
    "scontrol",
    "scancel",
    "sacct",
    "srun",
    "salloc",
    "sprio",
    "sshare",
    "sstat",
    "sdiag",
    "sattach",
    "sbcast",
)
# Debian packages of the chroot: daemons and client tools, munge, spank.h for our plugin, the
# host's users (libnss-extrausers: devcluster/sidhost.py), and the shared libraries the host's
# Python loads that a minimal sid lacks (ctypes: libffi, which torch imports; sqlite3; expat,
# which Debian's own python3.X binary links). Jobs run the host's Python (interpreter_paths).
PACKAGES = (
    "slurm-wlm",
    "slurm-client",
    "munge",
    "libslurm-dev",
    "ca-certificates",
    "libffi8",
    "libsqlite3-0",
    "libexpat1",
    "libnss-extrausers",
)
# Prefixes that belong to the chroot's own system: never mounted over as a whole.
SYSTEM_PREFIXES = ("/", "/usr", "/usr/local", "/bin", "/lib", "/lib64", "/etc", "/var")


def sid_config(config: DevClusterConfig) -> DevClusterConfig:
    """The same layout as the system Slurm's dev cluster, on ports PORT_OFFSET higher."""
    return dataclasses.replace(
        config,
        slurmctld_port=config.slurmctld_port + PORT_OFFSET,
        slurmd_port_base=config.slurmd_port_base + PORT_OFFSET,
    )


def version_problem(text: str) -> str | None:
    """Why the chroot's Slurm (as `slurmd -V` printed it) cannot be used, or None."""
    try:
        version = parse_version(text)
    except SlurmParseError as exc:
        return f"cannot tell the Slurm version of the chroot: {exc}"
    if version < MIN_VERSION:
        return (
            f"the chroot has Slurm {version}, older than {MIN_VERSION.major}."
            f"{MIN_VERSION.minor:02d}: `--slurm sid` is for the newest Slurm (the system "
            "Slurm's dev cluster covers older ones). Rebuild the chroot from a newer suite: "
            "`hetsched devcluster down --slurm sid`, delete the chroot folder, set "
            "HETSCHED_SID_SUITE if needed, `up` again"
        )
    return None


def format_version(version: tuple[int, int, int]) -> str:
    return str(SlurmVersion(*version))


def wrapper_script(command: str, chroot: Path, slurm_conf: Path, chroot_program: str) -> str:
    """A /bin/sh script that runs the chroot's `command` with the caller's arguments.

    Arguments pass through as "$@" (never rebuilt into a string). Outside the chroot it runs
    `chroot <root> env --chdir=<cwd> /usr/bin/<command> "$@"`, keeping the working directory
    when the chroot has the same path (a shared folder), else /. Inside the chroot (a job's
    shell) it runs /usr/bin/<command> directly. SLURM_CONF is set the same on both sides.
    Outside the chroot, a caller whose SLURM_CONF names another cluster's config (e.g. a
    system-Slurm dev cluster, with this folder still first on PATH) gets the next `command`
    on PATH instead: the chroot's Slurm is for the sid cluster only.

    Raises:
        ValueError: a command name that is not a plain word, or a relative path.
    """
    if not re.fullmatch(r"[a-z][a-z0-9_-]*", command):
        raise ValueError(f"not a Slurm command name: {command!r}")
    for path in (chroot, slurm_conf):
        if not path.is_absolute():
            raise ValueError(f"{path} must be absolute")
    root = shlex.quote(str(chroot))
    program = f"/usr/bin/{command}"
    conf = shlex.quote(str(slurm_conf))
    return "\n".join(
        [
            "#!/bin/sh",
            "# Written by `hetsched devcluster up --slurm sid`: runs the chroot's "
            f"{command} (docs/devcluster-sid.md).",
            f'if [ -n "${{SLURM_CONF:-}}" ] && ! [ "$SLURM_CONF" -ef {conf} ] '
            f"&& [ ! -e {CHROOT_MARKER} ]; then",
            "    # another cluster's config: the next " + command + " on PATH serves it",
            "    set -f; IFS=:",
            "    for dir in $PATH; do",
            '        [ -n "$dir" ] || continue',
            f'        next="$dir/{command}"',
            '        [ -x "$next" ] && ! [ "$next" -ef "$0" ] && exec "$next" "$@"',
            "    done",
            f"    echo \"{command}: SLURM_CONF=$SLURM_CONF is not the sid cluster's and no other "
            f'{command} is on PATH" >&2',
            "    exit 1",
            "fi",
            f"export SLURM_CONF={conf}",
            f"if [ -e {CHROOT_MARKER} ]; then",
            f'    exec {program} "$@"',
            "fi",
            "dir=$(pwd -P 2>/dev/null) || dir=/",
            f'[ -d {root}"$dir" ] || dir=/',
            f'exec {shlex.quote(chroot_program)} {root} /usr/bin/env --chdir="$dir" {program} "$@"',
            "",
        ]
    )


def env_lines(bin_dir: Path, slurm_conf: Path) -> list[str]:
    """The `export` lines of `hetsched devcluster env --slurm sid` (for eval)."""
    return [
        f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"',
        f"export SLURM_CONF={shlex.quote(str(slurm_conf))}",
    ]


def _is_under(path: PurePath, folder: PurePath) -> bool:
    return path == folder or folder in path.parents


def interpreter_paths(prefix: str, base_prefix: str, executable: str, version: str) -> list[Path]:
    """What of the host's Python a job in the chroot needs, at the same paths.

    A venv (`prefix` != `base_prefix`) is needed whole; so is the interpreter's installation
    when it has its own prefix (pyenv, /opt/python). A system Python (/usr) cannot be mounted
    whole over the chroot's /usr: then its binary and its standard library folder.

    Args:
        prefix, base_prefix: sys.prefix and sys.base_prefix of the host's Python.
        executable: the real path of its binary.
        version: "3.11".
    """
    paths: list[Path] = []
    if prefix != base_prefix:
        paths.append(Path(prefix))
    if os.path.normpath(base_prefix) in SYSTEM_PREFIXES:
        paths.append(Path(executable))
        paths.append(Path(base_prefix) / "lib" / f"python{version}")
    else:
        paths.append(Path(base_prefix))
    return paths


def shared_paths(candidates: Iterable[Path]) -> list[Path]:
    """The folders to bind-mount: absolute, normalised, no duplicates, none inside another
    (its parent's mount carries it), none of the chroot's system folders; shortest first."""
    chosen: list[Path] = []
    for candidate in sorted({Path(os.path.normpath(c)) for c in candidates}, key=_depth):
        if not candidate.is_absolute() or str(candidate) in SYSTEM_PREFIXES:
            continue
        if any(_is_under(candidate, folder) for folder in chosen):
            continue
        chosen.append(candidate)
    return chosen


def _depth(path: Path) -> tuple[int, str]:
    return len(path.parts), str(path)


def check_chroot_location(chroot: Path, shared: Sequence[Path]) -> str | None:
    """Why the chroot may not live at `chroot` (inside a shared folder, or a system one)."""
    if not chroot.is_absolute():
        return f"the chroot folder {chroot} must be an absolute path"
    if str(Path(os.path.normpath(chroot))) in SYSTEM_PREFIXES:
        return f"the chroot folder {chroot} is a system folder"
    for folder in shared:
        if _is_under(chroot, folder) or _is_under(folder, chroot):
            return (
                f"the chroot folder {chroot} overlaps {folder}, which is bind-mounted into it: "
                "choose another (HETSCHED_SID_CHROOT or --chroot), e.g. under /var/tmp"
            )
    return None
